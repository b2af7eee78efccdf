"""Backend runtimes: what each device needs to run kernels, and nothing else (no methods of
generic functions: those live in dispatchrl.kernels and dispatchrl.envs, one file per backend).

- :mod:`.cpu`: Numba jit option sets, the Numba disk cache, BLAS threads, denormal flushing, and
  ``compile_step(CPU)``, a generated ``@njit`` loop over a traced step;
- :mod:`.cuda`: launch configurations, device twins of CPU helpers, ``compile_step(CUDA)``;
  imported only when a CUDA device is first made (importing numba.cuda is slow);
- :mod:`.c`: C kernel blocks and their rendering, the host compiler, ``compile_step(C)``.
"""

from . import c, cpu

__all__ = ["c", "cpu"]
