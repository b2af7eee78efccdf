"""Staged dispatch: resolve a sequence of generic-function calls once, run it compiled many times.

Device methods never compute directly; they call :func:`launch` with a kernel and its arguments.
Called eagerly, ``launch`` runs the kernel at once. Inside :func:`fuse`, it records the call
instead, so tracing a step function once yields the flat list of (kernel, arguments) with all
plum dispatch and validation already done. :func:`compile_step` (a dispatched function itself)
turns that list into something runnable for the device. Its methods live with each backend's
runtime (:mod:`dispatchrl.backends`): on CPU one generated ``@njit`` function looping ``n`` times
over the kernel calls, on C one generated C function, on CUDA one generated single-block kernel; here
only the Generic one, a prepared loop of calls with the arrays already unwrapped
(:func:`python_program`), and :func:`segmented_program`, the split into compiled runs and host
calls that devices compiling only some kernels share.
"""

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .arrays import Array
from .devices import Device, Generic
from .dispatch import keyed_leaves
from .errors import ConfigError, DeviceError
from .functions import DispatchedFunction

__all__ = [
    "Below",
    "Branch",
    "CompileActivity",
    "Every",
    "Program",
    "Step",
    "check_tensordicts",
    "compile_activity",
    "compile_step",
    "compiling_steps",
    "fork",
    "fuse",
    "fuse_steps",
    "grouped_arguments",
    "kernel_calls",
    "launch",
    "python_program",
    "python_source",
    "raw",
    "segmented_program",
    "segments",
    "trace",
    "tracing",
    "when",
]

#: a compiled or prepared step: ``run(n)`` runs it n times
Program = Callable[[int], None]

_recording: contextvars.ContextVar[list | None] = contextvars.ContextVar("dispatchrl_recording", default=None)


def raw(x: object) -> Any:
    """The device buffer of an Array; anything else unchanged."""
    t = type(x)
    if t in _array_types:  # (an isinstance on plum's parametric type costs ~1 µs: memoised)
        return x.data  # type: ignore[attr-defined]
    if t in _other_types:
        return x
    (_array_types if isinstance(x, Array) else _other_types).add(t)
    return raw(x)


_array_types: set[type] = set()
_other_types: set[type] = set()


def launch(device, kernel, *args) -> None:
    """Run ``kernel(*raw args)`` now, or record it while a step is being staged by :func:`fuse`."""
    calls = _recording.get()
    if calls is not None:
        calls.append((kernel, args))
        return
    kernel(*[a.data if type(a) in _array_types else raw(a) for a in args])  # type: ignore[attr-defined]


class Every:
    """Condition ``counter[0] % period == offset`` on an int64 (1,) counter Array."""

    def __init__(self, counter, period, offset=0):
        _check_counter(counter)
        if int(period) < 1 or not 0 <= int(offset) < int(period):
            raise ConfigError(f"Every: need period >= 1 and 0 <= offset < period, got {period}, {offset}")
        self.counter, self.period, self.offset = counter, int(period), int(offset)

    def holds(self, count) -> bool:
        return count % self.period == self.offset

    def expression(self, name) -> str:
        return f"{name}[0] % {self.period} == {self.offset}"


class Below:
    """Condition ``counter[0] < limit`` on an int64 (1,) counter Array."""

    def __init__(self, counter, limit):
        _check_counter(counter)
        self.counter, self.limit = counter, int(limit)

    def holds(self, count) -> bool:
        return count < self.limit

    def expression(self, name) -> str:
        return f"{name}[0] < {self.limit}"


def _check_counter(counter) -> None:
    if not (isinstance(counter, Array) and counter.shape == (1,) and counter.dtype == np.int64):
        raise ConfigError(f"a staged condition needs an int64 Array of shape (1,) as counter, got {counter!r}")


class Branch:
    """A staged ``if``: ``then`` and ``otherwise`` are lists of recorded calls (and branches)."""

    def __init__(self, condition):
        self.condition, self.then, self.otherwise = condition, [], []


def when(device, condition, then, otherwise=None) -> None:
    """``then(device)`` if ``condition`` holds, else ``otherwise(device)``: evaluated now when
    called eagerly; inside :func:`fuse`, both branches are traced and the test runs in the step."""
    calls = _recording.get()
    if calls is None:
        branch = then if condition.holds(int(raw(condition.counter)[0])) else otherwise
        if branch is not None:
            branch(device)
        return
    node = Branch(condition)
    calls.append(node)
    for target, fn in ((node.then, then), (node.otherwise, otherwise)):
        if fn is not None:
            token = _recording.set(target)
            try:
                fn(device)
            finally:
                _recording.reset(token)


def tracing() -> bool:
    """Whether :func:`launch` records (a step is being staged) rather than runs."""
    return _recording.get() is not None


def _fork(device, sides) -> None:
    """Run ``sides`` (a tuple of ``side(device)`` callables that write no array another side
    reads or writes): in sequence by default; a device's method may stage them to run at once,
    which then gives the same results (the CPU's, on two threads: dispatchrl.kernels.core.cpu_fork)."""


#: backends add their methods with ``@fork.dispatch``
fork = DispatchedFunction(_fork, name="fork")


@fork.dispatch
def _(device: Device, sides: tuple) -> None:
    for side in sides:
        side(device)


def kernel_calls(nodes: list) -> Iterator[tuple]:
    """Every recorded (kernel, args) in ``nodes``, both sides of every branch included."""
    for node in nodes:
        if isinstance(node, Branch):
            yield from kernel_calls(node.then)
            yield from kernel_calls(node.otherwise)
        else:
            yield node


def grouped_arguments(params, fields: dict) -> tuple[list[str], str]:
    """An element body's parameters ``params`` as a generated kernel takes them and passes them on:
    a parameter named in ``fields`` (a record, e.g. ``ring``) stands for that record's arrays
    (``fields["ring"]``: ``b_obs``, ...), which the kernel takes one by one (launches and fused
    steps pass arrays) and the body receives as one tuple. Returns (kernel parameters, call
    arguments)."""
    flat = [name for param in params for name in fields.get(param, (param,))]
    call = [f"({', '.join(fields[param])},)" if param in fields else param for param in params]
    return flat, ", ".join(call)


def python_source(
    nodes: list, indent: str, call: Callable[[tuple, str], list[str]], test: Callable[[Branch, str], tuple]
) -> list[str]:
    """Python source lines running recorded ``nodes`` at ``indent`` (the generated Numba and
    numba.cuda steps): ``call(node, indent)`` gives a kernel call's lines; ``test(branch, indent)``
    the lines before a branch's ``if`` and its condition."""
    lines: list[str] = []
    for node in nodes:
        if isinstance(node, Branch):
            before, condition = test(node, indent)
            lines += before
            lines.append(f"{indent}if {condition}:")
            lines += python_source(node.then, indent + "    ", call, test) or [indent + "    pass"]
            if node.otherwise:
                lines.append(f"{indent}else:")
                lines += python_source(node.otherwise, indent + "    ", call, test)
        else:
            lines += call(node, indent)
    return lines


class CompileActivity:
    """What this process is compiling, for a progress display that reads it from another thread.

    A backend wraps each program's compile in :meth:`kernels` with a probe returning (kernels
    compiled, kernels to compile); :meth:`phase` describes it ("kernel 7/23", then "the fused
    step" once every kernel is in); ``cold_kernels`` counts the kernels the process had to
    compile (not find in the disk cache), so a display can tell a cold compile from a warm one."""

    def __init__(self) -> None:
        self.probe: Callable[[], tuple[int, int]] | None = None
        self.cold_kernels = 0

    @contextlib.contextmanager
    def kernels(self, probe: Callable[[], tuple[int, int]]) -> Iterator[None]:
        self.cold_kernels += probe()[1]
        previous, self.probe = self.probe, probe
        try:
            yield
        finally:
            self.probe = previous

    def phase(self) -> str | None:
        """ "kernel i/n" (the one being compiled), "the fused step" or None (no program yet);
        never raises (a display thread calls it)."""
        probe = self.probe
        if probe is None:
            return None
        try:
            done, total = probe()
        except Exception:  # a probe racing the compile it watches: say nothing rather than fail
            return None
        return f"kernel {min(done + 1, total)}/{total}" if done < total else "the fused step"


#: the process's compile activity (backends report into it, progress displays read it)
compile_activity = CompileActivity()


class Step:
    """A staged step: ``step()`` runs it once, ``step(n)`` n times (on CPU in one compiled call)."""

    def __init__(self, device, run, calls, compile_seconds):
        self.device = device
        self._run = run
        self.calls = calls
        self.compile_seconds = compile_seconds

    def __call__(self, n=1) -> None:
        self._run(int(n))

    @property
    def kernel_calls(self) -> list[tuple]:
        """Every recorded (kernel, args), both sides of every branch included."""
        return list(kernel_calls(self.calls))

    def __repr__(self) -> str:
        return f"<Step on {self.device!r}: {len(self.kernel_calls)} kernel calls>"


@contextlib.contextmanager
def trace(calls: list) -> Iterator[list]:
    """Record instead of run: inside ``with trace(calls):`` every :func:`launch` appends its
    (kernel, args) to ``calls`` and :func:`when` records a :class:`Branch`. :func:`fuse` traces
    this way; the exported C trainer records its programs with it too."""
    token = _recording.set(calls)
    try:
        yield calls
    finally:
        _recording.reset(token)


def fuse(device, fn, *args, **kwargs) -> Step:
    """Trace ``fn(device, *args, **kwargs)`` once and compile it into a :class:`Step`.

    ``fn`` must be a sequence of generic-function calls on persistent arrays (outputs passed in),
    with data-dependent control flow expressed by :func:`when`; nothing executes while tracing,
    so it must not read array values.

    Arguments may be, or hold (dataclass fields, lists, tuples, dicts), TensorDicts: their leaves
    are the step's arrays like a dataclass's fields (``td["obs"]`` or ``td.obs``, passed on to
    generic functions, which flatten them into kernel arguments). Each must be on ``device``'s
    memory with dispatchrl Array leaves; :func:`check_tensordicts` refuses any other before tracing.
    """
    return _compiled(device, _traced(device, fn, args, kwargs))


def fuse_steps(device, *steps: tuple) -> list[Step]:
    """:func:`fuse` for steps that run together (an env step and an update): ``steps`` are
    ``(fn, *args)`` tuples, each traced first, then compiled in order inside
    :func:`compiling_steps`, so a backend can start on all their kernels at once (the CPU's
    precompile helper compiles the later steps' kernels while this process compiles the first)."""
    traced = [_traced(device, fn, tuple(args), {}) for fn, *args in steps]
    with compiling_steps(device, traced):
        return [_compiled(device, calls) for calls in traced]


def _traced(device, fn, args: tuple, kwargs: dict) -> list:
    """The calls of ``fn(device, *args, **kwargs)``, its TensorDicts checked first."""
    check_tensordicts(device, _named_arguments(fn, device, args, kwargs))
    calls: list = []
    with trace(calls):
        fn(device, *args, **kwargs)
    return calls


def _compiled(device, calls: list) -> Step:
    start = time.perf_counter()
    run = compile_step(device, calls)
    return Step(device, run, calls, time.perf_counter() - start)


def _named_arguments(fn, device, args: tuple, kwargs: dict) -> dict:
    """``fn``'s arguments after the device by parameter name (``#1``, ``#2``, ... where its
    signature cannot say)."""
    try:
        bound = inspect.signature(fn).bind(device, *args, **kwargs).arguments
        return dict(list(bound.items())[1:])
    except (TypeError, ValueError):
        return {**{f"#{i + 1}": value for i, value in enumerate(args)}, **kwargs}


def check_tensordicts(device, arguments: dict) -> None:
    """Refuse (:class:`DeviceError`, naming the argument and key) a TensorDict among the
    ``arguments`` (name → value) or inside them that is not on ``device``'s memory space, or has a leaf that is not
    a dispatchrl Array there: a step can only close over device arrays, and a numpy leaf would
    be read, not written, by compiled kernels. Runs before tracing, so before anything compiles."""

    def visit(value, name, depth) -> None:
        leaves = keyed_leaves(value, name + ".")  # a TensorDict (dispatchrl.data, a later layer)
        if leaves is not None:
            where = getattr(value, "device", None)
            if where is None or where.memory != device.memory:
                raise DeviceError(
                    f"fuse: argument '{name}' is a {type(value).__name__} on {where!r}, the step runs on "
                    f"{device!r} ({device.memory} memory); move it with .to(device)"
                )
            for path, leaf in leaves:
                if not isinstance(leaf, Array) or leaf.device.memory != device.memory:
                    where = f"on {leaf.device!r}" if isinstance(leaf, Array) else f"a {type(leaf).__name__}"
                    raise DeviceError(
                        f"fuse: argument '{name}' has leaf '{path[len(name) + 1 :]}' that is {where}, not a "
                        f"dispatchrl Array on {device!r}; build the TensorDict with device={device!r}"
                    )
        elif depth > 6 or isinstance(value, (Array, str, bytes, int, float, np.ndarray, np.generic, type)):
            return
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                visit(item, f"{name}.{i}", depth + 1)
        elif isinstance(value, dict):
            for key, item in value.items():
                visit(item, f"{name}.{key}", depth + 1)
        elif dataclasses.is_dataclass(value):
            for field in dataclasses.fields(value):
                visit(getattr(value, field.name), f"{name}.{field.name}", depth + 1)

    for name, value in arguments.items():
        visit(value, name, 0)


def _compile_step(device, calls) -> Program:
    """The runnable program of a traced step (``calls``) for ``device``: a dispatched function whose
    other methods live with the backends (dispatchrl.backends.cpu, .cuda, .c)."""


def _no_compile_step(args: tuple) -> DeviceError:
    device = args[0]
    return DeviceError(
        f"fuse: {device!r} has no compile_step method, so its traced steps cannot run; add one, e.g. "
        f"@dispatchrl.compile_step.dispatch def compile_step(device: {type(device).__name__}, calls: list) "
        "-> Program: return dispatchrl.staging.python_program(calls)  (each kernel called from Python), "
        "or derive the device from CPU/Generic to inherit theirs"
    )


#: backends add their methods with ``@compile_step.dispatch``
compile_step = DispatchedFunction(_compile_step, _no_compile_step, "compile_step")


@compile_step.dispatch
def _(device: Generic, calls: list) -> Program:
    return python_program(calls)


def _compiling_steps(device, steps: list) -> contextlib.AbstractContextManager:
    """A context inside which :func:`fuse_steps` compiles the traced ``steps`` (lists of calls) one
    after another: where a backend prepares them together (dispatchrl.backends.cpu)."""


#: the default prepares nothing; backends add methods with ``@compiling_steps.dispatch``
compiling_steps = DispatchedFunction(_compiling_steps, name="compiling_steps")


@compiling_steps.dispatch
def _(device: Device, steps: list) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def python_program(calls: list) -> Program:
    """Prepared closures over raw arrays; branches read their counter (for CUDA, a small copy)."""

    def prepare(nodes) -> list[Callable[..., None]]:
        ops = []
        for node in nodes:
            if isinstance(node, Branch):
                counter, holds = raw(node.condition.counter), node.condition.holds
                then, otherwise = prepare(node.then), prepare(node.otherwise)

                def op(counter=counter, holds=holds, then=then, otherwise=otherwise) -> None:
                    for inner in then if holds(int(counter[0])) else otherwise:
                        inner()

                ops.append(op)
            else:
                kernel, args = node
                ops.append(functools.partial(kernel, *[raw(a) for a in args]))
        return ops

    ops = prepare(calls)

    def run(n) -> None:
        for _ in range(n):
            for op in ops:
                op()

    return run


def segments(nodes: list, compiles: Callable[[object], bool]) -> Iterator[tuple[str, list]]:
    """Split recorded ``nodes`` for a device that compiles some of them into one program and runs
    the rest from the host: maximal runs of nodes ``compiles`` accepts as ("compiled", nodes),
    maximal runs of other kernel calls as ("host", calls), and every other branch alone as
    ("branch", [branch]) (its condition is then tested on the host, its sides split in turn)."""

    def kind(node) -> str:
        if compiles(node):
            return "compiled"
        return "branch" if isinstance(node, Branch) else "host"

    for key, run in itertools.groupby(nodes, key=kind):
        group = list(run)
        if key == "branch":
            for node in group:
                yield key, [node]
        else:
            yield key, group


def segmented_program(
    nodes: list,
    compiles: Callable[[object], bool],
    compile_run: Callable[[list], Program],
    host_run: Callable[[list], Program],
) -> Program:
    """One ``compile_run(nodes)`` program if ``compiles`` accepts every node; otherwise a host loop
    over the :func:`segments`: compiled runs by ``compile_run``, host calls by ``host_run``, and
    a branch that cannot compile whole tested on the host each time round, its sides split in
    turn. ``run.segments`` lists the parts."""
    if all(compiles(node) for node in nodes):
        return compile_run(nodes)
    parts = []
    for key, group in segments(nodes, compiles):
        if key == "compiled":
            parts.append(compile_run(group))
        elif key == "host":
            parts.append(host_run(group))
        else:
            parts.append(_host_branch(group[0], lambda side: segmented_program(side, compiles, compile_run, host_run)))

    def run(n) -> None:
        for _ in range(n):
            for part in parts:
                part(1)

    run.segments = parts  # type: ignore[attr-defined]  # for tests and inspection
    return run


def _host_branch(node: Branch, program: Callable[[list], Program]) -> Program:
    counter, holds = raw(node.condition.counter), node.condition.holds
    then = program(node.then) if node.then else None
    otherwise = program(node.otherwise) if node.otherwise else None

    def run(n) -> None:
        for _ in range(n):
            side = then if holds(int(counter[0])) else otherwise
            if side is not None:
                side(1)

    return run
