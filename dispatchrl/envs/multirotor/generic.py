"""Generic (numpy) methods of the multirotor: the batched float64 reference, vectorised over N,
written from the equations (not from the CPU bodies) so the tests compare two derivations."""

import math

import numpy as np

from ...devices import Generic
from ...kernels.random.generic import SPLITMIX_GOLDEN, SPLITMIX_MIX1, SPLITMIX_MIX2, UNIFORM01_SCALE, normal_quantile
from ...staging import launch
from .. import api
from ..shared.generic import clear_reset, reset_mask
from ..shared.host import kernel_methods
from . import layout
from .env import Multirotor, parameter_array

__all__ = ["rotation_matrices"]


def _uniform(key, counter) -> np.ndarray:
    """The counter stream's uniforms at positions ``counter`` (uint64 arrays; kernels.random)."""
    z = key + (counter + np.uint64(1)) * SPLITMIX_GOLDEN
    z = (z ^ (z >> np.uint64(30))) * SPLITMIX_MIX1
    z = (z ^ (z >> np.uint64(27))) * SPLITMIX_MIX2
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * UNIFORM01_SCALE


def _normal(key, counter) -> np.ndarray:
    u1, u2 = _uniform(key, counter), _uniform(key, counter + np.uint64(1))
    return np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * math.pi * u2)


def _normal_icdf(key, counter) -> np.ndarray:
    """N(0, 1) from one stream position each (the CPU helper standard_normal_icdf)."""
    u = _uniform(key, counter)
    return normal_quantile(np.floor(u * 4503599627370496.0) * (2.0 * UNIFORM01_SCALE) + UNIFORM01_SCALE)


def rotation_matrices(q) -> np.ndarray:
    """(N, 9) row-major rotation matrices of (N, 4) unit quaternions w, x, y, z."""
    w, x, y, z = q.T
    return np.stack(
        [
            1 - 2 * y * y - 2 * z * z, 2 * x * y - 2 * w * z, 2 * x * z + 2 * w * y,
            2 * x * y + 2 * w * z, 1 - 2 * x * x - 2 * z * z, 2 * y * z - 2 * w * x,
            2 * x * z - 2 * w * y, 2 * y * z + 2 * w * x, 1 - 2 * x * x - 2 * y * y,
        ],
        axis=1,
    )  # fmt: skip


def _derivative(s, cmd, force, torque, p) -> np.ndarray:
    """d/dt of the (N, 17) integrated states: Newton in the world frame, Euler in the body frame."""
    q, omega, rpm = s[:, 3:7], s[:, 10:13], s[:, 13:17]
    thrust = p[layout.P_THRUST] + p[layout.P_THRUST + 1] * rpm + p[layout.P_THRUST + 2] * rpm**2  # (N, 4)
    rotors = p[layout.P_ROTOR : layout.P_ROTOR + 12].reshape(4, 3)
    torque_body = np.stack(
        [
            thrust @ rotors[:, 1],
            -(thrust @ rotors[:, 0]),
            thrust @ (p[layout.P_YAW : layout.P_YAW + 4] * p[layout.P_TORQUE_CONSTANT]),
        ],
        axis=1,
    )
    world_thrust = rotation_matrices(q)[:, [2, 5, 8]] * thrust.sum(axis=1, keepdims=True)  # R e_z T
    w, x, y, z = q.T
    wx, wy, wz = omega.T
    q_dot = 0.5 * np.stack(
        [-x * wx - y * wy - z * wz, w * wx + y * wz - z * wy, w * wy + z * wx - x * wz, w * wz + x * wy - y * wx],
        axis=1,
    )
    inertia = p[layout.P_J : layout.P_J + 3]
    gyro = np.cross(omega, omega * inertia)
    accel = (world_thrust + force) / p[layout.P_MASS]
    accel[:, 2] -= p[layout.P_GRAVITY]
    return np.concatenate(
        [s[:, 7:10], q_dot, accel, (torque_body + torque - gyro) / inertia, (cmd - rpm) / p[layout.P_TAU]], axis=1
    )


def _weights(p, stage) -> np.ndarray:
    w = np.empty((stage.shape[0], 4))
    for k in range(4):
        weight, factor, limit = (
            p[layout.P_REWARD + 4 + k],
            p[layout.P_CURRICULUM + 1 + 2 * k],
            p[layout.P_CURRICULUM + 2 + 2 * k],
        )
        w[:, k] = np.minimum(weight * factor**stage, limit) if factor > 1.0 else weight
    return w


def _observe(physics, steps, obs, p, mask) -> None:
    key = physics[:, layout.KEY].astype(np.uint64)[:, None]
    counter = (steps.astype(np.uint64) * np.uint64(layout.NOISE_DRAWS))[:, None] + np.arange(18, dtype=np.uint64)
    clean = np.concatenate(
        [
            physics[:, layout.POS : layout.POS + 3],
            rotation_matrices(physics[:, layout.QUAT : layout.QUAT + 4]),
            physics[:, layout.VEL : layout.VEL + 3],
            physics[:, layout.OMEGA : layout.OMEGA + 3],
        ],
        axis=1,
    )
    sigma = np.repeat(p[layout.P_NOISE : layout.P_NOISE + 4], [3, 9, 3, 3])
    noisy = clean + np.where(sigma > 0, sigma * _normal_icdf(key, counter), 0.0)
    full = np.concatenate([noisy, physics[:, layout.HISTORY :]], axis=1)
    obs[mask] = full[mask]


def multirotor_step_kernel(physics, steps, action, obs, reward, terminated, truncated, p, max_steps) -> None:
    low, high = p[layout.P_RPM_MIN], p[layout.P_RPM_MAX]
    a = np.clip(action.astype(np.float64), -1.0, 1.0)
    half = 0.5 * (high - low)
    cmd = a * half + low + half
    s = physics[:, : layout.INTEGRATED].copy()
    stage = (
        np.floor(physics[:, layout.AGE] / p[layout.P_CURRICULUM]) if p[layout.P_CURRICULUM] > 0 else np.zeros(len(s))
    )
    shape = np.sqrt if p[layout.P_EXTENSIONS] > 0 else (lambda x: x)  # norms or the paper's squares
    costs = np.stack(
        [
            shape((s[:, 0:3] ** 2).sum(1)),
            1 - s[:, 3] ** 2,
            shape((s[:, 7:10] ** 2).sum(1)),
            ((a - p[layout.P_REWARD + 3]) ** 2).sum(1),
        ],
        axis=1,
    )
    cost = (_weights(p, stage) * costs).sum(axis=1)
    force, torque, dt = (
        physics[:, layout.FORCE : layout.FORCE + 3],
        physics[:, layout.TORQUE : layout.TORQUE + 3],
        p[layout.P_DT],
    )
    k1 = _derivative(s, cmd, force, torque, p)
    k2 = _derivative(s + 0.5 * dt * k1, cmd, force, torque, p)
    k3 = _derivative(s + 0.5 * dt * k2, cmd, force, torque, p)
    k4 = _derivative(s + dt * k3, cmd, force, torque, p)
    n = s + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    n[:, 3:7] /= np.linalg.norm(n[:, 3:7], axis=1, keepdims=True)
    n[:, 13:17] = np.clip(n[:, 13:17], low, high)
    physics[:, : layout.INTEGRATED] = n
    done = (
        (np.abs(n[:, 0:3]) > p[layout.P_TERMINATION]).any(1)
        | (np.abs(n[:, 7:10]) > p[layout.P_TERMINATION + 1]).any(1)
        | (np.abs(n[:, 10:13]) > p[layout.P_TERMINATION + 2]).any(1)
    )
    gain = p[layout.P_EXTENSIONS + 1]
    end = physics.shape[1] - (layout.INTEGRAL_COLUMNS if gain > 0 else 0)  # of the action history
    if end > layout.HISTORY:
        physics[:, layout.HISTORY : end] = np.concatenate([physics[:, layout.HISTORY + 4 : end], a], axis=1)
    if gain > 0:  # the position-error integral, of the position after the step
        physics[:, end:] = np.clip(physics[:, end:] + gain * dt * n[:, 0:3], -1.0, 1.0)
    physics[:, layout.AGE] += 1.0
    steps += 1
    reward[:] = np.where(done, p[layout.P_REWARD + 2], p[layout.P_REWARD + 1] - p[layout.P_REWARD] * cost)
    terminated[:] = done
    truncated[:] = steps >= max_steps
    _observe(physics, steps, obs, p, np.ones(len(s), bool))


def multirotor_reset_kernel(rng, physics, steps, obs, reward, terminated, truncated, p, only_done) -> None:
    n = physics.shape[0]
    key = rng[0]
    counter = rng[1] + np.uint64(layout.RESET_DRAWS) * np.arange(n, dtype=np.uint64)[:, None]  # (N, 1) block starts
    u = _uniform(key, counter + np.arange(layout.RESET_DRAWS, dtype=np.uint64))  # (N, RESET_DRAWS)
    normal = lambda j: _normal(key, counter[:, 0] + np.uint64(j))  # noqa: E731
    guidance = u[:, 0] < p[layout.P_INIT]
    fresh = physics.copy()
    fresh[:, layout.POS : layout.POS + 3] = np.where(guidance[:, None], 0.0, p[layout.P_INIT + 1] * (2 * u[:, 1:4] - 1))
    fresh[:, layout.VEL : layout.VEL + 3] = p[layout.P_INIT + 3] * (2 * u[:, 4:7] - 1)
    fresh[:, layout.OMEGA : layout.OMEGA + 3] = p[layout.P_INIT + 4] * (2 * u[:, 7:10] - 1)
    fresh[:, layout.FORCE : layout.FORCE + 3] = p[layout.P_DISTURBANCE] * np.stack(
        [normal(10 + 2 * k) for k in range(3)], 1
    )
    fresh[:, layout.TORQUE : layout.TORQUE + 3] = p[layout.P_DISTURBANCE + 1] * np.stack(
        [normal(16 + 2 * k) for k in range(3)], 1
    )
    fresh[:, layout.KEY] = np.floor(u[:, 22] * 2.0**52)
    tries = u[:, 23 : 23 + 3 * layout.ORIENTATION_TRIES].reshape(n, layout.ORIENTATION_TRIES, 3)
    u0, u1, u2 = tries[..., 0], tries[..., 1], tries[..., 2]
    candidates = np.stack(
        [np.sqrt(1 - u0) * np.sin(2 * math.pi * u1), np.sqrt(1 - u0) * np.cos(2 * math.pi * u1),
         np.sqrt(u0) * np.sin(2 * math.pi * u2), np.sqrt(u0) * np.cos(2 * math.pi * u2)],
        axis=-1,
    )  # fmt: skip
    accepted = np.abs(2 * np.arccos(candidates[..., 0])) <= p[layout.P_INIT + 2]
    first = accepted.argmax(axis=1)
    found = accepted.any(axis=1) & (p[layout.P_INIT + 2] > 0) & ~guidance
    quat = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
    quat[found] = candidates[np.arange(n), first][found]
    fresh[:, layout.QUAT : layout.QUAT + 4] = quat
    fresh[:, layout.RPM : layout.RPM + 4] = 0.5 * (p[layout.P_RPM_MIN] + p[layout.P_RPM_MAX])
    fresh[:, layout.HISTORY :] = 0.0
    fresh[:, layout.AGE] = physics[:, layout.AGE]  # resets keep the env's age
    mask = reset_mask(terminated, truncated, only_done)
    physics[mask] = fresh[mask]
    clear_reset(mask, steps, reward, terminated, truncated, only_done)
    _observe(physics, steps, obs, p, mask)
    rng[1] += np.uint64(layout.RESET_DRAWS * n)


kernel_methods(Generic, Multirotor, multirotor_step_kernel, multirotor_reset_kernel, parameters=parameter_array)


def multirotor_critic_observation_kernel(physics, out, p) -> None:
    low, high = p[layout.P_RPM_MIN], p[layout.P_RPM_MAX]
    columns = [
        physics[:, layout.POS : layout.POS + 3],
        rotation_matrices(physics[:, layout.QUAT : layout.QUAT + 4]),
        physics[:, layout.VEL : layout.VEL + 3],
        physics[:, layout.OMEGA : layout.OMEGA + 3],
        2.0 * (physics[:, layout.RPM : layout.RPM + 4] - low) / (high - low) - 1.0,
        physics[:, layout.FORCE : layout.FORCE + 3] / p[layout.P_MASS],
        physics[:, layout.TORQUE : layout.TORQUE + 3] / p[layout.P_J : layout.P_J + 3],
        physics[:, physics.shape[1] - (out.shape[1] - layout.CRITIC_COLUMNS) :],  # the integral, if any
    ]
    out[:] = np.concatenate(columns, axis=1)


@api.env_critic_observation.dispatch
def env_critic_observation(device: Generic, env: Multirotor, state, out) -> None:
    launch(device, multirotor_critic_observation_kernel, state.physics, out, parameter_array(device, env))
