"""Small helpers that several test files share."""

import contextlib
import dataclasses
import importlib
import json
import sys

import numpy as np

import dispatchrl as drl
import dispatchrl.envs as E
from dispatchrl import checkpoint
from dispatchrl.backends.c import borrow_methods


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


def env_trajectory(dev, env, actions, steps=6):
    """Reset, steps with ``actions`` (one per env), a partial reset_done, a few more steps: every
    output."""
    n = env.num_envs
    state, rng = E.env_state(dev, env), drl.rng(dev, 7)
    E.env_reset(dev, env, state, rng)
    action = drl.asarray(dev, actions[:, None])
    out = [drl.to_numpy(state.obs)]
    for t in range(steps):
        E.env_step(dev, env, state, action)
        if t == steps // 2:
            drl.assign(state.truncated, np.arange(n) % 3 == 0)
            E.env_reset_done(dev, env, state, rng)
        out += [
            drl.to_numpy(x)
            for x in (state.obs, state.reward, state.terminated, state.truncated, state.steps, state.physics)
        ]
    return out + [drl.to_numpy(rng)]


def assert_same_trajectories(reference, got, dev):
    """Floats to 1e-6 (sin/cos may differ in the last bit between libm, numpy's SIMD loops and
    CUDA's intrinsics), flags and counters exactly."""
    for ref, g in zip(reference, got):
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(g, ref, rtol=0, atol=1e-6, err_msg=repr(dev))
        else:
            np.testing.assert_array_equal(g, ref, err_msg=repr(dev))


def n_step_windows(reward, terminated, truncated, newest, index, num_envs, n, gamma):
    """Float64 numpy n-step windows over a replay ring written ``num_envs`` rows per step, ``newest``
    the last row written: for each row of ``index``, the discounted sum of up to ``n`` rewards of its
    env (cut by a termination, a truncation or the newest write), gamma**k, k and the window's last
    row, as arrays."""
    capacity = len(reward)
    totals, discounts, steps, last = [], [], [], []
    for row in index:
        total, k = 0.0, 0
        while True:
            total += gamma**k * float(reward[row])
            k += 1
            if k == n or terminated[row] or truncated[row] or (newest - row) % capacity < num_envs:
                break
            row = (row + num_envs) % capacity
        totals.append(total)
        discounts.append(gamma**k)
        steps.append(k)
        last.append(row)
    return np.array(totals), np.array(discounts), np.array(steps), np.array(last, np.int64)


def write_as_version(target, arrays, meta, version):
    """``arrays`` and ``meta`` (as checkpoint.load returns them) written to ``target`` as the
    checkpoint of format ``version`` that an earlier release wrote: that version, the digest of
    this content."""
    meta = {k: v for k, v in meta.items() if k not in ("digest", "format", "version")}
    current = checkpoint.VERSION
    try:
        checkpoint.VERSION = version
        checkpoint.write(target, arrays, meta)
    finally:
        checkpoint.VERSION = current
    assert json.loads(checkpoint.paths(target)[1].read_text())["version"] == version


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


def branching_step(device, counter, x, evens, below):
    """A step with both kinds of branch: evens counts the steps at an even count, below the steps
    while counter < 3, the others polyak-update x with itself (x unchanged); counter counts every
    step."""
    drl.when(device, drl.Every(counter, 2), lambda d: drl.increment(d, evens))
    drl.when(
        device, drl.Below(counter, 3), lambda d: drl.increment(d, below), lambda d: drl.polyak_update(d, x, x, 0.5)
    )
    drl.increment(device, counter)


def borrowed_host_function(kernel):
    """A test-local generic function ``fn(device, x)`` whose one method launches the host ``kernel``
    on Generic, borrowed by the C device (a host kernel inside a fused C step); left out of
    ``GENERIC_FUNCTIONS`` to keep the registry to the package's own functions."""

    @drl.generic
    def fn(device, x):
        return device, x

    @fn.dispatch
    def fn_generic(device: drl.Generic, x):
        drl.launch(device, kernel, x)

    drl.GENERIC_FUNCTIONS.remove(fn)
    borrow_methods(fn)
    return fn


@contextlib.contextmanager
def kernel_module(tmp_path, monkeypatch, stem, source):
    """``source`` imported as a new module from ``tmp_path`` (a name of its own per test, so Numba's
    disk cache holds only this test's kernels), dropped from ``sys.modules`` afterwards."""
    name = f"{stem}_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    try:
        yield module
    finally:
        sys.modules.pop(name, None)
