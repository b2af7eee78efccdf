"""Parallel MuJoCo HalfCheetah-v5 (a :class:`~dispatchrl.envs.shared.mujoco.MujocoBatch`), as
gymnasium's HalfCheetah-v5 with default arguments computes it for one env:

- obs = [qpos[1:], qvel] (17 values);
- reward = Δ qpos x / dt − 0.1 Σ a² (dt = 5 × 0.01 s; ctrl cost float32 like gymnasium's);
- never terminates (the 1000-step time limit truncates);
- reset: mj_resetData, qpos0 + U(±0.1), qvel0 + 0.1 N(0, 1), mj_forward.
"""

import functools
from typing import Any

import numpy as np
from numba import njit

from ..shared.mujoco import MujocoBatch, TaskKernels, pairwise_sum, planar_observation, square, x_position

__all__ = ["HalfCheetahBatch"]

FORWARD_REWARD_WEIGHT = 1.0
CTRL_COST_WEIGHT = 0.1


class HalfCheetahBatch(MujocoBatch):
    """N HalfCheetah-v5 envs (the module says what they compute)."""

    NAME = "HalfCheetah"
    XML_FILE = "half_cheetah.xml"
    FRAME_SKIP = 5
    RESET_NOISE = 0.1
    QVEL_NOISE = "normal"
    INFO = (("x_position", 1), ("x_velocity", 1), ("reward_forward", 1), ("reward_ctrl", 1))

    def _observation_size(self) -> int:
        return self.model.nq - 1 + self.model.nv

    def _kernels(self) -> TaskKernels:
        return kernels()

    def reset_info(self, i: int) -> dict[str, Any]:
        return {"x_position": self.qpos[i, 0]}


@functools.cache
def kernels() -> TaskKernels:
    ctrl_weight = np.float32(CTRL_COST_WEIGHT)  # gymnasium's ctrl cost is float32, like the action

    @njit(nogil=True)
    def outcome(state, i, action, velocity, info):  # pragma: no cover
        forward = FORWARD_REWARD_WEIGHT * velocity[0]
        ctrl = ctrl_weight * pairwise_sum(action, 0, action.size, square)
        info[0], info[1], info[2], info[3] = state[0][i, 0], velocity[0], forward, -ctrl
        return forward - ctrl, False

    return TaskKernels(x_position, outcome, planar_observation(np.inf))  # its velocities unclipped
