"""The command line and the Python API as a new user meets them (issue 35, items 6-9): messages
that name what the user typed and what exists, flags that say what they do, and runs that say why
they end or that they train nothing. None of these compiles a kernel."""

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.cli import available_devices, build_parser, main
from dispatchrl.training.runs import EpisodeHistory


def test_unknown_env_lists_the_native_names_and_suggests_the_closest(capsys):
    assert main(["train", "td3", "--env", "pendlum", "--steps", "200"]) == 2
    err = capsys.readouterr().err
    assert (
        "(pendulum, acrobot, cartpole, mountaincar, multirotor, ant, halfcheetah, hopper, walker2d, humanoid)" in err
        and "did you mean 'pendulum'" in err
    )
    assert "from_gymnasium" not in err


def test_cuda_without_a_gpu_names_the_flag_to_use():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-m", "dispatchrl", "train", "td3", "--device", "cuda", "--steps", "200"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "--device cpu" in done.stderr and "use CPU()" not in done.stderr


def test_unknown_flag_gets_the_subcommands_usage_and_the_closest_flag(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["train", "td3", "--actr-lr", "1e-3"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: dispatchrl train td3") and "did you mean --actor-lr?" in err


def test_version_and_help_texts(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out.strip() == f"dispatchrl {drl.__version__}"
    parser = build_parser()
    assert "``" not in parser.format_help()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    train_td3 = next(a for a in commands["train"]._actions if a.dest == "algo").choices["td3"]
    helps = {option: action.help for action in train_td3._actions for option in action.option_strings}
    assert "--total-steps" in helps["--steps"] and "--steps" in helps["--total-steps"]
    assert "default" in helps["--device"]
    exporter = {o: a.help for a in commands["export-trainer"]._actions for o in a.option_strings}
    assert exporter["--out"]


def test_demo_runs_on_the_c_device_when_a_compiler_is_installed():
    from dispatchrl.backends.c.compiler import host_compiler

    try:
        host_compiler()
    except drl.DeviceError:
        pytest.skip("no C compiler")
    assert any(isinstance(device, drl.C) for device in available_devices())


def test_stop_on_reward_says_why_and_where_the_run_stopped(capsys):
    history = EpisodeHistory(
        {"steps": np.array([200, 400]), "returns": np.array([-150.0, -120.0]), "lengths": np.array([200, 200])}
    )
    run = types.SimpleNamespace(history=history, steps=1000, total_steps=20_000, stop=False)
    stop = drl.StopOnReward(-200.0)
    stop(run)
    assert run.stop and stop.stopped_at == 1000
    err = capsys.readouterr().err
    assert "StopOnReward" in err and "-135.0" in err and "-200" in err and "1000 of 20000" in err


def test_model_repr_shows_algorithm_env_device_and_steps():
    assert repr(drl.TD3("pendulum", seed=3)) == "TD3(env='pendulum', device=CPU(), seed=3, num_timesteps=0)"


def test_all_warmup_run_is_warned_about_and_special_files_are_refused(capsys, tmp_path):
    assert main(["train", "td3", "--warmup-steps", "100000", "--steps", "500", "--save", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "warning: warmup_steps=100000 covers the whole run of 500 steps" in err
    assert "--save /dev/null" in err and "special file" in err
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "thesis.tex").write_text("")
    assert main(["train", "td3", "--steps", "500", "--save", str(folder), "--save-every", "100"]) == 2
    assert "thesis.tex" in capsys.readouterr().err


def test_keep_best_deploys_saves_and_reports_the_best_policy(capsys, tmp_path):
    assert main(["train", "td3", "--keep-best", "-1"]) == 2
    assert "--keep-best must be an int >= 0" in capsys.readouterr().err
    small = ["--steps", "400", "--warmup-steps", "50", "--batch-size", "16", "--hidden", "16,16", "--json"]
    path = tmp_path / "run"
    assert main(["train", "td3", *small, "--keep-best", "100", "--save", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 400 and summary["policy_steps"] in (100, 200, 300, 400)
    assert summary["saved"] == str(path) and summary["saved_best"] == f"{path}-best.npz"
    # the best policy's run evaluates as the training command reported; the final state resumes
    assert main(["eval", "--checkpoint", f"{path}-best", "--json"]) == 0
    best = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert best["eval_return"] == summary["eval_return"]
    assert json.loads((tmp_path / "run-best.json").read_text())["steps"] == summary["policy_steps"]
    assert main(["train", "td3", *small, "--keep-best", "0"]) == 0
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert final["policy_steps"] == 400 and final["saved_best"] is None


def test_keep_best_evaluates_as_often_as_the_env_asks():
    """A tenth of the run by default; the multirotor's precise hover comes and goes between
    evaluations, so it asks for 30 (every 10k of the recipe's 300k steps); at least 1000 apart."""
    from dispatchrl.cli import keep_best_every
    from dispatchrl.envs import Pendulum
    from dispatchrl.envs.multirotor import Multirotor
    from dispatchrl.training.envspec import resolve_env

    assert keep_best_every(resolve_env(Multirotor(), 1), 300_000) == 10_000
    assert keep_best_every(resolve_env(Pendulum(), 1), 300_000) == 30_000
    assert keep_best_every(resolve_env("CartPole-v1", 1), 50_000) == 5_000
    assert keep_best_every(resolve_env(Multirotor(), 1), 20_000) == 1_000


def test_the_command_exits_with_mains_status_and_all_its_output():
    """``cli.console`` (the ``dispatchrl`` command, ``python -m dispatchrl``) skips the interpreter's
    teardown: the exit status, every line written and the exit handlers' work still arrive."""
    command = [
        sys.executable,
        "-c",
        "import atexit, dispatchrl.cli as c; atexit.register(print, 'HANDLER'); c.console()",
    ]
    done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("dispatchrl ") and done.stdout.endswith("HANDLER\n")
    done = subprocess.run([*command, "train", "td3", "--bogus"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "unrecognized arguments: --bogus" in done.stderr and "HANDLER" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "dispatchrl", "--version"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.startswith("dispatchrl ")
