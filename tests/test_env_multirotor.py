"""The multirotor env: the CPU kernels against the numpy reference on random states (hypothesis),
the physics against closed forms (hover, free fall, torque signs), the initial-state distribution,
the curriculum's reward, parameter checks, and the flight evaluation."""

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dispatchrl as drl
from dispatchrl.arrays import asarray, to_numpy
from dispatchrl.envs import env_reset, env_reset_done, env_state, env_step
from dispatchrl.envs.multirotor import CRAZYFLIE, Multirotor, MultirotorParameters
from dispatchrl.envs.multirotor.evaluation import (
    FLIGHT_SEED,
    Lissajous,
    flight_metrics,
    hovering_start,
    tracking_metrics,
)
from dispatchrl.envs.multirotor.layout import AGE, FORCE, HISTORY, OMEGA, POS, QUAT, RPM, TORQUE, VEL
from dispatchrl.kernels.random.api import rng

QUIET = dict(
    noise_position=0.0,
    noise_orientation=0.0,
    noise_linear_velocity=0.0,
    noise_angular_velocity=0.0,
    disturbance_force=0.0,
    disturbance_torque=0.0,
)


def _run(device, env, physics, actions):
    """Step ``env`` on ``device`` from ``physics`` through ``actions`` (T, N, 4), no resets."""
    state = env_state(device, env)
    state.physics.data[...] = asarray(device, physics).data
    out = []
    for a in actions:
        env_step(device, env, state, asarray(device, a.astype(np.float32)))
        out.append(tuple(to_numpy(x).copy() for x in (state.physics, state.obs, state.reward, state.terminated)))
    return out


@st.composite
def flight_states(draw, n=4, history=2):
    """Physics rows anywhere in the flight envelope: any attitude, fast spins, RPM in range; the
    task with norm costs and the position-error integral (the defaults) or the paper's."""
    costs, gain = draw(st.sampled_from([("norm", 5.0), ("squared", 0.0), ("norm", 0.0), ("squared", 2.0)]))
    env = Multirotor(n, action_history=history, reward_costs=costs, position_integral=gain)
    rows = np.zeros((n, env.physics_dim))
    floats = lambda lo, hi, k: np.array(draw(st.lists(st.floats(lo, hi), min_size=k, max_size=k)))  # noqa: E731
    rows[:, POS : POS + 3] = floats(-0.5, 0.5, 3 * n).reshape(n, 3)
    q = floats(-1, 1, 4 * n).reshape(n, 4) + np.array([1e-3, 0, 0, 0])
    rows[:, QUAT : QUAT + 4] = q / np.linalg.norm(q, axis=1, keepdims=True)
    rows[:, VEL : VEL + 3] = floats(-3, 3, 3 * n).reshape(n, 3)
    rows[:, OMEGA : OMEGA + 3] = floats(-30, 30, 3 * n).reshape(n, 3)
    rows[:, RPM : RPM + 4] = floats(0, CRAZYFLIE.rpm_max, 4 * n).reshape(n, 4)
    rows[:, FORCE : FORCE + 6] = floats(-0.05, 0.05, 6 * n).reshape(n, 6)
    rows[:, AGE] = draw(st.sampled_from([0.0, 99_999.0, 100_000.0, 250_000.0]))
    rows[:, HISTORY:] = floats(-1, 1, (4 * history + env.integral_columns) * n).reshape(n, -1)
    actions = floats(-1.5, 1.5, 3 * 4 * n).reshape(3, n, 4)  # beyond [-1, 1]: clipped
    return env, rows, actions


@settings(max_examples=25, deadline=None)
@given(flight_states())
def test_cpu_step_matches_the_numpy_reference(case):
    env, rows, actions = case
    cpu, reference = _run(drl.CPU(), env, rows, actions), _run(drl.Generic(), env, rows, actions)
    for got, want in zip(cpu, reference):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-9)  # physics (RPM ~ 1e4)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)  # float32 observations
        np.testing.assert_allclose(got[2], want[2], rtol=1e-6, atol=1e-5)
        np.testing.assert_array_equal(got[3], want[3])


def test_cpu_matches_the_reference_through_resets():
    env = Multirotor(48, action_history=3)
    runs = {}
    for device in (drl.Generic(), drl.CPU()):
        state, stream = env_state(device, env), rng(device, 5)
        env_reset(device, env, state, stream)
        draws = np.random.default_rng(1)
        rows = []
        for _ in range(150):
            action = draws.uniform(-1, 1, (48, 4)).astype(np.float32) * 0.3 + 0.33
            env_step(device, env, state, asarray(device, action))
            rows.append([to_numpy(x).copy() for x in (state.physics, state.obs, state.reward, state.terminated)])
            env_reset_done(device, env, state, stream)
            rows[-1].append(to_numpy(state.obs).copy())
        runs[type(device).__name__] = rows
    assert sum(r[3].sum() for r in runs["CPU"]) > 10  # vehicles left the box and were reset
    for got, want in zip(runs["CPU"], runs["Generic"]):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-9)
        for k in (1, 2, 3, 4):
            np.testing.assert_array_equal(got[k], want[k])


def _level(rpm, env=None):
    row = np.zeros((1, (env or Multirotor(1, action_history=0)).physics_dim))
    row[0, QUAT] = 1.0
    row[0, RPM : RPM + 4] = rpm
    return row


@pytest.mark.parametrize("device", [drl.Generic(), drl.CPU()], ids=["generic", "cpu"])
def test_physics_hover_free_fall_and_torque_signs(device):
    env = Multirotor(1, action_history=0, **QUIET)
    hover = CRAZYFLIE.hover_action
    assert hover == pytest.approx(0.334, abs=1e-3)  # the paper's action baseline
    (final, *_), *_ = _run(device, env, _level(CRAZYFLIE.hover_rpm), np.full((100, 1, 4), hover))[-1:]
    # the action is float32: the commanded RPM is the hover RPM to ~1e-8
    np.testing.assert_allclose(final[0, :13], [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], atol=1e-6)
    # rotors off: free fall, exact for RK4 (constant acceleration)
    (fall, *_), *_ = _run(device, env, _level(0.0), np.full((10, 1, 4), -1.0))[-1:]
    assert fall[0, POS + 2] == pytest.approx(-0.5 * 9.81 * 0.1**2, rel=1e-12)
    # faster rotors on +y roll about +x, on +x pitch about −y, with positive yaw sign yaw about +z
    for faster, axis, sign in (((2, 3), 0, 1), ((0, 3), 1, -1), ((1, 3), 2, 1)):
        action = np.full((5, 1, 4), hover)
        action[:, :, faster] += 0.02
        (row, *_), *_ = _run(device, env, _level(CRAZYFLIE.hover_rpm), action)[-1:]
        rates = row[0, OMEGA : OMEGA + 3]
        assert np.sign(rates[axis]) == sign and abs(rates[axis]) > 10 * np.abs(np.delete(rates, axis)).max()


def test_reset_draws_the_papers_initial_states_and_keeps_the_age():
    env = Multirotor(4000, action_history=2)
    device = drl.CPU()
    state, stream = env_state(device, env), rng(device, 0)
    state.physics.data[:, AGE] = 7.0
    env_reset(device, env, state, stream)
    p = to_numpy(state.physics)
    guided = np.all(p[:, POS : POS + 3] == 0, axis=1) & (p[:, QUAT] == 1.0)
    assert 0.08 < guided.mean() < 0.12  # init_guidance 0.1
    free = p[~guided]
    assert np.abs(free[:, POS : POS + 3]).max() <= 0.2 and np.abs(free[:, POS : POS + 3]).max() > 0.19
    angle = 2 * np.arccos(np.clip(free[:, QUAT], -1, 1))
    assert angle.max() <= math.pi / 2 + 1e-12 and angle.max() > 1.5  # up to 90°
    np.testing.assert_allclose(np.linalg.norm(p[:, QUAT : QUAT + 4], axis=1), 1.0, rtol=1e-12)
    assert np.abs(p[:, VEL : VEL + 3]).max() <= 1.0 and np.abs(p[:, OMEGA : OMEGA + 3]).max() <= 1.0
    assert np.all(p[:, RPM : RPM + 4] == CRAZYFLIE.rpm_max / 2) and np.all(p[:, HISTORY:] == 0)
    assert np.std(p[:, FORCE : FORCE + 3]) == pytest.approx(env.disturbance_force, rel=0.05)
    assert np.std(p[:, TORQUE : TORQUE + 3]) == pytest.approx(env.disturbance_torque, rel=0.05)
    assert np.all(p[:, AGE] == 7.0)
    assert to_numpy(stream)[1] == 4000 * 256  # the same stream positions whatever is reset


CURRICULUM = [(0, (5, 0.01, 0.01)), (99_999, (5, 0.01, 0.01)), (100_000, (6, 0.014, 0.014))]
CURRICULUM += [(200_000, (7.2, 0.0196, 0.0196)), (10**9, (40, 1, 1))]


@pytest.mark.parametrize("costs", ["squared", "norm"])
@pytest.mark.parametrize(("age", "weights"), CURRICULUM)
def test_reward_is_the_papers_with_its_curriculum(age, weights, costs):
    """The paper's squared position and velocity costs, or their norms (the default)."""
    env = Multirotor(1, action_history=1, reward_costs=costs, **QUIET)
    row = _level(CRAZYFLIE.hover_rpm, env)
    row[0, POS : POS + 3] = (0.1, -0.2, 0.05)
    row[0, QUAT : QUAT + 4] = (math.cos(0.2), math.sin(0.2), 0, 0)
    row[0, VEL : VEL + 3] = (0.3, 0, -0.1)
    row[0, AGE] = age
    action = np.array([[[0.5, 0.1, -0.2, 0.3]]])
    (_, _, reward, terminated), *_ = _run(drl.CPU(), env, row, action)
    w_p, w_v, w_a = weights
    shape = math.sqrt if costs == "norm" else float
    cost = w_p * shape(0.0525) + 5 * (1 - math.cos(0.2) ** 2) + w_v * shape(0.1)
    cost += w_a * ((action - 0.33405300460415477) ** 2).sum()
    assert not terminated[0] and reward[0] == pytest.approx(2.0 - 0.5 * cost, rel=1e-5)


def test_leaving_the_box_terminates_with_the_penalty():
    env = Multirotor(1, action_history=0, termination_penalty=-100.0, **QUIET)
    row = _level(CRAZYFLIE.hover_rpm)
    row[0, POS] = 0.599
    row[0, VEL] = 1.0
    (_, obs, reward, terminated), *_ = _run(drl.CPU(), env, row, np.full((1, 1, 4), 0.334))
    assert terminated[0] and reward[0] == -100.0 and obs[0, 0] > 0.6


def test_nonsense_parameters_are_refused_naming_the_parameter(tmp_path):
    for change, name in (
        (dict(mass=-0.027), "'mass'"),
        (dict(inertia=(3.85e-6, 0.0, 5.9e-6)), "'inertia'"),
        (dict(thrust_curve=(0.0, 0.0, 1e-10)), "cannot lift the vehicle"),
        (dict(motor_time_constant=0.0), "'motor_time_constant'"),
        (dict(rpm_min=30000.0), "'rpm_min'"),
        (dict(rotor_yaw_directions=(1.0, 1.0, -1.0, 0.0)), "'rotor_yaw_directions'"),
        (dict(rotor_positions=((0.1, 0.1, 0.0),)), "'rotor_positions'"),
    ):
        with pytest.raises(drl.ConfigError, match=name):
            MultirotorParameters(**change)
    for change, name in (
        (dict(init_guidance=2.0), "init_guidance"),
        (dict(dt=0.0), "'dt'"),
        (dict(num_envs=0), "num_envs"),
        (dict(reward_costs="cubed"), "'reward_costs' must be 'norm' or 'squared'"),
        (dict(position_integral=-1.0), "'position_integral'"),
    ):
        with pytest.raises(drl.ConfigError, match=name):
            Multirotor(**change)
    path = tmp_path / "x500.json"
    path.write_text(
        json.dumps({"mass": 2.0, "thrust_curve": [0, 0, 1e-6], "rpm_max": 10000, "inertia": [0.02, 0.02, 0.04]})
    )
    loaded = MultirotorParameters.from_file(path)
    assert (
        loaded.mass == 2.0
        and loaded.inertia == (0.02, 0.02, 0.04)
        and loaded.hover_rpm == pytest.approx(math.sqrt(2.0 * 9.81 / 4 / 1e-6))
    )
    path.write_text(json.dumps({"masss": 2.0}))
    with pytest.raises(drl.ConfigError, match="unknown field"):
        MultirotorParameters.from_file(path)


def _hover_controller(obs, gains=(1.0, 1.5, 16.0, 6.0)):
    """A cascaded PD controller on the observation (no model of the motor lag): gentle gains
    (position, velocity; attitude, angular velocity)."""
    kp, kv, ka, kw = gains
    p, rotation, v, w = obs[:, 0:3], obs[:, 3:12].reshape(-1, 3, 3), obs[:, 12:15], obs[:, 15:18]
    m, g = CRAZYFLIE.mass, CRAZYFLIE.gravity
    wanted = -kp * p - kv * v + np.array([0, 0, g])
    body_z = rotation[:, :, 2]
    thrust = m * np.einsum("ij,ij->i", wanted, body_z)
    error = np.einsum("nji,nj->ni", rotation, np.cross(body_z, wanted / np.linalg.norm(wanted, axis=1, keepdims=True)))
    torque = np.array(CRAZYFLIE.inertia) * (ka * error - kw * w)
    r, yaw = np.array(CRAZYFLIE.rotor_positions), np.array(CRAZYFLIE.rotor_yaw_directions)
    mix = np.linalg.inv(np.stack([np.ones(4), r[:, 1], -r[:, 0], yaw * CRAZYFLIE.torque_constant]))
    rotor = np.clip(np.einsum("ij,nj->ni", mix, np.concatenate([thrust[:, None], torque], 1)), 0, None)
    return np.clip(2 * np.sqrt(rotor / CRAZYFLIE.thrust_curve[2]) / CRAZYFLIE.rpm_max - 1, -1, 1)


def test_flight_metrics_tell_flying_from_falling():
    gentle = Multirotor(init_max_angle=0.2, init_max_linear_velocity=0.2, init_max_angular_velocity=0.2, **QUIET)
    flying = flight_metrics(_hover_controller, gentle, flights=20)
    assert flying["eval_success"] == 1.0 and flying["eval_final_position_error"] < 0.02
    falling = flight_metrics(lambda obs: np.full((len(obs), 4), -1.0), gentle, flights=20)
    assert falling["eval_success"] == 0.0 and falling["eval_position_rmse"] > 0.3
    # the hover score: 1 − distance / box for flights that stayed in the box, 0 for the others
    assert flying["eval_hover_score"] > 0.95 and falling["eval_hover_score"] == 0.0
    offset = flight_metrics(
        lambda obs: _hover_controller(obs - np.r_[0.3, 0, 0, np.zeros(obs.shape[1] - 3)]), gentle, flights=20
    )
    assert offset["eval_success"] == 0.0 and 0.4 < offset["eval_hover_score"] < 0.6  # hovering 0.3 m off
    # spinning up leaves the box and would integrate to inf and NaN: such flights stop counting
    spin = flight_metrics(lambda obs: np.tile(np.float32([1, -1, 1, -1]), (len(obs), 1)), Multirotor(), flights=20)
    assert spin["eval_success"] == 0.0 and spin["eval_hover_score"] == 0.0
    assert spin["eval_position_rmse"] == pytest.approx(0.6, rel=0.2) and spin["eval_final_position_error"] == np.inf
    with pytest.raises(drl.ConfigError, match="flights"):
        flight_metrics(_hover_controller, gentle, flights=0)


def _tracker(obs):
    """The hover controller, stiffer: it follows a moving target (it sees the offsets)."""
    return _hover_controller(obs, (3.0, 2.5, 100.0, 20.0))


def _tracking_reference(policy, env, trajectory, flights, seed=FLIGHT_SEED):
    """tracking_metrics written plainly: the dispatched env step, the target from the closed form
    ``A sin(2π f t / T)``, the errors collected and reduced at the end."""
    device = drl.CPU()
    task, state = hovering_start(device, env, flights, seed)
    A, f, T = map(np.array, (trajectory.amplitudes, trajectory.frequencies, trajectory.period))
    errors = []
    for k in range(round(T / task.dt)):
        t, t_next = k * task.dt, (k + 1) * task.dt
        obs = to_numpy(state.obs).copy()
        obs[:, 0:3] -= A * np.sin(2 * np.pi * f * t / T)
        obs[:, 12:15] -= A * 2 * np.pi * f / T * np.cos(2 * np.pi * f * t / T)
        env_step(device, task, state, asarray(device, policy(obs).astype(np.float32)))
        errors.append(to_numpy(state.physics)[:, :3] - A * np.sin(2 * np.pi * f * t_next / T))
    errors = np.array(errors)
    lost = np.logical_or.accumulate(np.any(np.abs(errors) > env.termination_position, axis=2), axis=0)
    distance = np.where(lost, env.termination_position, np.linalg.norm(errors, axis=2))  # lost: the box's
    return {
        "eval_tracking_rmse": float(np.sqrt(np.mean(distance**2))),
        "eval_tracking_within": float(np.mean(distance < 0.1)),
        "eval_tracking_lost": float(np.mean(lost[-1])),
    }


def test_lissajous_is_rltools_figure_eight():
    """RLtools' l2f default: x = 0.5 sin(2 φ), y = sin(φ), φ = 2π t / 6.5 s, and its velocity."""
    figure = Lissajous()
    position, velocity = figure(np.array([0.0, 6.5 / 4, 6.5 / 8]))
    np.testing.assert_allclose(position, [[0, 0, 0], [0, 1, 0], [0.5, np.sin(np.pi / 4), 0]], atol=1e-12)
    w = 2 * np.pi / 6.5
    np.testing.assert_allclose(velocity[0], [0.5 * 2 * w, w, 0], atol=1e-12)
    t, h = 1.234, 1e-6  # velocity is the position's derivative
    np.testing.assert_allclose(figure(t)[1], (figure(t + h)[0] - figure(t - h)[0]) / (2 * h), atol=1e-6)


def test_tracking_metrics_tell_tracking_from_falling():
    """A PD controller fed the offsets to the moving target follows RLtools' figure eight (no
    disturbances, no noise: no integral action needed) within ~0.4 m RMS, a slower, smaller one
    within ~0.1 m; falling is far off and lost. The numbers are the plain reference's."""
    quiet = Multirotor(**QUIET)
    tracked = tracking_metrics(_tracker, quiet, flights=3)
    assert tracked == pytest.approx(_tracking_reference(_tracker, quiet, Lissajous(), 3), rel=1e-9, abs=1e-12)
    assert tracked["eval_tracking_rmse"] < 0.5 and tracked["eval_tracking_lost"] == 0.0
    gentle = Lissajous(amplitudes=(0.25, 0.5, 0.0), period=10.0)
    slow = tracking_metrics(_tracker, quiet, gentle, flights=3)
    assert slow["eval_tracking_rmse"] < 0.15 and slow["eval_tracking_within"] > 0.3
    assert slow["eval_tracking_lost"] == 0.0
    falling = tracking_metrics(lambda obs: np.full((len(obs), 4), -1.0), quiet, flights=3)
    assert falling["eval_tracking_rmse"] > 0.5 and falling["eval_tracking_lost"] == 1.0  # the box distance, mostly
    assert falling["eval_tracking_within"] < 0.05  # only the first few steps, before it drops away
    hovering_still = tracking_metrics(_tracker, quiet, Lissajous(amplitudes=(0.0, 0.0, 0.0)), flights=2)
    assert hovering_still["eval_tracking_rmse"] < 1e-5 and hovering_still["eval_tracking_within"] == 1.0
    with pytest.raises(drl.ConfigError, match="'flights'"):
        tracking_metrics(_tracker, quiet, flights=0)
    with pytest.raises(drl.ConfigError, match="'trajectory'"):
        tracking_metrics(_tracker, quiet, (0.5, 1.0, 0.0))
    with pytest.raises(drl.ConfigError, match="'seconds'"):
        tracking_metrics(_tracker, quiet, seconds=0.0)
    with pytest.raises(drl.ConfigError, match="'tolerance'"):
        tracking_metrics(_tracker, quiet, tolerance=-0.1)


def test_gymnasium_env_is_the_task_with_the_final_weights():
    import gymnasium

    env = gymnasium.make("dispatchrl/Multirotor-v0")
    obs, _ = env.reset(seed=3)
    assert obs.shape == (149,) and env.spec.max_episode_steps == 500
    native = env.unwrapped._env
    assert native.reward_weights == (40.0, 5.0, 1.0, 1.0) and native.curriculum_steps == 0
    obs, reward, *_ = env.step(np.full(4, 0.334, np.float32))
    assert np.isfinite(reward) and obs.shape == (149,)
    assert dataclasses.replace(native, num_envs=2).num_envs == 2


def test_cli_reports_the_flight_evaluation(tmp_path, capsys):
    """``train td3 --env multirotor`` (its recipe: train_freq 10, tanh) prints the task's measures
    beside the return, and ``eval`` of its checkpoint gives the same."""
    from dispatchrl.cli import main

    small = ["--set=warmup_steps=100", "--set=batch_size=16", "--set=hidden=[8,8]", "--keep-best", "0"]
    common = ["--env", "multirotor", "--device", "generic", "--steps", "300", "--json", *small]
    assert main(["train", "td3", *common, "--save", str(tmp_path / "run")]) == 0
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.0 <= trained["eval_success"] <= 1.0 and trained["eval_position_rmse"] > 0
    assert trained["eval_tracking_rmse"] > 0 and 0.0 <= trained["eval_tracking_within"] <= 1.0
    assert main(["eval", "--checkpoint", str(tmp_path / "run"), "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    keys = ("eval_success", "eval_position_rmse", "eval_final_position_error", "eval_tracking_rmse")
    assert {k: evaluated[k] for k in keys} == {k: trained[k] for k in keys}


def test_another_vehicle_is_evaluated_on_its_own_description(tmp_path):
    """A variant (another parameter file, a shorter history) is not the registered id's task: a
    run on it is evaluated on one env of its own description, final weights, 500-step limit."""
    from dispatchrl.training.envspec import resolve_env

    assert resolve_env("multirotor", 4).eval_id == "dispatchrl/Multirotor-v0"
    heavy = MultirotorParameters(mass=0.05, rpm_max=30000.0)
    spec = resolve_env(Multirotor(8, parameters=heavy, action_history=2))
    assert spec.eval_id is None and spec.obs_dim == 29
    env = spec.make_eval_env()
    obs, _ = env.reset(seed=0)
    native = env.unwrapped._env
    assert obs.shape == (29,) and native.parameters == heavy and native.reward_weights == (40.0, 5.0, 1.0, 1.0)
    steps = 0
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(np.full(4, heavy.hover_action, np.float32))
        steps, done = steps + 1, terminated or truncated
    assert steps <= 500 and (steps == 500) == (not terminated)


def test_critic_targets_follow_every_update_without_delay_critic_targets():
    """``delay_critic_targets=False`` (the multirotor recipe, RLtools' schedule): the critics'
    targets take a Polyak step after every critic update, the actor's only with the actor; the
    default keeps TD3's (all targets every ``policy_delay``-th update)."""
    from dispatchrl.algorithms import td3

    def first_update(delay):  # warm-up 4 steps, one update at step 4: not a delayed one
        config = td3.Config(total_steps=5, warmup_steps=4, batch_size=4, hidden=(8,), policy_delay=2)
        config = dataclasses.replace(config, delay_critic_targets=delay)
        return td3.train(drl.Generic(), "pendulum", config, seed=3, progress=False).state

    delayed, every = first_update(True), first_update(False)
    weights = lambda net: to_numpy(net.weights[0].value)  # noqa: E731
    for name in ("critic1", "critic2"):
        online, untouched = weights(getattr(every, name)), weights(getattr(delayed, f"{name}_target"))
        assert np.array_equal(online, weights(getattr(delayed, name)))  # the same first update
        stepped = weights(getattr(every, f"{name}_target"))
        assert not np.array_equal(stepped, untouched)
        np.testing.assert_allclose(stepped, 0.995 * untouched + 0.005 * online, rtol=1e-6, atol=1e-7)
    assert np.array_equal(weights(every.actor_target), weights(delayed.actor_target))
    assert td3.config_for("multirotor").delay_critic_targets is False


def test_actor_waits_for_actor_warmup_steps_the_critics_do_not():
    """``actor_warmup_steps`` (the recipe's 30k, RLtools l2f): critics train from ``warmup_steps``,
    the actor and its target only from ``actor_warmup_steps``; Adam's step counts say how often."""
    from dispatchrl.algorithms import td3

    def run(total, actor_warmup):
        config = td3.Config(total_steps=total, warmup_steps=4, batch_size=4, hidden=(8,), policy_delay=2)
        config = dataclasses.replace(config, actor_warmup_steps=actor_warmup)
        return td3.train(drl.Generic(), "pendulum", config, seed=3, progress=False).state

    initial = run(4, 0)
    steps = lambda net: int(to_numpy(net.weights[0].t)[0])  # noqa: E731
    waiting, started, plain = run(12, 12), run(16, 12), run(16, 0)
    assert steps(waiting.critic1) == 8 and steps(waiting.actor) == 0
    assert np.array_equal(to_numpy(waiting.actor.weights[0].value), to_numpy(initial.actor.weights[0].value))
    assert np.array_equal(
        to_numpy(waiting.actor_target.weights[0].value), to_numpy(initial.actor_target.weights[0].value)
    )
    assert steps(started.critic1) == 12 and steps(started.actor) == 2 and steps(plain.actor) == 6
    with pytest.raises(drl.ConfigError, match="actor_warmup_steps"):
        td3.train(drl.Generic(), "pendulum", td3.Config(actor_warmup_steps=-1), progress=False)


def test_keep_best_ranks_multirotor_policies_by_held_out_success():
    """The evaluation return (final weights, no termination penalty) rates a crash above a hover
    0.4 m off; keep-best ranks by the env's selection score (held-out flights) instead: their
    success, ties broken by the hover score (a close hover above a crash while none succeeds)."""
    gentle = Multirotor(init_max_angle=0.2, init_max_linear_velocity=0.2, init_max_angular_velocity=0.2, **QUIET)
    assert gentle.selection_score(lambda obs: np.full((len(obs), 4), -1.0, np.float32)) == 0.0
    assert 0.95 < gentle.selection_score(_hover_controller) <= 1.005
    offset = gentle.selection_score(lambda obs: _hover_controller(obs - np.r_[0.3, 0, 0, np.zeros(obs.shape[1] - 3)]))
    assert 0.4 * 0.005 < offset < 0.6 * 0.005  # no success; hovering 0.3 m off: hover score ~0.5
    env = Multirotor()
    evaluation = drl.EvalCallback(every=100, episodes=1, deploy_best=True)
    config = drl.td3.Config(total_steps=300, warmup_steps=100, batch_size=8, hidden=(8,))
    result = drl.td3.train(drl.Generic(), Multirotor(), config, hooks=(evaluation,))
    scores = [row["selection_score"] for row in evaluation.rows]
    assert len(scores) == 3 and evaluation.best_score == max(scores)
    assert result.policy_steps == 100 * (1 + scores.index(max(scores)))
    assert env.selection_score(result.policy) == evaluation.best_score
    # the score chooses, so no return episodes are run; unless a StopOnReward reads them
    assert all("eval_return" not in row for row in evaluation.rows)
    read = drl.EvalCallback(every=100, episodes=1, deploy_best=True)
    drl.td3.train(drl.Generic(), Multirotor(), config, hooks=(read, drl.StopOnReward(1e9, read)))
    assert [row["selection_score"] for row in read.rows] == scores
    assert all(np.isfinite(row["eval_return"]) for row in read.rows)


@pytest.mark.parametrize(
    "make",
    [lambda n: Multirotor(n, action_history=3), lambda n: drl.Pendulum(n, max_episode_steps=50)],
    ids=["multirotor", "pendulum"],
)
def test_threaded_batches_give_the_serial_bits(make, monkeypatch):
    """With DISPATCHRL_ENV_THREADS, a batch of THREADED_FROM envs or more runs the kernels' prange
    twins on Numba's threads: each env is its own body, so every array matches the one-thread
    loop's bit for bit, resets included."""
    import numba

    from dispatchrl.backends import cpu as cpu_backend
    from dispatchrl.envs.shared import host

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one CPU: Numba has no second thread")
    env, device, runs, picked = make(40), drl.CPU(), {}, []
    monkeypatch.setattr(host, "batch_kernel", lambda k, n: picked.append(cpu_backend.batch_kernel(k, n)) or picked[-1])
    monkeypatch.setenv("DISPATCHRL_ENV_THREADS", "2")
    for threaded_from in (10**9, 16):
        monkeypatch.setattr(cpu_backend, "THREADED_FROM", threaded_from)
        picked.clear()
        state, stream = env_state(device, env), rng(device, 9)
        env_reset(device, env, state, stream)
        draws, rows = np.random.default_rng(2), []
        for _ in range(120):
            action = draws.uniform(-1, 1, (40, env.action_dim)).astype(np.float32)
            env_step(device, env, state, asarray(device, action))
            rows.append(
                [
                    to_numpy(x).copy()
                    for x in (state.physics, state.obs, state.reward, state.terminated, state.truncated)
                ]
            )
            env_reset_done(device, env, state, stream)
        runs[threaded_from] = rows, {k.targetoptions.get("parallel", False) for k in picked}
    assert runs[10**9][1] == {False} and runs[16][1] == {True}
    assert sum(r[3].sum() + r[4].sum() for r in runs[16][0]) > 10  # envs ended and were reset
    for got, want in zip(runs[16][0], runs[10**9][0]):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_env_threads_setting_is_checked(monkeypatch):
    from dispatchrl.backends.cpu import env_threads
    from dispatchrl.errors import ConfigError

    monkeypatch.setenv("DISPATCHRL_ENV_THREADS", "two")
    with pytest.raises(ConfigError, match="DISPATCHRL_ENV_THREADS"):
        env_threads()
    monkeypatch.setenv("DISPATCHRL_ENV_THREADS", "1")
    assert env_threads() == 1
