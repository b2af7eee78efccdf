"""dispatchrl: reinforcement learning as generic functions over device-tagged static-shape arrays.

Every generic function takes the device first and writes into outputs passed in::

    import dispatchrl as drl
    dev = drl.CPU()
    a, b, out = drl.zeros(dev, (4, 3)), drl.zeros(dev, (3, 2)), drl.zeros(dev, (4, 2))
    drl.matmul(dev, a, b, out)
"""

from .activation import ACTIVATIONS, Activation
from .arrays import Array, asarray, assign, to_numpy, zeros
from .devices import C, CPU, CUDA, Device, Generic
from .dispatch import GENERIC_FUNCTIONS, GenericFunction, generic, invoke
from .errors import (CheckpointError, ConfigError, DeviceError, DispatchRLError, DTypeError, ShapeError,
                     TrainingDiverged)
from .staging import Below, Every, Step, compile_step, fuse, launch, when
from . import backends  # noqa: F401  (compile_step methods of CPU and C; before any kernel is jitted)
from .kernels.core.api import (adam_step, copy, dense_backward, dense_forward, dense_input_gradient, fill, gelu,
                               identity, increment, matmul, mse_gradient, mse_loss, nonfinite_flag, polyak_update, relu,
                               tanh)
from .kernels.random.api import random_normal, random_uniform, rng
from . import kernels  # noqa: F401  (registers the Generic, CPU and C methods)
from . import algorithms, data, export, nn  # noqa: F401,E402
from .algorithms import ppo, sac, td3  # noqa: F401,E402
from . import envs  # noqa: F401  (env methods; gymnasium ids dispatchrl/Pendulum-v1, AcrobotContinuous-v1, Ant-v5)
from .envs import (AcrobotContinuous, Pendulum, env_reset, env_reset_done, env_state, env_step,
                   from_gymnasium)

__version__ = "0.1.0"
