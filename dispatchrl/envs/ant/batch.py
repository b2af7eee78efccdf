"""Parallel MuJoCo Ant-v5: N MjData stepped on threads, gymnasium's Ant-v5 semantics.

A :class:`~dispatchrl.envs.shared.mujoco.MujocoBatch` (threads, resets, autoreset): each thread
copies its envs' qpos, qvel, cfrc_ext and torso position into shared (N, ·) arrays and computes
their observation, reward and termination as gymnasium's AntEnv computes them for one env:

- obs = [qpos[2:], qvel, clip(cfrc_ext[1:], -1, 1).ravel()] (105 values);
- forward reward = Δx of the torso ``xpos`` over dt = 5 × 0.01 s (xpos as left by mj_step);
- healthy = finite qpos, qvel and 0.2 <= z <= 1.0; reward = forward + healthy − (ctrl + contact);
- ctrl cost = 0.5 Σ a² (float32, like gymnasium's), contact cost = 5e-4 Σ clip(cfrc_ext)²;
- reset: mj_resetData, qpos0 + U(±0.1), 0.1 N(0, 1) velocities, mj_forward.

mujoco is imported only when a batch is made, so it stays an optional dependency.
"""

import functools
from typing import Any

import numpy as np
from numba import njit

from ..shared.mujoco import (
    MujocoBatch,
    TaskKernels,
    clip,
    default_threads,
    load_mujoco,
    mujoco_model,
    pairwise_sum,
    square,
)

__all__ = ["MAIN_BODY", "AntBatch", "ant_model", "default_threads", "load_mujoco"]

FRAME_SKIP = 5
FORWARD_REWARD_WEIGHT = 1.0
CTRL_COST_WEIGHT = 0.5
CONTACT_COST_WEIGHT = 5e-4
HEALTHY_REWARD = 1.0
HEALTHY_Z = (0.2, 1.0)
CONTACT_FORCE_RANGE = (-1.0, 1.0)
RESET_NOISE = 0.1
MAIN_BODY = 1  # the torso


def ant_model() -> Any:
    """gymnasium's ant.xml, compiled."""
    return mujoco_model("ant.xml")


class AntBatch(MujocoBatch):
    """N Ant-v5 envs (the module says what they compute)."""

    NAME = "Ant"
    XML_FILE = "ant.xml"
    FRAME_SKIP = FRAME_SKIP
    RESET_NOISE = RESET_NOISE
    QVEL_NOISE = "normal"
    CONTACT_FORCES = True
    cfrc_ext: np.ndarray  # (N, nbody, 6)
    xy: np.ndarray  # (N, 2) the torso's xpos

    def _sources(self, data: Any) -> dict[str, Any]:
        return {"cfrc_ext": data.cfrc_ext, "xy": data.xpos[MAIN_BODY, :2]}

    INFO = tuple((name, 1) for name in ("x_position", "y_position", "x_velocity", "y_velocity"))
    INFO += tuple((name, 1) for name in ("reward_forward", "reward_ctrl", "reward_contact", "reward_survive"))
    POSITION_SIZE = 2

    def _observation_size(self) -> int:
        m = self.model
        return m.nq - 2 + m.nv + 6 * (m.nbody - 1)

    def _kernels(self) -> TaskKernels:
        return kernels(self._state_index("cfrc_ext"), self._state_index("xy"))


@njit(nogil=True, inline="always")
def clipped_square(force):  # pragma: no cover
    c = clip(force, CONTACT_FORCE_RANGE[0], CONTACT_FORCE_RANGE[1])
    return c * c


@functools.cache
def kernels(forces: int, xy: int) -> TaskKernels:
    """Per env; ``forces`` and ``xy``: where cfrc_ext and the torso's xy are in the state."""
    ctrl_weight = np.float32(CTRL_COST_WEIGHT)  # gymnasium: float32 action → float32 ctrl cost

    @njit(nogil=True)
    def position(state, i, out):  # pragma: no cover
        out[0], out[1] = state[xy][i, 0], state[xy][i, 1]

    @njit(nogil=True)
    def outcome(state, i, action, velocity, info):  # pragma: no cover
        qpos, qvel, cfrc_ext = state[0][i], state[1][i], state[forces][i]
        healthy = HEALTHY_Z[0] <= qpos[2] and qpos[2] <= HEALTHY_Z[1]
        for k in range(qpos.size):
            healthy = healthy and np.isfinite(qpos[k])
        for k in range(qvel.size):
            healthy = healthy and np.isfinite(qvel[k])
        forward = velocity[0] * FORWARD_REWARD_WEIGHT
        survive = healthy * HEALTHY_REWARD
        ctrl = ctrl_weight * pairwise_sum(action, 0, action.size, square)
        contact = CONTACT_COST_WEIGHT * pairwise_sum(cfrc_ext, 0, cfrc_ext.size, clipped_square)  # all bodies
        info[0], info[1], info[2], info[3] = qpos[0], qpos[1], velocity[0], velocity[1]
        info[4], info[5], info[6], info[7] = forward, -ctrl, -contact, survive
        return (forward + survive) - (ctrl + contact), not healthy

    @njit(nogil=True)
    def observe(state, i, obs):  # pragma: no cover
        qpos, qvel, cfrc_ext = state[0][i], state[1][i], state[forces][i]
        n = 0
        for k in range(2, qpos.size):
            obs[n] = qpos[k]
            n += 1
        for k in range(qvel.size):
            obs[n] = qvel[k]
            n += 1
        for k in range(6, cfrc_ext.size):  # bodies 1..: the world body's terms left out
            obs[n] = clip(cfrc_ext[k], CONTACT_FORCE_RANGE[0], CONTACT_FORCE_RANGE[1])
            n += 1

    return TaskKernels(position, outcome, observe)
