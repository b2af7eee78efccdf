"""Runtime hyperparameters on the CPU device: float arguments of staged kernels enter the fused
step at run time, so a new learning rate or γ reuses the compiled program, and the results are
the ones the step with the values baked into its source gives, bit for bit."""

import sys

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.backends import cpu as cpu_backend
from dispatchrl.kernels.core.api import fill

T = drl.td3


def small(**changes):
    return T.Config(**{"total_steps": 300, "warmup_steps": 100, "batch_size": 32, "hidden": (16, 16), **changes})


def fused_programs():
    """Every generated fused-step module loaded in this process, with its compiled signatures."""
    return {
        name: len(module.fused_step.overloads)
        for name, module in list(sys.modules.items())
        if name.startswith("dispatchrl_fused.")
    }


def weights(result):
    nets = (result.state.actor, result.state.critic1, result.state.critic2_target)
    return [drl.to_numpy(p.value).copy() for net in nets for p in net.parameters()]


def test_new_learning_rate_or_gamma_reuses_the_compiled_step():
    T.train(drl.CPU(), "pendulum", small(), seed=0)
    before = fused_programs()
    changed = T.train(drl.CPU(), "pendulum", small(actor_lr=5.1e-4, critic_lr=7e-4, gamma=0.97, polyak=0.99), seed=0)
    assert fused_programs() == before  # no new program, no new compiled signature
    assert changed.compile_seconds < 2.0  # tracing only (structure decides, not timing: see above)
    # control: a change of structure (a third layer) does build a new program, so the check
    # above can fail
    T.train(drl.CPU(), "pendulum", small(hidden=(16, 16, 16)), seed=0)
    assert set(fused_programs()) - set(before)


def test_step_exposes_one_program_per_structure():
    device = drl.CPU()
    x = drl.zeros(device, (4,))

    def step(device, value):
        fill(device, x, value)

    a, b = drl.fuse(device, step, 0.25), drl.fuse(device, step, 1.5)
    assert a._run.program is b._run.program
    a()
    assert np.all(drl.to_numpy(x) == 0.25)
    b()
    assert np.all(drl.to_numpy(x) == 1.5)


@pytest.mark.parametrize("changes", [{}, {"actor_lr": 5.1e-4, "gamma": 0.97, "target_noise": 0.3}])
def test_runtime_values_equal_baked_values_bit_for_bit(monkeypatch, changes):
    runtime = T.train(drl.CPU(), "pendulum", small(**changes), seed=3)
    monkeypatch.setattr(cpu_backend, "RUNTIME_SCALARS", False)
    baked = T.train(drl.CPU(), "pendulum", small(**changes), seed=3)
    for r, b in zip(weights(runtime), weights(baked), strict=True):
        np.testing.assert_array_equal(r, b)
    np.testing.assert_array_equal(runtime.history["returns"], baked.history["returns"])
    if changes:  # the values do reach the kernels
        default = T.train(drl.CPU(), "pendulum", small(), seed=3)
        assert not np.array_equal(weights(runtime)[0], weights(default)[0])
