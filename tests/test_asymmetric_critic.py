"""The asymmetric critic (``asymmetric_critic=True`` in TD3/SAC): the multirotor's privileged
observation on every device against a float64 numpy reference, the replay rows and network
shapes it leads to, training on it, and its refusal where an env has none."""

import dataclasses

import numpy as np
import pytest
from agreement import run_arrays
from hypothesis import given, settings
from hypothesis import strategies as st

import dispatchrl as drl
import dispatchrl.envs as E
from dispatchrl.algorithms import sac, td3
from dispatchrl.envs.multirotor import Multirotor
from dispatchrl.envs.multirotor.layout import FORCE, OMEGA, POS, QUAT, RPM, TORQUE, VEL
from dispatchrl.errors import ConfigError

ENV = Multirotor(4, max_episode_steps=9, action_history=2, termination_position=0.3)
CRITIC_DIM = ENV.critic_observation_dim  # layout.CRITIC_COLUMNS and the position-error integral


def reference(physics: np.ndarray, env: Multirotor) -> np.ndarray:
    """The critic observation in float64, written from its definition (layout.CRITIC_COLUMNS, then
    the position-error integral: the physics row's last columns)."""
    p = env.parameters
    rows = []
    for row in physics:
        w, x, y, z = row[QUAT : QUAT + 4]
        rotation = [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
        rpm = (row[RPM : RPM + 4] - p.rpm_min) / (p.rpm_max - p.rpm_min) * 2 - 1
        force = row[FORCE : FORCE + 3] / p.mass
        torque = row[TORQUE : TORQUE + 3] / np.asarray(p.inertia)
        rows.append(
            np.concatenate(
                [
                    *(row[POS : POS + 3], np.ravel(rotation), row[VEL : VEL + 3], row[OMEGA : OMEGA + 3]),
                    *(rpm, force, torque, row[len(row) - env.integral_columns :]),
                ]
            )
        )
    return np.array(rows)


def critic_observations(device, physics: np.ndarray) -> np.ndarray:
    state = E.env_state(device, ENV)
    drl.assign(state.physics, physics)
    out = drl.zeros(device, (ENV.num_envs, CRITIC_DIM))
    E.env_critic_observation(device, ENV, state, out)
    return drl.to_numpy(out)


finite = st.floats(-3.0, 3.0, allow_nan=False)


@settings(max_examples=15, deadline=None)
@given(st.lists(finite, min_size=4 * 17, max_size=4 * 17), st.integers(0, 2**31))
def test_every_device_matches_the_reference(values, seed):
    physics = np.zeros((ENV.num_envs, ENV.physics_dim))
    physics[:, :17] = np.reshape(values, (4, 17))
    q = physics[:, QUAT : QUAT + 4]
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-3)  # attitudes are unit quaternions
    p = ENV.parameters
    physics[:, RPM : RPM + 4] = np.random.default_rng(seed).uniform(p.rpm_min, p.rpm_max, (4, 4))
    physics[:, FORCE : FORCE + 6] = np.random.default_rng(seed + 1).normal(0, 1e-2, (4, 6))
    physics[:, ENV.physics_dim - ENV.integral_columns :] = np.random.default_rng(seed + 2).uniform(-1, 1, (4, 3))
    expected = reference(physics, ENV)
    cpu = critic_observations(drl.CPU(), physics)
    np.testing.assert_allclose(cpu, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(critic_observations(drl.C(), physics), cpu)  # same expressions, same bits
    np.testing.assert_allclose(critic_observations(drl.Generic(), physics), cpu, rtol=1e-6, atol=1e-6)


def test_cuda_matches_cpu(cuda_device):
    state, rng = E.env_state(drl.CPU(), ENV), drl.rng(drl.CPU(), 3)
    E.env_reset(drl.CPU(), ENV, state, rng)
    physics = drl.to_numpy(state.physics)
    np.testing.assert_array_equal(critic_observations(cuda_device, physics), critic_observations(drl.CPU(), physics))


def test_refused_without_a_critic_observation():
    config = td3.Config(total_steps=200, warmup_steps=10, asymmetric_critic=True)
    with pytest.raises(ConfigError, match="asymmetric_critic.*pendulum.*no critic observation"):
        td3.train(drl.Generic(), "pendulum", config, seed=0, progress=False)
    with pytest.raises(ConfigError, match="asymmetric_critic.*'true or false'|asymmetric_critic"):
        td3.train(drl.Generic(), "pendulum", dataclasses.replace(config, asymmetric_critic=1), seed=0, progress=False)


def small_config(algo, steps_per_env):
    """``algo``'s asymmetric-critic config on ENV for ``steps_per_env`` steps per env, small enough
    for the Generic device."""
    return algo.Config(
        total_steps=steps_per_env * ENV.num_envs,
        warmup_steps=20,
        batch_size=8,
        hidden=(16,),
        num_envs=ENV.num_envs,
        asymmetric_critic=True,
    )


@pytest.mark.parametrize("algo", [td3, sac])
def test_training_stores_both_observations_and_critics_see_the_privileged_one(algo):
    """Generic device (numpy, no compilation): replay rows are [actor obs | critic obs]; the
    critics' first layer takes critic columns + actions, the actor's the env's observation; a
    row's next critic observation is the following row's (same env, no reset between)."""
    config = small_config(algo, 60)
    result = algo.train(drl.Generic(), ENV, config, seed=1, progress=False)
    s, obs_dim = result.state, ENV.observation_dim
    assert drl.to_numpy(s.critic1.weights[0].value).shape == (CRITIC_DIM + 4, 16)
    assert drl.to_numpy(s.actor.weights[0].value).shape == (obs_dim, 16)
    replay = {k: drl.to_numpy(v) for k, v in (("obs", s.replay.obs), ("next_obs", s.replay.next_obs))}
    done = drl.to_numpy(s.replay.terminated) | drl.to_numpy(s.replay.truncated)
    assert replay["obs"].shape[1] == obs_dim + CRITIC_DIM
    n = ENV.num_envs
    rows = int(drl.to_numpy(s.replay.size)[0])
    follows = [t for t in range(rows - n) if not done[t]]
    assert len(follows) > 100
    for t in follows:  # the next row of the same env starts where this one ended
        np.testing.assert_array_equal(replay["next_obs"][t], replay["obs"][t + n])
    # the first rows: the critic columns of the reset state, the actor columns its observation
    first = replay["obs"][:n, obs_dim:]
    assert np.all(np.abs(first[:, 18:22]) <= 1.0) and np.all(np.isfinite(first))
    position_error = np.abs(first[:, :3] - replay["obs"][:n, :3])
    assert position_error.max() < 0.05  # the actor's copy is the same position with its small noise
    assert np.all(np.isfinite(drl.to_numpy(s.critic1.weights[0].value)))


@pytest.mark.parametrize("algo", [td3, sac])
def test_fused_cpu_and_c_steps_agree_with_generic(algo):
    """The asymmetric step fused on CPU and C (six updates after warm-up) against Generic's."""
    config = small_config(algo, 26)
    reference = run_arrays(algo.train(drl.Generic(), ENV, config, seed=1, progress=False))
    assert reference["replay.obs."].shape[1] == ENV.observation_dim + CRITIC_DIM
    for device in (drl.CPU(), drl.C()):
        got = run_arrays(algo.train(device, ENV, config, seed=1, progress=False))
        assert got.keys() == reference.keys()
        for key, value in got.items():
            np.testing.assert_allclose(value, reference[key], rtol=1e-4, atol=1e-5, err_msg=f"{device} {key}")


def test_fused_cuda_step_agrees_with_generic(cuda_device):
    env = Multirotor(2, max_episode_steps=9, action_history=1, termination_position=0.3)
    config = td3.Config(
        total_steps=23 * 2, warmup_steps=20, batch_size=4, hidden=(4,), num_envs=2, asymmetric_critic=True
    )
    reference = run_arrays(td3.train(drl.Generic(), env, config, seed=1, progress=False))
    got = run_arrays(td3.train(cuda_device, env, config, seed=1, progress=False))
    for key, value in got.items():
        if key == "episodes.returns.":  # envs ending in the same step take ring slots in any order on CUDA
            value, reference[key] = np.sort(value), np.sort(reference[key])
        np.testing.assert_allclose(value, reference[key], rtol=1e-4, atol=1e-5, err_msg=key)


def test_memory_estimate_counts_the_critic_columns():
    """Replay rows hold [actor obs | critic obs]; the critics read C + A columns."""
    from dispatchrl.algorithms.memory import estimate

    config = td3.Config(total_steps=100_000, batch_size=256)
    plain, asym = estimate(td3, config, 146, 4), estimate(td3, config, 146, 4, critic_obs_dim=28)
    sizes = [{a.what: a.nbytes for a in allocations} for allocations in (plain, asym)]
    replay = f"replay buffer of {config.capacity} rows"
    assert sizes[1][replay] - sizes[0][replay] == config.capacity * 2 * 28 * 4  # obs and next obs, float32
    # the critics' first layer reads 28 + 4 columns instead of 146 + 4: fewer weights
    networks = "networks (weights, gradients, Adam moments, targets)"
    assert sizes[1][networks] < sizes[0][networks]
