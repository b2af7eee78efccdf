"""Parallel MuJoCo Humanoid-v5 (a :class:`~dispatchrl.envs.shared.mujoco.MujocoBatch`), as
gymnasium's Humanoid-v5 with default arguments computes it for one env:

- obs = [qpos[2:], qvel, cinert[1:], cvel[1:], qfrc_actuator[6:], cfrc_ext[1:]] (348 values; the
  world body's and the free joint's terms left out);
- forward reward = 1.25 Δx of the centre of mass (body masses × ``xipos``) over dt = 5 × 0.003 s;
- reward = forward + 5 (while healthy) − 0.1 Σ ctrl² (float64, from MjData.ctrl) − min(5e-7 Σ
  cfrc_ext², 10) (all bodies, unclipped forces);
- healthy (else terminated): z = qpos[2] in (1, 2), strict;
- reset: mj_resetData, qpos0 + U(±1e-2), qvel0 + U(±1e-2), mj_forward.
"""

import functools
from typing import Any

import numpy as np
from numba import njit

from ..shared.mujoco import MujocoBatch, TaskKernels, pairwise_sum, square, square_float64

__all__ = ["HumanoidBatch"]

FORWARD_REWARD_WEIGHT = 1.25
CTRL_COST_WEIGHT = 0.1
CONTACT_COST_WEIGHT = 5e-7
CONTACT_COST_MAX = 10.0
HEALTHY_REWARD = 5.0
HEALTHY_Z = (1.0, 2.0)


class HumanoidBatch(MujocoBatch):
    """N Humanoid-v5 envs (the module says what they compute)."""

    NAME = "Humanoid"
    XML_FILE = "humanoid.xml"
    FRAME_SKIP = 5
    RESET_NOISE = 1e-2
    CONTACT_FORCES = True
    cinert: np.ndarray  # (N, nbody, 10)
    cvel: np.ndarray  # (N, nbody, 6)
    qfrc_actuator: np.ndarray  # (N, nv)
    cfrc_ext: np.ndarray  # (N, nbody, 6)
    xipos: np.ndarray  # (N, nbody, 3) the bodies' centres of mass
    ten_length: np.ndarray  # (N, 2) the hip-to-knee tendons
    ten_velocity: np.ndarray  # (N, 2)

    def _sources(self, data: Any) -> dict[str, Any]:
        return {
            "cinert": data.cinert,
            "cvel": data.cvel,
            "qfrc_actuator": data.qfrc_actuator,
            "cfrc_ext": data.cfrc_ext,
            "xipos": data.xipos,
            "ten_length": data.ten_length,
            "ten_velocity": data.ten_velocity,
        }

    INFO = (
        *(("x_position", 1), ("y_position", 1), ("tendon_length", 2), ("tendon_velocity", 2)),
        *(("distance_from_origin", 1), ("x_velocity", 1), ("y_velocity", 1), ("reward_survive", 1)),
        *(("reward_forward", 1), ("reward_ctrl", 1), ("reward_contact", 1)),
    )
    POSITION_SIZE = 2

    def _observation_size(self) -> int:
        m = self.model
        return m.nq - 2 + m.nv + (10 + 6 + 6) * (m.nbody - 1) + m.nv - 6

    def _kernels(self) -> TaskKernels:
        mass = self.model.body_mass
        names = ("cinert", "cvel", "qfrc_actuator", "cfrc_ext", "xipos", "ten_length")
        return kernels(tuple(mass), float(mass.sum()), tuple(self._state_index(name) for name in names))

    def reset_info(self, i: int) -> dict[str, Any]:
        row = np.zeros(self._out.info.shape[1])
        position_info(self._state_index("ten_length"))(self._state, i, row)  # the step info's first terms
        return {name: row[column] for name, column in self._info_columns[:5]}


@functools.cache
def kernels(masses: tuple[float, ...], total_mass: float, index: tuple[int, ...]) -> TaskKernels:
    """Per env; ``index``: where cinert, cvel, qfrc_actuator, cfrc_ext, xipos and ten_length are
    in the state (ten_velocity follows ten_length)."""
    mass = np.array(masses)
    cinert, cvel, actuator, forces, xipos, tendon = index
    write_position_info = position_info(tendon)

    @njit(nogil=True)
    def position(state, i, out):  # pragma: no cover  (the centre of mass: bodies summed in order, as einsum)
        x = state[xipos][i]
        for j in range(2):
            s = mass[0] * x[j]
            for b in range(1, mass.size):
                s += mass[b] * x[3 * b + j]
            out[j] = s / total_mass

    @njit(nogil=True)
    def outcome(state, i, action, velocity, info):  # pragma: no cover
        qpos, cfrc_ext = state[0][i], state[forces][i]
        healthy = HEALTHY_Z[0] < qpos[2] and qpos[2] < HEALTHY_Z[1]
        forward = FORWARD_REWARD_WEIGHT * velocity[0]
        survive = healthy * HEALTHY_REWARD
        # gymnasium squares MjData.ctrl (the float32 action as float64), not the action
        ctrl = CTRL_COST_WEIGHT * pairwise_sum(action, 0, action.size, square_float64)
        contact = CONTACT_COST_WEIGHT * pairwise_sum(cfrc_ext, 0, cfrc_ext.size, square)  # all bodies, unclipped
        contact = CONTACT_COST_MAX if contact > CONTACT_COST_MAX else contact
        write_position_info(state, i, info)
        info[7], info[8], info[9] = velocity[0], velocity[1], survive
        info[10], info[11], info[12] = forward, -ctrl, -contact
        return (forward + survive) - (ctrl + contact), not healthy

    @njit(nogil=True)
    def observe(state, i, obs):  # pragma: no cover
        n = 0
        for f, first in ((0, 2), (1, 0), (cinert, 10), (cvel, 6), (actuator, 6), (forces, 6)):
            values = state[f][i]  # the world body's and the free joint's terms left out
            for k in range(first, values.size):
                obs[n] = values[k]
                n += 1

    return TaskKernels(position, outcome, observe)


@functools.cache
def position_info(tendon: int) -> Any:
    """``(state, i, info)``: the step info's first terms, also gymnasium's reset info: x, y, the
    tendons' lengths and velocities (``tendon``: where ten_length is in the state), the distance
    from the origin."""

    @njit(nogil=True)
    def write(state, i, info):  # pragma: no cover
        qpos, lengths, speeds = state[0][i], state[tendon][i], state[tendon + 1][i]
        info[0], info[1], info[2], info[3] = qpos[0], qpos[1], lengths[0], lengths[1]
        info[4], info[5] = speeds[0], speeds[1]
        info[6] = np.sqrt(qpos[0] * qpos[0] + qpos[1] * qpos[1])

    return write
