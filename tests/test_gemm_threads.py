"""The NN products split over a learner's threads (kernels/core/cpu_gemm_threads.py): the serial
driver's bits, whichever thread computes which rows, and the setting checked."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatchrl.errors import ConfigError

seeds = st.integers(0, 2**32 - 1)


@pytest.fixture(scope="module")
def products():
    """njit callers of the three NN forms (plain, bias + ReLU epilogue, mask epilogue), and a
    switch between 1 and 2 learner threads; back to 1 at the end."""
    from numba import njit

    from dispatchrl.kernels.core import cpu_gemm

    @njit
    def run(a, b, c, bias, mask, form):
        if form == 0:
            cpu_gemm.matmul_tiled(a, b, c)
            return True
        if form == 1:
            return cpu_gemm.matmul_bias_tiled(a, b, c, bias, True)
        return cpu_gemm.matmul_mask_tiled(a, b, c, mask)

    cpu_gemm.load_drivers()
    yield run, cpu_gemm.use_learner_threads
    cpu_gemm.use_learner_threads(1)


def _operands(g, m, k, n):
    a, b = g.normal(size=(m, k)).astype(np.float32), g.normal(size=(k, n)).astype(np.float32)
    bias, mask = g.normal(size=n).astype(np.float32), g.normal(size=(m, n)).astype(np.float32)
    return a, b, bias, mask


@settings(max_examples=25, deadline=None)
@given(st.integers(8, 300), st.integers(1, 200), st.integers(1, 33), st.sampled_from([0, 1, 2]), seeds)
def test_threaded_products_give_the_serial_bits(products, m, k, n8, form, seed):
    run, use = products
    a, b, bias, mask = _operands(np.random.default_rng(seed), m, k, 8 * n8)
    out = {}
    for threads in (1, 2):
        use(threads)
        c = np.full((m, 8 * n8), np.nan, np.float32)
        assert run(a, b, c, bias, mask, form)
        out[threads] = c
    np.testing.assert_array_equal(out[2].view(np.int32), out[1].view(np.int32))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if form == 1:
        ref = np.maximum(ref + bias, 0)
    elif form == 2:
        ref = np.where(mask > 0, ref, 0)
    np.testing.assert_allclose(out[2], ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_back_to_back_products_of_changing_shapes(products):
    """Products of different row counts (so 2, 3 or 4 parts), one right after the other, as a
    training step makes them, give the serial bits every time. The race the first version had
    (the parts' count outside the job word) needs a worker to look between two of the caller's
    stores, which these few thousand products rarely do: benchmarks/fingerprints.py's threads
    twins (40k multirotor steps) are what found it."""
    from dispatchrl.kernels.core.cpu_gemm_threads import worker_parts

    run, use = products
    g = np.random.default_rng(0)
    shapes = [(256, 64, 64), (12, 256, 128), (256, 160, 64), (8, 512, 128), (100, 64, 64), (12, 64, 64), (64, 256, 64)]
    cases = [(*_operands(g, m, k, n), form) for (m, k, n) in shapes for form in (0, 1, 2)]
    use(1)
    expected = []
    for a, b, bias, mask, form in cases:
        c = np.empty((a.shape[0], b.shape[1]), np.float32)
        run(a, b, c, bias, mask, form)
        expected.append(c)
    use(2)
    before = worker_parts()
    outs = [np.full_like(e, np.nan) for e in expected]
    for _ in range(40):
        for (a, b, bias, mask, form), c in zip(cases, outs, strict=True):
            run(a, b, c, bias, mask, form)
        for c, e in zip(outs, expected, strict=True):
            np.testing.assert_array_equal(c.view(np.int32), e.view(np.int32))
    if (os.cpu_count() or 1) > 1:
        assert worker_parts() > before  # the worker computed some of them


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_learner_threads_setting_is_checked(monkeypatch, value):
    from dispatchrl.kernels.core.cpu_gemm_threads import learner_threads

    monkeypatch.setenv("DISPATCHRL_LEARNER_THREADS", value)
    with pytest.raises(ConfigError, match="DISPATCHRL_LEARNER_THREADS"):
        learner_threads()
    monkeypatch.setenv("DISPATCHRL_LEARNER_THREADS", "1000")
    assert learner_threads() == min(os.cpu_count() or 1, 64)
