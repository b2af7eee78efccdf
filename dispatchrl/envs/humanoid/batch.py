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

from typing import Any

import numpy as np

from ..shared.mujoco import MujocoBatch

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

    def _observations(self, rows: Any = slice(None)) -> np.ndarray:
        n = len(self.qpos[rows])
        parts = [
            self.qpos[rows, 2:],
            self.qvel[rows],
            self.cinert[rows, 1:].reshape(n, -1),
            self.cvel[rows, 1:].reshape(n, -1),
            self.qfrc_actuator[rows, 6:],
            self.cfrc_ext[rows, 1:].reshape(n, -1),
        ]
        return np.concatenate(parts, axis=1).astype(self.obs_dtype)

    def _forward_position(self) -> np.ndarray:
        mass = self.model.body_mass
        return np.einsum("b,nbj->nj", mass, self.xipos)[:, :2] / mass.sum()

    def healthy(self) -> np.ndarray:
        z = self.qpos[:, 2]
        return (HEALTHY_Z[0] < z) & (z < HEALTHY_Z[1])

    def _position_info(self, rows: Any = slice(None)) -> dict[str, Any]:
        return {
            "x_position": self.qpos[rows, 0].copy(),
            "y_position": self.qpos[rows, 1].copy(),
            "tendon_length": self.ten_length[rows].copy(),
            "tendon_velocity": self.ten_velocity[rows].copy(),
            "distance_from_origin": np.linalg.norm(self.qpos[rows, 0:2], ord=2, axis=-1),
        }

    def _outcome(self, actions: np.ndarray, xy_velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        forward = FORWARD_REWARD_WEIGHT * xy_velocity[:, 0]
        healthy = self.healthy()
        healthy_reward = healthy * HEALTHY_REWARD
        # gymnasium squares MjData.ctrl (the float32 action as float64), not the action
        ctrl_cost = CTRL_COST_WEIGHT * np.sum(np.square(actions.astype(np.float64)), axis=1)
        contact_cost = np.minimum(
            CONTACT_COST_WEIGHT * np.sum(np.square(self.cfrc_ext).reshape(self.num_envs, -1), axis=1), CONTACT_COST_MAX
        )
        info = {
            **self._position_info(),
            "x_velocity": xy_velocity[:, 0],
            "y_velocity": xy_velocity[:, 1],
            "reward_survive": healthy_reward,
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
        }
        return (forward + healthy_reward) - (ctrl_cost + contact_cost), ~healthy, info

    def reset_info(self, i: int) -> dict[str, Any]:
        return self._position_info(i)
