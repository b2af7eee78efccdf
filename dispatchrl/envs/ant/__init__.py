"""MuJoCo Ant-v5, threaded: :class:`AntBatch` (N MjData stepped on threads) and the
``dispatchrl/Ant-v5`` gymnasium env. mujoco is imported only when an Ant is made."""

from .batch import AntBatch, ant_model, default_threads
from .gym import GYMNASIUM_SPEC, AntEnv, make_ant_vector

__all__ = ["GYMNASIUM_SPEC", "AntBatch", "AntEnv", "ant_model", "default_threads", "make_ant_vector"]
