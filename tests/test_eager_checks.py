"""Eager calls check once per kind of call (argument types, scalar values): a repeated call skips
the declaration, while every refusal (shapes, dtypes, devices, overlapping memory) still comes
before any method runs (issue 34)."""

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.arrays import view
from dispatchrl.checks import check_array, check_device, check_number
from dispatchrl.dispatch import GenericFunction

DECLARED = []


def scale(device, x, out, factor):
    """out = factor * x"""
    DECLARED.append(factor)
    check_device("scale", device)
    check_array("scale", "x", x, device)
    check_array("scale", "out", out, device, shape=x.shape, dtype=x.dtype)
    return device, x, out, check_number("scale", "factor", factor, low=0.0)


def make_scale():
    fn = GenericFunction(scale, outputs=("out",), may_alias={"out": ("x",)})  # not in GENERIC_FUNCTIONS
    ran = []

    @fn.dispatch
    def scale_generic(device: drl.Generic, x, out, factor):
        ran.append("generic")
        out.data[...] = factor * x.data

    return fn, ran


def arr(dev, values, dtype=np.float32):
    return drl.asarray(dev, np.asarray(values, dtype))


def test_a_repeated_call_skips_the_declaration_but_not_the_method():
    fn, ran = make_scale()
    dev = drl.CPU()
    x, out = arr(dev, [1.0, 2.0]), drl.zeros(dev, 2)
    DECLARED.clear()
    for _ in range(3):
        fn(dev, x, out, 2)
    assert DECLARED == [2] and ran == ["generic"] * 3
    np.testing.assert_array_equal(drl.to_numpy(out), [2.0, 4.0])
    fn(dev, x, out, 3)  # another scalar value: checked again (and converted to a float again)
    fn(dev, arr(dev, [1.0, 2.0, 3.0]), drl.zeros(dev, 3), 3)  # another shape: checked again
    assert DECLARED == [2, 3, 3]


def test_every_refusal_still_comes_after_a_remembered_call():
    fn, ran = make_scale()
    dev = drl.CPU()
    x, out = arr(dev, [1.0, 2.0]), drl.zeros(dev, 2)
    fn(dev, x, out, 2.0)
    ran.clear()
    with pytest.raises(drl.ShapeError, match="scale: argument 'out' has shape \\(3,\\), expected \\(2,\\)"):
        fn(dev, x, drl.zeros(dev, 3), 2.0)
    with pytest.raises(drl.DTypeError, match="scale: argument 'out' has dtype float64, expected float32"):
        fn(dev, x, drl.zeros(dev, 2, np.float64), 2.0)
    with pytest.raises(drl.ConfigError, match="scale: argument 'factor' must be finite"):
        fn(dev, x, out, -1.0)
    with pytest.raises(drl.DeviceError, match="scale: argument 'x' must be a dispatchrl Array"):
        fn(dev, np.ones(2, np.float32), out, 2.0)
    flat = drl.zeros(dev, 3)  # same types as the remembered call, overlapping memory
    with pytest.raises(drl.ShapeError, match="scale: argument 'out' \\(written\\) overlaps argument 'x'"):
        fn(dev, view(flat, 0, (2,)), view(flat, 1, (2,)), 2.0)
    assert ran == []  # no method ran for any of them


def test_the_same_array_twice_then_two_arrays():
    """A call passing one array as both x and out (allowed) is remembered by position, so a
    later call with two arrays reads x, not out."""
    fn, _ = make_scale()
    dev = drl.CPU()
    x = arr(dev, [1.0, 2.0])
    fn(dev, x, x, 2.0)
    out = drl.zeros(dev, 2)
    fn(dev, arr(dev, [5.0, 7.0]), out, 2.0)
    np.testing.assert_array_equal(drl.to_numpy(out), [10.0, 14.0])


def test_a_method_registered_later_is_used():
    fn, ran = make_scale()
    dev = drl.CPU()
    x, out = arr(dev, [1.0, 2.0]), drl.zeros(dev, 2)
    fn(dev, x, out, 2.0)

    @fn.dispatch
    def scale_cpu(device: drl.CPU, x, out, factor):
        ran.append("cpu")
        out.data[...] = factor * x.data

    fn(dev, x, out, 2.0)
    assert ran == ["generic", "cpu"]


def test_a_remembered_builtin_call_gives_the_same_result():
    dev = drl.CPU()
    g = np.random.default_rng(0)
    a, b = (arr(dev, g.normal(size=(2, 2))) for _ in range(2))
    first, again = drl.zeros(dev, (2, 2)), drl.zeros(dev, (2, 2))
    drl.matmul(dev, a, b, first)
    drl.matmul(dev, a, b, again)
    np.testing.assert_array_equal(drl.to_numpy(first), drl.to_numpy(again))
    np.testing.assert_allclose(drl.to_numpy(first), drl.to_numpy(a) @ drl.to_numpy(b), rtol=1e-6)
