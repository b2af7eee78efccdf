"""Scratch sharing for the exported trainer: a liveness analysis over the traced programs that lets
arrays whose lifetimes do not overlap share static memory.

An array (a root buffer and its views) is *scratch* when it is used by one program only, is not
part of the trainer's interface (weights, named arrays, branch counters), and within that program
every read of it is preceded, on every path through the staged branches, by writes that cover
what is read: a kernel output listed in :attr:`CKernel.overwrites` counts as a write of the
whole view; any other output counts as a read too. A scratch array's value is then dead outside
its interval [first access, last access] in program order (every execution visits the kernels in
that order, a subsequence of it), and it is rewritten before being read in the next run of the
program. Arrays with disjoint intervals, or in different programs, can share memory; the
placement is greedy by size (largest first, lowest offset free over its interval), as tensor
arena planners do. Nothing a kernel computes changes: the trainer's bits stay the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..staging import Branch, raw

__all__ = ["ALIGN_BYTES", "Interval", "plan_scratch", "scratch_intervals"]

#: scratch offsets are multiples of this many bytes (the globals' alignment: vector loads)
ALIGN_BYTES = 64

Interval = tuple[str, int, int]  # (program, first position, last position)


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _covered(ranges: list[tuple[int, int]], start: int, end: int) -> bool:
    return any(s <= start and end <= e for s, e in ranges)  # merged: one range covers a covered view


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return _merge([(max(s, t), min(e, f)) for s, e in a for t, f in b if max(s, t) < min(e, f)])


def _accesses(kernel: Any, args: list, root_of) -> tuple[list, list]:
    """(reads, writes) of one call as (root id, start, end) byte ranges; reads come first."""
    reads, writes = [], []
    for param, arg in zip(kernel.params, args):
        a = raw(arg)
        if not isinstance(a, np.ndarray):
            continue
        access = (root_of(a), a.ctypes.data, a.ctypes.data + a.nbytes)
        if param in getattr(kernel, "overwrites", ()):
            writes.append(access)
        else:
            reads.append(access)  # inputs, and outputs that may read what they held
            if param in kernel.outputs:
                writes.append(access)
    return reads, writes


def scratch_intervals(programs: dict[str, list], root_of) -> tuple[dict[int, Interval], set[int]]:
    """Per program, the interval of every root it accesses, and the roots that are *not* scratch
    there (read before being written on some path, so they carry a value into the program, or
    used by more than one program)."""
    intervals: dict[int, Interval] = {}
    live_in: set[int] = set()
    seen_in: dict[int, set[str]] = {}
    for name, calls in programs.items():
        _walk_program(name, calls, root_of, intervals, live_in, seen_in)
    live_in |= {root for root, names in seen_in.items() if len(names) > 1}
    return intervals, live_in


def _walk_program(name: str, calls: list, root_of, intervals: dict, live_in: set, seen_in: dict) -> None:
    position = 0

    def touch(root: int) -> None:
        seen_in.setdefault(root, set()).add(name)
        _, first, _ = intervals.get(root, (name, position, position))
        intervals[root] = (name, first, position)

    def walk(nodes: list, defined: dict[int, list]) -> dict[int, list]:
        nonlocal position
        for node in nodes:
            if isinstance(node, Branch):
                counter = root_of(raw(node.condition.counter))
                position += 1
                touch(counter)
                live_in.add(counter)
                then = walk(node.then, {k: list(v) for k, v in defined.items()})
                otherwise = walk(node.otherwise, {k: list(v) for k, v in defined.items()})
                defined = {k: _intersect(then[k], otherwise[k]) for k in then.keys() & otherwise.keys()}
                continue
            kernel, args = node
            position += 1
            reads, writes = _accesses(kernel, args, root_of)
            for root, start, end in reads:
                touch(root)
                if not _covered(defined.get(root, []), start, end):
                    live_in.add(root)
            for root, start, end in writes:
                touch(root)
                defined[root] = _merge([*defined.get(root, []), (start, end)])
        return defined

    walk(calls, {})


def plan_scratch(sizes: dict[int, int], intervals: dict[int, Interval]) -> tuple[dict[int, int], int]:
    """Byte offsets in one shared arena for roots of ``sizes`` (bytes) with their intervals, and
    the arena's size: largest first, each at the lowest aligned offset clear of every placed root
    whose interval overlaps its own."""

    def overlap(a: Interval, b: Interval) -> bool:
        return a[0] == b[0] and a[1] <= b[2] and b[1] <= a[2]

    offsets: dict[int, int] = {}
    for root in sorted(sizes, key=lambda r: (-sizes[r], intervals[r])):
        size = -(-sizes[root] // ALIGN_BYTES) * ALIGN_BYTES
        busy = sorted(
            (offsets[other], offsets[other] + sizes[other])
            for other in offsets
            if overlap(intervals[root], intervals[other])
        )
        offset = 0
        for start, end in busy:
            if offset + size <= start:
                break
            offset = max(offset, -(-end // ALIGN_BYTES) * ALIGN_BYTES)
        offsets[root] = offset
    arena = max((offsets[r] + sizes[r] for r in offsets), default=0)
    return offsets, -(-arena // ALIGN_BYTES) * ALIGN_BYTES
