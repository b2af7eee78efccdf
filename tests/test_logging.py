"""Metrics logging (CSV, TensorBoard), the progress display without a TTY, the CLI generated
from the Config dataclasses and --config files, and learning-curve plots."""

import dataclasses
import io
import json
from types import SimpleNamespace

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.algorithms import ALGORITHMS, ppo, td3
from dispatchrl.cli import _run_config, build_parser, main
from dispatchrl.cli_config import load_config_file
from dispatchrl.loggers import CSVLogger, MultiLogger, TensorBoardLogger, config_dict, learner_scalars, read_progress
from dispatchrl.training.progress import Progress
from dispatchrl.training.runs import EpisodeHistory

CONFIG = dataclasses.replace(
    td3.config_for("pendulum"), total_steps=1000
)  # the CLI's; one config for every run here: one compile


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    """A 1000-step TD3 run logged to CSV and TensorBoard through the Python API."""
    log_dir = tmp_path_factory.mktemp("run")
    logger = MultiLogger([CSVLogger(log_dir), TensorBoardLogger(log_dir)])
    result = td3.train(drl.CPU(), "pendulum", CONFIG, seed=3, progress=False, logger=logger)
    logger.close()
    return log_dir, result


def test_csv_episode_rows_equal_history(logged_run):
    log_dir, result = logged_run
    rows = read_progress(log_dir)
    episodes = [r for r in rows if "episode_return" in r]
    assert len(result.history["returns"]) == 5  # 1000 steps of 200-step episodes
    np.testing.assert_array_equal([r["step"] for r in episodes], result.history["steps"])
    np.testing.assert_array_equal([r["episode_return"] for r in episodes], result.history["returns"])
    np.testing.assert_array_equal([r["episode_length"] for r in episodes], result.history["lengths"])
    chunks = [r for r in rows if "steps_per_second" in r]
    assert chunks[-1]["step"] == 1000 and all(r["steps_per_second"] > 0 for r in chunks)
    assert [r["step"] for r in rows] == sorted(r["step"] for r in rows)
    assert json.loads((log_dir / "config.json").read_text()) == config_dict(CONFIG)
    assert json.loads((log_dir / "run.json").read_text())["algo"] == "td3"


def test_tensorboard_reader_parses_the_same_scalars(logged_run):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    log_dir, result = logged_run
    reader = event_accumulator.EventAccumulator(str(log_dir))
    reader.Reload()
    rows = read_progress(log_dir)
    assert set(reader.Tags()["scalars"]) == {k for r in rows for k in r} - {"step", "time"}
    for tag in reader.Tags()["scalars"]:
        events = reader.Scalars(tag)
        csv_rows = [r for r in rows if tag in r]
        assert [e.step for e in events] == [int(r["step"]) for r in csv_rows]
        np.testing.assert_allclose([e.value for e in events], [r[tag] for r in csv_rows], rtol=1e-6)  # float32
    np.testing.assert_allclose(
        [e.value for e in reader.Scalars("episode_return")], result.history["returns"], rtol=1e-6
    )


def test_ppo_learner_scalars_are_the_states():
    result = ppo.train(drl.CPU(), "pendulum", ppo.Config(total_steps=2 * 64 * 128), progress=False)
    scalars = learner_scalars(result.state)
    stats = drl.to_numpy(result.state.update_stats)
    assert scalars["kl"] == stats[0] and scalars["clip_fraction"] == stats[3]
    assert scalars["learning_rate"] == ppo.Config().lr


class FakeRun(SimpleNamespace):
    pass


def fake_run(steps, total, finished=False):
    history = EpisodeHistory({"steps": np.array([200]), "returns": np.array([-5.0]), "lengths": np.array([200])})
    return FakeRun(
        steps=steps,
        total_steps=total,
        finished=finished,
        history=history,
        algo=td3,
        spec=SimpleNamespace(name="pendulum"),
    )


def test_progress_without_a_tty_prints_periodic_lines_and_rates_exclude_compile():
    clock = SimpleNamespace(now=0.0)
    stream = io.StringIO()
    bar = Progress(stream=stream, interval=10.0, clock=lambda: clock.now)
    bar.compiling("compiling fused TD3 step (cpu)")
    clock.now = 100.0  # compilation took 100 s
    bar.started(fake_run(0, 4000))
    for second in range(1, 41):  # then 100 steps a second of training
        clock.now = 100.0 + second
        bar(fake_run(100 * second, 4000, finished=second == 40))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "dispatchrl: compiling fused TD3 step (cpu)…"
    # one line every 10 s (the first chunk's included), the last one when the run ends
    steps = [int(line.split()[1].split("/")[0]) for line in lines[1:]]
    assert steps == [100, 1100, 2100, 3100, 4000]
    assert all(" 100 steps/s" in line for line in lines[1:]), lines  # 100 s of compile would give < 40
    assert "return -5.00" in lines[-1] and "ETA 0:00:00" in lines[-1]


def test_progress_rate_counts_from_the_resumed_step():
    clock = SimpleNamespace(now=0.0)
    bar = Progress(stream=io.StringIO(), clock=lambda: clock.now)
    bar.compiling("x")
    bar.started(fake_run(3000, 4000))
    clock.now = 2.0
    assert bar.rate(3500) == 250.0


def test_train_help_lists_every_config_field(capsys):
    for name, algo in ALGORITHMS.items():
        with pytest.raises(SystemExit):
            main(["train", name, "--help"])
        shown = " ".join(capsys.readouterr().out.split())
        for field in dataclasses.fields(algo.Config):
            flag = f"--{field.name.replace('_', '-')}"
            assert flag in shown, (name, flag)
        assert f"[float, default: {algo.config_for('pendulum').gamma!r}]" in shown  # the default env's


def config_of(argv):
    return _run_config(build_parser().parse_args(["train", *argv]))[2]


def test_config_flags_are_set_aliases(tmp_path):
    flags = config_of(["td3", "--actor-lr", "3e-4", "--hidden", "32,32", "--replay-capacity", "null"])
    assert flags == dataclasses.replace(
        td3.config_for("pendulum"), actor_lr=3e-4, hidden=(32, 32), replay_capacity=None
    )
    assert flags == config_of(["td3", "--set", "actor_lr=3e-4", "--set", "hidden=[32,32]"])
    assert config_of(["td3", "--gamma", "0.5", "--set", "gamma=0.7"]).gamma == 0.7  # the last one given


def test_bad_flag_value_is_the_same_config_error(capsys):
    assert main(["train", "td3", "--set", "actor_lr=-1", "--no-eval"]) == 2
    by_set = capsys.readouterr().err
    assert main(["train", "td3", "--actor-lr", "-1", "--no-eval"]) == 2
    assert capsys.readouterr().err == by_set
    assert "ConfigError: Config.actor_lr must be a positive number, got -1" in by_set


def test_config_file_round_trip(tmp_path, capsys):
    config = dataclasses.replace(CONFIG, actor_lr=3e-4, hidden=(32, 16), replay_capacity=None)
    (tmp_path / "config.json").write_text(json.dumps(config_dict(config)))
    assert load_config_file(td3.Config(), tmp_path / "config.json") == config
    assert config_of(["td3", "--config", str(tmp_path / "config.json")]) == config
    assert config_of(["td3", "--config", str(tmp_path / "config.json"), "--batch-size", "64"]).batch_size == 64
    (tmp_path / "typo.json").write_text(json.dumps({"actor_lrr": 1e-3}))
    assert main(["train", "td3", "--config", str(tmp_path / "typo.json")]) == 2
    assert "unknown field(s) ['actor_lrr']" in capsys.readouterr().err


def test_cli_log_dir_writes_its_config_and_config_reruns_it(tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    argv = ["train", "td3", "--no-eval", "--json", "--seed", "1"]
    assert main([*argv, "--steps", "1000", "--log-dir", str(first)]) == 0
    assert json.loads((first / "config.json").read_text()) == config_dict(CONFIG)
    capsys.readouterr()
    again = ["train", "td3", "--no-eval", "--seed", "1", "--progress-interval", "0"]  # no --json: progress shown
    assert main([*again, "--config", str(first / "config.json"), "--log-dir", str(second)]) == 0
    progress = capsys.readouterr().err.splitlines()  # captured: not a terminal, so plain lines, one per chunk
    assert progress[0] == "dispatchrl: compiling fused TD3 step (cpu)…" and len(progress) > 10
    assert progress[-1].startswith("dispatchrl: 1000/1000 steps") and "steps/s" in progress[-1]
    assert (second / "config.json").read_text() == (first / "config.json").read_text()
    episodes = [[r for r in read_progress(d) if "episode_return" in r] for d in (first, second)]
    assert [r["episode_return"] for r in episodes[0]] == [r["episode_return"] for r in episodes[1]]
    assert main([*argv, "--logger", "csv"]) == 2
    assert "--logger csv needs --log-dir" in capsys.readouterr().err


def test_csv_logger_appends_for_a_resumed_run_and_widens_its_header(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.write(100, {"episode_return": -3.5})
    logger.flush()
    resumed = CSVLogger(tmp_path, append=True)
    resumed.write(200, {"episode_return": -2.25, "kl": 0.125})
    resumed.flush()
    rows = read_progress(tmp_path)
    assert [(r["step"], r["episode_return"]) for r in rows] == [(100, -3.5), (200, -2.25)]
    assert "kl" not in rows[0] and rows[1]["kl"] == 0.125
    CSVLogger(tmp_path)  # a new run starts the file anew
    assert read_progress(tmp_path) == []


def write_runs(folder, seeds=3, **config):
    """Runs as CSVLogger writes them: a rising return, a seed-dependent offset."""
    for seed in range(seeds):
        logger = CSVLogger(folder / f"seed{seed}")
        logger.start({"algo": "td3", "env": "pendulum", "seed": seed}, config_dict(td3.Config(**config)))
        for episode in range(1, 21):
            logger.write(200 * episode, {"episode_return": -1500.0 + 70 * episode + 50 * seed, "episode_length": 200})
        logger.close()


def test_plot_writes_a_png_that_is_not_blank(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    from dispatchrl.plot import learning_curves

    write_runs(tmp_path / "a")
    write_runs(tmp_path / "b", seeds=2, actor_lr=3e-4)
    (curve_a, curve_b) = sorted(learning_curves([tmp_path / "a", tmp_path / "b"]), key=lambda c: c.runs, reverse=True)
    assert curve_a.runs == 3 and curve_a.label == "TD3 pendulum actor_lr=0.001"
    np.testing.assert_array_equal(curve_a.steps, 200 * np.arange(1, 21))
    np.testing.assert_allclose(curve_a.mean, -1450.0 + 70 * np.arange(1, 21))  # offsets 0, 50, 100
    np.testing.assert_allclose(curve_a.high - curve_a.low, 100.0)
    out = tmp_path / "curve.png"
    assert main(["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    pixels = imread(out)[..., :3]
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    ink = np.any(pixels < 0.9, axis=-1)  # anything not (near) white: axes, text, curves, bands
    assert 0.02 < ink.mean() < 0.9
    assert len(np.unique(pixels.reshape(-1, 3).round(2), axis=0)) > 10  # coloured curves and bands, not one ink


def test_plot_errors_name_the_fix(tmp_path, monkeypatch, capsys):
    write_runs(tmp_path / "a", seeds=1)
    assert main(["plot", str(tmp_path / "a"), "--metric", "eval_return", "--out", str(tmp_path / "x.png")]) == 2
    assert "no 'eval_return' values; its metrics are ['episode_length', 'episode_return']" in capsys.readouterr().err
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # as if not installed
    monkeypatch.setitem(__import__("sys").modules, "matplotlib.figure", None)
    assert main(["plot", str(tmp_path / "a"), "--out", str(tmp_path / "x.png")]) == 2
    assert 'pip install "dispatchrl[plot]"' in capsys.readouterr().err
