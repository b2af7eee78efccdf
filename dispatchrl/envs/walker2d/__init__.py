"""MuJoCo Walker2d-v5, threaded: :class:`Walker2dBatch` (N MjData stepped on threads) and the
``dispatchrl/Walker2d-v5`` gymnasium env. mujoco is imported only when one is made."""

from ..shared.mujoco import gymnasium_declarations
from .batch import Walker2dBatch

__all__ = ["GYMNASIUM_SPEC", "Walker2dBatch", "Walker2dEnv", "make_walker2d_vector"]

# the camera follows the thigh, as gymnasium's camera
Walker2dEnv, make_walker2d_vector, GYMNASIUM_SPEC = gymnasium_declarations(Walker2dBatch, track_body=2)
