"""The multirotor's C kernels against its CPU ones: the same trajectories from the same streams,
with resets of finished episodes between steps and the curriculum raising its weights."""

import math
from dataclasses import replace

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.envs import api as E
from dispatchrl.envs.multirotor import Multirotor
from dispatchrl.envs.multirotor.c import cos_limit


def _trajectory(device, env, actions):
    state, rng = E.env_state(device, env), drl.rng(device, 7)
    E.env_reset(device, env, state, rng)
    out = [[drl.to_numpy(x) for x in (state.obs, state.physics)]]
    for action in actions:
        E.env_step(device, env, state, drl.asarray(device, action))
        step = [drl.to_numpy(x) for x in (state.obs, state.reward, state.terminated, state.truncated, state.physics)]
        E.env_reset_done(device, env, state, rng)
        out.append(step + [drl.to_numpy(x) for x in (state.obs, state.physics, state.steps)])
    return out + [[drl.to_numpy(rng)]]


@pytest.mark.parametrize("history", [4, 32])
def test_c_steps_and_resets_as_cpu(history):
    n, steps = 16, 150
    # curriculum stages every 8 steps per env, so the weights rise (and reach their limits)
    env = Multirotor(n, max_episode_steps=60, action_history=history, curriculum_steps=8 * n)
    actions = np.random.default_rng(3).uniform(-1, 1, (steps, n, 4)).astype(np.float32)
    cpu, c = _trajectory(drl.CPU(), env, actions), _trajectory(drl.C(), env, actions)
    terminations = sum(int(step[2].sum()) for step in cpu[1:-1])
    assert terminations > 0 and sum(int(step[3].sum()) for step in cpu[1:-1]) > 0  # both kinds of reset ran
    for t, (expected, got) in enumerate(zip(cpu, c)):
        for e, g in zip(expected, got):
            if e.dtype == np.float64:  # physics: the C device's sin/cos/log may differ from libm by an ulp
                np.testing.assert_allclose(g, e, rtol=0, atol=1e-12, err_msg=f"step {t}")
            else:
                np.testing.assert_array_equal(g, e, err_msg=f"step {t}")


@pytest.mark.parametrize("task", [{}, {"reward_costs": "squared", "position_integral": 0.0}], ids=["default", "paper"])
def test_c_step_is_bit_exact_from_the_same_state(task):
    """From the CPU's state (reset draws aside, which use the C device's own sin/cos/log), steps
    give the CPU's bits: physics, observations with their noise, rewards through the curriculum
    (the default task, and the paper's: squared costs, no position-error integral)."""
    n, env = 16, Multirotor(16, max_episode_steps=60, action_history=4, curriculum_steps=8 * 16, **task)
    cpu, c = drl.CPU(), drl.C()
    expected, rng = E.env_state(cpu, env), drl.rng(cpu, 7)
    E.env_reset(cpu, env, expected, rng)
    got = E.env_state(c, env)
    for name in ("physics", "steps"):
        drl.assign(getattr(got, name), drl.to_numpy(getattr(expected, name)))
    actions = np.random.default_rng(0).uniform(-1.5, 1.5, (100, n, 4)).astype(np.float32)  # some clipped
    for t, action in enumerate(actions):
        E.env_step(cpu, env, expected, drl.asarray(cpu, action))
        E.env_step(c, env, got, drl.asarray(c, action))
        for name in ("physics", "obs", "reward", "terminated", "truncated", "steps"):
            np.testing.assert_array_equal(
                drl.to_numpy(getattr(got, name)), drl.to_numpy(getattr(expected, name)), err_msg=f"{name} at {t}"
            )


@pytest.mark.parametrize("max_angle", [0.0, 1e-300, 0.3, math.pi / 2, 3.0, math.pi])
def test_cos_limit_is_the_acos_test(max_angle):
    """cw >= cos_limit(a) is |2 acos(cw)| <= a, at the limit and the doubles beside it."""
    c = cos_limit(max_angle)
    for cw in (c, np.nextafter(c, -2.0), np.nextafter(c, 2.0), -1.0, 0.0, 1.0):
        if -1.0 <= cw <= 1.0:
            assert (cw >= c) == (abs(2.0 * math.acos(cw)) <= max_angle), cw


def test_exported_td3_trainer_gives_train_device_c_weights(tmp_path):
    """export-trainer on the multirotor (the C kernels, their parameter array and curriculum
    table as constant arrays): the host build's weights are ``train --device c``'s, past the
    warm-up into updates every train_freq steps, the critics on the privileged observation."""
    from dispatchrl.algorithms import td3
    from dispatchrl.export.trainer import state_weights, trainer_source, weights_checksum, write_trainer
    from dispatchrl.export.trainer_targets import build_trainer, run_trainer

    steps, overrides = 400, dict(warmup_steps=200, actor_warmup_steps=300, batch_size=32, hidden=[16, 16])
    write_trainer(tmp_path, trainer_source("td3", "multirotor", steps, 0, overrides=overrides))
    host = run_trainer(build_trainer(tmp_path, "host"), "host", steps=steps, seed=0)
    config = replace(td3.config_for("multirotor"), total_steps=steps, **overrides)
    result = td3.train(drl.C(), "multirotor", config, seed=0)
    assert host["checksum"] == weights_checksum(state_weights(result.state))
    assert host["steps"] == steps and np.isfinite(host["eval_return"])
