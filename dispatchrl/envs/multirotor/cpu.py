"""CPU methods of the multirotor: one Numba loop over the N envs per call.

The per-env bodies (``multirotor_step_at``, ``multirotor_reset_at``) and their scalar helpers are
written in the Numba subset with tuples, no arrays allocated, so :mod:`.cuda` compiles the very
same source as device code. The layouts (physics columns, parameter entries) are :mod:`.env`'s.
"""

import math

import numpy as np
from numba import njit

from ...backends.cpu import JIT_EXACT_INLINED, JIT_EXACT_INNER, batch_kernel
from ...devices import CPU
from ...kernels.random.cpu import standard_normal, standard_normal_icdf, uniform01
from ...staging import launch
from .. import api
from ..shared import TWO_PI
from ..shared.cpu import per_env, per_env_reset
from ..shared.host import kernel_methods
from . import layout
from .env import Multirotor, parameter_array

#: what .cuda compiles as device functions (the methods register themselves)
__all__ = [
    "curriculum_weight",
    "multirotor_critic_observe_at",
    "multirotor_derivative",
    "multirotor_observe_at",
    "multirotor_reset_at",
    "multirotor_step_at",
    "reset_draw",
    "rotation_matrix",
    "state_plus",
]


# --- scalar physics: 17-tuples (position, quaternion, velocity, angular velocity, RPM) -----------


@njit(**JIT_EXACT_INLINED)
def multirotor_derivative(s, cmd, disturbance, p) -> tuple:
    """d/dt of the integrated state ``s`` under commanded RPMs ``cmd`` (4-tuple) and the
    episode's ``disturbance`` (force in the world frame, torque in the body frame; 6-tuple)."""
    qw, qx, qy, qz = s[3], s[4], s[5], s[6]
    wx, wy, wz = s[10], s[11], s[12]
    # rotor forces along body z, torques: r × (0, 0, T) plus the yaw reaction
    thrust = 0.0
    tx, ty, tz = 0.0, 0.0, 0.0
    for j in range(4):
        rpm = s[13 + j]
        t = p[layout.P_THRUST] + p[layout.P_THRUST + 1] * rpm + p[layout.P_THRUST + 2] * rpm * rpm
        thrust += t
        tx += p[layout.P_ROTOR + 3 * j + 1] * t
        ty -= p[layout.P_ROTOR + 3 * j] * t
        tz += p[layout.P_YAW + j] * p[layout.P_TORQUE_CONSTANT] * t
    # body thrust rotated into the world frame: v + 2 q_w (q_v × v) + 2 q_v × (q_v × v), v = (0, 0, thrust)
    cx, cy = 2.0 * (qy * thrust), 2.0 * (-qx * thrust)  # 2 (q_v × v); its z is 0
    fx = -qz * cy + qw * cx
    fy = qz * cx + qw * cy
    fz = qx * cy - qy * cx + thrust
    inv_mass = 1.0 / p[layout.P_MASS]
    # Euler's equations with a diagonal inertia: J ω̇ = τ − ω × J ω
    jx, jy, jz = p[layout.P_J], p[layout.P_J + 1], p[layout.P_J + 2]
    tx += disturbance[3] - (wy * (jz * wz) - wz * (jy * wy))
    ty += disturbance[4] - (wz * (jx * wx) - wx * (jz * wz))
    tz += disturbance[5] - (wx * (jy * wy) - wy * (jx * wx))
    tau = p[layout.P_TAU]
    return (
        s[7],
        s[8],
        s[9],
        0.5 * (-qx * wx - qy * wy - qz * wz),
        0.5 * (qw * wx + qy * wz - qz * wy),
        0.5 * (qw * wy + qz * wx - qx * wz),
        0.5 * (qw * wz + qx * wy - qy * wx),
        (fx + disturbance[0]) * inv_mass,
        (fy + disturbance[1]) * inv_mass,
        (fz + disturbance[2]) * inv_mass - p[layout.P_GRAVITY],
        tx / jx,
        ty / jy,
        tz / jz,
        (cmd[0] - s[13]) / tau,
        (cmd[1] - s[14]) / tau,
        (cmd[2] - s[15]) / tau,
        (cmd[3] - s[16]) / tau,
    )


@njit(**JIT_EXACT_INNER)
def state_plus(s, k, h) -> tuple:
    """``s + h k`` for 17-tuples."""
    return (
        s[0] + h * k[0], s[1] + h * k[1], s[2] + h * k[2], s[3] + h * k[3], s[4] + h * k[4],
        s[5] + h * k[5], s[6] + h * k[6], s[7] + h * k[7], s[8] + h * k[8], s[9] + h * k[9],
        s[10] + h * k[10], s[11] + h * k[11], s[12] + h * k[12], s[13] + h * k[13],
        s[14] + h * k[14], s[15] + h * k[15], s[16] + h * k[16],
    )  # fmt: skip


@njit(**JIT_EXACT_INNER)
def curriculum_weight(p, k, stage) -> float:
    """Reward weight k after ``stage`` curriculum raises: times its factor each, up to its limit
    (the parameters' table of the first layout.CURRICULUM_STAGES stages holds exactly this)."""
    if stage < layout.CURRICULUM_STAGES:
        return p[layout.P_CURRICULUM_TABLE + 4 * int(stage) + k]
    weight, factor, limit = (
        p[layout.P_REWARD + 4 + k],
        p[layout.P_CURRICULUM + 1 + 2 * k],
        p[layout.P_CURRICULUM + 2 + 2 * k],
    )
    return min(weight * factor**stage, limit) if factor > 1.0 else weight


# --- per-env bodies ------------------------------------------------------------------------------


@njit(**JIT_EXACT_INNER)
def rotation_matrix(physics, i) -> tuple:
    """Env i's attitude as a rotation matrix (body to world), row-major: a 9-tuple."""
    qw, qx, qy, qz = (
        physics[i, layout.QUAT],
        physics[i, layout.QUAT + 1],
        physics[i, layout.QUAT + 2],
        physics[i, layout.QUAT + 3],
    )
    return (
        1.0 - 2.0 * qy * qy - 2.0 * qz * qz, 2.0 * qx * qy - 2.0 * qw * qz, 2.0 * qx * qz + 2.0 * qw * qy,
        2.0 * qx * qy + 2.0 * qw * qz, 1.0 - 2.0 * qx * qx - 2.0 * qz * qz, 2.0 * qy * qz - 2.0 * qw * qx,
        2.0 * qx * qz - 2.0 * qw * qy, 2.0 * qy * qz + 2.0 * qw * qx, 1.0 - 2.0 * qx * qx - 2.0 * qy * qy,
    )  # fmt: skip


@njit(**JIT_EXACT_INNER)
def multirotor_observe_at(i, physics, steps, obs, p) -> None:
    """Env i's observation: position, rotation matrix (row-major), linear and angular velocity,
    each with Gaussian noise from the episode's key at stream positions of this step; then the
    action history and the position-error integral (the physics row's last columns)."""
    key = np.uint64(physics[i, layout.KEY])
    base = np.uint64(steps[i] * layout.NOISE_DRAWS)
    rotation = rotation_matrix(physics, i)
    for c in range(18):
        if c < 3:
            value, sigma = physics[i, layout.POS + c], p[layout.P_NOISE]
        elif c < 12:
            value, sigma = rotation[c - 3], p[layout.P_NOISE + 1]
        elif c < 15:
            value, sigma = physics[i, layout.VEL + c - 12], p[layout.P_NOISE + 2]
        else:
            value, sigma = physics[i, layout.OMEGA + c - 15], p[layout.P_NOISE + 3]
        if sigma > 0.0:
            value += sigma * standard_normal_icdf(key, base + np.uint64(c))
        obs[i, c] = value
    for k in range(obs.shape[1] - 18):
        obs[i, 18 + k] = physics[i, layout.HISTORY + k]


@njit(**JIT_EXACT_INNER)
def multirotor_critic_observe_at(i, physics, out, p) -> None:
    """Env i's privileged observation for an asymmetric critic (layout.CRITIC_COLUMNS): the state
    without noise, RPMs in [-1, 1], the disturbance as accelerations; then the position-error
    integral where the task has one."""
    rotation = rotation_matrix(physics, i)
    low, high = p[layout.P_RPM_MIN], p[layout.P_RPM_MAX]
    for c in range(out.shape[1]):
        if c < 3:
            value = physics[i, layout.POS + c]
        elif c < 12:
            value = rotation[c - 3]
        elif c < 15:
            value = physics[i, layout.VEL + c - 12]
        elif c < 18:
            value = physics[i, layout.OMEGA + c - 15]
        elif c < 22:
            value = 2.0 * (physics[i, layout.RPM + c - 18] - low) / (high - low) - 1.0
        elif c < 25:
            value = physics[i, layout.FORCE + c - 22] / p[layout.P_MASS]
        elif c < layout.CRITIC_COLUMNS:
            value = physics[i, layout.TORQUE + c - 25] / p[layout.P_J + c - 25]
        else:
            value = physics[i, physics.shape[1] - out.shape[1] + c]
        out[i, c] = value


@njit(**JIT_EXACT_INNER)
def multirotor_step_at(i, physics, steps, action, obs, reward, terminated, truncated, p, max_steps) -> None:
    """One control step of env i: reward on the pre-step state, RK4 over dt with the commanded
    RPMs held, then the post-integration fixes (unit quaternion, RPM in range, history)."""
    low, high = p[layout.P_RPM_MIN], p[layout.P_RPM_MAX]
    a0 = min(max(np.float64(action[i, 0]), -1.0), 1.0)
    a1 = min(max(np.float64(action[i, 1]), -1.0), 1.0)
    a2 = min(max(np.float64(action[i, 2]), -1.0), 1.0)
    a3 = min(max(np.float64(action[i, 3]), -1.0), 1.0)
    half = 0.5 * (high - low)
    cmd = (a0 * half + low + half, a1 * half + low + half, a2 * half + low + half, a3 * half + low + half)
    # the curriculum's weights for this env's age
    stage = math.floor(physics[i, layout.AGE] / p[layout.P_CURRICULUM]) if p[layout.P_CURRICULUM] > 0.0 else 0.0
    weights = (
        curriculum_weight(p, 0, stage),
        curriculum_weight(p, 1, stage),
        curriculum_weight(p, 2, stage),
        curriculum_weight(p, 3, stage),
    )
    s = (
        physics[i, 0], physics[i, 1], physics[i, 2], physics[i, 3], physics[i, 4], physics[i, 5],
        physics[i, 6], physics[i, 7], physics[i, 8], physics[i, 9], physics[i, 10], physics[i, 11],
        physics[i, 12], physics[i, 13], physics[i, 14], physics[i, 15], physics[i, 16],
    )  # fmt: skip
    position_cost = s[0] * s[0] + s[1] * s[1] + s[2] * s[2]
    orientation_cost = 1.0 - s[3] * s[3]
    velocity_cost = s[7] * s[7] + s[8] * s[8] + s[9] * s[9]
    if p[layout.P_EXTENSIONS] > 0.0:  # norms instead of the paper's squares
        position_cost = math.sqrt(position_cost)
        velocity_cost = math.sqrt(velocity_cost)
    baseline = p[layout.P_REWARD + 3]
    action_cost = (a0 - baseline) ** 2 + (a1 - baseline) ** 2 + (a2 - baseline) ** 2 + (a3 - baseline) ** 2
    cost = (
        weights[0] * position_cost
        + weights[1] * orientation_cost
        + weights[2] * velocity_cost
        + weights[3] * action_cost
    )
    disturbance = (
        physics[i, layout.FORCE], physics[i, layout.FORCE + 1], physics[i, layout.FORCE + 2],
        physics[i, layout.TORQUE], physics[i, layout.TORQUE + 1], physics[i, layout.TORQUE + 2],
    )  # fmt: skip
    dt = p[layout.P_DT]
    # RK4, its stages in a loop so the inlined derivative is typed and compiled once; the sum
    # ((k1 + 2 k2) + 2 k3) + k4 in the order of writing it out, so the bits are the same
    slope = acc = s
    for stage in range(4):
        x = s if stage == 0 else state_plus(s, slope, dt if stage == 3 else 0.5 * dt)
        slope = multirotor_derivative(x, cmd, disturbance, p)
        acc = slope if stage == 0 else state_plus(acc, slope, 1.0 if stage == 3 else 2.0)
    n = state_plus(s, acc, dt / 6.0)
    norm = math.sqrt(n[3] * n[3] + n[4] * n[4] + n[5] * n[5] + n[6] * n[6])
    done = False
    for j in range(17):
        value = n[j]
        if 3 <= j < 7:
            value = value / norm
        elif j >= 13:
            value = min(max(value, low), high)
        physics[i, j] = value
        if j < 3:
            done = done or abs(value) > p[layout.P_TERMINATION]
        elif 7 <= j < 10:
            done = done or abs(value) > p[layout.P_TERMINATION + 1]
        elif 10 <= j < 13:
            done = done or abs(value) > p[layout.P_TERMINATION + 2]
    gain = p[layout.P_EXTENSIONS + 1]
    integral = layout.INTEGRAL_COLUMNS if gain > 0.0 else 0
    history = (physics.shape[1] - layout.HISTORY - integral) // 4
    for k in range(4 * (history - 1)):
        physics[i, layout.HISTORY + k] = physics[i, layout.HISTORY + 4 + k]
    if history > 0:
        last = layout.HISTORY + 4 * (history - 1)
        physics[i, last] = a0
        physics[i, last + 1] = a1
        physics[i, last + 2] = a2
        physics[i, last + 3] = a3
    for k in range(integral):  # of the position after the step
        column = physics.shape[1] - integral + k
        value = physics[i, column] + gain * dt * physics[i, layout.POS + k]
        physics[i, column] = min(max(value, -1.0), 1.0)
    physics[i, layout.AGE] += 1.0
    steps[i] += 1
    reward[i] = p[layout.P_REWARD + 2] if done else p[layout.P_REWARD + 1] - p[layout.P_REWARD] * cost
    terminated[i] = done
    truncated[i] = steps[i] >= max_steps
    multirotor_observe_at(i, physics, steps, obs, p)


@njit(**JIT_EXACT_INNER)
def reset_draw(key, base, j) -> float:
    """Draw ``j`` of a reset's block of stream positions starting at ``base``."""
    return uniform01(key, base + np.uint64(j))


@njit(**JIT_EXACT_INNER)
def multirotor_reset_at(i, key, base, physics, steps, obs, reward, terminated, truncated, p, only_done) -> None:
    """Env i's initial state from its block of layout.RESET_DRAWS stream positions after ``base``."""
    if only_done and not (terminated[i] or truncated[i]):
        return
    b = base + np.uint64(i * layout.RESET_DRAWS)
    guidance = reset_draw(key, b, 0) < p[layout.P_INIT]
    for k in range(3):
        physics[i, layout.POS + k] = 0.0 if guidance else p[layout.P_INIT + 1] * (2.0 * reset_draw(key, b, 1 + k) - 1.0)
        physics[i, layout.VEL + k] = p[layout.P_INIT + 3] * (2.0 * reset_draw(key, b, 4 + k) - 1.0)
        physics[i, layout.OMEGA + k] = p[layout.P_INIT + 4] * (2.0 * reset_draw(key, b, 7 + k) - 1.0)
        physics[i, layout.FORCE + k] = p[layout.P_DISTURBANCE] * standard_normal(key, b + np.uint64(10 + 2 * k))
        physics[i, layout.TORQUE + k] = p[layout.P_DISTURBANCE + 1] * standard_normal(key, b + np.uint64(16 + 2 * k))
    physics[i, layout.KEY] = math.floor(reset_draw(key, b, 22) * 4503599627370496.0)  # 2**52: exact in float64
    # a uniformly random attitude (Shoemake's method), redrawn until its angle is within the limit
    qw, qx, qy, qz = 1.0, 0.0, 0.0, 0.0
    if p[layout.P_INIT + 2] > 0.0 and not guidance:
        for t in range(layout.ORIENTATION_TRIES):
            u0, u1, u2 = reset_draw(key, b, 23 + 3 * t), reset_draw(key, b, 24 + 3 * t), reset_draw(key, b, 25 + 3 * t)
            cw = math.sqrt(1.0 - u0) * math.sin(TWO_PI * u1)
            if abs(2.0 * math.acos(cw)) <= p[layout.P_INIT + 2]:
                qw, qx = cw, math.sqrt(1.0 - u0) * math.cos(TWO_PI * u1)
                qy, qz = math.sqrt(u0) * math.sin(TWO_PI * u2), math.sqrt(u0) * math.cos(TWO_PI * u2)
                break
    physics[i, layout.QUAT] = qw
    physics[i, layout.QUAT + 1] = qx
    physics[i, layout.QUAT + 2] = qy
    physics[i, layout.QUAT + 3] = qz
    middle = 0.5 * (p[layout.P_RPM_MIN] + p[layout.P_RPM_MAX])  # the paper's initial RPM, action 0
    for j in range(4):
        physics[i, layout.RPM + j] = middle
    for k in range(physics.shape[1] - layout.HISTORY):
        physics[i, layout.HISTORY + k] = 0.0
    steps[i] = 0
    if not only_done:
        reward[i] = 0.0
        terminated[i] = False
        truncated[i] = False
    multirotor_observe_at(i, physics, steps, obs, p)


# --- CPU kernels -------------------------------------------------------------------------------


multirotor_step_kernel = per_env(multirotor_step_at, "multirotor_step_kernel")


multirotor_reset_kernel = per_env_reset(multirotor_reset_at, "multirotor_reset_kernel", layout.RESET_DRAWS)


multirotor_critic_observation_kernel = per_env(multirotor_critic_observe_at, "multirotor_critic_observation_kernel")


kernel_methods(CPU, Multirotor, multirotor_step_kernel, multirotor_reset_kernel, parameters=parameter_array)


@api.env_critic_observation.dispatch
def env_critic_observation(device: CPU, env: Multirotor, state, out) -> None:
    kernel = batch_kernel(multirotor_critic_observation_kernel, env.num_envs)
    launch(device, kernel, state.physics, out, parameter_array(device, env))
