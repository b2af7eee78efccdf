"""The one training driver: the Algorithm protocol, config and seed checks, and its hook seam
(hooks run at chunk boundaries, where the whole state is consistent enough to resume from)."""

import json

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import checkpoint
from dispatchrl.algorithms import ALGORITHMS, dqn, ppo, sac, td3
from dispatchrl.algorithms.protocol import Schedule
from dispatchrl.training import TrainingRun
from dispatchrl.training.driver import chunk_iterations
from dispatchrl.training.envspec import resolve_env


def arrays_of(state):
    return {name: drl.to_numpy(a) for name, a in checkpoint.named_arrays(state)}


def test_registry_holds_every_algorithm_module():
    assert dict(ALGORITHMS) == {"td3": td3, "sac": sac, "ppo": ppo, "dqn": dqn}
    for name, algo in ALGORITHMS.items():
        assert algo.NAME == name
        for member in (
            "Config",
            "State",
            "config_for",
            "build",
            "schedule",
            "native_step",
            "act",
            "store",
            "update",
            "check_iteration",
            "policy",
            "train",
        ):
            assert hasattr(algo, member), (name, member)
    assert td3.schedule(td3.Config()) == Schedule(env_steps=1, updates=0)
    config = ppo.Config()
    assert ppo.schedule(config) == Schedule(env_steps=config.steps_per_env, updates=config.epochs * config.minibatches)
    assert dqn.schedule(dqn.Config()) == Schedule(env_steps=256, updates=128)  # SB3's train_freq, gradient_steps


@pytest.mark.parametrize("algo, other", [(td3, sac), (sac, td3), (ppo, td3), (td3, ppo)])
def test_a_config_of_another_algorithm_is_refused(algo, other):
    with pytest.raises(drl.ConfigError, match=rf"config must be a dispatchrl\.algorithms\.{algo.NAME}\.Config"):
        algo.train(drl.CPU(), "pendulum", other.Config(total_steps=10))


@pytest.mark.parametrize("seed", [-1, 2**31, True, 1.5, "0"])
def test_bad_seeds_are_refused(seed):
    with pytest.raises(drl.ConfigError, match="seed"):
        td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=10), seed=seed)


def test_chunks():
    native, python = resolve_env("pendulum"), resolve_env("MountainCarContinuous-v0")
    assert chunk_iterations(native, Schedule(1, 0), 10_000) == 500
    assert chunk_iterations(native, Schedule(1, 0), 1_000_000) == 2000
    assert chunk_iterations(native, Schedule(1, 0), 7) == 1
    assert chunk_iterations(native, Schedule(128, 1), 640) == 15
    assert chunk_iterations(python, Schedule(1, 0), 10_000) == 200
    assert chunk_iterations(python, Schedule(128, 1), 10) == 1


def test_hooks_run_at_chunk_boundaries_and_a_mid_run_save_resumes_bit_for_bit(tmp_path):
    seen = []

    def hook(run: TrainingRun) -> None:
        seen.append((run.done, run.steps, run.finished, int(drl.to_numpy(run.state.step)[0])))
        if run.done == 200:
            run.save(tmp_path / "mid")

    config = td3.Config(total_steps=400)
    straight = td3.train(drl.CPU(), "pendulum", config, seed=5, progress=False, hooks=(hook,))
    assert [s[0] for s in seen] == list(range(20, 401, 20))  # 400 iterations // 20 per chunk
    assert all(done == steps == step for done, steps, _, step in seen)
    assert [s[2] for s in seen] == [False] * 19 + [True]
    resumed = td3.train(drl.CPU(), "pendulum", config, progress=False, resume=tmp_path / "mid")
    assert resumed.seed == 5
    want, got = arrays_of(straight.state), arrays_of(resumed.state)
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_ppo_hooks_see_whole_iterations(tmp_path):
    config = ppo.Config(total_steps=2 * 4 * 3, num_envs=2, steps_per_env=4, batch_size=4, hidden=(4,))
    seen = []
    ppo.train(
        drl.CPU(),
        "pendulum",
        config,
        seed=0,
        progress=False,
        hooks=(lambda run: seen.append((run.done, run.steps, int(drl.to_numpy(run.state.updates)[0]))),),
    )
    assert seen == [(i, 8 * i, 2 * i) for i in (1, 2, 3)]


def test_a_hook_that_raises_stops_the_run():
    class Stop(Exception):
        pass

    def stop(run: TrainingRun) -> None:
        raise Stop(run.done)

    with pytest.raises(Stop) as info:
        td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=400), progress=False, hooks=(stop,))
    assert info.value.args == (20,)


def test_checkpoints_with_the_old_field_names_still_load(tmp_path):
    """io, log, lr, ... were renamed; a checkpoint written before the rename resumes the same."""
    from dispatchrl.training import load_run
    from dispatchrl.training.runs import RENAMED_FIELDS, SCRATCH_SINCE_5

    config = ppo.Config(total_steps=2 * 4 * 2, num_envs=2, steps_per_env=4, batch_size=4, hidden=(4,))
    result = ppo.train(drl.CPU(), "pendulum", config, seed=0, progress=False)
    result.save(tmp_path / "new")
    old_names = {new: old for old, new in RENAMED_FIELDS.items()}
    with np.load(tmp_path / "new.npz") as data:  # rewritten as a version 1 checkpoint (npz + json)
        saved = {name: data[name] for name in data.files if name != checkpoint.METADATA_ENTRY}
    # which also held the scratch buffers (format 5 leaves them out)
    newer = SCRATCH_SINCE_5["ppo"]  # scratch fields that came later still: not in a version-1 file
    saved.update(
        {
            name.rstrip("."): drl.to_numpy(a)
            for name, a in checkpoint.scratch_arrays(result.state)
            if name.partition(".")[0] not in newer
        }
    )
    arrays = {}
    for name, value in saved.items():
        field, dot, rest = name.partition(".")
        arrays[f"{old_names.get(field, field)}{dot}{rest}"] = value
    assert {"io.obs", "log.count", "lr", "perm", "info"} <= arrays.keys()
    np.savez(tmp_path / "old.npz", **arrays)
    document = json.loads((tmp_path / "new.json").read_text())
    del document["digest"]
    (tmp_path / "old.json").write_text(json.dumps({**document, "version": 1}))
    _, _, _, _, state = load_run(tmp_path / "old", ALGORITHMS, drl.CPU())
    want, got = arrays_of(result.state), arrays_of(state)
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
