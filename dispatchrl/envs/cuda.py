"""The built-in envs' CUDA methods, registered when a CUDA device is first made: the module
``dispatchrl.devices.CUDA.method_modules`` names (the envs are listed in :mod:`.registry`)."""

from .registry import register_cuda_methods

__all__: list[str] = []  # methods only: importing the module registers them

register_cuda_methods()
