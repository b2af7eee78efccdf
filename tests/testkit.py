"""Small helpers that several test files share."""

import dataclasses

import numpy as np

import dispatchrl as drl


def state_bytes(tree, seen):
    """Bytes of every distinct numpy buffer reachable from ``tree`` (a built state)."""
    if isinstance(tree, np.ndarray):
        while isinstance(tree.base, np.ndarray):
            tree = tree.base
        if id(tree) in seen:
            return 0
        seen.add(id(tree))
        return tree.nbytes
    if isinstance(tree, drl.Array):
        return state_bytes(tree.data, seen)
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return sum(state_bytes(getattr(tree, f.name), seen) for f in dataclasses.fields(tree))
    if isinstance(tree, (list, tuple)):
        return sum(state_bytes(v, seen) for v in tree)
    if isinstance(tree, dict):
        return sum(state_bytes(v, seen) for v in tree.values())
    if hasattr(tree, "__dict__"):
        return sum(state_bytes(v, seen) for v in vars(tree).values())
    return 0


def numeric_gradient(f, x, h=1e-6):
    """Central differences of the scalar function ``f`` at the float64 array ``x``, one element at a
    time."""
    grad = np.zeros(x.shape)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        grad[i] = (f(up) - f(down)) / (2 * h)
    return grad
