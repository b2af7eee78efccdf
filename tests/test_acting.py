"""The one act program: the policy heads' kernels (clip, argmax) against numpy on every device;
each algorithm's ``act(..., deterministic=True)`` against the host policy its head describes;
``predict(deterministic=False)`` through ``act`` without moving training's random stream."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dispatchrl as drl
from dispatchrl.algorithms import dqn, ppo, sac, td3
from dispatchrl.nn import head_policy
from dispatchrl.spaces import Box, Discrete

seeds = st.integers(0, 2**32 - 1)


def examples(device):
    if isinstance(device, drl.C):  # each example compiles a library: few, derandomised (disk cache)
        return settings(max_examples=4, derandomize=True, deadline=None)
    return settings(max_examples=3 if isinstance(device, drl.CUDA) else 12, deadline=None)


def test_clip_and_argmax_match_numpy(device):
    @examples(device)
    @given(st.integers(1, 6), st.integers(1, 6), seeds, st.floats(-2, 0), st.floats(0, 2))
    def check(m, n, seed, low, high):
        x = (np.random.default_rng(seed).normal(size=(m, n)) * 2).astype(np.float32)
        x[:, -1] = x[:, 0]  # a tie: the first maximum wins
        clipped, index = drl.zeros(device, (m, n)), drl.zeros(device, (m, 1))
        drl.clip(device, drl.asarray(device, x), low, high, clipped)
        drl.argmax(device, drl.asarray(device, x), index)
        reference = np.minimum(np.maximum(x.astype(np.float64), low), high).astype(np.float32)
        np.testing.assert_array_equal(drl.to_numpy(clipped), reference)
        np.testing.assert_array_equal(drl.to_numpy(index)[:, 0], np.argmax(x, axis=1))

    check()


def test_clip_in_place_and_refusals():
    device = drl.CPU()
    x = drl.asarray(device, np.array([[-3.0, 0.5, 3.0]], np.float32))
    drl.clip(device, x, -1.0, 1.0, x)
    np.testing.assert_array_equal(drl.to_numpy(x), [[-1.0, 0.5, 1.0]])
    with pytest.raises(drl.ConfigError, match="high"):
        drl.clip(device, x, 1.0, -1.0, x)
    with pytest.raises(drl.ShapeError, match="out"):
        drl.argmax(device, x, drl.zeros(device, (1, 3)))


CASES = {
    "td3": (td3, td3.Config(hidden=(8,), num_envs=3), Box(np.float32([-1]), np.float32([1]))),
    "sac": (sac, sac.Config(hidden=(8,), num_envs=3), Box(np.float32([-1]), np.float32([1]))),
    "ppo": (
        ppo,
        ppo.Config(hidden=(8,), num_envs=3, steps_per_env=4, batch_size=4),
        Box(np.float32([-1]), np.float32([1])),
    ),
    "ppo_discrete": (ppo, ppo.Config(hidden=(8,), num_envs=3, steps_per_env=4, batch_size=4), Discrete(4)),
    "dqn": (dqn, dqn.Config(hidden=(8,), num_envs=3), Discrete(4)),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("device_name", ["cpu", "generic", "c"])
def test_deterministic_act_is_the_host_policy(name, device_name):
    """The device act program and the numpy policy derive from one head: same actions (in [-1, 1]
    units, the bounds being ±1; indices for a Discrete space)."""
    algo, config, space = CASES[name]
    device = drl.devices.device_from_name(device_name)
    state = algo.build(device, config, 5, space, seed=3)
    obs = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32) * 3
    action = drl.zeros(device, state.action.shape)
    algo.act(device, config, state, drl.asarray(device, obs), action, deterministic=True)
    host = head_policy(algo.policy_head(state), space)(obs)
    if isinstance(space, Discrete):
        np.testing.assert_array_equal(drl.to_numpy(action)[:, 0], host)
    else:
        np.testing.assert_allclose(drl.to_numpy(action), host, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [drl.TD3, drl.DQN])
def test_exploring_predict_leaves_trainings_stream_alone(cls):
    env, config = (
        ("pendulum", dict(warmup_steps=50))
        if cls is drl.TD3
        else ("cartpole", dict(learning_starts=50, train_freq=4, gradient_steps=1))
    )
    model = cls(env, seed=1, hidden=(8,), batch_size=16, **config)
    model.learn(100)
    before = {k: drl.to_numpy(getattr(model.state, k)).copy() for k in ("rng", "step", "action")}
    obs = np.zeros((7, model.spec.obs_dim), np.float32)
    sampled, _ = model.predict(obs, deterministic=False)
    assert sampled.shape == ((7, 1) if cls is drl.TD3 else (7,))
    single, _ = model.predict(obs[0], deterministic=False)
    assert single.shape == ((1,) if cls is drl.TD3 else ())
    for key, value in before.items():
        np.testing.assert_array_equal(drl.to_numpy(getattr(model.state, key)), value)
