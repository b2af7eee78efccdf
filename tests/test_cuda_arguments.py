"""What the CUDA simulator accepts but a real GPU refuses, checked structurally: no kernel launch
of a whole fused TD3, SAC or PPO step (nor GAE without returns) receives None. Real numba.cuda
cannot type a None argument (``NotImplementedError: (none, None)``); the simulator runs it."""

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.algorithms import ppo, sac, td3
from dispatchrl.kernels.onpolicy import gae
from dispatchrl.training import runs
from dispatchrl.training.envspec import resolve_env


def launched_arguments(step):
    return [arg for _, args in step.kernel_calls for arg in args]


@pytest.mark.parametrize(
    "algo, config",
    [
        (td3, td3.Config(total_steps=8, warmup_steps=2, batch_size=4, hidden=(4,))),
        (sac, sac.Config(total_steps=8, warmup_steps=2, batch_size=4, hidden=(4,))),
        (ppo, ppo.Config(total_steps=16, num_envs=2, steps_per_env=4, batch_size=4, hidden=(4,))),
    ],
    ids=["td3", "sac", "ppo"],
)
def test_no_none_reaches_a_fused_cuda_kernel(cuda_device, algo, config):
    spec = resolve_env("pendulum", config.num_envs)
    state = runs.build_state(algo, cuda_device, spec, config, 0)
    steps = [drl.fuse(cuda_device, algo.native_step, config, spec.native, state)]
    if algo.schedule(config).updates:
        steps.append(drl.fuse(cuda_device, algo.update, config, state))
    for step in steps:
        arguments = launched_arguments(step)
        assert arguments and all(arg is not None for arg in arguments)


def test_gae_without_returns_passes_no_none(cuda_device):
    reward, value, next_value = (drl.zeros(cuda_device, (3, 2)) for _ in range(3))
    terminated, truncated = drl.zeros(cuda_device, (3, 2), np.bool_), drl.zeros(cuda_device, (3, 2), np.bool_)
    advantage = drl.zeros(cuda_device, (3, 2))
    step = drl.fuse(
        cuda_device, lambda d: gae(d, reward, value, next_value, terminated, truncated, 0.9, 0.95, advantage)
    )
    assert all(arg is not None for arg in launched_arguments(step))


def test_a_numba_cuda_that_does_not_import_names_versions_and_fix(monkeypatch):
    """numba-cuda <= 0.30 fails to import under numpy 2.5 (np.row_stack is gone): CUDA() says so."""
    import builtins

    real_import = builtins.__import__

    def failing_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "numba" and fromlist and "cuda" in fromlist:
            raise AttributeError("module 'numpy' has no attribute 'row_stack'")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", failing_import)
    with pytest.raises(drl.DeviceError, match=r"numba .*numba-cuda .*numpy .*dispatchrl\[cuda\]"):
        drl.CUDA()
