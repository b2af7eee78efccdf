"""Parallel MuJoCo HalfCheetah-v5 (a :class:`~dispatchrl.envs.shared.mujoco.MujocoBatch`), as
gymnasium's HalfCheetah-v5 with default arguments computes it for one env:

- obs = [qpos[1:], qvel] (17 values);
- reward = Δ qpos x / dt − 0.1 Σ a² (dt = 5 × 0.01 s; ctrl cost float32 like gymnasium's);
- never terminates (the 1000-step time limit truncates);
- reset: mj_resetData, qpos0 + U(±0.1), qvel0 + 0.1 N(0, 1), mj_forward.
"""

from typing import Any

import numpy as np

from ..shared.mujoco import MujocoBatch

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

    def _observations(self, rows: Any = slice(None)) -> np.ndarray:
        return np.concatenate([self.qpos[rows, 1:], self.qvel[rows]], axis=1).astype(self.obs_dtype)

    def _forward_position(self) -> np.ndarray:
        return self.qpos[:, 0]

    def _outcome(self, actions: np.ndarray, x_velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        forward = FORWARD_REWARD_WEIGHT * x_velocity
        ctrl_cost = CTRL_COST_WEIGHT * np.sum(np.square(actions), axis=1)
        info = {
            "x_position": self.qpos[:, 0].copy(),
            "x_velocity": x_velocity,
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
        }
        return forward - ctrl_cost, np.zeros(self.num_envs, bool), info

    def reset_info(self, i: int) -> dict[str, Any]:
        return {"x_position": self.qpos[i, 0]}
