"""Parallel MuJoCo Hopper-v5 (a :class:`~dispatchrl.envs.shared.mujoco.PlanarWalkerBatch`), as
gymnasium's Hopper-v5 with default arguments computes it for one env:

- obs = [qpos[1:], clip(qvel, −10, 10)] (11 values);
- reward = Δ qpos x / dt + 1 (while healthy) − 1e-3 Σ a² (dt = 4 × 0.002 s; ctrl cost float32);
- healthy (else terminated): every value of [qpos[2:], qvel] in (−100, 100), z = qpos[1] > 0.7
  and the angle qpos[2] in (−0.2, 0.2), all strict;
- reset: mj_resetData, qpos0 + U(±5e-3), qvel0 + U(±5e-3), mj_forward.
"""

from ..shared.mujoco import PlanarWalkerBatch

__all__ = ["HopperBatch"]


class HopperBatch(PlanarWalkerBatch):
    """N Hopper-v5 envs (the module says what they compute)."""

    NAME = "Hopper"
    XML_FILE = "hopper.xml"
    FRAME_SKIP = 4
    RESET_NOISE = 5e-3
    HEALTHY_Z = (0.7, float("inf"))
    HEALTHY_ANGLE = (-0.2, 0.2)
    HEALTHY_STATE = (-100.0, 100.0)
