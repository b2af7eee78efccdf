"""Aliasing: each generic function declares what it writes and which outputs may be which inputs;
any other overlap of a written array with another argument is a ShapeError naming both, before
any kernel runs, on every device, eagerly and while a step is traced. In-place-by-design
functions (Adam, Polyak, increment, env_step) are tested in place."""

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.arrays import view
from dispatchrl.dispatch import GENERIC_FUNCTIONS
from dispatchrl.kernels.offpolicy.api import track_episodes

DEVICES = ["generic", "cpu", "c", "cuda"]


@pytest.fixture(params=DEVICES)
def dev(request):
    return drl.devices.device_from_name(request.param)


def arr(dev, values, dtype=np.float32):
    return drl.asarray(dev, np.asarray(values, dtype))


def test_every_generic_function_declares_its_outputs():
    import dispatchrl.envs  # noqa: F401  (registers the env functions)

    ours = [fn for fn in GENERIC_FUNCTIONS if fn.__module__.startswith("dispatchrl.")]
    assert len(ours) >= 40
    for fn in ours:
        assert fn.outputs is not None and (fn.outputs or fn.inplace), fn.__name__


def test_matmul_output_aliasing_an_input_refused(dev):
    """The issue's case: on CPU this returned zeros, on the CUDA simulator inf."""
    a = arr(dev, [[1, 2], [3, 4]])
    with pytest.raises(drl.ShapeError, match="matmul: argument 'out' \\(written\\) overlaps argument 'a'"):
        drl.matmul(dev, a, a, a)
    b, out = arr(dev, [[1, 0], [0, 1]]), drl.zeros(dev, (2, 2))
    with pytest.raises(drl.ShapeError, match="'out' .* overlaps argument 'b'"):
        drl.matmul(dev, a, b, b)
    np.testing.assert_array_equal(drl.to_numpy(a), [[1, 2], [3, 4]])  # nothing ran
    drl.matmul(dev, a, a, out)  # reading one array twice is fine
    np.testing.assert_allclose(drl.to_numpy(out), [[7, 10], [15, 22]])


def dense_args(dev, batch=3, n_in=4, n_out=4):
    g = np.random.default_rng(0)
    return (
        arr(dev, g.normal(size=(batch, n_in))),
        arr(dev, g.normal(size=(n_in, n_out))),
        arr(dev, g.normal(size=n_out)),
        drl.zeros(dev, (batch, n_out)),
        drl.zeros(dev, (batch, n_out)),
    )


def test_dense_forward_pre_aliasing_x_refused(dev):
    """The issue's case: off by up to 1.85 before."""
    x, W, b, _, out = dense_args(dev)
    with pytest.raises(drl.ShapeError, match="dense_forward: argument 'pre' \\(written\\) overlaps argument 'x'"):
        drl.dense_forward(dev, x, W, b, x, out, "relu")
    with pytest.raises(drl.ShapeError, match="argument 'out' \\(written\\) overlaps argument 'x'"):
        drl.dense_forward(dev, x, W, b, out, x, "relu")


def test_dense_forward_pre_may_be_out(dev):
    """Declared: pre and out may be one array (the MLP buffers activate in place)."""
    x, W, b, pre, out = dense_args(dev)
    drl.dense_forward(dev, x, W, b, pre, out, "tanh")
    drl.dense_forward(dev, x, W, b, pre, pre, "tanh")
    # (the CPU kernel takes another loop when it activates in place: an ulp may differ)
    np.testing.assert_allclose(drl.to_numpy(pre), drl.to_numpy(out), rtol=1e-6)


@pytest.mark.parametrize("name", ["identity", "relu", "tanh", "gelu"])
def test_elementwise_in_place(dev, name):
    values = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    x, out = arr(dev, values), drl.zeros(dev, (3, 4))
    fn = getattr(drl, name)
    fn(dev, x, out)
    fn(dev, x, x)
    np.testing.assert_array_equal(drl.to_numpy(x), drl.to_numpy(out))


def test_partial_overlap_refused_even_where_exact_aliasing_is_allowed(dev):
    flat = drl.zeros(dev, 8)
    x, shifted = view(flat, 0, (2, 3)), view(flat, 2, (2, 3))
    with pytest.raises(
        drl.ShapeError,
        match="relu: argument 'out' \\(written\\) overlaps argument 'x'.*may only be the very same array as 'x'",
    ):
        drl.relu(dev, x, shifted)


def test_refused_while_tracing(dev):
    a = arr(dev, [[1, 2], [3, 4]])
    with pytest.raises(drl.ShapeError, match="matmul"):
        drl.fuse(dev, lambda d: drl.matmul(d, a, a, a))


def test_struct_fields_are_checked(dev):
    from dispatchrl.data import episode_log

    log = episode_log(dev, 2, 8)
    reward, flags = drl.zeros(dev, 2), drl.zeros(dev, 2, np.bool_)
    with pytest.raises(
        drl.ShapeError, match="track_episodes: argument 'log.count' \\(written\\) overlaps argument 'step'"
    ):
        track_episodes(dev, log, reward, flags, drl.zeros(dev, 2, np.bool_), log.count)
    with pytest.raises(drl.ShapeError, match="argument 'log.running_return' \\(written\\) overlaps argument 'reward'"):
        track_episodes(dev, log, log.running_return, flags, drl.zeros(dev, 2, np.bool_), drl.zeros(dev, 1, np.int64))


def test_adam_step_in_place(dev):
    g = np.random.default_rng(1)
    p0, grad0 = g.normal(size=5).astype(np.float32), g.normal(size=5).astype(np.float32)
    param, grad, m, v, t = (
        arr(dev, p0),
        arr(dev, grad0),
        drl.zeros(dev, 5),
        drl.zeros(dev, 5),
        drl.zeros(dev, 1, np.int64),
    )
    drl.adam_step(dev, param, grad, m, v, t, lr=0.1)
    # first bias-corrected Adam step: param -= lr * g / (|g| + eps)
    np.testing.assert_allclose(drl.to_numpy(param), p0 - 0.1 * grad0 / (np.abs(grad0) + 1e-8), rtol=1e-5)
    np.testing.assert_allclose(drl.to_numpy(m), 0.1 * grad0, rtol=1e-5)
    assert drl.to_numpy(t)[0] == 1
    with pytest.raises(drl.ShapeError, match="adam_step: argument 'param' \\(written\\) overlaps argument 'grad'"):
        drl.adam_step(dev, param, param, m, v, t)
    with pytest.raises(drl.ShapeError, match="argument 'm' \\(written\\) overlaps argument 'v'"):
        drl.adam_step(dev, param, grad, m, m, t)


def test_polyak_update_and_increment_in_place(dev):
    target, source = arr(dev, [1.0, 2.0]), arr(dev, [3.0, 6.0])
    drl.polyak_update(dev, target, source, 0.75)
    np.testing.assert_allclose(drl.to_numpy(target), [1.5, 3.0])
    drl.polyak_update(dev, target, target, 0.5)  # elementwise: target may be source (x ← x)
    np.testing.assert_allclose(drl.to_numpy(target), [1.5, 3.0])
    flat = drl.zeros(dev, 3)
    with pytest.raises(
        drl.ShapeError, match="polyak_update: argument 'target' \\(written\\) overlaps argument 'source'"
    ):
        drl.polyak_update(dev, view(flat, 0, (2,)), view(flat, 1, (2,)), 0.5)
    counter = drl.zeros(dev, 1, np.int64)
    drl.increment(dev, counter, 3)
    drl.increment(dev, counter)
    assert drl.to_numpy(counter)[0] == 4


def test_env_step_in_place(dev):
    from dispatchrl.envs import Pendulum, env_reset, env_state, env_step

    env = Pendulum(num_envs=2)
    state, stream = env_state(dev, env), drl.rng(dev, 0)
    env_reset(dev, env, state, stream)
    before = drl.to_numpy(state.physics)
    env_step(dev, env, state, drl.zeros(dev, (2, 1)))
    assert not np.array_equal(drl.to_numpy(state.physics), before)
    np.testing.assert_array_equal(drl.to_numpy(state.steps), [1, 1])
    with pytest.raises(drl.ShapeError, match="env_step: argument 'state.obs' \\(written\\) overlaps argument 'action'"):
        env_step(dev, env, state, view(drl.Array(dev, state.obs.data.reshape(-1)), 0, (2, 1)))


def test_undeclared_function_treats_every_array_as_written():
    """A user's bare ``@generic`` (no outputs stated) refuses any overlap; a declaration naming
    a parameter it lacks is refused when it is made."""
    from dispatchrl.dispatch import GenericFunction

    def scale(device, x, out):
        return device, x, out

    fn = GenericFunction(scale)  # not registered in GENERIC_FUNCTIONS

    @fn.dispatch
    def _(device: drl.Generic, x, out):
        out.data[...] = 2 * x.data

    cpu = drl.CPU()
    x = arr(cpu, [1.0, 2.0])
    with pytest.raises(drl.ShapeError, match="scale: argument '(x|out)' \\(written\\) overlaps argument '(x|out)'"):
        fn(cpu, x, x)
    out = drl.zeros(cpu, 2)
    fn(cpu, x, out)
    np.testing.assert_array_equal(drl.to_numpy(out), [2.0, 4.0])
    with pytest.raises(drl.ConfigError, match="'y' is not a parameter"):
        GenericFunction(scale, outputs=("y",))
