"""dispatchrl.spaces: Box and Discrete, read by EnvSpec, the batches and the policies; an env of a
space an algorithm does not take is refused naming the algorithm (no kernel runs here)."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import nn
from dispatchrl.envs import from_gymnasium
from dispatchrl.errors import ConfigError
from dispatchrl.spaces import Box, Discrete, from_gymnasium_space, to_gymnasium_space
from dispatchrl.training.envspec import EnvSpec, resolve_env

LOW, HIGH = np.array([-2.0, 0.5], np.float32), np.array([3.0, 1.5], np.float32)


def test_box_maps_unit_actions_with_the_float32_order_of_before():
    box = Box(LOW, HIGH)
    unit = np.random.default_rng(0).uniform(-1, 1, size=(64, 2)).astype(np.float32)
    expected = LOW + (unit + 1) * 0.5 * (HIGH - LOW)  # the expression the 7 call sites wrote
    mapped = box.from_unit(unit)
    assert mapped.dtype == np.float32
    np.testing.assert_array_equal(mapped, expected)
    wide = unit.astype(np.float64)  # float64 noise stays float64 until the caller's cast
    np.testing.assert_array_equal(box.from_unit(wide), LOW + (wide + 1) * 0.5 * (HIGH - LOW))
    np.testing.assert_allclose(box.to_unit(box.from_unit(wide)), wide, atol=1e-12)
    np.testing.assert_array_equal(
        box.affine_from_unit(unit * 2), np.clip(unit * 2 * ((HIGH - LOW) / 2) + (HIGH + LOW) / 2, LOW, HIGH)
    )
    np.testing.assert_array_equal(box.squash(unit * 5, "clip"), np.clip(unit * 5, LOW, HIGH))
    assert (box.dim, box.columns, repr(box)) == (2, 2, "Box(2)")
    with pytest.raises(ConfigError, match="squash"):
        box.squash(unit, "sigmoid")
    with pytest.raises(ConfigError, match="'low' has 2 components, 'high' 1"):
        Box(LOW, HIGH[:1])
    with pytest.raises(ConfigError, match="env 'x': action bounds must be finite"):
        Box(LOW, np.array([np.inf, 1], np.float32)).check_finite("x")


def test_discrete_checks_indices():
    space = Discrete(3)
    assert space.check(np.array([[0], [2]])).dtype == np.int64
    np.testing.assert_array_equal(space.check(np.array([[1.0], [2.0]], np.float32)), [[1], [2]])
    with pytest.raises(ConfigError, match=r"integers in \[0, 3\)"):
        space.check(np.array([[0.5]]))
    with pytest.raises(ConfigError, match=r"must be in \[0, 3\)"):
        space.check(np.array([[3]]))
    with pytest.raises(ConfigError, match="'n' must be an int >= 1"):
        Discrete(0)


def test_gymnasium_spaces_convert_and_the_others_are_refused():
    box = from_gymnasium_space(gym.spaces.Box(-1, 2, (2, 2), np.float32), "a")
    assert isinstance(box, Box) and box.dim == 4 and box.low.dtype == np.float32
    assert from_gymnasium_space(gym.spaces.Discrete(5), "a") == Discrete(5)
    for space in (gym.spaces.MultiDiscrete([2, 3]), gym.spaces.Tuple([gym.spaces.Discrete(2)])):
        with pytest.raises(
            ConfigError, match=f"the env's action_space must be a gymnasium Box or Discrete, got {type(space).__name__}"
        ):
            from_gymnasium_space(space, "the env's action_space")
    with pytest.raises(ConfigError, match="start=1"):
        from_gymnasium_space(gym.spaces.Discrete(3, start=1), "a")
    assert to_gymnasium_space(Discrete(4)) == gym.spaces.Discrete(4)
    assert to_gymnasium_space(Box(LOW, HIGH)) == gym.spaces.Box(LOW, HIGH, dtype=np.float32)


def test_a_discrete_gymnasium_env_is_a_batch_whose_steps_take_indices():
    batch = from_gymnasium("CartPole-v1", 2)
    try:
        assert batch.action_space == Discrete(2) and batch.action_dim == 1
        batch.reset(seed=0)
        obs, reward, *_ = batch.step(np.array([[0], [1]]))
        assert obs.shape == (2, 4) and reward.tolist() == [1.0, 1.0]
        with pytest.raises(ConfigError, match="action indices"):
            batch.step(np.array([[0], [2]]))
    finally:
        batch.close()
    with pytest.raises(ConfigError, match="observation_space must be a gymnasium Box, got Tuple"):
        from_gymnasium("Blackjack-v1")


def test_env_spec_holds_the_action_space_and_is_built_by_keyword():
    native, python = resolve_env("pendulum"), resolve_env("MountainCarContinuous-v0")
    assert isinstance(native.action_space, Box) and native.action_dim == 1
    np.testing.assert_array_equal(native.action_low, [-2.0])  # the policy's bounds: the physical torque
    np.testing.assert_array_equal(python.action_high, [1.0])
    discrete = resolve_env("CartPole-v1")
    assert discrete.action_space == Discrete(2) and discrete.action_dim == 1
    with pytest.raises(ConfigError, match="Discrete\\(2\\) action space has no bounds"):
        discrete.action_low  # noqa: B018
    with pytest.raises(TypeError):
        EnvSpec("x", None, None, 3, Box(LOW, HIGH), None)  # type: ignore[misc]
    assert dataclasses.replace(native, name="y").action_space is native.action_space


def test_a_discrete_env_is_refused_by_the_algorithms_that_take_box():
    assert drl.td3.ACTION_SPACES == drl.sac.ACTION_SPACES == (Box,)
    assert drl.ppo.ACTION_SPACES == (Box, Discrete)
    with pytest.raises(
        ConfigError,
        match=r"sac: env 'cartpole' has a Discrete\(2\) action space; sac takes Box action spaces; algorithms taking Discrete: dqn, ppo",
    ):
        drl.SAC("CartPole-v1")
    with pytest.raises(ConfigError, match=r"td3: env 'cartpole' has a Discrete\(2\) action space; td3 takes Box"):
        drl.td3.train(drl.CPU(), "CartPole-v1", drl.td3.Config(total_steps=100), progress=False)


def test_policy_heads_derive_the_policies_of_before():
    """Each algorithm's PolicyHead gives the deterministic policy its own code built before (the
    SAC last layer cut to its mean columns, PPO's affine map folded into its last layer)."""
    obs = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    sac = drl.sac.build(drl.CPU(), drl.sac.Config(hidden=(8,)), 3, 2, 0)
    head = drl.sac.policy_head(sac)
    assert (head.squash, head.columns) == ("tanh_mean", 2)
    policy = drl.sac.policy(sac, LOW, HIGH)
    raw = nn.raw_output(sac.actor)
    mean = np.tanh((np.maximum(obs @ raw.weights[0] + raw.biases[0], 0) @ raw.weights[1] + raw.biases[1])[:, :2])
    assert policy.output_activation == "tanh" and policy.weights[-1].shape == (8, 2)
    np.testing.assert_array_equal(policy(obs), (LOW + (mean + 1) * 0.5 * (HIGH - LOW)).astype(np.float32))
    ppo = drl.ppo.build(drl.CPU(), drl.ppo.Config(hidden=(8,)), 3, 2, 0)
    head = drl.ppo.policy_head(ppo)
    assert head.squash == "clip" and head.obs_mean is not None
    policy = drl.ppo.policy(ppo, LOW, HIGH)
    raw = nn.raw_output(ppo.actor)
    np.testing.assert_array_equal(policy.weights[-1], (raw.weights[-1] * ((HIGH - LOW) / 2)).astype(np.float32))
    np.testing.assert_array_equal(policy.biases[-1], (raw.biases[-1] * ((HIGH - LOW) / 2) + (HIGH + LOW) / 2))
    assert drl.td3.policy_head(drl.td3.build(drl.CPU(), drl.td3.Config(hidden=(8,)), 3, 2, 0)).squash == "tanh"
    with pytest.raises(ConfigError, match="'squash' must be one of"):
        nn.PolicyHead(sac.actor, "softmax")
    with pytest.raises(ConfigError, match="the 'argmax' head cannot act in a Box"):
        nn.head_policy(nn.PolicyHead(sac.actor, "argmax"), Box(LOW, HIGH))


def test_checkpoint_metadata_keeps_the_bounds_and_reads_back_as_a_box():
    from dispatchrl.facade import _recorded_spec
    from dispatchrl.training.runs import run_metadata

    spec = resolve_env(gym.wrappers.RescaleAction(gym.make("MountainCarContinuous-v0"), np.float32(-2), np.float32(2)))
    meta = run_metadata("td3", spec, drl.td3.Config(), 0, 0)
    assert (meta["action_low"], meta["action_high"], meta["action_dim"]) == ([-2.0], [2.0], 1)
    recorded = _recorded_spec(meta)  # a wrapped env: only its recorded dimensions and bounds
    assert recorded.make_batch is None and isinstance(recorded.action_space, Box)
    np.testing.assert_array_equal(recorded.action_low, [-2.0])
    assert (recorded.obs_dim, recorded.action_dim) == (2, 1)
