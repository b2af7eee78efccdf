"""A fused CPU step's fork regions on two threads: the caller runs a region's first side while a
spinning worker runs its second (TD3's and SAC's twin critics).

:func:`dispatchrl.staging.fork` marks the sides (calls that write no array the other side uses);
the CPU's method (here) records them between marker kernels where ``DISPATCHRL_LEARNER_THREADS``
asks for threads, and :func:`dispatchrl.backends.cpu.njit_program` generates, beside the fused
step, a worker function holding every region's second side (it finds this module through the
markers). The caller publishes a region, runs its first side, then claims the second by
compare-and-swap: a worker that has not taken it by then (napping, descheduled) leaves it to the
caller, so a late worker costs nothing but its help; one preempted inside a side it took holds the
caller until it runs again (nothing guards against that yet: beside a busy process two threads
lose, NOTES.md). Each side runs the same kernels on the same arrays as the sequence would, so the
bits are the same (the worker flushes denormals as the fused step does).

The worker is also the learner's product worker while it runs (:mod:`.cpu_gemm_threads`:
the product workers stop, as a third spinning thread would take time from the two): between
regions it serves the parts of the caller's products; inside a region both threads compute
their products alone.

The sync state is one int64 array per program, its fields a cache line apart: the job word
(generation << 16 | region << 1 | claimed), the generation last finished, stop, the sides the
worker ran, and whether the region holds the products' split.
"""

import os
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
    atomic_load,
    atomic_store,
    compare_and_swap,
    learner_threads,
    lend_workers,
    nap,
    products_state,
    return_workers,
    serve_parts,
    spin_pause,
)

__all__ = [
    "SYNC_SIZE",
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
    "stopped_sync",
]

JOB, DONE, STOP, SIDES, HELD = 0, 8, 16, 24, 32
SYNC_SIZE = 40 + 8  # + a line of slack to align the fields to 64 bytes


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
    return 2 if learner_threads() > 1 and not _FORKED else 1


@njit(**JIT_EXACT)
def _address(sync) -> int:
    return (sync.ctypes.data + 63) // 64 * 64


@njit(**JIT_EXACT)
def fork_publish(sync, region) -> int:
    """The caller: offer ``region``'s second side to the worker; the open job word. The products
    inside the region run on their own thread (their split held, as while another thread splits one)."""
    state = _address(sync)
    products = products_state()
    atomic_store(state, HELD, 1 if products != 0 and compare_and_swap(products, BUSY, 0, 1) else 0)
    job = ((atomic_load(state, JOB) >> 16) + 1) << 16 | region << 1
    atomic_store(state, JOB, job)
    return job


@njit(**JIT_EXACT)
def fork_claim(sync, job) -> bool:
    """The caller, after its side: whether it takes the second side itself (the worker has not)."""
    state = _address(sync)
    if compare_and_swap(state, JOB, job, job | 1):
        atomic_store(state, DONE, job >> 16)
        return True
    return False


@njit(**JIT_EXACT)
def fork_join(sync, job) -> None:
    """The caller: wait until the region's second side is done; release the products."""
    state = _address(sync)
    while atomic_load(state, DONE) != job >> 16:
        spin_pause()
    products = products_state()
    if atomic_load(state, HELD) != 0 and products != 0:
        atomic_store(products, BUSY, 0)


@njit(**JIT_EXACT)
def fork_wait(sync) -> int:
    """The worker: the region whose second side it claimed, or -1 once stopped. Meanwhile it
    serves the parts of the caller's products, spins, then naps."""
    state = _address(sync)
    spins = naps = 0
    while True:
        job = atomic_load(state, JOB)
        if job & 1 == 0 and job >> 16 != atomic_load(state, DONE) and compare_and_swap(state, JOB, job, job | 1):
            return (job >> 1) & 32767
        if atomic_load(state, STOP) != 0:
            return -1
        products = products_state()
        if products != 0 and serve_parts(products) > 0:
            spins = naps = 0
        elif spins < SPINS:
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


def stopped_sync() -> np.ndarray:
    """A sync state whose worker stops at once (to compile the worker without running it)."""
    sync = np.zeros(SYNC_SIZE, np.int64)
    _fields(sync)[STOP] = 1
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
    run.worker_sides = lambda: int(_fields(sync)[SIDES])  # type: ignore[attr-defined]
    weakref.finalize(run, _stop, sync, workers)
    return run


def _stop(sync: np.ndarray, workers: list) -> None:
    _fields(sync)[STOP] = 1
    for thread in workers:
        thread.join()
        return_workers()
    workers.clear()


def _fields(sync: np.ndarray) -> np.ndarray:
    """The sync state's fields as the compiled functions address them (64-byte aligned)."""
    return sync[((sync.ctypes.data + 63) // 64 * 64 - sync.ctypes.data) // 8 :]


def _forked() -> None:
    global _FORKED
    _FORKED = True


_FORKED = False
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
