"""What checkpoints keep: no scratch buffers (every step writes them before reading them, shown
by scribbling over them at every chunk boundary), no episode log (the run's history of finished
episodes instead), and format-4 files, which held both, still load."""

import numpy as np
import pytest
from testkit import write_as_version

import dispatchrl as drl
from dispatchrl import checkpoint
from dispatchrl.algorithms import ppo, sac, td3
from dispatchrl.training.runs import EPISODE_LOG_4, SCRATCH_FIELDS_5, SCRATCH_SINCE_5

ALGOS = {"td3": td3, "sac": sac, "ppo": ppo}
OFF_POLICY = dict(total_steps=400, warmup_steps=100, batch_size=16, hidden=(8,))
ON_POLICY = dict(total_steps=512, num_envs=8, steps_per_env=16, batch_size=32, hidden=(8,))


def config(algo, **overrides):
    return ALGOS[algo].Config(**{**(ON_POLICY if algo == "ppo" else OFF_POLICY), **overrides})


def saved_arrays(state):
    return {name.rstrip("."): drl.to_numpy(a) for name, a in checkpoint.named_arrays(state)}


def scribble(run):
    """Hook: garbage into every scratch buffer (floats, counts and flags) at a chunk boundary."""
    rng = np.random.default_rng(run.done)
    for _, array in checkpoint.scratch_arrays(run.state):
        host = drl.to_numpy(array)
        if host.dtype.kind == "f":
            garbage = rng.normal(0, 1e3, host.shape)
        else:  # counts and indices: small, so a stray read would index, not crash
            garbage = rng.integers(0, 2, host.shape)
        drl.assign(array, garbage.astype(host.dtype))


@pytest.mark.parametrize(
    ("algo", "device", "env"),
    [
        ("td3", drl.CPU(), "pendulum"),
        ("sac", drl.CPU(), "pendulum"),
        ("ppo", drl.CPU(), "pendulum"),
        ("td3", drl.Generic(), "pendulum"),
        ("td3", drl.CPU(), "MountainCarContinuous-v0"),  # stepped from Python
        ("ppo", drl.CPU(), "MountainCarContinuous-v0"),
    ],
)
def test_scratch_is_written_before_it_is_read(algo, device, env):
    """A run whose scratch buffers are overwritten with garbage at every chunk boundary trains
    bit for bit as one left alone: their contents at a boundary (what a checkpoint would hold)
    never reach the numbers."""
    module = ALGOS[algo]
    extra = dict(total_steps=256, num_envs=4) if algo == "ppo" and env != "pendulum" else {}
    clean = module.train(device, env, config(algo, **extra), seed=3, progress=False)
    scribbled = module.train(device, env, config(algo, **extra), seed=3, progress=False, hooks=(scribble,))
    assert sum(1 for _ in checkpoint.scratch_arrays(clean.state)) > 10
    a, b = saved_arrays(clean.state), saved_arrays(scribbled.state)
    assert a.keys() == b.keys()
    assert [name for name in a if not np.array_equal(a[name], b[name])] == []
    for key in ("steps", "returns", "lengths"):
        np.testing.assert_array_equal(scribbled.history[key], clean.history[key])


@pytest.mark.parametrize("algo", ["td3", "sac", "ppo"])
def test_checkpoints_leave_scratch_out(algo, tmp_path):
    steps = 1664 if algo == "ppo" else 256  # episodes finish (200 steps per env)
    result = ALGOS[algo].train(drl.CPU(), "pendulum", config(algo, total_steps=steps), seed=0, progress=False)
    npz, _ = result.save(tmp_path / "run")
    _, arrays = checkpoint.load(npz)
    scratch = {name.rstrip(".") for name, _ in checkpoint.scratch_arrays(result.state)}
    assert scratch and not scratch & arrays.keys()
    # what the format-4 migration drops: the scratch fields, and the episode log's ring
    assert set(EPISODE_LOG_4) <= scratch
    fields = {name.partition(".")[0] for name in scratch - set(EPISODE_LOG_4)}
    assert fields - set(SCRATCH_SINCE_5.get(algo, ())) == set(SCRATCH_FIELDS_5[algo])
    # the finished episodes travel as the run's history instead
    assert len(result.history["returns"]) > 0
    for key in ("steps", "returns", "lengths"):
        np.testing.assert_array_equal(arrays[f"history.{key}"], result.history[key])


def as_version_4(result, path, target):
    """``path`` rewritten as the format-4 checkpoint the previous release wrote: with every
    scratch buffer (as the run left it), the finished episodes in a 65536-episode log instead of
    the history, version 4, digest of that content."""
    meta, arrays = checkpoint.load(path)
    newer = SCRATCH_SINCE_5.get(meta["algo"], ())
    for name, array in checkpoint.scratch_arrays(result.state):
        if name.partition(".")[0] not in newer:  # a field the previous release did not have
            arrays[name.rstrip(".")] = drl.to_numpy(array)
    history = {key: arrays.pop(f"history.{key}") for key in ("steps", "returns", "lengths")}
    held = len(history["returns"])
    assert 0 < held == int(arrays["episodes.count"][0])
    for name, values in zip(
        EPISODE_LOG_4, (history["returns"], history["lengths"], history["steps"] // meta["num_envs"])
    ):
        log = np.zeros(1 << 16, values.dtype)
        log[:held] = values
        arrays[name] = log
    write_as_version(target, arrays, meta, 4)


@pytest.mark.parametrize("algo", ["td3", "sac", "ppo"])
def test_format_4_checkpoint_resumes_bit_for_bit(algo, tmp_path):
    module = ALGOS[algo]
    # each saved run has finished episodes (Pendulum's take 200 steps per env)
    first = config(algo, total_steps=1664 if algo == "ppo" else 300)
    total = config(algo, total_steps=1920 if algo == "ppo" else 400)
    saved = module.train(drl.CPU(), "pendulum", first, seed=2, progress=False)
    saved.save(tmp_path / "new")
    as_version_4(saved, tmp_path / "new", tmp_path / "old")
    old_size = checkpoint.paths(tmp_path / "old")[0].stat().st_size
    assert checkpoint.paths(tmp_path / "new")[0].stat().st_size < old_size
    meta, _ = checkpoint.load(tmp_path / "old")
    assert meta["version"] == checkpoint.VERSION
    resumed = module.train(drl.CPU(), "pendulum", total, seed=2, progress=False, resume=tmp_path / "old")
    straight = module.train(drl.CPU(), "pendulum", total, seed=2, progress=False)
    a, b = saved_arrays(resumed.state), saved_arrays(straight.state)
    assert a.keys() == b.keys()
    assert [name for name in a if not np.array_equal(a[name], b[name])] == []
    np.testing.assert_array_equal(resumed.history["returns"], straight.history["returns"])
    np.testing.assert_array_equal(
        resumed.policy(np.ones((2, 3), np.float32)), straight.policy(np.ones((2, 3), np.float32))
    )
