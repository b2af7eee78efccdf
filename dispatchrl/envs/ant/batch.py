"""Parallel MuJoCo Ant-v5: N MjData stepped by a pool of threads, gymnasium's Ant-v5 semantics.

A :class:`~dispatchrl.envs.shared.mujoco.MujocoBatch` (threads, resets, autoreset): each thread
copies its envs' qpos, qvel, cfrc_ext and torso position into shared (N, ·) arrays; the
observation, reward and termination are then computed for the whole batch with numpy, as
gymnasium's AntEnv computes them for one env:

- obs = [qpos[2:], qvel, clip(cfrc_ext[1:], -1, 1).ravel()] (105 values);
- forward reward = Δx of the torso ``xpos`` over dt = 5 × 0.01 s (xpos as left by mj_step);
- healthy = finite qpos, qvel and 0.2 <= z <= 1.0; reward = forward + healthy − (ctrl + contact);
- ctrl cost = 0.5 Σ a² (float32, like gymnasium's), contact cost = 5e-4 Σ clip(cfrc_ext)²;
- reset: mj_resetData, qpos0 + U(±0.1), 0.1 N(0, 1) velocities, mj_forward.

mujoco is imported only when a batch is made, so it stays an optional dependency.
"""

from typing import Any

import numpy as np

from ..shared.mujoco import MujocoBatch, default_threads, load_mujoco, mujoco_model

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

    def _observations(self, rows: Any = slice(None)) -> np.ndarray:
        forces = np.clip(self.cfrc_ext[rows, 1:], *CONTACT_FORCE_RANGE).reshape(len(self.qpos[rows]), -1)
        return np.concatenate([self.qpos[rows, 2:], self.qvel[rows], forces], axis=1).astype(self.obs_dtype)

    def _forward_position(self) -> np.ndarray:
        return self.xy

    def healthy(self) -> np.ndarray:
        z = self.qpos[:, 2]
        finite = np.isfinite(self.qpos).all(axis=1) & np.isfinite(self.qvel).all(axis=1)
        return finite & (HEALTHY_Z[0] <= z) & (z <= HEALTHY_Z[1])

    def _outcome(self, actions: np.ndarray, xy_velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        forward = xy_velocity[:, 0] * FORWARD_REWARD_WEIGHT
        healthy = self.healthy()
        healthy_reward = healthy * HEALTHY_REWARD
        # gymnasium: float32 action → float32 ctrl cost; contact cost over all bodies, float64
        ctrl_cost = CTRL_COST_WEIGHT * np.sum(np.square(actions), axis=1)
        contact_cost = CONTACT_COST_WEIGHT * np.sum(
            np.square(np.clip(self.cfrc_ext, *CONTACT_FORCE_RANGE)).reshape(self.num_envs, -1), axis=1
        )
        reward = (forward + healthy_reward) - (ctrl_cost + contact_cost)
        info = {
            "x_position": self.qpos[:, 0].copy(),
            "y_position": self.qpos[:, 1].copy(),
            "x_velocity": xy_velocity[:, 0],
            "y_velocity": xy_velocity[:, 1],
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
            "reward_survive": healthy_reward,
        }
        return reward, ~healthy, info
