"""Parallel MuJoCo Hopper-v5 (a :class:`~dispatchrl.envs.shared.mujoco.MujocoBatch`), as
gymnasium's Hopper-v5 with default arguments computes it for one env:

- obs = [qpos[1:], clip(qvel, −10, 10)] (11 values);
- reward = Δ qpos x / dt + 1 (while healthy) − 1e-3 Σ a² (dt = 4 × 0.002 s; ctrl cost float32);
- healthy (else terminated): every value of [qpos[2:], qvel] in (−100, 100), z = qpos[1] > 0.7
  and the angle qpos[2] in (−0.2, 0.2), all strict;
- reset: mj_resetData, qpos0 + U(±5e-3), qvel0 + U(±5e-3), mj_forward.
"""

from typing import Any

import numpy as np

from ..shared.mujoco import MujocoBatch

__all__ = ["HopperBatch"]

FORWARD_REWARD_WEIGHT = 1.0
CTRL_COST_WEIGHT = 1e-3
HEALTHY_REWARD = 1.0
HEALTHY_STATE = (-100.0, 100.0)
HEALTHY_Z = (0.7, float("inf"))
HEALTHY_ANGLE = (-0.2, 0.2)
VELOCITY_CLIP = 10.0


class HopperBatch(MujocoBatch):
    """N Hopper-v5 envs with the batch API of :mod:`dispatchrl.envs.batch`; env i resets from
    its own generator seeded ``seed + i``, like gymnasium's vector envs."""

    NAME = "Hopper"
    XML_FILE = "hopper.xml"
    FRAME_SKIP = 4
    RESET_NOISE = 5e-3

    def _observations(self, rows: Any = slice(None)) -> np.ndarray:
        velocity = np.clip(self.qvel[rows], -VELOCITY_CLIP, VELOCITY_CLIP)
        return np.concatenate([self.qpos[rows, 1:], velocity], axis=1).astype(self.obs_dtype)

    def _forward_position(self) -> np.ndarray:
        return self.qpos[:, 0]

    def healthy(self) -> np.ndarray:
        state = np.concatenate([self.qpos[:, 2:], self.qvel], axis=1)
        z, angle = self.qpos[:, 1], self.qpos[:, 2]
        return (
            ((HEALTHY_STATE[0] < state) & (state < HEALTHY_STATE[1])).all(axis=1)
            & (HEALTHY_Z[0] < z)
            & (z < HEALTHY_Z[1])
            & (HEALTHY_ANGLE[0] < angle)
            & (angle < HEALTHY_ANGLE[1])
        )

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
