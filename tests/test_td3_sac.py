"""TD3 and SAC: learning, determinism, resume, checkpoints, bad input, device agreement."""

import dataclasses
import json

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import checkpoint
from dispatchrl.algorithms import sac, td3
from dispatchrl.cli import main
from dispatchrl.training import evaluate, load_run
from dispatchrl.training.driver import Progress

ALGOS = {"td3": td3, "sac": sac}


def weights(result):
    return {name: drl.to_numpy(a) for name, a in checkpoint.named_arrays(result.state) if ".weights." in name}


@pytest.mark.parametrize("name", ["td3", "sac"])
def test_pendulum_learns(name):
    # ~6% of seeds evaluate below -400 at exactly 10k steps (a snapshot between two good ones),
    # with either product kernel (NOTES.md, "Quality at 10k steps"): seed 1 is the second chance.
    algo = ALGOS[name]
    for seed in (0, 1):
        result = algo.train(drl.CPU(), "pendulum", algo.Config(total_steps=10_000), seed=seed, progress=False)
        mean, returns = evaluate(result.policy, result.spec.eval_id)
        assert len(returns) == 10
        if mean >= -400:
            break
    assert mean >= -400, (name, seed, mean, returns)
    assert result.history["returns"].shape == (50,)  # 10k steps / 200-step episodes
    assert result.train_seconds > 0 and result.compile_seconds > 0


@pytest.mark.parametrize("name", ["td3", "sac"])
def test_same_seed_is_bit_identical_and_seeds_differ(name):
    algo = ALGOS[name]
    config = algo.Config(total_steps=400)
    runs = [algo.train(drl.CPU(), "pendulum", config, seed=s, progress=False) for s in (3, 3, 4)]
    first, again, other = (weights(r) for r in runs)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert any(not np.array_equal(first[k], other[k]) for k in first)


def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path):
    half = td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=5000), seed=1, progress=False)
    half.save(tmp_path / "half")
    resumed = td3.train(
        drl.CPU(), "pendulum", td3.Config(total_steps=10_000), seed=1, progress=False, resume=tmp_path / "half"
    )
    straight = td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=10_000), seed=1, progress=False)
    a = {n: drl.to_numpy(x) for n, x in checkpoint.named_arrays(resumed.state)}
    b = {n: drl.to_numpy(x) for n, x in checkpoint.named_arrays(straight.state)}
    assert a.keys() == b.keys()
    assert [n for n in a if not np.array_equal(a[n], b[n])] == []


def test_checkpoint_round_trip_and_cli_eval(tmp_path, capsys):
    result = sac.train(drl.CPU(), "pendulum", sac.Config(total_steps=300), seed=2, progress=False)
    result.save(tmp_path / "run")
    algo, name, spec, config, state = load_run(tmp_path / "run", {"sac": sac, "td3": td3})
    assert name == "sac" and config == result.config
    restored = algo.policy(state, spec.action_low, spec.action_high)
    obs = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    np.testing.assert_array_equal(restored(obs), result.policy(obs))
    assert np.all(np.abs(result.policy(obs)) <= 2.0)
    assert main(["eval", "--checkpoint", str(tmp_path / "run"), "--episodes", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 2 and summary["algo"] == "sac"


def test_cli_train_json_keys(capsys):
    assert main(["train", "td3", "--env", "pendulum", "--steps", "400", "--seed", "5", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("algo", "env", "device", "seed", "steps", "train_seconds", "compile_seconds", "eval_return"):
        assert key in summary
    assert (summary["algo"], summary["env"], summary["device"], summary["seed"], summary["steps"]) == (
        "td3",
        "pendulum",
        "cpu",
        5,
        400,
    )
    assert len(summary["eval_returns"]) == 10


@pytest.mark.parametrize(
    "field,value",
    [
        ("batch_size", 0),
        ("actor_lr", -1.0),
        ("gamma", 1.5),
        ("hidden", (64, 0)),
        ("activation", "sigmoid"),
        ("num_envs", 0),
        ("policy_delay", 0),
        ("replay_capacity", -5),
        ("total_steps", 2.5),
    ],
)
def test_bad_config_refused_before_anything_runs(field, value):
    config = dataclasses.replace(td3.Config(), **{field: value})
    with pytest.raises(drl.ConfigError, match=field):
        td3.train(drl.CPU(), "pendulum", config)


def test_bad_env_and_seed_refused():
    with pytest.raises(drl.ConfigError, match="cannot make env"):
        td3.train(drl.CPU(), "NoSuchEnv-v9", td3.Config(total_steps=10))
    with pytest.raises(drl.ConfigError, match="seed"):
        td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=10), seed=-1)
    assert main(["train", "td3", "--set", "gamma=2", "--no-eval"]) == 2


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "run"
    td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=200), seed=0, progress=False).save(path)
    return path


def load(path):
    return load_run(path, ALGOS)


def test_truncated_checkpoint_refused(saved, tmp_path):
    data = saved.with_name("run.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "cut.json").write_bytes(saved.with_name("run.json").read_bytes())
    with pytest.raises(drl.CheckpointError, match="unreadable"):
        load(tmp_path / "cut")


def resigned(saved, tmp_path, name, edit=None, **metadata):
    """A copy of the saved checkpoint with ``edit(arrays)`` applied and its digest recomputed,
    as a crafted (not merely corrupted) checkpoint would be."""
    meta, arrays = checkpoint.load(saved)
    if edit is not None:
        edit(arrays)
    checkpoint.write(tmp_path / name, arrays, {**meta, **metadata})
    return tmp_path / name


def test_wrong_shapes_refused(saved, tmp_path):
    bad = resigned(saved, tmp_path, "bad", lambda a: a.update({"actor.weights.0.value": np.zeros((5, 64), np.float32)}))
    with pytest.raises(drl.CheckpointError, match=r"'actor.weights.0.value' has shape \(5, 64\)"):
        load(bad)


def test_edited_checkpoint_refused(saved, tmp_path):
    """An array changed without the digest: refused as edited or corrupted."""
    arrays = dict(np.load(saved.with_name("run.npz")))
    arrays["actor.weights.0.value"][0, 0] += 1
    np.savez(tmp_path / "edit.npz", **arrays)
    with pytest.raises(drl.CheckpointError, match="digest"):
        load(tmp_path / "edit")


def test_pickled_content_refused(saved, tmp_path):
    arrays = dict(np.load(saved.with_name("run.npz")))
    arrays["actor.weights.0.value"] = np.array([{"payload": "os.system"}], dtype=object)
    np.savez(tmp_path / "evil.npz", **arrays)  # object arrays are stored pickled
    with pytest.raises(drl.CheckpointError, match="dtype object; checkpoints hold plain numbers only"):
        load(tmp_path / "evil")


def test_bad_metadata_refused(saved, tmp_path):
    arrays = dict(np.load(saved.with_name("run.npz")))
    for text, match in (("{not json", "not valid JSON"), ('{"format": "other"}', "not a dispatchrl checkpoint")):
        arrays[checkpoint.METADATA_ENTRY] = np.frombuffer(text.encode(), np.uint8)
        np.savez(tmp_path / "m.npz", **arrays)
        with pytest.raises(drl.CheckpointError, match=match):
            load(tmp_path / "m")
    with pytest.raises(drl.CheckpointError, match="unknown algorithm"):
        load(resigned(saved, tmp_path, "algo", algo="dqn"))
    with pytest.raises(drl.CheckpointError, match="dimensions"):
        load(resigned(saved, tmp_path, "env", env="acrobot"))
    with pytest.raises(drl.CheckpointError, match="does not exist"):
        load(tmp_path / "missing")


def test_nan_weights_refused(saved, tmp_path):
    def poison(arrays):
        arrays["critic1.biases.0.value"][0] = np.nan

    with pytest.raises(drl.CheckpointError, match="NaN"):
        load(resigned(saved, tmp_path, "nan", poison))


@pytest.mark.parametrize("name", ["td3", "sac"])
def test_first_updates_agree_across_devices(name, cuda_device):
    """Same code, same seed: Generic, CPU and CUDA (simulator) reach the same weights."""
    algo = ALGOS[name]
    config = algo.Config(total_steps=6, warmup_steps=4, batch_size=4, hidden=(8, 8))  # 2 updates, one with the actor
    results = [
        algo.train(device, "pendulum", config, seed=0, progress=False)
        for device in (drl.Generic(), drl.CPU(), cuda_device)
    ]
    reference = weights(results[0])
    for result in results[1:]:
        for key, value in weights(result).items():
            np.testing.assert_allclose(value, reference[key], rtol=1e-4, atol=1e-5, err_msg=f"{result.device} {key}")
    assert int(drl.to_numpy(results[2].state.step)[0]) == 6


def test_python_stepped_gymnasium_env():
    """Any gymnasium Box env trains through the Python-stepped path."""
    result = td3.train(
        drl.CPU(), "MountainCarContinuous-v0", td3.Config(total_steps=300, warmup_steps=50), seed=0, progress=False
    )
    assert result.spec.native is None and result.steps == 300
    assert int(drl.to_numpy(result.state.replay.size)[0]) == 300
    action = result.policy(np.zeros(2, np.float32))
    assert action.shape == (1,) and -1 <= action[0] <= 1


def test_cli_export_of_a_trained_checkpoint(saved, tmp_path, capsys):
    """dispatchrl export writes policy.h/.c whose host build acts like the Python policy."""
    from dispatchrl import export

    assert main(["export", "--checkpoint", str(saved), "--out", str(tmp_path / "c"), "--target", "host"]) == 0
    paths = {line.split(": ")[0]: line.split(": ")[1] for line in capsys.readouterr().out.splitlines()}
    assert {"header", "source", "main", "binary"} <= paths.keys()
    algo, _, spec, _, state = load(saved)
    policy = algo.policy(state, spec.action_low, spec.action_high)
    obs = np.random.default_rng(1).normal(size=(3, 3)).astype(np.float32)
    np.testing.assert_allclose(export.run_executable(paths["binary"], "host", obs), policy(obs), atol=1e-5)


def test_cli_export_refuses_a_bad_checkpoint(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    assert main(["export", "--checkpoint", str(tmp_path / "x"), "--out", str(tmp_path / "c")]) == 2


def test_progress_bar_on_a_terminal_plain_lines_when_piped():
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    shown, piped = Terminal(), io.StringIO()
    for stream in (shown, piped):
        td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=400), progress=Progress(stream=stream))
    assert "400/400" in shown.getvalue() and "steps/s" in shown.getvalue() and "return" in shown.getvalue()
    assert "compiling fused TD3 step (cpu)" in shown.getvalue()
    lines = piped.getvalue().splitlines()  # no TTY: plain lines, the first and the last at least
    assert lines[0] == "dispatchrl: compiling fused TD3 step (cpu)…"
    assert (
        lines[-1].startswith("dispatchrl: 400/400 steps") and "steps/s" in lines[-1] and "\x1b" not in piped.getvalue()
    )


def test_td3_trains_pendulum_with_rl_zoo_gamma_and_other_envs_with_the_shared_default():
    # 0.98 on Pendulum halves the seeds that evaluate below -400 at 10k steps (NOTES.md, "The first result")
    for name in ("pendulum", "Pendulum-v1"):
        assert drl.td3.config_for(name).gamma == 0.98
    assert drl.td3.config_for(drl.envs.Pendulum()).gamma == 0.98
    assert drl.td3.config_for("acrobot").gamma == drl.td3.Config().gamma == 0.99
    assert drl.sac.config_for("pendulum").gamma == 0.99  # rl-zoo keeps SAC's 0.99 on Pendulum
    # the README's first command takes it; --set (or --gamma) still wins
    for flags, gamma in (([], 0.98), (["--set", "gamma=0.99"], 0.99), (["--env", "acrobot"], 0.99)):
        args = drl.cli.build_parser().parse_args(["train", "td3", "--env", "pendulum", *flags])
        assert drl.cli._run_config(args)[2].gamma == gamma


def test_sac_with_a_fixed_alpha_keeps_its_temperature():
    """auto_alpha=False (Tianshou's MuJoCo default) traces no temperature step: log α stays at
    log(initial_alpha) while the rest trains; the default tunes it."""
    config = dataclasses.replace(sac.Config(), total_steps=400, warmup_steps=200, auto_alpha=False, initial_alpha=0.3)
    fixed = sac.train(drl.CPU(), "pendulum", config, seed=0, progress=False)
    assert drl.to_numpy(fixed.state.log_alpha.value)[0] == np.float32(np.log(0.3))
    assert np.isfinite(drl.to_numpy(fixed.state.actor.weights[0].value)).all()
    tuned = sac.train(drl.CPU(), "pendulum", dataclasses.replace(config, auto_alpha=True), seed=0, progress=False)
    assert drl.to_numpy(tuned.state.log_alpha.value)[0] != np.float32(np.log(0.3))
    assert sac.config_for("halfcheetah").auto_alpha is False and sac.Config().auto_alpha is True
