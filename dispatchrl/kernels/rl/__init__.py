"""RL generic functions (replay, noise, TD targets, episode log, SAC head): declarations in api,
methods per backend. CUDA methods register when a CUDA device is first made."""

from ...devices import CUDA
from . import api, cpu, generic  # noqa: F401  (importing registers the methods)
from . import c  # noqa: F401  (C methods; compiling is lazy)

CUDA.method_modules.append("dispatchrl.kernels.rl.cuda")
