"""The NN product on several threads: the caller and spinning workers split a product's rows.

A training step's products take 10–400 µs each (issue 38's 256 × 256 × 256, the multirotor's
256 × 64 × 64): far too short for a thread pool that sleeps between them (two OS wake-ups cost
~100 µs on a 2-core VM, NOTES.md). Here each worker spins on a job word. The caller publishes a
product's arguments, then claims parts (blocks of rows, multiples of 4) with the workers by
compare-and-swap until none is left, and waits only for the parts a worker has claimed. A worker
that is late costs nothing but its help. One descheduled inside its part holds the caller until it
runs again, so the caller also times its products (cycles per multiply-add, threaded against a
sample run serially) and runs them serially while the threads are slower (SAMPLE, WINDOW).

Every element of C is the same K-ordered FMA chain whichever tile and thread computes it, so the
split changes no bit (:func:`cpu_gemm._gemm_nn_raw`). Opt-in with ``DISPATCHRL_LEARNER_THREADS``
(default 1): a spinning worker takes a core while a run trains. Only the tiled products (x86 with
AVX2 + FMA or AVX-512) use it.

The state is one int64 array, its fields a cache line apart. Its address lives in a cell that the
compiled driver reads at each call (like the drivers' own cells), so the driver can be cached on
disk, and a process without workers (a forked child among them) runs every product serially.
"""

import atexit
import ctypes
import os
import platform
import threading
from typing import Any

import numpy as np
from llvmlite import binding, ir
from numba import cfunc, njit, types
from numba.extending import intrinsic

from ...errors import ConfigError

__all__ = [
    "BUSY",
    "LONG_NAP_US",
    "NAPS",
    "NAP_US",
    "SPINS",
    "aligned_fields",
    "atomic_load",
    "atomic_store",
    "compare_and_swap",
    "cycles",
    "in_forked_child",
    "learner_threads",
    "lend_workers",
    "nap",
    "products_state",
    "return_workers",
    "serve_parts",
    "spin_pause",
    "start_workers",
    "stop_workers",
    "worker_parts",
]

# int64 fields of the state, 8 apart (a 64-byte line each): the job word, parts done, the caller's
# flag (one caller at a time), stop, the last generation, the threads (workers + caller), MIN_MACS
# and whether threads are preferred (the lines the workers poll change rarely), the 14 arguments
# and the rows per part, then the parts the workers computed. The job
# word is generation << 16 | parts << 8 | parts claimed: a claim (a compare-and-swap of the whole
# word) succeeds only while that job has a part left, so the arguments read before it were that
# job's (the next job's are written only once every part is done). With the parts' count in a
# field of its own, a worker could read the next job's count with the last job's word, claim a
# part that job did not have and compute it on half-written arguments: the multirotor's critic
# (3 parts for its 35-row weight gradient, 4 for the rest) trained to other bits.
JOB, DONE, BUSY, STOP, GENERATION, THREADS, MIN_WORK, PREFER, ARGS = 0, 8, 16, 24, 32, 40, 41, 42, 48
WORKER_PARTS = 64
# the caller's tally, on its own line: products made, and the cycles and multiply-adds of the
# threaded and the serial products in this window
PRODUCTS, CYCLES_THREADED, MACS_THREADED, CYCLES_SERIAL, MACS_SERIAL = 72, 73, 74, 75, 76
STATE_SIZE = 80
#: products below this many multiply-adds run on the caller alone (a hand-off costs ~1 µs)
MIN_MACS = 128 * 64 * 32
#: parts per thread: a late worker leaves the caller at most this many parts of imbalance
PARTS_PER_THREAD = 2
#: every SAMPLE-th product runs the way not preferred, and every WINDOW products the caller keeps
#: the threads if their cycles per multiply-add were below MARGIN times the serial products'.
#: Where another process takes the workers' cores, a claimed part waits out a time slice, and a
#: spinning worker takes time from the caller too (beside a busy process 2 threads trained
#: the multirotor 1.3× slower than one while the two rates differed by 3 %, NOTES.md): then the
#: products run serially and the workers nap
SAMPLE, WINDOW, MARGIN = 16, 512, 0.9
#: a worker polls the job word SPINS times after its last part, each poll with a spin-wait hint
#: (~1.6 ms on a Zen 3: 2**18 polls without it took 0.2 ms, shorter than the multirotor's gaps
#: between updates, so its workers napped there), then naps NAP_US at a time, LONG_NAP_US after
#: NAPS naps (~0.1 s): between a run's products it spins; an idle process costs it little, and
#: the first products after a pause run on the caller alone
SPINS, NAP_US, NAPS, LONG_NAP_US = 1 << 16, 50, 2000, 5000

_I64 = ir.IntType(64)
_INNER: dict[str, Any] = dict(nogil=True, error_model="numpy", no_cpython_wrapper=True)  # called by the cfuncs only
_CELL = ctypes.c_int64(0)  # the state's address while workers run, else 0
_SERIAL = ctypes.c_int64(0)  # the serial NN driver's address (cpu_gemm's, for this CPU's width)
binding.add_symbol("dispatchrl_gemm_threads", ctypes.addressof(_CELL))
binding.add_symbol("dispatchrl_gemm_nn_serial", ctypes.addressof(_SERIAL))
try:  # a worker's nap: libc's usleep, called through a cell as the drivers are (cacheable code)
    _USLEEP = ctypes.c_int64(ctypes.cast(ctypes.CDLL(None).usleep, ctypes.c_void_p).value or 0)
except (OSError, AttributeError, TypeError):  # no libc symbols (Windows): no workers
    _USLEEP = ctypes.c_int64(0)
binding.add_symbol("dispatchrl_usleep", ctypes.addressof(_USLEEP))


def _field(builder, args) -> Any:
    base = builder.add(args[0], builder.mul(args[1], ir.Constant(_I64, 8)))
    return builder.inttoptr(base, _I64.as_pointer())


def _int64_args(context, builder, sig, args) -> list:
    return [context.cast(builder, v, t, types.int64) for v, t in zip(args, sig.args)]


def _cell(builder, name) -> Any:
    try:
        return builder.module.get_global(name)
    except KeyError:
        cell = ir.GlobalVariable(builder.module, _I64, name)
        cell.linkage = "external"
        return cell


# Numba intrinsics on raw int64 addresses (an int64 field k at address + 8 k) and cells, called
# with integers only (here and by .cpu_fork)
def _load_typing(typingctx, state, k) -> Any:
    def codegen(context, builder, sig, args) -> Any:
        return builder.load_atomic(_field(builder, _int64_args(context, builder, sig, args)), "seq_cst", 8)

    return types.int64(state, k), codegen


atomic_load: Any = intrinsic(_load_typing)


def _store_typing(typingctx, state, k, value) -> Any:
    def codegen(context, builder, sig, args) -> Any:
        args = _int64_args(context, builder, sig, args)
        builder.store_atomic(args[2], _field(builder, args), "seq_cst", 8)
        return context.get_dummy_value()

    return types.void(state, k, value), codegen


atomic_store: Any = intrinsic(_store_typing)


def _compare_and_swap_typing(typingctx, state, k, expected, value) -> Any:
    """Whether state[k] held ``expected`` and now holds ``value``."""

    def codegen(context, builder, sig, args) -> Any:
        args = _int64_args(context, builder, sig, args)
        pair = builder.cmpxchg(_field(builder, args), args[2], args[3], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 1)

    return types.boolean(state, k, expected, value), codegen


compare_and_swap: Any = intrinsic(_compare_and_swap_typing)


def _fetch_add_typing(typingctx, state, k, value) -> Any:
    def codegen(context, builder, sig, args) -> Any:
        args = _int64_args(context, builder, sig, args)
        return builder.atomic_rmw("add", _field(builder, args), args[2], "seq_cst")

    return types.int64(state, k, value), codegen


_fetch_add: Any = intrinsic(_fetch_add_typing)


def _products_state_typing(typingctx) -> Any:
    """The state's address while workers run, else 0 (its cell)."""

    def codegen(context, builder, sig, args) -> Any:
        return builder.load_atomic(_cell(builder, "dispatchrl_gemm_threads"), "acquire", 8)

    return types.int64(), codegen


products_state: Any = intrinsic(_products_state_typing)


def _nap_typing(typingctx, us) -> Any:
    """usleep(us) through its cell."""

    def codegen(context, builder, sig, args) -> Any:
        i32 = ir.IntType(32)
        usleep = builder.inttoptr(
            builder.load(_cell(builder, "dispatchrl_usleep")), ir.FunctionType(i32, [i32]).as_pointer()
        )
        builder.call(usleep, [builder.trunc(context.cast(builder, args[0], sig.args[0], types.int64), i32)])
        return context.get_dummy_value()

    return types.void(us), codegen


nap: Any = intrinsic(_nap_typing)


def _pause_typing(typingctx) -> Any:
    """A spin-wait hint (x86 ``pause``): a spinning thread yields its core's issue slots to the
    other hardware thread, where the OS put one there (elsewhere: nothing)."""

    def codegen(context, builder, sig, args) -> Any:
        if _X86:
            try:
                pause = builder.module.get_global("llvm.x86.sse2.pause")
            except KeyError:
                pause = ir.Function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
            builder.call(pause, [])
        return context.get_dummy_value()

    return types.void(), codegen


spin_pause: Any = intrinsic(_pause_typing)
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def _serial_typing(typingctx, a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row) -> Any:
    """The serial NN driver on these arguments, called through its cell."""

    def codegen(context, builder, sig, args) -> Any:
        driver = builder.load(_cell(builder, "dispatchrl_gemm_nn_serial"))
        driver = builder.inttoptr(driver, ir.FunctionType(ir.VoidType(), [_I64] * 14).as_pointer())
        builder.call(driver, _int64_args(context, builder, sig, args))
        return context.get_dummy_value()

    return types.void(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row), codegen


_serial: Any = intrinsic(_serial_typing)


def _cycles_typing(typingctx) -> Any:
    """The CPU's cycle counter: rdtsc on x86 (the tiles, and so the product workers, are x86 only);
    elsewhere 0 (AArch64 lowers it to a register user code may not read)."""

    def codegen(context, builder, sig, args) -> Any:
        if not _X86:
            return ir.Constant(_I64, 0)
        try:
            counter = builder.module.get_global("llvm.readcyclecounter")
        except KeyError:
            counter = ir.Function(builder.module, ir.FunctionType(_I64, []), "llvm.readcyclecounter")
        return builder.call(counter, [])

    return types.int64(), codegen


cycles: Any = intrinsic(_cycles_typing)


@njit(**_INNER)
def _run_claimed(state, generation, rows, a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask,
                 mask_row):  # fmt: skip
    """Claim and compute the job's parts (rows p·rows to (p + 1)·rows, fewer in the last) until
    none is left; how many it computed."""
    computed = 0
    while True:
        job = atomic_load(state, JOB)
        p = job & 255
        if job >> 16 != generation or p >= (job >> 8) & 255:
            return computed
        if compare_and_swap(state, JOB, job, job + 1):
            i0 = p * rows
            _serial(a + i0 * a_row, a_row, a_col, b, b_row, c + i0 * c_row, c_row, min(rows, m - i0), n, k, bias,
                    relu, mask + i0 * mask_row if mask != 0 else 0, mask_row)  # fmt: skip
            _fetch_add(state, DONE, 1)
            computed += 1


def _threaded(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row) -> None:
    """The NN driver the cell calls while workers run: the product on the threads or on the
    caller alone, whichever has been faster lately (SAMPLE, WINDOW)."""
    state = products_state()
    macs = m * n * k
    if state == 0 or m < 8 or macs < atomic_load(state, MIN_WORK) or not compare_and_swap(state, BUSY, 0, 1):
        _serial(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row)
        return
    count, prefer = atomic_load(state, PRODUCTS), atomic_load(state, PREFER)
    threads = prefer if count % SAMPLE else 1 - prefer
    start = cycles()
    if threads:
        _split(state, a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row)
    else:
        _serial(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row)
    spent = cycles() - start
    spent_field, multiply_adds = (CYCLES_THREADED, MACS_THREADED) if threads else (CYCLES_SERIAL, MACS_SERIAL)
    atomic_store(state, spent_field, atomic_load(state, spent_field) + spent)
    atomic_store(state, multiply_adds, atomic_load(state, multiply_adds) + macs)
    atomic_store(state, PRODUCTS, count + 1)
    if (count + 1) % WINDOW == 0:
        threaded_rate = atomic_load(state, CYCLES_THREADED) / max(atomic_load(state, MACS_THREADED), 1)
        serial_rate = atomic_load(state, CYCLES_SERIAL) / max(atomic_load(state, MACS_SERIAL), 1)
        atomic_store(state, PREFER, 1 if threaded_rate < MARGIN * serial_rate else 0)
        for field in (CYCLES_THREADED, MACS_THREADED, CYCLES_SERIAL, MACS_SERIAL):
            atomic_store(state, field, 0)
    atomic_store(state, BUSY, 0)


@njit(**_INNER)
def _split(state, a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row):
    """Publish the product, claim parts with the workers, wait for the parts they claimed."""
    parts = min(atomic_load(state, THREADS) * PARTS_PER_THREAD, m // 4)
    rows = (m + parts - 1) // parts
    rows += -rows % 4
    parts = (m + rows - 1) // rows
    generation = atomic_load(state, GENERATION) + 1
    atomic_store(state, GENERATION, generation)
    for i, value in enumerate((a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row, rows)):
        atomic_store(state, ARGS + i, value)
    atomic_store(state, DONE, 0)
    atomic_store(state, JOB, generation << 16 | parts << 8)  # published
    _run_claimed(state, generation, rows, a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask,
                 mask_row)  # fmt: skip
    while atomic_load(state, DONE) < parts:
        spin_pause()


@njit(**_INNER)
def serve_parts(state) -> int:
    """A worker's turn: claim and compute parts of the job on offer, if any; how many."""
    job = atomic_load(state, JOB)
    if job & 255 >= (job >> 8) & 255:
        return 0
    # a part left: the arguments are the job's if a claim succeeds
    computed = _run_claimed(state, job >> 16, atomic_load(state, ARGS + 14), atomic_load(state, ARGS),
                 atomic_load(state, ARGS + 1), atomic_load(state, ARGS + 2), atomic_load(state, ARGS + 3),
                 atomic_load(state, ARGS + 4), atomic_load(state, ARGS + 5), atomic_load(state, ARGS + 6),
                 atomic_load(state, ARGS + 7), atomic_load(state, ARGS + 8), atomic_load(state, ARGS + 9),
                 atomic_load(state, ARGS + 10), atomic_load(state, ARGS + 11), atomic_load(state, ARGS + 12),
                 atomic_load(state, ARGS + 13))  # fmt: skip
    _fetch_add(state, WORKER_PARTS, computed)
    return computed


def _serve(state) -> None:
    """A worker's loop: claim parts of each new job until stop is set."""
    spins = naps = 0
    while True:
        if serve_parts(state):
            spins = naps = 0
        elif atomic_load(state, STOP) != 0:
            return
        elif spins < SPINS and atomic_load(state, PREFER):  # while products run serially it naps
            spin_pause()
            spins += 1
        else:
            nap(NAP_US if naps < NAPS else LONG_NAP_US)
            naps += 1


_COMPILED: dict[str, Any] = {}
_WORKERS: list[threading.Thread] = []
_LENT: list[bool] = []  # one entry per fork worker serving the products
_STATE = np.zeros(STATE_SIZE + 8, np.int64)  # + a line of slack to align the fields to 64 bytes


def aligned_fields(state: np.ndarray) -> np.ndarray:
    """An int64 state array from its first 64-byte boundary on (where its fields' lines begin)."""
    return state[((state.ctypes.data + 63) // 64 * 64 - state.ctypes.data) // 8 :]


def _state_view() -> np.ndarray:
    return aligned_fields(_STATE)[:STATE_SIZE]


_STATE_ADDRESS = _state_view().ctypes.data


def learner_threads() -> int:
    """DISPATCHRL_LEARNER_THREADS (default 1): the threads that compute a learner's products,
    capped at the CPUs (a spinning worker without a core of its own only waits) and at 64 (the
    job word counts parts in 8 bits)."""
    setting = os.environ.get("DISPATCHRL_LEARNER_THREADS", "1")
    if not setting.isdigit() or int(setting) < 1:
        raise ConfigError(f"DISPATCHRL_LEARNER_THREADS must be an int >= 1, got {setting!r}")
    return min(int(setting), os.cpu_count() or 1, 64)


def _compiled(name: str) -> Any:
    if name not in _COMPILED:
        if name == "threaded":
            _COMPILED[name] = cfunc(types.void(*(types.int64,) * 14), cache=True, error_model="numpy")(_threaded)
        else:
            _COMPILED[name] = cfunc(types.void(types.int64), cache=True, error_model="numpy")(_serve)
    return _COMPILED[name]


def start_workers(threads: int, serial_driver: int) -> int:
    """Run ``threads - 1`` workers beside the caller (none where libc's usleep is missing) on the
    serial NN driver at address ``serial_driver``; the threaded driver's address, for the NN
    driver's cell (0 where no workers run). Idempotent."""
    _SERIAL.value = serial_driver
    if threads < 2 or not _USLEEP.value or _FORKED:
        return 0
    threaded = _compiled("threaded").address
    if len(_WORKERS) == threads - 1:
        return threaded
    stop_workers()
    state = _state_view()
    state[:] = 0
    state[THREADS], state[MIN_WORK], state[PREFER] = threads, MIN_MACS, 1
    if not _LENT:
        _spawn(threads - 1)
    _CELL.value = _STATE_ADDRESS
    return threaded


def _spawn(workers: int) -> None:
    serve = ctypes.CFUNCTYPE(None, ctypes.c_int64)(_compiled("serve").address)
    for k in range(workers):  # ctypes releases the GIL for the call
        worker = threading.Thread(target=serve, args=(_STATE_ADDRESS,), name=f"dispatchrl-gemm-{k + 1}", daemon=True)
        worker.start()
        _WORKERS.append(worker)


def _join_workers() -> None:
    state = _state_view()
    state[STOP] = 1
    for worker in _WORKERS:
        worker.join()
    _WORKERS.clear()
    state[STOP] = 0


def stop_workers() -> None:
    """Stop the workers; products run on the caller alone from here (idempotent)."""
    _CELL.value = 0
    _join_workers()


def lend_workers() -> None:
    """A fused step's fork worker (.cpu_fork) serves the products' parts from now on
    (:func:`serve_parts`) in place of the workers, which stop: a third spinning thread would take
    time from the two. Each call is matched by a :func:`return_workers`."""
    _LENT.append(True)
    _join_workers()


def return_workers() -> None:
    """The fork worker has stopped: the workers serve the products again (once none is lent)."""
    if _LENT:
        _LENT.pop()
    if not _LENT and _CELL.value and not _WORKERS:
        try:
            _spawn(int(_state_view()[THREADS]) - 1)
        except RuntimeError:  # the interpreter is shutting down (a finalizer at exit): none is needed
            _CELL.value = 0


def worker_parts() -> int:
    """How many parts of products the workers have computed since they started."""
    return int(_state_view()[WORKER_PARTS])


def in_forked_child() -> bool:
    """Whether this process is a forked child (its parent's threads are not here)."""
    return _FORKED


def _forked() -> None:
    """A forked child (a precompile helper, a sweep's trial) has no workers and starts none: its
    products run serially."""
    global _FORKED
    _CELL.value = 0
    _WORKERS.clear()
    _LENT.clear()
    _FORKED = True


_FORKED = False


atexit.register(stop_workers)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
