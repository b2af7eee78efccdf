"""How a :class:`~dispatchrl.envs.shared.mujoco.MujocoBatch` steps its chunks of envs on several
threads without the GIL: :func:`chunk_functions` are Numba functions calling libmujoco's
``mj_step`` themselves, and :class:`SpinningThreads` runs one chunk per thread.

Why threads that spin: handing a chunk to a sleeping thread and waiting for it to finish costs two
OS wake-ups, about 50 µs each on a 2-core VM, against a HalfCheetah chunk of 8 envs taking 230 µs:
a ``ThreadPoolExecutor`` scaled 16 envs 1.26× from 1 to 2 threads. Here a thread waits for the next
step's generation number in a loop, and the caller for the threads' done flags, both without the
GIL: about 1.7×. Spinning only pays while every spinning thread has a core: with other processes
running, a spinner that is descheduled holds everyone up for a time slice (a 2-thread step became
2–5× slower than a pool's). So a thread spins at most SERVE_SPIN_NS between steps and then parks,
and the caller watches for contention (its wait outlasting WAIT_SPIN_NS, or a parked thread at a
new step) and hands off by blocking, as a pool does, while it persists.
"""

import ctypes
import functools
import glob
import os
import threading
import time
import weakref
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = ["SpinningThreads", "chunk_functions"]

#: how long a thread spins for the next step before it parks: longer than the work between two
#: steps of a stepping loop (HalfCheetah 40 µs; Hopper's resets made 300 µs too short for 10%)
SERVE_SPIN_NS = 1_000_000
#: how long the caller spins for the threads' chunks before it naps WAIT_NAP_US at a time (a
#: chunk normally ends within a few µs of the caller's: the chunks are equal; a nap costs ~100 µs
#: on a 2-core VM); it returns to Python every WAIT_CHECK_NS to check the threads are alive
WAIT_SPIN_NS = 100_000
WAIT_NAP_US = 20
WAIT_CHECK_NS = 100_000_000
#: contention: at least CONTENDED of the last WINDOW steps waited past WAIT_SPIN_NS or found a
#: thread parked (quiet, 2–15% of the steps do, in bursts; with one or two busy processes beside
#: it, 55–90%); then the steps hand off by blocking before spinning is tried again, for
#: BLOCKING_STEPS, doubled each time contention is found again within WINDOW steps (up to
#: MAX_BLOCKING_STEPS), so a lasting load costs few tries and a passing one few blocked steps
WINDOW, CONTENDED = 32, 12
BLOCKING_STEPS, MAX_BLOCKING_STEPS = 256, 16_384


def _atomics() -> tuple[Any, Any, Any]:
    """``load(flags, k)``, ``store(flags, k, value)`` and ``fetch_add(flags, k, value)`` (the old
    value) on an int64 array, sequentially consistent: plain accesses would let the compiler hoist a
    waiting loop's load, and the parking handshake (each side stores, then loads what the other
    stored) needs the order of all four."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    def pointer(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        return cgutils.get_item_pointer(context, builder, array_type, array, [args[1]])

    @intrinsic
    def load(typingctx, flags, k):
        def codegen(context, builder, signature, args) -> ir.Value:
            return builder.load_atomic(pointer(context, builder, signature, args), "seq_cst", 8)

        return types.int64(flags, types.intp), codegen

    @intrinsic
    def store(typingctx, flags, k, value):
        def codegen(context, builder, signature, args) -> ir.Value:
            builder.store_atomic(args[2], pointer(context, builder, signature, args), "seq_cst", 8)
            return context.get_dummy_value()

        return types.void(flags, types.intp, types.int64), codegen

    @intrinsic
    def fetch_add(typingctx, flags, k, value):
        def codegen(context, builder, signature, args) -> ir.Value:
            return builder.atomic_rmw("add", pointer(context, builder, signature, args), args[2], "seq_cst")

        return types.int64(flags, types.intp, types.int64), codegen

    return load, store, fetch_add


@functools.cache
def chunk_functions(
    mujoco_dir: str, frame_skip: int, contact_forces: bool, finish: Any, restart: Any
) -> SimpleNamespace | None:
    """Numba functions, all without the GIL (None where libmujoco's shared library is not found;
    the batch then steps through the bindings):

    - ``step(model, datas, actions, ctrls, sources, state, out, bounds, claim, flags, slot,
      generation)``: per env i claimed, ctrl ← its action, ``mj_step`` ``frame_skip`` times and
      ``mj_rnePostConstraint`` where the task reads contact forces (the C calls the bindings make,
      on the same MjData: the same bits), its state arrays copied into the batch's rows, then
      ``finish(i, state, actions, out)`` (see ``envs.shared.mujoco.env_functions``); where that
      says the env ends, the reset the bindings' path makes (``mj_resetData``, qpos and qvel from
      ``out.next_qpos``/``next_qvel``, ``mj_forward``), the copies again and ``restart``; last
      ``flags[slot] = generation`` (slot -1: none). Under the bindings' ``mj_step`` the per-env
      copies held the GIL, so two threads stepped cheap bodies no faster than one (NOTES.md).
      Claiming: thread ``slot + 1`` (the caller: 0) owns chunk ``slot + 1``, the envs from
      ``bounds[c]`` to ``bounds[c + 1]``, and counts ``claim[c]`` up atomically to take each next
      env of it; when its chunk is done it takes the rest of the others' the same way. So a thread
      mostly steps the same envs (their MjData stay in its core's cache), and the threads finish
      within an env of each other whatever each env's contacts cost (a HalfCheetah's step takes
      20–37 µs). Which thread steps an env changes no bits;
    - ``serve(cmd, slot, last, *step_args)``: a thread's loop: ``step`` each time
      ``cmd[0]`` holds a new generation; returns -1 when it holds -1 (stop), or ``last`` once
      ``cmd[1]`` ns pass without one;
    - ``park(cmd, slot, last)``: a thread about to block sets ``cmd[2 + slot]``; False (and
      unset) if a generation came meanwhile;
    - ``publish(cmd, generation, spin_ns)``: the caller's new generation and the threads' spin;
      True when a thread is parked;
    - ``wait(flags, generation, spin_ns, nap_us, check_ns)``: the caller until every flag holds
      ``generation``, spinning ``spin_ns``, then napping ``nap_us`` at a time: 0 when done
      spinning, 1 when done after a nap, -1 after ``check_ns``.

    A MuJoCo fatal error (mju_error: none in these models at their defaults) would abort the
    process in ``step``, where the bindings raise it."""
    from numba import njit

    names = ("libmujoco.so*", "libmujoco*.dylib", "mujoco.dll")
    found = [path for name in names for path in sorted(glob.glob(os.path.join(mujoco_dir, name)))]
    try:
        libc = ctypes.CDLL(None)
        usleep, clock_gettime = libc.usleep, libc.clock_gettime
        clock = time.CLOCK_MONOTONIC
    except (OSError, AttributeError, TypeError):  # no libc symbols (Windows)
        return None
    if not found:
        return None
    lib = ctypes.CDLL(found[0])  # the library the bindings loaded: the same handle
    mj_step, mj_rne_post_constraint = lib.mj_step, lib.mj_rnePostConstraint
    mj_reset_data, mj_forward = lib.mj_resetData, lib.mj_forward
    for function in (mj_step, mj_rne_post_constraint, mj_reset_data, mj_forward):
        function.argtypes, function.restype = (ctypes.c_size_t, ctypes.c_size_t), None
    usleep.argtypes, usleep.restype = (ctypes.c_uint,), ctypes.c_int
    clock_gettime.argtypes, clock_gettime.restype = (ctypes.c_int, ctypes.c_size_t), ctypes.c_int
    load, store, fetch_add = _atomics()

    @njit(nogil=True)
    def now(timespec):  # pragma: no cover  (ns; timespec: an int64[2] of the calling thread)
        clock_gettime(clock, timespec.ctypes.data)
        return timespec[0] * 1_000_000_000 + timespec[1]

    @njit(nogil=True, inline="always")
    def gather(i, sources, state):  # pragma: no cover
        fields = len(state)
        for f in range(fields):
            source, target = sources[i * fields + f], state[f]
            for k in range(source.size):
                target[i, k] = source[k]

    @njit(nogil=True, inline="always")
    def step_env(i, model, datas, actions, ctrls, sources, state, out, fields):  # pragma: no cover
        ctrl = ctrls[i]
        for j in range(ctrl.size):
            ctrl[j] = actions[i, j]
        for _ in range(frame_skip):
            mj_step(model, datas[i])
        if contact_forces:
            mj_rne_post_constraint(model, datas[i])
        gather(i, sources, state)
        if finish(i, state, actions, out):
            mj_reset_data(model, datas[i])
            qpos, qvel = sources[i * fields], sources[i * fields + 1]  # MjData's: sources begin with them
            for j in range(qpos.size):
                qpos[j] = out.next_qpos[i, j]
            for j in range(qvel.size):
                qvel[j] = out.next_qvel[i, j]
            mj_forward(model, datas[i])
            gather(i, sources, state)
            restart(i, state, out)
            out.ended[i] = True

    @njit(nogil=True)
    def step(
        model, datas, actions, ctrls, sources, state, out, bounds, claim, flags, slot, generation
    ):  # pragma: no cover
        fields, chunks = len(state), claim.size
        for c in range(chunks):
            chunk = (slot + 1 + c) % chunks  # its own first
            while True:
                i = bounds[chunk] + fetch_add(claim, chunk, 1)
                if i >= bounds[chunk + 1]:
                    break
                step_env(i, model, datas, actions, ctrls, sources, state, out, fields)
        if slot >= 0:
            store(flags, slot, generation)

    @njit(nogil=True)
    def serve(
        cmd, slot, last, model, datas, actions, ctrls, sources, state, out, bounds, claim, flags
    ):  # pragma: no cover
        timespec = np.empty(2, np.int64)
        since = now(timespec)
        while True:
            generation = load(cmd, 0)
            if generation == last:
                if now(timespec) - since >= load(cmd, 1):
                    return last
            elif generation < 0:
                return generation
            else:
                step(model, datas, actions, ctrls, sources, state, out, bounds, claim, flags, slot, generation)
                last, since = generation, now(timespec)

    @njit(nogil=True)
    def park(cmd, slot, last):  # pragma: no cover
        store(cmd, 2 + slot, 1)
        if load(cmd, 0) != last:
            store(cmd, 2 + slot, 0)
            return False
        return True

    @njit(nogil=True)
    def publish(cmd, generation, spin_ns):  # pragma: no cover
        store(cmd, 1, spin_ns)
        store(cmd, 0, generation)
        for k in range(2, cmd.size):
            if load(cmd, k) != 0:
                return True
        return False

    @njit(nogil=True)
    def wait(flags, generation, spin_ns, nap_us, check_ns):  # pragma: no cover
        timespec = np.empty(2, np.int64)
        start, napped = now(timespec), 0
        for k in range(flags.size):
            while load(flags, k) != generation:
                waited = now(timespec) - start
                if waited > check_ns:
                    return -1
                if waited >= spin_ns:
                    usleep(nap_us)
                    napped = 1
        return napped

    return SimpleNamespace(step=step, serve=serve, park=park, publish=publish, wait=wait)


def compiled(dispatcher: Any, *args: Any) -> Callable:
    """``dispatcher``'s compiled entry point for these arguments' types: it skips typing the
    arguments on every call (a step's, typed lists and a named tuple of arrays among them: a call
    costs 2.6 µs through the entry point, 12 µs through the dispatcher). Every later call must
    pass the same types."""
    from numba import typeof

    return dispatcher.compile(tuple(typeof(a) for a in args))


def _serve(
    functions: SimpleNamespace,
    cmd: np.ndarray,
    ready: threading.Condition,
    done: threading.Condition,
    slot: int,
    args: tuple,
) -> None:
    """A thread of :class:`SpinningThreads`: spin while steps come, then say so to a caller that
    blocks, and park."""
    last = 0
    while True:
        last = functions.serve(cmd, slot, last, *args)
        if last < 0:
            return
        with done:
            done.notify()
        with ready:
            if functions.park(cmd, slot, last):
                ready.wait()  # the caller unsets the flag and notifies (a spurious wake-up only re-parks)


def _stop(functions: SimpleNamespace, cmd: np.ndarray, ready: threading.Condition, threads: list) -> None:
    functions.publish(cmd, -1, 0)
    with ready:
        cmd[2:] = 0
        ready.notify_all()
    for thread in threads:
        if thread is not threading.current_thread():  # a collection can run the finalizer on one of them
            thread.join()


class SpinningThreads:
    """``workers`` threads that step a batch's envs with the caller, each claiming the next env of
    its chunk, then of the others', until none is left. ``step_args(claim, flags)`` gives
    ``functions.step``'s first arguments; their actions are one array that the caller fills
    before each :meth:`step`. They must not reference ``owner``: the threads stop when it is
    collected."""

    def __init__(self, owner: object, functions: SimpleNamespace, workers: int, step_args: Callable[..., tuple]):
        self._functions = functions
        # cmd[0]: the step's generation (-1: stop); cmd[1]: ns a thread spins; cmd[2 + k]: thread k is parked
        self._cmd = np.zeros(2 + workers, np.int64)
        self._flags = np.zeros(workers, np.int64)  # thread k's last generation stepped
        self._generation = 0
        self._ready, self._done = threading.Condition(), threading.Condition()
        self._contended, self._recent = [False] * WINDOW, 0  # per recent step (spinning); how many
        self._blocking = 0  # steps left that hand off by blocking
        self._backoff, self._spun = BLOCKING_STEPS, 0  # the next blocking period; steps spun since
        self._claim = np.zeros(1 + workers, np.int64)  # per chunk, the next env to step
        self._own = step_args(self._claim, self._flags)
        # the caller's calls each step, typed once
        self._step = compiled(functions.step, *self._own, -1, 0)
        self._publish = compiled(functions.publish, self._cmd, 0, 0)
        self._wait = compiled(functions.wait, self._flags, 0, 0, 0, 0)
        # and the threads' (compiling them on a thread would hold up the first steps and parking)
        compiled(functions.serve, self._cmd, 0, 0, *self._own)
        compiled(functions.park, self._cmd, 0, 0)
        self._threads = [
            threading.Thread(
                target=_serve,
                args=(functions, self._cmd, self._ready, self._done, k, self._own),
                name=f"dispatchrl-mujoco-{k + 1}",
                daemon=True,
            )
            for k in range(workers)
        ]
        for thread in self._threads:
            thread.start()
        # the threads hold no reference to the batch: stop them when it is collected or at exit
        self._finalizer = weakref.finalize(owner, _stop, functions, self._cmd, self._ready, self._threads)

    def _wake(self) -> None:
        with self._ready:
            self._cmd[2:] = 0
            self._ready.notify_all()

    def _all_done(self, generation: int) -> bool:
        return bool((self._flags == generation).all())

    def _check_alive(self) -> None:
        if not all(thread.is_alive() for thread in self._threads):
            raise RuntimeError("a MuJoCo stepping thread has died")

    def step(self) -> None:
        """Step every env (the actions already in place) and return when all are done."""
        self._claim[:] = 0  # before the generation is published (a sequentially consistent store)
        if not self._threads:
            self._step(*self._own, -1, 0)
            return
        self._generation += 1
        g = self._generation
        blocking = self._blocking > 0
        parked = self._publish(self._cmd, g, 0 if blocking else SERVE_SPIN_NS)
        if parked:
            self._wake()
        self._step(*self._own, -1, g)
        if blocking:
            self._blocking -= 1
            with self._done:  # the threads notify it after their chunk, before they park
                while not self._done.wait_for(lambda: self._all_done(g), WAIT_CHECK_NS / 1e9):
                    self._check_alive()
            return
        napped = self._wait(self._flags, g, WAIT_SPIN_NS, WAIT_NAP_US, WAIT_CHECK_NS)
        while napped < 0:
            self._check_alive()
            napped = self._wait(self._flags, g, 0, WAIT_NAP_US, WAIT_CHECK_NS)
        contended = bool(parked or napped)
        self._recent += contended - self._contended[g % WINDOW]
        self._contended[g % WINDOW] = contended
        self._spun += 1
        if self._recent >= CONTENDED:
            if self._spun > WINDOW:
                self._backoff = BLOCKING_STEPS
            self._blocking, self._contended, self._recent, self._spun = self._backoff, [False] * WINDOW, 0, 0
            self._backoff = min(2 * self._backoff, MAX_BLOCKING_STEPS)

    def close(self) -> None:
        self._finalizer()
