"""Parallel MuJoCo Walker2d-v5 (a :class:`~dispatchrl.envs.shared.mujoco.PlanarWalkerBatch`), as
gymnasium's Walker2d-v5 with default arguments computes it for one env (model walker2d_v5.xml):

- obs = [qpos[1:], clip(qvel, −10, 10)] (17 values);
- reward = Δ qpos x / dt + 1 (while healthy) − 1e-3 Σ a² (dt = 4 × 0.002 s; ctrl cost float32);
- healthy (else terminated): z = qpos[1] in (0.8, 2) and the angle qpos[2] in (−1, 1), strict;
- reset: mj_resetData, qpos0 + U(±5e-3), qvel0 + U(±5e-3), mj_forward.
"""

from ..shared.mujoco import PlanarWalkerBatch

__all__ = ["Walker2dBatch"]


class Walker2dBatch(PlanarWalkerBatch):
    """N Walker2d-v5 envs (the module says what they compute)."""

    NAME = "Walker2d"
    XML_FILE = "walker2d_v5.xml"
    FRAME_SKIP = 4
    RESET_NOISE = 5e-3
    HEALTHY_Z = (0.8, 2.0)
    HEALTHY_ANGLE = (-1.0, 1.0)
