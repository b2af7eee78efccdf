"""Memory checked before it is taken, bad input as dispatchrl errors (not tracebacks), PPO's
divergence and learning rate told right (issue 40, items 13-16). Cheap: nothing here compiles a
fused step."""

import dataclasses
import gc
import json
import resource
import sys

import numpy as np
import pytest
from testkit import state_bytes

import dispatchrl as drl
from dispatchrl.algorithms import ppo, sac, td3
from dispatchrl.cli import main
from dispatchrl.training import driver
from dispatchrl.training.envspec import resolve_env
from dispatchrl.training.runs import build_state, restore_for_resume, save_run

DEEP = "[" * 6000 + "]" * 6000  # json's C scanner raises RecursionError near 1000 levels


# ---------------------------------------------------------------- 13: memory before it is taken


@pytest.mark.parametrize(
    "algo, config",
    [
        (td3, td3.Config(hidden=(96, 80), batch_size=64, total_steps=20_000, prioritized=True, n_step=3)),
        (sac, sac.Config(hidden=(48, 48, 32), batch_size=128, activation="gelu", num_envs=4)),
        (ppo, ppo.Config(hidden=(64, 64), num_envs=8, steps_per_env=64, batch_size=128, total_steps=8192)),
    ],
)
def test_memory_estimate_matches_what_the_state_allocates(algo, config):
    from dispatchrl.algorithms import memory

    spec = resolve_env("pendulum", config.num_envs)
    state = build_state(algo, drl.CPU(), spec, config, 0)
    built = state_bytes(state, set())
    episodes = driver.episode_ring_capacity(config.num_envs, algo.schedule(config).env_steps)
    estimated = memory.total_bytes(memory.estimate(algo, config, spec.obs_dim, spec.action_dim, episodes))
    assert abs(estimated - built) <= 0.02 * built, (estimated, built)


def test_networks_and_batches_beyond_memory_are_refused_before_allocating():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # today's tree: numpy's _ArrayMemoryError from inside the build
    with pytest.raises(drl.ConfigError, match=r"networks .* needs .* GiB \(lower hidden\)"):
        td3.train(drl.CPU(), "pendulum", td3.Config(hidden=(100_000, 100_000), total_steps=200), progress=False)
    with pytest.raises(drl.ConfigError, match=r"batch buffers and scratch needs .* \(lower batch_size"):
        sac.train(drl.CPU(), "pendulum", sac.Config(batch_size=10**9, total_steps=200), progress=False)
    with pytest.raises(drl.ConfigError, match=r"rollout of .* rows needs"):
        ppo.train(
            drl.CPU(), "pendulum", ppo.Config(num_envs=10**5, steps_per_env=10**5, batch_size=10**5, total_steps=10**10)
        )
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grown_kib < 64 * 1024  # refused from the config: nothing large was allocated


def test_network_memory_is_checked_against_what_is_available(monkeypatch):
    # 2048-wide TD3 networks with gradients, Adam moments and targets: ~0.34 GB, over 64 MiB
    monkeypatch.setattr(driver, "available_memory", lambda: 64 * 2**20)
    config = td3.Config(hidden=(2048, 2048), total_steps=200)
    with pytest.raises(drl.ConfigError, match=r"more than the 0\.1 GiB of memory available: networks"):
        td3.train(drl.CPU(), "pendulum", config, progress=False)


def test_export_trainer_and_web_refuse_a_replay_buffer_beyond_memory(capsys):
    from dispatchrl.backends.c.compiler import zig_command
    from dispatchrl.export.trainer import trainer_source

    # today's tree: three traced states of 10^12 rows each, a MemoryError (10^9: the OOM killer)
    with pytest.raises(drl.ConfigError, match=r"export-trainer: .* replay buffer of 1000000000000 rows"):
        trainer_source("td3", "pendulum", 10_000, 0, {"replay_capacity": 10**12})
    with pytest.raises(drl.ConfigError, match=r"rollout of .* rows .*lower num_envs × steps_per_env"):
        trainer_source("ppo", "pendulum", 10**10, 0, {"num_envs": 10**5, "steps_per_env": 10**5, "batch_size": 10**5})
    if zig_command() is not None:  # without zig, web refuses before (DeviceError)
        assert main(["web", "--steps", str(10**12), "--port", "0"]) == 2
        assert "replay_capacity" in capsys.readouterr().err


# ---------------------------------------------------------------- 15: tracebacks instead of errors


def test_load_json_refuses_deep_nesting_and_non_utf8_naming_the_source():
    from dispatchrl.checks import JSON_MAX_DEPTH, load_json

    assert load_json(b'{"a": "[[[[{{", "b": [[1]]}', "x") == {"a": "[[[[{{", "b": [[1]]}
    assert load_json("[" * JSON_MAX_DEPTH + "]" * JSON_MAX_DEPTH, "x") is not None
    with pytest.raises(drl.ConfigError, match=r"--config c\.json: JSON nested 6000 levels deep"):
        load_json(DEEP, "--config c.json")
    with pytest.raises(drl.ConfigError, match=r"--config c\.json: not UTF-8 text \(byte 7"):
        load_json(b'{"a": "\xff"}', "--config c.json")
    with pytest.raises(drl.ConfigError, match="not UTF-8"):  # argv's undecodable bytes (surrogateescape)
        load_json(b'"\xff"'.decode("utf-8", "surrogateescape"), "--set network")
    with pytest.raises(drl.ConfigError, match="not valid JSON"):
        load_json("[1,", "x")


def test_deep_or_non_utf8_json_in_set_config_and_sweep_specs_is_a_config_error(tmp_path, capsys):
    from dispatchrl import sweep

    assert main(["train", "td3", "--steps", "200", "--set", f"hidden={DEEP}"]) == 2
    assert "--set hidden: JSON nested 6000 levels deep" in capsys.readouterr().err
    bad = b"network=\xff".decode("utf-8", "surrogateescape")
    assert main(["train", "td3", "--steps", "200", "--set", bad]) == 2
    assert "--set network: not UTF-8" in capsys.readouterr().err
    deep, binary = tmp_path / "deep.json", tmp_path / "binary.json"
    deep.write_text('{"a":' * 6000 + "1" + "}" * 6000)
    binary.write_bytes(b'{"hidden": "\xff"}')
    for path, problem in ((deep, "JSON nested 6000 levels deep"), (binary, "not UTF-8 text")):
        assert main(["train", "td3", "--steps", "200", "--config", str(path), "--json"]) == 2
        line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert line["status"] == "error" and f"--config {path}: {problem}" in line["error"]
        with pytest.raises(drl.ConfigError, match=f"sweep SPEC .*{problem}"):
            sweep.load_spec(path)
    toml = tmp_path / "deep.toml"
    toml.write_text(f"space = {DEEP}\n")
    with pytest.raises(drl.ConfigError, match="JSON nested 6000 levels deep"):
        sweep.load_spec(toml)


def test_a_missing_or_garbage_study_db_is_a_config_error(tmp_path, capsys):
    missing = tmp_path / "none"
    assert main(["sweep", "--report", "--out", str(missing)]) == 2
    assert "sweep --report: no study in" in capsys.readouterr().err
    assert not missing.exists()  # optuna did not create an empty study.db there
    (tmp_path / "study.db").write_bytes(b"garbage, not SQLite\n" * 10)
    for flag in ("--report", "--resume"):
        spec = ["sweep.json"] if flag == "--resume" else []
        assert main(["sweep", *spec, flag, "--out", str(tmp_path)]) == 2
        assert f"sweep {flag}: {str(tmp_path / 'study.db')!r} is not a study" in capsys.readouterr().err


def test_out_and_video_naming_an_existing_file_are_config_errors(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert main(["export-trainer", "td3", "--out", str(a_file)]) == 2  # today: FileExistsError after tracing
    assert f"--out {str(a_file)!r} is an existing file, not a folder" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(tmp_path / "run"), "--video", str(a_file / "videos"), "--json"]) == 2
    out, err = capsys.readouterr()
    assert "--video" in json.loads(out.strip().splitlines()[-1])["error"] and "existing file" in err
    assert main(["plot", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "is a folder; name the image file" in capsys.readouterr().err


def test_argparse_errors_under_json_still_end_with_one_json_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "td3", "--steps", "many", "--json"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    line = json.loads(out.strip().splitlines()[-1])
    assert line["status"] == "error" and "argument --steps: invalid int value: 'many'" in line["error"]
    assert "usage:" in err
    with pytest.raises(SystemExit):
        main(["train", "td3", "--steps", "many"])
    assert capsys.readouterr().out == ""  # without --json, argparse's output alone


def test_deep_networks_warn_of_a_long_compile(tmp_path, recwarn):
    with pytest.warns(driver.LongCompileWarning, match=r"50 hidden layers: compiling the fused steps may take"):
        with pytest.raises(drl.CheckpointError):  # after the warning, before anything compiles
            td3.train(drl.CPU(), "pendulum", td3.Config(hidden=(8,) * 50), resume=tmp_path / "none.npz")
    recwarn.clear()
    with pytest.raises(drl.CheckpointError):
        td3.train(drl.CPU(), "pendulum", td3.Config(hidden=(256, 256)), resume=tmp_path / "none.npz")
    assert not [w for w in recwarn if issubclass(w.category, driver.LongCompileWarning)]


def test_a_run_shorter_than_total_steps_warns_before_compiling(tmp_path, recwarn):
    # DQN trains in whole phases of num_envs × train_freq env steps: 3000 runs 11 × 256 = 2816
    config = drl.dqn.config_for("CartPole-v1")
    with pytest.warns(
        driver.RoundedStepsWarning, match=r"total_steps=3000 .* 256 env steps .* the run takes 2816 steps"
    ):
        with pytest.raises(drl.CheckpointError):  # after the warning, before anything compiles
            drl.dqn.train(
                drl.CPU(), "CartPole-v1", dataclasses.replace(config, total_steps=3000), resume=tmp_path / "x.npz"
            )
    recwarn.clear()
    with pytest.raises(drl.CheckpointError):  # the default's 50k rounds down by 0.16 %: no warning
        drl.dqn.train(drl.CPU(), "CartPole-v1", config, resume=tmp_path / "x.npz")
    assert not [w for w in recwarn if issubclass(w.category, driver.RoundedStepsWarning)]


def test_the_command_line_shows_its_warnings_as_its_other_messages(capsys):
    assert main(["train", "dqn", "--env", "CartPole-v1", "--steps", "3000", "--no-eval", "--keep-best", "0"]) == 0
    err = capsys.readouterr().err
    assert "dispatchrl: warning: total_steps=3000 is not a multiple" in err and "RoundedStepsWarning" not in err


# ---------------------------------------------------------------- 16: PPO's divergence and learning rate


def _ppo_state(config):
    spec = resolve_env("pendulum", config.num_envs)
    return spec, build_state(ppo, drl.CPU(), spec, config, 0)


SMALL_PPO = ppo.Config(num_envs=4, steps_per_env=16, batch_size=32, total_steps=640)


def test_nan_observations_from_a_diverged_policy_are_a_divergence():
    _, state = _ppo_state(SMALL_PPO)
    drl.assign(state.obs_stats.nonfinite, np.array([3], state.obs_stats.nonfinite.dtype))
    with pytest.raises(drl.ConfigError, match="the env returned NaN or inf observations"):
        ppo.check_iteration(state)  # the policy is finite: the env's fault
    weights = state.actor.weights[0].value
    drl.assign(weights, np.full(weights.shape, np.nan, np.float32))
    drl.assign(state.step, np.array([32]))
    with pytest.raises(drl.TrainingDiverged, match=r"actor weights became NaN .* between step 64 and 128") as e:
        ppo.check_iteration(state)  # today: the ConfigError blaming the env (exit 2)
    assert e.value.quantity == "actor weights" and "lr" in str(e.value)
    assert not isinstance(e.value, drl.ConfigError)


def test_ppo_lr_override_on_resume_reaches_the_state(tmp_path):
    spec, state = _ppo_state(SMALL_PPO)
    save_run(tmp_path / "run", "ppo", spec, SMALL_PPO, 0, 0, state)
    changed = dataclasses.replace(SMALL_PPO, lr=10.0)
    _, resumed = _ppo_state(changed)
    restore_for_resume(tmp_path / "run", "ppo", spec, changed, resumed)
    assert drl.to_numpy(resumed.learning_rate)[0] == 10.0  # today: the checkpoint's 0.001
    _, same = _ppo_state(SMALL_PPO)
    restore_for_resume(tmp_path / "run", "ppo", spec, SMALL_PPO, same)
    assert drl.to_numpy(same.learning_rate)[0] == np.float64(SMALL_PPO.lr)


@pytest.mark.parametrize("rate", [-1.0, 0.0])
def test_ppo_checkpoint_learning_rate_must_be_positive(tmp_path, rate):
    spec, state = _ppo_state(SMALL_PPO)
    drl.assign(state.learning_rate, np.array([rate]))
    save_run(tmp_path / "run", "ppo", spec, SMALL_PPO, 0, 0, state)
    _, fresh = _ppo_state(SMALL_PPO)
    with pytest.raises(drl.CheckpointError, match=f"'learning_rate' = {rate} is not a positive learning rate"):
        restore_for_resume(tmp_path / "run", "ppo", spec, SMALL_PPO, fresh)


# ---------------------------------------------------------------- 14: repeated learn() and memory


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_repeated_learn_leaves_no_freed_state_behind():
    """Each learn() rebuilds the state with a replay buffer as large as the new budget; the old
    state and its snapshot copy were freed into glibc's heap and kept there. Warm-up only (random
    actions): the steps are cheap, the buffers as large as a real run's."""
    steps = 200_000
    model = drl.TD3("pendulum", progress=False, warmup_steps=10**9)
    rss = []
    for _ in range(4):
        model.learn(steps)
        gc.collect()
        rss.append(_rss_bytes())
    replay_row = 4 * (2 * 3 + 1 + 1) + 2  # pendulum: float32 obs, next_obs, action, reward; 2 flags
    grown = rss[-1] - rss[1]  # two calls: the replay buffer grew by 2 x steps rows
    # today's tree: ~25 MB a call (3 replay buffers' worth), 50 MB here
    assert grown < 2 * steps * replay_row + 12 * 2**20, [r / 2**20 for r in rss]


@pytest.mark.parametrize("name", ["td3", "sac", "ppo", "dqn"])
def test_every_config_field_declares_its_rule_and_each_rule_refuses(name):
    """Each field's rule stands beside it (``batch_size: int = POSITIVE_INT(100)``), and
    validate() names the field whose value its rule refuses."""
    import dataclasses

    from dispatchrl.algorithms.registry import ALGORITHMS
    from dispatchrl.errors import ConfigError

    config_class = ALGORITHMS[name].Config
    for field in dataclasses.fields(config_class):
        assert "rule" in field.metadata, f"{config_class.__module__}.Config.{field.name} declares no rule"
        refused = "not a valid value" if field.name != "memmap_path" else 3.5
        with pytest.raises(ConfigError, match=rf"Config\.{field.name} must be "):
            dataclasses.replace(config_class(), **{field.name: refused}).validate()
