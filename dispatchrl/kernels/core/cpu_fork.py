"""A fused CPU step's fork regions on two threads: the caller runs a region's first side while a
spinning worker runs its second (TD3's and SAC's twin critics).

:func:`dispatchrl.staging.fork` marks the sides (calls that write no array the other side uses);
the CPU's method (here) records them between marker kernels where ``DISPATCHRL_LEARNER_THREADS``
asks for threads, and :func:`dispatchrl.backends.cpu.njit_program` generates, beside the fused
step, a worker function holding every region's second side (it finds this module through the
markers). The caller publishes a region, runs its first side, then claims the second by
compare-and-swap: a worker that has not taken it by then (napping, descheduled) leaves it to the
caller, so a late worker costs nothing but its help. Each side runs the same kernels on the same
arrays as the sequence would, so the bits are the same (the worker flushes denormals as the fused
step does).

A worker preempted inside a side it took holds the caller until it runs again, and a spinning
worker takes time from the caller and from other processes: beside a busy process, forks trained
the multirotor 1.6× slower than one thread (NOTES.md). So the caller times the step: the period
between starts of region 0 (an update), averaged over a window of WINDOW periods, forked and in
sequence, each way tried against the other after HOLD windows (doubled while the way preferred
keeps winning; a trial clearly losing ends early). In sequence the worker naps and the products
run on the caller alone, as on one thread. Timing the regions alone does not see a spinning
worker's cost to the rest of the step; beside a busy process it kept choosing forks.

The worker is also the learner's product worker while it runs (:mod:`.cpu_gemm_threads`:
the product workers stop, as a third spinning thread would take time from the two): between
regions it serves the parts of the caller's products; inside a region both threads compute
their products alone.

The sync state is one int64 array per program, its fields a cache line apart: the job word
(generation << 16 | region << 1 | claimed), the generation last finished, stop, the sides the
worker ran, whether the regions fork now (the worker polls these), then the caller's line (its
timings and choices).
"""

import threading
import weakref
from typing import Any

import numpy as np
from numba import njit

from ...backends.cpu import JIT_EXACT
from ...devices import CPU
from ...staging import fork, launch, tracing
from .cpu_gemm_threads import (
    BUSY,
    LONG_NAP_US,
    NAP_US,
    NAPS,
    SPINS,
    aligned_fields,
    atomic_load,
    atomic_store,
    compare_and_swap,
    cycles,
    in_forked_child,
    learner_threads,
    lend_workers,
    nap,
    products_state,
    return_workers,
    serve_parts,
    spin_pause,
)

__all__ = [
    "fork_begin",
    "fork_claim",
    "fork_end",
    "fork_join",
    "fork_next",
    "fork_publish",
    "fork_threads",
    "fork_wait",
    "fork_worker_done",
    "forked_program",
    "new_sync",
]

JOB, DONE, STOP, SIDES, FORKING = 0, 8, 16, 24, 32
# the caller's line: whether the region holds the products' split; region 0's last start, its
# periods' cycles and count in this window; whether the window is a trial, how many windows the
# way preferred is kept before the next trial, how many it has been kept, which way it is, the
# last windows' cycles per period forked and in sequence
HELD, START, CYCLES, PERIODS, TRIAL, HOLD, KEPT, PREFERRED, RATE_FORKED, RATE_SEQUENCE = range(40, 50)
SYNC_SIZE = 56 + 8  # + a line of slack to align the fields to 64 bytes
#: a window is WINDOW periods of region 0 (a training step's update, where it forks its critics);
#: periods longer than MAX_PERIOD cycles (~0.1 s: a pause between calls) are not counted
WINDOW, MAX_PERIOD = 512, 1 << 28
#: the forks are kept while their windows' periods are below MARGIN times the sequence's, and the
#: way preferred is tried against the other after HOLD windows, doubled after each trial that
#: confirms it up to MAX_HOLD (at most 1 window in MAX_HOLD + 1 runs the slower way)
MARGIN, MAX_HOLD = 0.95, 32
#: a trial whose periods so far (checked every WINDOW / 8) average LOSING times the other way's ends
LOSING = 1.25


# the marker kernels a traced step records around a fork's sides (njit_program finds them by
# their ``fork_marker``): never called in a fused step
@njit(**JIT_EXACT)
def fork_begin() -> None:
    pass


@njit(**JIT_EXACT)
def fork_next() -> None:
    pass


@njit(**JIT_EXACT)
def fork_end() -> None:
    pass


for _marker, _kind in ((fork_begin, "begin"), (fork_next, "next"), (fork_end, "end")):
    _marker.py_func.fork_marker = _kind  # type: ignore[attr-defined]


@fork.dispatch
def _(device: CPU, sides: tuple) -> None:
    # two sides, staged, with two learner threads: between markers (a worker runs the second);
    # eagerly, or on one thread, in sequence
    if not tracing() or len(sides) != 2 or fork_threads() < 2:
        for side in sides:
            side(device)
        return
    launch(device, fork_begin)
    sides[0](device)
    launch(device, fork_next)
    sides[1](device)
    launch(device, fork_end)


def fork_threads() -> int:
    """The threads a fused step's forks run on: 2 where DISPATCHRL_LEARNER_THREADS asks for more
    than one (a side each), else 1 (the sides in sequence)."""
    return 2 if not in_forked_child() and learner_threads() > 1 else 1


@njit(**JIT_EXACT)
def _address(sync) -> int:
    return (sync.ctypes.data + 63) // 64 * 64


@njit(**JIT_EXACT)
def fork_publish(sync, region) -> int:
    """The caller: offer ``region``'s second side to the worker and return the open job word, or
    ``-1 - region`` where the sides run in sequence now. The products inside an offered region run
    on their own thread (their split held, as while another thread splits one)."""
    state = _address(sync)
    if region == 0:
        _time_period(state)
    if atomic_load(state, FORKING) == 0:
        return -1 - region
    products = products_state()
    atomic_store(state, HELD, 1 if products != 0 and compare_and_swap(products, BUSY, 0, 1) else 0)
    job = ((atomic_load(state, JOB) >> 16) + 1) << 16 | region << 1
    atomic_store(state, JOB, job)
    return job


@njit(**JIT_EXACT)
def _time_period(state) -> None:
    """Count the period since region 0 last began; at the end of a window choose the way of the
    next. The periods hold the whole step, so a spinning worker's cost to the caller, and to a
    busy process beside it, is in them (timing the regions alone misses it: beside a busy process
    the forks won per region and lost overall). Off x86 the counter reads 0: nothing is timed, the
    regions fork."""
    now = cycles()
    period = now - atomic_load(state, START)
    atomic_store(state, START, now)
    if not 0 < period < MAX_PERIOD:
        return
    atomic_store(state, CYCLES, atomic_load(state, CYCLES) + period)
    periods = atomic_load(state, PERIODS) + 1
    atomic_store(state, PERIODS, periods)
    forking = atomic_load(state, FORKING)
    trial = atomic_load(state, TRIAL)
    if periods < WINDOW:
        # a trial already clearly slower ends early (one of forks beside a busy process costs ~70 %)
        if trial == 0 or periods % (WINDOW // 8) != 0:
            return
        rate = atomic_load(state, RATE_SEQUENCE if forking else RATE_FORKED)
        if rate == 0 or atomic_load(state, CYCLES) < LOSING * rate * periods:
            return
    atomic_store(state, RATE_FORKED if forking else RATE_SEQUENCE, atomic_load(state, CYCLES) // periods)
    atomic_store(state, CYCLES, 0)
    atomic_store(state, PERIODS, 0)
    preferred = atomic_load(state, PREFERRED)
    if trial != 0:
        best = 1 if atomic_load(state, RATE_FORKED) < MARGIN * atomic_load(state, RATE_SEQUENCE) else 0
        hold = min(2 * atomic_load(state, HOLD), MAX_HOLD) if best == preferred else 1
        atomic_store(state, HOLD, hold)
        atomic_store(state, PREFERRED, best)
        atomic_store(state, FORKING, best)
        atomic_store(state, TRIAL, 0)
        atomic_store(state, KEPT, 0)
        return
    kept = atomic_load(state, KEPT) + 1
    atomic_store(state, KEPT, kept)
    if kept >= atomic_load(state, HOLD):  # try the other way for a window
        atomic_store(state, TRIAL, 1)
        atomic_store(state, FORKING, 1 - preferred)


@njit(**JIT_EXACT)
def fork_claim(sync, job) -> bool:
    """The caller, after its side: whether it runs the second side itself (in sequence, or the
    worker has not taken it)."""
    if job < 0:
        return True
    state = _address(sync)
    if compare_and_swap(state, JOB, job, job | 1):
        atomic_store(state, DONE, job >> 16)
        return True
    return False


@njit(**JIT_EXACT)
def fork_join(sync, job) -> None:
    """The caller: wait until an offered region's second side is done; release the products."""
    if job < 0:
        return
    state = _address(sync)
    while atomic_load(state, DONE) != job >> 16:
        spin_pause()
    products = products_state()
    if atomic_load(state, HELD) != 0 and products != 0:
        atomic_store(products, BUSY, 0)


@njit(**JIT_EXACT)
def fork_wait(sync) -> int:
    """The worker: the region whose second side it claimed, or -1 once stopped. Meanwhile, while
    the regions fork, it serves the parts of the caller's products and spins; else it naps."""
    state = _address(sync)
    spins = naps = 0
    while True:
        job = atomic_load(state, JOB)
        if job & 1 == 0 and job >> 16 != atomic_load(state, DONE) and compare_and_swap(state, JOB, job, job | 1):
            return (job >> 1) & 32767
        if atomic_load(state, STOP) != 0:
            return -1
        forking = atomic_load(state, FORKING) != 0
        products = products_state() if forking else 0  # in sequence the caller computes them alone
        if products != 0 and serve_parts(products) > 0:
            spins = naps = 0
        elif spins < SPINS and forking:
            spin_pause()
            spins += 1
        else:
            nap(NAP_US if naps < NAPS else LONG_NAP_US)
            naps += 1


@njit(**JIT_EXACT)
def fork_worker_done(sync) -> None:
    """The worker: the side it claimed is done."""
    state = _address(sync)
    atomic_store(state, SIDES, atomic_load(state, SIDES) + 1)
    atomic_store(state, DONE, atomic_load(state, JOB) >> 16)


def new_sync(stopped: bool = False) -> np.ndarray:
    """A program's sync state, forking at first (``stopped``: its worker stops at once, to compile
    the worker without running it)."""
    sync = np.zeros(SYNC_SIZE, np.int64)
    fields = aligned_fields(sync)
    fields[FORKING], fields[PREFERRED], fields[HOLD], fields[STOP] = 1, 1, 1, int(stopped)
    return sync


def forked_program(fused: Any, worker: Any, raw: list, hyperparameters: Any) -> Any:
    """``run(n)`` of a fused step with fork regions (``raw[0]`` its sync state): its worker thread
    starts at the first run (in no forked child: a precompile helper, a sweep's trial) and stops
    when the program is collected or the process exits."""
    sync = raw[0]
    workers: list[threading.Thread] = []

    def run(n: int) -> None:
        if not workers and fork_threads() > 1:
            lend_workers()
            thread = threading.Thread(target=worker, args=raw, name="dispatchrl-fork", daemon=True)
            thread.start()  # the worker's compiled loop holds no GIL
            workers.append(thread)
        fused(n, *raw)

    run.program = fused  # type: ignore[attr-defined]
    run.hyperparameters = hyperparameters  # type: ignore[attr-defined]
    run.worker_sides = lambda: int(aligned_fields(sync)[SIDES])  # type: ignore[attr-defined]
    weakref.finalize(run, _stop, sync, workers)
    return run


def _stop(sync: np.ndarray, workers: list) -> None:
    aligned_fields(sync)[STOP] = 1
    for thread in workers:
        thread.join()
        return_workers()
    workers.clear()
