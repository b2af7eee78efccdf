"""Parallel MuJoCo Walker2d-v5 (a :class:`~dispatchrl.envs.shared.mujoco.MujocoBatch`), as
gymnasium's Walker2d-v5 with default arguments computes it for one env (model walker2d_v5.xml):

- obs = [qpos[1:], clip(qvel, −10, 10)] (17 values);
- reward = Δ qpos x / dt + 1 (while healthy) − 1e-3 Σ a² (dt = 4 × 0.002 s; ctrl cost float32);
- healthy (else terminated): z = qpos[1] in (0.8, 2) and the angle qpos[2] in (−1, 1), strict;
- reset: mj_resetData, qpos0 + U(±5e-3), qvel0 + U(±5e-3), mj_forward.
"""

from typing import Any

import numpy as np

from ..shared.mujoco import MujocoBatch

__all__ = ["Walker2dBatch"]

FORWARD_REWARD_WEIGHT = 1.0
CTRL_COST_WEIGHT = 1e-3
HEALTHY_REWARD = 1.0
HEALTHY_Z = (0.8, 2.0)
HEALTHY_ANGLE = (-1.0, 1.0)
VELOCITY_CLIP = 10.0


class Walker2dBatch(MujocoBatch):
    """N Walker2d-v5 envs with the batch API of :mod:`dispatchrl.envs.batch`; env i resets from
    its own generator seeded ``seed + i``, like gymnasium's vector envs."""

    NAME = "Walker2d"
    XML_FILE = "walker2d_v5.xml"
    FRAME_SKIP = 4
    RESET_NOISE = 5e-3

    def _observations(self, rows: Any = slice(None)) -> np.ndarray:
        velocity = np.clip(self.qvel[rows], -VELOCITY_CLIP, VELOCITY_CLIP)
        return np.concatenate([self.qpos[rows, 1:], velocity], axis=1).astype(self.obs_dtype)

    def _forward_position(self) -> np.ndarray:
        return self.qpos[:, 0]

    def healthy(self) -> np.ndarray:
        z, angle = self.qpos[:, 1], self.qpos[:, 2]
        return (HEALTHY_Z[0] < z) & (z < HEALTHY_Z[1]) & (HEALTHY_ANGLE[0] < angle) & (angle < HEALTHY_ANGLE[1])

    def _outcome(self, actions: np.ndarray, x_velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        forward = FORWARD_REWARD_WEIGHT * x_velocity
        healthy = self.healthy()
        healthy_reward = healthy * HEALTHY_REWARD
        ctrl_cost = CTRL_COST_WEIGHT * np.sum(np.square(actions), axis=1)
        info = {
            "x_position": self.qpos[:, 0].copy(),
            "z_distance_from_origin": self.qpos[:, 1] - self.init_qpos[1],
            "x_velocity": x_velocity,
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_survive": healthy_reward,
        }
        return (forward + healthy_reward) - ctrl_cost, ~healthy, info

    def reset_info(self, i: int) -> dict[str, Any]:
        return {"x_position": self.qpos[i, 0], "z_distance_from_origin": self.qpos[i, 1] - self.init_qpos[1]}
