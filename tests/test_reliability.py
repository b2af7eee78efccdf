"""Reliability of long runs (issue 21): divergence detected in the fused step and reported as
TrainingDiverged (CLI: exit 3, strict JSON, good checkpoints untouched); periodic crash-safe
checkpoints whose SIGKILL-and-resume ends bit for bit; Ctrl-C saves; resume keeps the run's
config; bad requests refused before any training."""

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import checkpoint
from dispatchrl.algorithms import ppo, sac, td3
from dispatchrl.cli import main, strict_json
from dispatchrl.devices import device_from_name
from dispatchrl.training import runs
from dispatchrl.training.driver import DivergenceCheck, watched_quantities

WORKER = Path(__file__).with_name("kill_resume_worker.py")
REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the kernel


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (33, 17)])
def test_nonfinite_flag_matches_numpy_and_keeps_the_first_code(device, shape):
    g = np.random.default_rng(sum(shape))
    flag = drl.zeros(device, 1, np.int64)
    expected = 0
    for code, bad in enumerate((None, np.nan, None, np.inf, -np.inf, np.nan), 1):
        for dtype in (np.float32, np.float64):
            values = g.normal(size=shape).astype(dtype) * 1e30  # huge but finite is not flagged
            if bad is not None:
                values.reshape(-1)[g.integers(values.size)] = bad
            drl.nonfinite_flag(device, drl.asarray(device, values), flag, code)
            if expected == 0 and not np.all(np.isfinite(values)):
                expected = code
            assert int(drl.to_numpy(flag)[0]) == expected, (code, dtype)
    assert expected == 2


def test_nonfinite_flag_refuses_bad_arguments():
    cpu_device = drl.CPU()
    x = drl.zeros(cpu_device, 3)
    with pytest.raises(drl.DTypeError, match="flag"):
        drl.nonfinite_flag(cpu_device, x, drl.zeros(cpu_device, 1), 1)
    with pytest.raises(drl.ShapeError, match="flag"):
        drl.nonfinite_flag(cpu_device, x, drl.zeros(cpu_device, 2, np.int64), 1)
    for code in (0, -1, 1.5, True):
        with pytest.raises(drl.ConfigError, match="code"):
            drl.nonfinite_flag(cpu_device, x, drl.zeros(cpu_device, 1, np.int64), code)


# ---------------------------------------------------------------- divergence in training


@pytest.mark.parametrize(
    "algo, config",
    [
        (td3, td3.Config(total_steps=1500, critic_lr=1e9, check_every=100)),
        (sac, sac.Config(total_steps=1500, critic_lr=1e9, check_every=100)),
        (ppo, ppo.Config(total_steps=64 * 128 * 3, lr=1e6, check_every=10)),
    ],
)
def test_a_diverging_run_raises_training_diverged_naming_the_quantity(algo, config):
    with pytest.raises(drl.TrainingDiverged) as caught:
        algo.train(drl.CPU(), "pendulum", config, seed=1, progress=False)
    error = caught.value
    names = {name for name, _ in watched_quantities(algo, algo.build(drl.CPU(), config, 3, 1, 0))}
    assert error.quantity in names | {"observation", "reward"}
    assert error.first_step < error.last_step and "became NaN or inf between step" in str(error)
    assert "Hint: lower the learning rates" in str(error)


def test_a_python_stepped_env_gets_training_diverged_not_the_envs_refusal():
    with pytest.raises(drl.TrainingDiverged, match="action became NaN or inf"):
        td3.train(
            drl.CPU(),
            "MountainCarContinuous-v0",
            td3.Config(total_steps=600, critic_lr=1e9, check_every=100),
            seed=1,
            progress=False,
        )


def test_td3_divergence_is_found_within_the_window_of_its_first_check():
    config = td3.Config(total_steps=2000, critic_lr=1e9, check_every=100)
    with pytest.raises(drl.TrainingDiverged) as caught:
        td3.train(drl.CPU(), "pendulum", config, seed=1, progress=False)
    # the critics update from step 100 (warm-up) and diverge at once: the check at step 200 sees it
    assert (caught.value.first_step, caught.value.last_step) == (100, 200)
    assert caught.value.quantity == "TD target (critic loss)"


@pytest.mark.parametrize("dev", ["generic", "cpu", "c"])
def test_the_check_changes_no_number_and_zero_turns_it_off(dev):
    device = drl.devices.device_from_name(dev)
    results = [
        td3.train(
            device,
            "pendulum",
            td3.Config(total_steps=400, warmup_steps=50, batch_size=16, hidden=(8,), check_every=k),
            seed=3,
            progress=False,
        )
        for k in (0, 1, 1000)
    ]
    obs = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    for other in results[1:]:
        np.testing.assert_array_equal(other.policy(obs), results[0].policy(obs))
        np.testing.assert_array_equal(other.history["returns"], results[0].history["returns"])
    # off: a diverging run is not stopped (the check is what stops it)
    off = td3.train(
        drl.CPU(), "pendulum", td3.Config(total_steps=400, critic_lr=1e9, check_every=0), seed=1, progress=False
    )
    assert not np.all(np.isfinite(off.policy(obs)))


def test_a_diverged_state_is_never_checkpointed(tmp_path):
    config = td3.Config(total_steps=400, critic_lr=1e9, check_every=0)
    off = td3.train(drl.CPU(), "pendulum", config, seed=1, progress=False)
    run = drl.training.TrainingRun(td3, drl.CPU(), off.spec, config, 1, off.state, td3.schedule(config), 400, 400)
    with pytest.raises(drl.TrainingDiverged, match="not saved"):
        run.save(tmp_path / "x")
    with pytest.raises(drl.TrainingDiverged, match=r"^training diverged: \S+ holds NaN or inf at step 400; not saved"):
        off.save(tmp_path / "y")  # the finished result's save too: such a file could never be resumed
    assert not list(tmp_path.iterdir())


def test_cli_with_the_check_off_still_reports_and_saves_no_diverged_run(tmp_path, capsys):
    """check_every=0 turns the in-step check off, not the truth: a run that ends with NaN weights
    is 'diverged' (exit 3), and the checkpoint it would have replaced stays as it was."""
    good = tmp_path / "run"
    assert main(["train", "td3", "--steps", "200", "--no-eval", "--save", str(good)]) == 0
    before = Path(f"{good}.npz").read_bytes(), Path(f"{good}.json").read_bytes()
    capsys.readouterr()
    diverging = [
        "train",
        "td3",
        "--steps",
        "400",
        "--set",
        "critic_lr=1e9",
        "--set",
        "check_every=0",
        "--seed",
        "1",
        "--json",
    ]
    for save in (["--save", str(good)], []):
        assert main([*diverging, *save]) == 3
        out, err = capsys.readouterr()
        summary = json.loads(out.strip().splitlines()[-1], parse_constant=lambda c: pytest.fail(c))
        assert summary["status"] == "diverged" and "holds NaN or inf at step 400" in summary["error"]
        assert "TrainingDiverged" in err and "Hint:" in err
    assert (Path(f"{good}.npz").read_bytes(), Path(f"{good}.json").read_bytes()) == before


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_check_every_is_validated(bad):
    for algo in (td3, sac, ppo):
        with pytest.raises(drl.ConfigError, match="check_every"):
            algo.Config(check_every=bad).validate()


def test_the_divergence_hook_reads_the_flag(tmp_path):
    flag = drl.zeros(drl.CPU(), 1, np.int64)
    weights = drl.zeros(drl.CPU(), 4)
    check = DivergenceCheck(flag, [("actor weights", weights)], every=10)

    class Run:  # the fields DivergenceCheck reads
        config, schedule, finished = td3.Config(), td3.schedule(td3.Config()), False
        steps = 0

    run = Run()
    check(run)
    run.steps = 20
    check(run)
    drl.nonfinite_flag(drl.CPU(), drl.asarray(drl.CPU(), np.array([np.nan], np.float32)), flag, 1)
    run.steps = 35
    with pytest.raises(drl.TrainingDiverged, match="actor weights became NaN or inf between step 20 and 30"):
        check(run)


# ---------------------------------------------------------------- CLI: exit 3, strict JSON


def test_strict_json_has_no_nan():
    line = strict_json({"a": float("nan"), "b": [1.0, float("inf"), np.float32(-np.inf)], "c": np.int64(3)})
    assert json.loads(line, parse_constant=lambda c: pytest.fail(c)) == {"a": None, "b": [1.0, None, None], "c": 3}


def test_cli_divergence_exits_3_with_strict_json_and_keeps_the_good_checkpoint(tmp_path, capsys):
    good = tmp_path / "run"
    assert main(["train", "td3", "--steps", "300", "--no-eval", "--json", "--save", str(good)]) == 0
    before = Path(f"{good}.npz").read_bytes(), Path(f"{good}.json").read_bytes()
    capsys.readouterr()
    diverging = ["train", "td3", "--steps", "3000", "--set", "critic_lr=1e9"]
    code = main([*diverging, "--set", "check_every=200", "--json", "--save", str(good)])
    assert code == 3
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1], parse_constant=lambda c: pytest.fail(c))
    assert summary["status"] == "diverged" and summary["quantity"] == "TD target (critic loss)"
    assert "TrainingDiverged" in err and "Hint:" in err and len(err.strip().splitlines()) == 1
    assert (Path(f"{good}.npz").read_bytes(), Path(f"{good}.json").read_bytes()) == before
    # periodic checkpoints written before the divergence stay loadable
    directory = tmp_path / "periodic"
    periodic = ["--save", str(directory), "--save-every", "500", "--keep", "5", "--no-eval"]
    assert main([*diverging, "--set", "check_every=1000", *periodic]) in (3,)
    for path in directory.glob("step-*.npz"):
        _, arrays = checkpoint.load(path)
        assert all(np.all(np.isfinite(a)) for a in arrays.values() if a.dtype.kind == "f")


def test_cli_json_status_ok(capsys):
    assert main(["train", "td3", "--steps", "200", "--no-eval", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["status"] == "ok" and summary["eval_return"] is None


def test_cli_json_reports_a_refusal_as_a_strict_json_line(tmp_path, capsys):
    for argv in (
        ["train", "td3", "--steps", "1000000000000", "--json"],
        ["eval", "--checkpoint", str(tmp_path / "missing"), "--json"],
    ):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        summary = json.loads(out, parse_constant=lambda c: pytest.fail(c))
        assert summary["status"] == "error" and summary["error"].split(":")[0] in ("ConfigError", "CheckpointError")
        assert err.startswith(f"dispatchrl: error: {summary['error']}")


# ---------------------------------------------------------------- resume restores the run


def test_resume_keeps_the_checkpoints_hyperparameters_and_refuses_contradictions(tmp_path, capsys):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert (
        main(
            [
                "train",
                "td3",
                "--steps",
                "1000",
                "--set",
                "gamma=0.98",
                "--set",
                "actor_lr=0.0005",
                "--seed",
                "4",
                "--save",
                str(a),
                "--no-eval",
            ]
        )
        == 0
    )
    assert main(["train", "td3", "--steps", "2000", "--resume", str(a), "--save", str(b), "--no-eval"]) == 0
    meta = json.loads(Path(f"{b}.json").read_text())
    assert (meta["config"]["gamma"], meta["config"]["actor_lr"], meta["seed"], meta["steps"]) == (0.98, 0.0005, 4, 2000)
    # the same as one uninterrupted 2000-step run with those flags
    whole = td3.train(
        drl.CPU(), "pendulum", td3.Config(total_steps=2000, gamma=0.98, actor_lr=0.0005), seed=4, progress=False
    )
    _, arrays = checkpoint.load(b)
    np.testing.assert_array_equal(arrays["actor.weights.0.value"], drl.to_numpy(whole.state.actor.weights[0].value))
    capsys.readouterr()
    for flags, field in (
        (["--set", "gamma=0.99"], "gamma=0.99 contradicts the checkpoint's gamma=0.98"),
        (["--steps", "500"], "only be raised"),
        (["--seed", "5"], "--seed is 5"),
        (["--env", "acrobot"], "--env is 'acrobot'"),
    ):
        # (argparse: the last --steps wins)
        assert main(["train", "td3", "--steps", "2000", "--resume", str(a), "--no-eval", *flags]) == 2
        assert field in capsys.readouterr().err
    assert main(["train", "sac", "--resume", str(a), "--no-eval"]) == 2
    assert "algorithm is 'sac'" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "td3",
                "--steps",
                "2000",
                "--resume",
                str(a),
                "--set",
                "gamma=0.99",
                "--override",
                "--save",
                str(c),
                "--no-eval",
            ]
        )
        == 0
    )
    assert "warning: --override: gamma changed from 0.98 (checkpoint) to 0.99" in capsys.readouterr().err
    assert json.loads(Path(f"{c}.json").read_text())["config"]["gamma"] == 0.99


# ---------------------------------------------------------------- early failures


def test_unwritable_save_path_is_refused_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(td3, "train", lambda *a, **k: pytest.fail("trained before checking --save"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    for path in (blocker / "run", "/proc/no/such/run"):
        assert main(["train", "td3", "--steps", "200", "--save", str(path), "--no-eval"]) == 2
        assert "cannot write there" in capsys.readouterr().err
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert (
            main(["train", "td3", "--steps", "200", "--save", str(locked / "run"), "--save-every", "100", "--no-eval"])
            == 2
        )
        assert "cannot write there" in capsys.readouterr().err


def test_a_run_too_large_for_memory_is_a_config_error(capsys):
    with pytest.raises(drl.ConfigError, match=r"replay buffer of 1000000000000 rows needs .* GiB"):
        td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=10**12))
    with pytest.raises(drl.ConfigError, match="replay_capacity"):
        sac.train(drl.CPU(), "pendulum", sac.Config(total_steps=1000, replay_capacity=10**12))
    assert main(["train", "td3", "--steps", "1000000000000", "--no-eval"]) == 2
    assert "ConfigError" in capsys.readouterr().err


def test_eval_episodes_are_validated_and_nonfinite_actions_refused(tmp_path, capsys):
    result = td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=200), seed=0, progress=False)
    result.save(tmp_path / "run")
    for episodes in ("-1", "0", "100"):
        assert main(["eval", "--checkpoint", str(tmp_path / "run"), "--episodes", episodes]) == 2
        assert "--episodes must be an int in [1, 10]" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(tmp_path / "run"), "--episodes", "12", "--seed", "3"]) == 0
    capsys.readouterr()
    g = np.random.default_rng(0)
    for parameter in result.state.actor.parameters():  # huge but finite: inf - inf inside the net
        values = drl.to_numpy(parameter.value)
        drl.assign(parameter.value, np.where(g.random(values.shape) < 0.5, -3e38, 3e38).astype(values.dtype))
    result.save(tmp_path / "huge")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the overflow is refused, not warned about
        assert main(["eval", "--checkpoint", str(tmp_path / "huge"), "--episodes", "1"]) == 2
    assert "outputs NaN or inf actions" in capsys.readouterr().err


# ---------------------------------------------------------------- SIGKILL, resume, bit for bit

TRAIN = ["td3", "--steps", "6000", "--seed", "7", "--no-eval", "--json", "--save-every", "1000", "--keep", "2"]


def _worker(save: Path, resume: bool, slow_save: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), **({"SLOW_SAVE": "1"} if slow_save else {})}
    args = [*TRAIN, "--save", str(save), *(["--resume", str(save)] if resume else [])]
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _kill_when(process: subprocess.Popen, predicate) -> list[str]:
    """Read the worker's lines until ``predicate(line)``, then SIGKILL it."""
    seen = []
    for line in process.stdout:
        seen.append(line.strip())
        if predicate(line.strip()):
            process.send_signal(signal.SIGKILL)
            break
    process.wait(timeout=120)
    return seen


def _final_arrays(path: Path) -> dict[str, np.ndarray]:
    meta, arrays = checkpoint.load(path)
    assert meta["steps"] == 6000
    return arrays


def test_sigkill_at_random_moments_then_resume_is_bit_identical(tmp_path):
    reference = tmp_path / "reference"
    done = _worker(reference, resume=False)
    _, err = done.communicate(timeout=600)
    assert done.returncode == 0, err
    rng = random.Random(int(time.time()))
    path = tmp_path / "killed"
    cycles = []
    # 1: at a random chunk boundary during training (before its save)
    target = rng.choice([1500, 2000, 2700, 3000])
    seen = _kill_when(_worker(path, resume=False), lambda line: line.startswith("STEP ") and int(line[5:]) >= target)
    cycles.append(("boundary", seen[-1]))
    # 2: in the middle of writing a checkpoint (the temporary file is written, not renamed)
    seen = _kill_when(_worker(path, resume=True, slow_save=True), lambda line: line == "SAVING")
    cycles.append(("during save", seen[-1]))
    assert list(path.glob(".step-*.tmp")), "the kill left the half-written temporary file"
    # 3: at a random wall-clock moment after training resumed (usually inside a compiled chunk)
    process = _worker(path, resume=True)
    line = process.stdout.readline()
    while line and not line.startswith("STEP"):
        line = process.stdout.readline()
    delay = rng.uniform(0.0, 0.3)
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=120)
    cycles.append(("random moment", f"{delay:.3f} s after {line.strip()}"))
    assert process.returncode == -signal.SIGKILL
    # the newest complete checkpoint continues the run
    finish = _worker(path, resume=True)
    _, err = finish.communicate(timeout=600)
    assert finish.returncode == 0, err
    reference_arrays, resumed = _final_arrays(reference), _final_arrays(path)
    assert reference_arrays.keys() == resumed.keys()
    for name in reference_arrays:
        np.testing.assert_array_equal(resumed[name], reference_arrays[name], err_msg=name)
    assert len(list(path.glob("step-*.npz"))) == 2  # --keep 2


def test_sigint_saves_at_the_next_boundary_and_exits_cleanly(tmp_path):
    path = tmp_path / "run"
    process = _worker(path, resume=False)
    line = process.stdout.readline()
    while line and not line.startswith("STEP"):
        line = process.stdout.readline()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "interrupted" and summary["saved"].endswith(f"step-{summary['steps']:012d}.npz")
    assert "dispatchrl: interrupted: stopped at step" in err and f"--resume {path}" in err
    assert "Traceback" not in err
    meta, _ = checkpoint.load(path)
    assert meta["steps"] == summary["steps"] < 6000
    finish = _worker(path, resume=True)
    _, err = finish.communicate(timeout=600)
    assert finish.returncode == 0, err
    assert checkpoint.load(path)[0]["steps"] == 6000


@pytest.mark.parametrize("device", ["generic", "cpu", "c", "cuda"])
def test_history_stays_complete_when_the_episode_ring_wraps(monkeypatch, device):
    """The device keeps the latest episodes in a ring the driver reads at every chunk boundary:
    a ring of num_envs + 1 episodes wraps several times, and history (and the run) still equal
    those of a run with the default ring."""
    device = device_from_name(device)
    config = td3.Config(total_steps=1000, warmup_steps=100, batch_size=8, hidden=(8,))
    env: object = "pendulum"  # five 200-step episodes
    if isinstance(device, (drl.Generic, drl.CUDA)):  # slow devices: shorter episodes (six of 10 steps)
        # updates in the last 10 steps only: the simulator runs each CUDA thread in Python (~30 s a
        # run with warmup 25, ~9 s with 50)
        config = td3.Config(total_steps=60, warmup_steps=50, batch_size=4, hidden=(4,), num_envs=2)
        env = drl.envs.Pendulum(2, max_episode_steps=10)
    reference = td3.train(device, env, config, seed=0, progress=False)
    monkeypatch.setattr(runs, "episode_ring_capacity", lambda num_envs, env_steps: num_envs + 1)
    wrapped = td3.train(device, env, config, seed=0, progress=False)
    ring, count = wrapped.state.episodes.returns.shape[0], int(drl.to_numpy(wrapped.state.episodes.count)[0])
    assert ring == config.num_envs + 1 and count > ring + 1
    assert len(reference.history["returns"]) == count
    orders = [np.arange(count)] * 2
    if isinstance(device, drl.CUDA):  # episodes ending at one step are counted in any thread order
        orders = [np.lexsort((h["returns"], h["steps"])) for h in (wrapped.history, reference.history)]
    for key in ("steps", "returns", "lengths"):
        np.testing.assert_array_equal(wrapped.history[key][orders[0]], reference.history[key][orders[1]])
    obs = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(wrapped.policy(obs), reference.policy(obs))


def test_an_episode_ring_smaller_than_one_iteration_is_refused(monkeypatch):
    monkeypatch.setattr(runs, "episode_ring_capacity", lambda num_envs, env_steps: num_envs - 1)
    with pytest.raises(drl.ConfigError, match="ring holds 1 episodes, fewer than one iteration"):
        td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=200, num_envs=2), seed=0, progress=False)
