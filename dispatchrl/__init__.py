"""dispatchrl: reinforcement learning as generic functions over device-tagged static-shape arrays.

Every generic function takes the device first and writes into outputs passed in::

    import dispatchrl as drl
    dev = drl.CPU()
    a, b, out = drl.zeros(dev, (4, 3)), drl.zeros(dev, (3, 2)), drl.zeros(dev, (4, 2))
    drl.matmul(dev, a, b, out)
"""

from . import (
    algorithms,
    backends,
    data,
    envs,
    export,
    kernels,
    nn,
    training,
)
from .activation import ACTIVATIONS, Activation
from .algorithms import dqn, ppo, sac, td3
from .arrays import Array, asarray, assign, to_numpy, zeros
from .devices import CPU, CUDA, C, Device, Generic
from .dispatch import GENERIC_FUNCTIONS, GenericFunction, generic, invoke
from .envs import AcrobotContinuous, Pendulum, env_reset, env_reset_done, env_state, env_step, from_gymnasium
from .errors import CheckpointError, ConfigError, DeviceError, DispatchRLError, DTypeError, ShapeError, TrainingDiverged
from .facade import DQN, PPO, SAC, TD3, EvalCallback, StopOnReward
from .kernels.core.api import (
    accumulate_squared_norm,
    adam_step,
    argmax,
    clip,
    clip_by_norm,
    copy,
    dense_backward,
    dense_forward,
    dense_input_gradient,
    fill,
    gelu,
    identity,
    increment,
    linear_schedule,
    matmul,
    mse_gradient,
    mse_loss,
    nonfinite_flag,
    polyak_update,
    relu,
    tanh,
    weight_decay_step,
)
from .kernels.random.api import random_normal, random_uniform, rng
from .staging import Below, Every, Step, compile_step, fork, fuse, fuse_steps, launch, when

__version__ = "0.1.0"

__all__ = [
    "ACTIVATIONS",
    "CPU",
    "CUDA",
    "DQN",
    "GENERIC_FUNCTIONS",
    "PPO",
    "SAC",
    "TD3",
    "AcrobotContinuous",
    "Activation",
    "Array",
    "Below",
    "C",
    "CheckpointError",
    "ConfigError",
    "DTypeError",
    "Device",
    "DeviceError",
    "DispatchRLError",
    "EvalCallback",
    "Every",
    "Generic",
    "GenericFunction",
    "Pendulum",
    "ShapeError",
    "Step",
    "StopOnReward",
    "TrainingDiverged",
    "__version__",
    "accumulate_squared_norm",
    "adam_step",
    "algorithms",
    "argmax",
    "asarray",
    "assign",
    "backends",
    "clip",
    "clip_by_norm",
    "compile_step",
    "copy",
    "data",
    "dense_backward",
    "dense_forward",
    "dense_input_gradient",
    "dqn",
    "env_reset",
    "env_reset_done",
    "env_state",
    "env_step",
    "envs",
    "export",
    "fill",
    "fork",
    "from_gymnasium",
    "fuse",
    "fuse_steps",
    "gelu",
    "generic",
    "identity",
    "increment",
    "invoke",
    "kernels",
    "launch",
    "linear_schedule",
    "matmul",
    "mse_gradient",
    "mse_loss",
    "nn",
    "nonfinite_flag",
    "polyak_update",
    "ppo",
    "random_normal",
    "random_uniform",
    "relu",
    "rng",
    "sac",
    "tanh",
    "td3",
    "to_numpy",
    "training",
    "weight_decay_step",
    "when",
    "zeros",
]
