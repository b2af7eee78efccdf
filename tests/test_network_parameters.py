"""Network parameters as TensorDicts (issue 17): ``nn.parameters(net)`` is a TensorDict whose leaves
are the network's own Arrays (TorchRL's ``TensorDict.from_module``), and ``nn.load_parameters``
copies one into a network after checking every key, shape and dtype."""

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dispatchrl as drl
from dispatchrl import nn
from dispatchrl.data import TensorDict
from dispatchrl.errors import ConfigError, DTypeError, MissingKeyError, ShapeError

SIZES = (3, 16, 8, 2)


def reference_forward(params: dict, x: np.ndarray, activation="tanh") -> np.ndarray:
    """float64 MLP forward from the TensorDict's host values (weights (in, out))."""
    h = x.astype(np.float64)
    layers = len(params["weights"])
    for i in range(layers):
        h = h @ params["weights"][str(i)].astype(np.float64) + params["biases"][str(i)].astype(np.float64)
        if i < layers - 1:
            h = np.tanh(h)
    return h


def device_forward(device, net, x: np.ndarray) -> np.ndarray:
    buffers = nn.make_buffers(device, net, x.shape[0])
    nn.forward(device, net, buffers, drl.asarray(device, x, np.float32))
    return drl.to_numpy(buffers.output)


@pytest.mark.parametrize("device_name", ["generic", "cpu", "cuda", "c"])
@given(seed=st.integers(0, 2**16), rows=st.integers(1, 6))
def test_parameters_are_the_networks_tensors_on_every_device(device_name, seed, rows):
    device = drl.devices.device_from_name(device_name)
    net = nn.mlp(device, SIZES, activation="tanh", seed=seed)
    params = nn.parameters(net)
    assert params.batch_size == () and type(params.device) is type(device)
    assert sorted(params.keys(include_nested=True, leaves_only=True)) == sorted(
        [("weights", str(i)) for i in range(3)] + [("biases", str(i)) for i in range(3)]
    )
    assert all(params["weights", str(i)] is w.value for i, w in enumerate(net.weights))
    assert all(params.biases[str(i)] is b.value for i, b in enumerate(net.biases))
    x = np.random.default_rng(seed).normal(size=(rows, SIZES[0]))
    np.testing.assert_allclose(device_forward(device, net, x), reference_forward(params.numpy(), x), atol=1e-5)
    # a write into a leaf is a write into the network (the first layer's flat-storage view too)
    drl.assign(params["weights", "0"], np.zeros((SIZES[0], SIZES[1]), np.float32))
    assert not np.any(drl.to_numpy(net.weights[0].value))
    np.testing.assert_allclose(device_forward(device, net, x), reference_forward(params.numpy(), x), atol=1e-5)


def test_memmap_round_trip_loads_bit_identical_networks_across_devices(tmp_path):
    source = nn.mlp(drl.CPU(), SIZES, activation="tanh", seed=1)
    nn.parameters(source).memmap(tmp_path / "actor")
    x = np.random.default_rng(0).normal(size=(4, SIZES[0]))
    for device in (drl.CPU(), drl.Generic(), drl.C()):
        target = nn.mlp(device, SIZES, activation="tanh", seed=2)
        assert not np.array_equal(device_forward(device, target, x), device_forward(drl.CPU(), source, x))
        nn.load_parameters(target, TensorDict.load_memmap(tmp_path / "actor", mode="r"))
        for a, b in zip(source.parameters(), target.parameters()):
            assert np.array_equal(drl.to_numpy(a.value), drl.to_numpy(b.value))
    # a plain nested dict of numpy arrays loads too
    target = nn.mlp(drl.CPU(), SIZES, activation="tanh", seed=3)
    nn.load_parameters(target, nn.parameters(source).numpy())
    assert np.array_equal(device_forward(drl.CPU(), target, x), device_forward(drl.CPU(), source, x))


def snapshot(net) -> list:
    return [drl.to_numpy(p.value) for p in net.parameters()]


@pytest.mark.parametrize(
    "change, error, match",
    [
        (lambda p: p.weights.pop("2"), MissingKeyError, r"missing key\(s\) weights\.2"),
        (lambda p: p.set("extra", np.zeros(2, np.float32)), MissingKeyError, r"unexpected key\(s\) extra"),
        (lambda p: p.biases.set("1", np.zeros(9, np.float32)), ShapeError, r"'biases\.1' has shape \(9,\)"),
        (lambda p: p.biases.set("2", np.zeros(2, np.float64)), DTypeError, r"'biases\.2' has dtype float64"),
    ],
)
def test_load_parameters_checks_everything_before_writing(change, error, match):
    net = nn.mlp(drl.CPU(), SIZES, seed=0)
    params = nn.parameters(nn.mlp(drl.CPU(), SIZES, seed=7)).to(None)
    change(params)
    before = snapshot(net)
    with pytest.raises(error, match=match):
        nn.load_parameters(net, params)
    assert all(np.array_equal(a, b) for a, b in zip(before, snapshot(net)))
    with pytest.raises(ConfigError, match="'params' must be a TensorDict or dict"):
        nn.load_parameters(net, [1, 2])


def test_gradients_and_adam_moments_by_name():
    device = drl.CPU()
    net = nn.mlp(device, SIZES, seed=0)
    x = drl.asarray(device, np.random.default_rng(0).normal(size=(5, SIZES[0])), np.float32)
    buffers = nn.make_buffers(device, net, 5)
    nn.forward(device, net, buffers, x)
    drl.assign(buffers.d_output, np.ones((5, SIZES[-1]), np.float32))
    nn.backward(device, net, buffers, x, buffers.d_output)
    grads = nn.parameters(net, "grad")
    assert grads["weights", "2"] is net.weights[2].grad
    # d(sum of outputs)/d(last bias) is the row count, per output
    np.testing.assert_allclose(drl.to_numpy(grads["biases", "2"]), np.full(SIZES[-1], 5.0))
    assert nn.parameters(net, "m")["weights", "1"] is net.weights[1].m
    with pytest.raises(ConfigError, match="'what' must be one of"):
        nn.parameters(net, "t")
    target = nn.mlp(device, SIZES, seed=0, trainable=False)
    assert nn.parameters(target)["weights", "0"] is target.weights[0].value
    with pytest.raises(ConfigError, match=r"'weights\.0' has no 'grad' \(a network built with trainable=False\)"):
        nn.parameters(target, "grad")


@dataclass
class GainMLP(nn.MLP):
    gain: nn.Parameter | None = None


class Opaque:
    """A network type without dataclass Parameter fields."""


@nn.parameters.dispatch
def _opaque_parameters(net: Opaque, what) -> TensorDict:
    return TensorDict({"scale": np.ones(2, np.float32)}, [])


def test_user_networks_get_their_own_parameters_by_field_or_method():
    device = drl.CPU()
    base = nn.mlp(device, SIZES, seed=0)
    gain = nn.parameter(device, (SIZES[-1],))
    net = GainMLP(**{f: getattr(base, f) for f in base.__dataclass_fields__}, gain=gain)
    params = nn.parameters(net)
    assert params["gain"] is gain.value
    assert "groups" not in params.keys()  # flat storage the other tensors are views of
    assert nn.parameters(Opaque())["scale"].shape == (2,)
    with pytest.raises(ConfigError, match="found no nn.Parameter fields in a object"):
        nn.parameters(object())


def test_a_trained_actor_reads_and_loads_as_a_tensordict(tmp_path):
    config = drl.td3.Config(total_steps=300, warmup_steps=100, batch_size=32)
    result = drl.td3.train(drl.CPU(), "pendulum", config, seed=0, progress=False)
    obs = np.random.default_rng(0).normal(size=(4, result.spec.obs_dim))
    fresh = drl.td3.build(drl.CPU(), config, result.spec.obs_dim, result.spec.action_dim, 5)
    nn.load_parameters(fresh.actor, nn.parameters(result.state.actor))
    policy = nn.deployable(fresh.actor, result.spec.action_low, result.spec.action_high)
    assert np.array_equal(policy(obs), result.policy(obs))
