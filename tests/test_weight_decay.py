"""Off-policy Adam weight decay (RLtools' ``weight_decay``): config checks, weights only, and
nothing traced when it is 0. The kernel against RLtools' formula is in test_kernels.py."""

import math

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.algorithms import offpolicy, sac, td3
from dispatchrl.nn import adam_update, decay_weights, mlp
from dispatchrl.staging import trace


@pytest.mark.parametrize("algo", [td3, sac])
@pytest.mark.parametrize("bad", [-1e-4, math.nan, math.inf, 2.5, "1e-4"])
def test_weight_decay_must_be_a_number_in_0_2(algo, bad):
    with pytest.raises(drl.ConfigError, match="weight_decay"):
        algo.Config(weight_decay=bad).validate()


def test_weight_decay_defaults_to_0_and_accepts_rltools_value():
    assert td3.Config().weight_decay == 0.0 and sac.Config().weight_decay == 0.0
    td3.Config(weight_decay=1e-4).validate()


def test_decay_weights_scales_the_weights_and_leaves_biases_and_step_counters():
    device = drl.Generic()
    net = mlp(device, (3, 64, 1), activation="tanh", seed=3)  # 3×64 and the 64 biases share a flat group
    weights = [drl.to_numpy(w.value).copy() for w in net.weights]
    biases = [drl.to_numpy(b.value).copy() for b in net.biases]
    decay_weights(device, net, 0.25)
    for w, before in zip(net.weights, weights):
        np.testing.assert_allclose(drl.to_numpy(w.value), 0.75 * before, rtol=1e-6)
    for b, before in zip(net.biases, biases):
        np.testing.assert_array_equal(drl.to_numpy(b.value), before)
    assert all(drl.to_numpy(p.t)[0] == 0 for p in net.groups)


def _traced(fn):
    calls: list = []
    with trace(calls):
        fn()
    return [(kernel, args) for kernel, *args in calls]


def test_without_weight_decay_an_update_traces_exactly_the_adam_kernels():
    device = drl.Generic()
    net = mlp(device, (3, 64, 1), seed=3)
    plain = _traced(lambda: adam_update(device, net, 1e-3))
    assert _traced(lambda: offpolicy.optimize(device, td3.Config(), net, 1e-3)) == plain
    decaying = _traced(lambda: offpolicy.optimize(device, td3.Config(weight_decay=1e-4), net, 1e-3))
    assert decaying[len(net.weights) :] == plain
    assert len(decaying) == len(plain) + len(net.weights)
