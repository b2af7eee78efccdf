"""Fork regions (staging.fork): sides run in sequence by default; on CPU with two learner threads
a fused step's worker runs each region's second side beside the first (kernels/core/cpu_fork.py),
with the same results. TD3's and SAC's twins against one thread are benchmarks/fingerprints.py's
``-threads`` cases."""

import os

import numpy as np
import pytest
from numba import njit

import dispatchrl as drl
from dispatchrl.kernels.core import cpu_gemm
from dispatchrl.kernels.core.cpu_gemm_threads import aligned_fields, atomic_load, atomic_store, spin_pause


@njit(nogil=True, cache=True)
def wait_for_flag(flag, seen):
    """The first side: spin until the second side has set the flag (at most ~2**26 polls, seconds)."""
    for _ in range(1 << 26):
        if atomic_load(flag.ctypes.data, 0) != 0:
            seen[0] = 1.0
            return
        spin_pause()


@njit(nogil=True, cache=True)
def set_flag(flag):
    atomic_store(flag.ctypes.data, 0, 1)


@njit(nogil=True, cache=True)
def add_to(x, value):
    for i in range(x.size):
        x[i] += value


def test_sides_run_in_order_eagerly_and_on_one_thread(monkeypatch):
    monkeypatch.setenv("DISPATCHRL_LEARNER_THREADS", "1")
    order = []
    drl.fork(drl.Generic(), (lambda d: order.append(1), lambda d: order.append(2)))
    drl.fork(drl.CPU(), (lambda d: order.append(3), lambda d: order.append(4), lambda d: order.append(5)))
    assert order == [1, 2, 3, 4, 5]
    cpu = drl.CPU()
    x, y, counter = drl.zeros(cpu, 4), drl.zeros(cpu, 4), drl.zeros(cpu, 1, np.int64)

    def step(device):
        drl.fork(device, (lambda d: drl.launch(d, add_to, x, 1.0), lambda d: drl.launch(d, add_to, y, 2.0)))
        drl.increment(device, counter)

    run = drl.fuse(cpu, step)
    run(3)
    assert not hasattr(run._run, "worker_sides")  # no worker: the plain fused step
    np.testing.assert_array_equal(drl.to_numpy(x), 3.0)
    np.testing.assert_array_equal(drl.to_numpy(y), 6.0)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a second side needs a second CPU")
def test_the_worker_runs_second_sides_beside_the_first(monkeypatch):
    """The first side waits for a flag only the second sets: it sees it only if they run at
    once. Inside a staged branch too; the sums of a plain fork are the sequence's."""
    monkeypatch.setenv("DISPATCHRL_LEARNER_THREADS", "2")
    cpu = drl.CPU()
    flag, seen = drl.zeros(cpu, 1, np.int64), drl.zeros(cpu, 1)
    x, y, counter = drl.zeros(cpu, 8), drl.zeros(cpu, 8), drl.zeros(cpu, 1, np.int64)

    def step(device):
        drl.fork(device, (lambda d: drl.launch(d, add_to, x, 1.0), lambda d: drl.launch(d, add_to, y, 2.0)))
        drl.when(
            device,
            drl.Below(counter, 1),
            lambda d: drl.fork(
                d, (lambda d: drl.launch(d, wait_for_flag, flag, seen), lambda d: drl.launch(d, set_flag, flag))
            ),
        )
        drl.increment(device, counter)

    run = drl.fuse(cpu, step)
    run(200)
    assert drl.to_numpy(seen)[0] == 1.0  # the flag was set while the first side waited
    np.testing.assert_array_equal(drl.to_numpy(x), 200.0)
    np.testing.assert_array_equal(drl.to_numpy(y), 400.0)
    assert run._run.worker_sides() >= 1


@njit(nogil=True)
def product(a, b, c):
    cpu_gemm.matmul_tiled(a, b, c)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a second side needs a second CPU")
def test_between_forks_the_worker_serves_the_products(monkeypatch):
    """The fork worker stands in for the product workers (which stop while it runs): it computes
    parts of the caller's products between regions, with the serial bits."""
    from dispatchrl.kernels.core.cpu_gemm_threads import worker_parts

    if not drl.backends.cpu.vector_fma_widths():
        pytest.skip("the products split only on the tiled (x86 FMA) path")
    monkeypatch.setenv("DISPATCHRL_LEARNER_THREADS", "2")
    cpu_gemm.load_drivers()
    g = np.random.default_rng(0)
    cpu = drl.CPU()
    a = drl.asarray(cpu, g.normal(size=(256, 128)).astype(np.float32))
    b = drl.asarray(cpu, g.normal(size=(128, 64)).astype(np.float32))
    c, x, y = drl.zeros(cpu, (256, 64)), drl.zeros(cpu, 8), drl.zeros(cpu, 8)

    def step(device):
        drl.launch(device, product, a, b, c)
        drl.fork(device, (lambda d: drl.launch(d, add_to, x, 1.0), lambda d: drl.launch(d, add_to, y, 2.0)))

    run = drl.fuse(cpu, step)
    before = worker_parts()
    run(300)
    assert worker_parts() > before
    expected = np.empty((256, 64), np.float32)
    cpu_gemm.use_learner_threads(1)
    product(a.data, b.data, expected)
    np.testing.assert_array_equal(drl.to_numpy(c).view(np.int32), expected.view(np.int32))
    np.testing.assert_array_equal(drl.to_numpy(y), 600.0)


def test_the_step_timing_chooses_the_faster_way():
    """The caller's guard (cpu_fork._time_period), driven through fork_publish with the window's
    cycles written in: a window of forks slower than the sequence's last starts a trial of the
    sequence, which is kept; a trial clearly losing ends after WINDOW / 8 periods and doubles the
    hold of the way preferred."""
    from dispatchrl.kernels.core import cpu_fork as f

    sync = f.new_sync()
    fields = aligned_fields(sync)

    def update(cycles_per_period: int, periods: int) -> int:
        """Region 0 once more, after ``periods - 1`` periods of the given cycles (the last one, to
        this start, is real and short); its job word, < 0 in sequence."""
        fields[f.PERIODS], fields[f.CYCLES] = periods - 1, cycles_per_period * (periods - 1)
        job = f.fork_publish(sync, 0)
        f.fork_claim(sync, job)  # no worker runs here: the caller takes the side
        f.fork_join(sync, job)
        return job

    update(0, 1)  # the first start: no period yet
    assert update(10**6, f.WINDOW) < 0  # a window forked: the update starting the next tries the sequence
    assert (fields[f.FORKING], fields[f.TRIAL], fields[f.PREFERRED]) == (0, 1, 1)
    assert update(10**4, f.WINDOW) < 0  # in sequence 100× faster: kept
    assert (fields[f.FORKING], fields[f.TRIAL], fields[f.PREFERRED], fields[f.HOLD]) == (0, 0, 0, 1)
    assert update(10**4, f.WINDOW) >= 0  # kept for one window (HOLD), then forks are tried
    assert (fields[f.FORKING], fields[f.TRIAL]) == (1, 1)
    assert update(10**5, f.WINDOW // 8) < 0  # forks 10× slower: the trial ends early
    assert (fields[f.FORKING], fields[f.TRIAL], fields[f.PREFERRED], fields[f.HOLD]) == (0, 0, 0, 2)
    assert fields[f.RATE_FORKED] >= 10**5 * (f.WINDOW // 8 - 1) // (f.WINDOW // 8)
