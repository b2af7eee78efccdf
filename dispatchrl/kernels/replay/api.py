"""Declarations of the replay generic functions.

The trees are float64 arrays of ``2 L`` entries, L a power of two >= the buffer's capacity:
node 1 is the root, node k's children are 2k and 2k + 1, row i is leaf L + i. ``sum_tree`` holds
sums (0 for empty rows), ``min_tree`` minima (:data:`EMPTY`, the largest finite float64, for
empty rows: checkpoints refuse non-finite floats). A row's stored value is
``(priority + eps) ** alpha``; ``max_priority`` (float64 (1,)) is the largest raw priority seen.
Rows are processed in order, so a repeated index keeps its last value on every device.
"""

import numpy as np

from ...checks import check_array, check_device, check_number
from ...dispatch import generic
from ...errors import ShapeError
from ..offpolicy.api import check_batch_rows, check_transitions, transition_arrays

__all__ = [
    "EMPTY",
    "bootstrap_target",
    "linear_anneal",
    "n_step_gather",
    "n_step_gather_arguments",
    "priority_mark_new",
    "priority_sample",
    "priority_update",
    "replay_gather",
    "scale_rows",
    "td_priority",
    "tree_leaves",
    "uniform_index",
]

#: min_tree's value for rows never written
EMPTY = float(np.finfo(np.float64).max)


def tree_leaves(capacity: int) -> int:
    """L: the smallest power of two >= ``capacity``."""
    return 1 << max(0, (int(capacity) - 1).bit_length())


def _check_trees(fn, device, sum_tree, min_tree) -> int:
    check_array(fn, "sum_tree", sum_tree, device, shape=(None,), dtype=np.float64)
    check_array(fn, "min_tree", min_tree, device, shape=sum_tree.shape, dtype=np.float64)
    n = sum_tree.shape[0]
    if n < 2 or n & (n - 1):
        raise ShapeError(f"{fn}: 'sum_tree' has {n} entries, expected 2 L with L a power of two")
    return n // 2


@generic(inplace=("sum_tree", "min_tree"))
def priority_mark_new(device, sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps) -> tuple:
    """Rows ``(position[0] + i) % capacity`` for i < ``count`` (the rows replay_add is about to
    write; call it before replay_add) get ``(max_priority + eps) ** alpha``."""
    fn = "priority_mark_new"
    check_device(fn, device)
    leaves = _check_trees(fn, device, sum_tree, min_tree)
    check_array(fn, "max_priority", max_priority, device, shape=(1,), dtype=np.float64)
    check_array(fn, "position", position, device, shape=(1,), dtype=np.int64, dtypes=None)
    if not isinstance(capacity, (int, np.integer)) or not 1 <= capacity <= leaves:
        raise ShapeError(f"{fn}: 'capacity' must be an int in [1, {leaves}], got {capacity!r}")
    if not isinstance(count, (int, np.integer)) or not 1 <= count <= capacity:
        raise ShapeError(f"{fn}: 'count' must be an int in [1, {capacity}], got {count!r}")
    return (
        device,
        sum_tree,
        min_tree,
        max_priority,
        position,
        int(count),
        int(capacity),
        check_number(fn, "alpha", alpha, 0),
        check_number(fn, "eps", eps, 0),
    )


@generic(inplace=("sum_tree", "min_tree", "max_priority"))
def priority_update(device, sum_tree, min_tree, max_priority, index, priority, alpha, eps) -> tuple:
    """Row ``index[i]`` gets ``(|priority[i]| + eps) ** alpha`` and ``max_priority`` follows the
    largest ``|priority|`` (TD errors may be negative)."""
    fn = "priority_update"
    check_device(fn, device)
    _check_trees(fn, device, sum_tree, min_tree)
    check_array(fn, "max_priority", max_priority, device, shape=(1,), dtype=np.float64)
    check_array(fn, "index", index, device, shape=(None,), dtype=np.int64, dtypes=None)
    check_array(fn, "priority", priority, device, shape=index.shape)
    return (
        device,
        sum_tree,
        min_tree,
        max_priority,
        index,
        priority,
        check_number(fn, "alpha", alpha, 0),
        check_number(fn, "eps", eps, 0),
    )


@generic(inplace=("rng",), outputs=("index", "weight"))
def priority_sample(device, rng, sum_tree, min_tree, size, beta, index, weight) -> tuple:
    """Draw ``index`` (int64 (B,)) with probability stored value / total among the ``size[0]``
    filled rows, and ``weight = (P(i) / P_min) ** -beta[0]`` (= (N P(i))^-β over its maximum over
    all stored rows), from the counter stream ``rng``. ``beta`` is a float64 (1,) array (annealed
    inside fused steps by :func:`linear_anneal`). The buffer must hold at least one row."""
    fn = "priority_sample"
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    _check_trees(fn, device, sum_tree, min_tree)
    check_array(fn, "size", size, device, shape=(1,), dtype=np.int64, dtypes=None)
    check_array(fn, "index", index, device, shape=(None,), dtype=np.int64, dtypes=None)
    check_array(fn, "beta", beta, device, shape=(1,), dtype=np.float64)
    check_array(fn, "weight", weight, device, shape=index.shape)
    return device, rng, sum_tree, min_tree, size, beta, index, weight


@generic(outputs=("batch",))
def replay_gather(device, buffer, index, batch) -> tuple:
    """``batch`` = rows ``index`` of ``buffer`` (Transitions of equal row shapes)."""
    fn = "replay_gather"
    check_device(fn, device)
    check_transitions(fn, device, "buffer", buffer)
    rows, _, _ = check_transitions(fn, device, "batch", batch)
    check_array(fn, "index", index, device, shape=(rows,), dtype=np.int64, dtypes=None)
    check_batch_rows(fn, buffer, batch)
    return device, buffer, index, batch


@generic(inplace=("x",))
def scale_rows(device, weight, x) -> tuple:
    """``x[i, :] *= weight[i]`` (importance weights on a per-row loss gradient)."""
    fn = "scale_rows"
    check_device(fn, device)
    check_array(fn, "x", x, device, shape=(None, None))
    check_array(fn, "weight", weight, device, shape=(x.shape[0],), dtype=x.dtype)
    return device, weight, x


@generic(outputs=("priority",))
def td_priority(device, q1, q2, target, priority) -> tuple:
    """``priority = (|q1 - target| + |q2 - target|) / 2`` per row: the twin critics' mean
    absolute TD error (q1, q2, target (B, 1); priority (B,))."""
    fn = "td_priority"
    check_device(fn, device)
    check_array(fn, "q1", q1, device, shape=(None, 1))
    for name, x in (("q2", q2), ("target", target)):
        check_array(fn, name, x, device, shape=q1.shape, dtype=q1.dtype)
    check_array(fn, "priority", priority, device, shape=(q1.shape[0],), dtype=q1.dtype)
    return device, q1, q2, target, priority


@generic(outputs=("out",))
def linear_anneal(device, step, start, end, steps, out) -> tuple:
    """``out[0] = start + (end - start) * min(1, step[0] / steps)`` in float64 (the β schedule)."""
    fn = "linear_anneal"
    check_device(fn, device)
    check_array(fn, "step", step, device, shape=(1,), dtype=np.int64, dtypes=None)
    check_array(fn, "out", out, device, shape=(1,), dtype=np.float64)
    return (
        device,
        step,
        check_number(fn, "start", start),
        check_number(fn, "end", end),
        check_number(fn, "steps", steps, 0, low_open=True),
        out,
    )


@generic(inplace=("rng",), outputs=("index",))
def uniform_index(device, rng, size, index) -> tuple:
    """``index`` (int64 (B,)) drawn uniformly from the ``size[0]`` filled rows with the counter
    stream ``rng``: the rows :func:`~dispatchrl.kernels.offpolicy.replay_sample` would read."""
    fn = "uniform_index"
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    check_array(fn, "size", size, device, shape=(1,), dtype=np.int64, dtypes=None)
    check_array(fn, "index", index, device, shape=(None,), dtype=np.int64, dtypes=None)
    return device, rng, size, index


@generic(outputs=("batch", "discount"))
def n_step_gather(device, buffer, index, num_envs, n, gamma, batch, discount) -> tuple:
    """``batch`` = n-step transitions starting at rows ``index`` of the ring ``buffer`` (a
    :class:`~dispatchrl.data.ReplayRing` written ``num_envs`` rows per step, so an env's next
    transition is ``num_envs`` rows later). From row r the window takes the k <= ``n`` transitions
    r, r + N, ... up to the first that ended its episode or the env's newest stored one:
    ``reward = sum_j gamma**j r_j`` (summed in float64), ``next_obs``, ``terminated`` and
    ``truncated`` are the window's last, ``discount = gamma**k`` (float64 (B,)): the target is
    ``reward + discount (1 - terminated) Q(next_obs)``. A truncation inside the window cuts the
    return and bootstraps from its last observation; a termination cuts it without bootstrap."""
    fn = "n_step_gather"
    check_device(fn, device)
    capacity, _, _ = check_transitions(fn, device, "buffer", buffer)
    check_array(fn, "buffer.position", buffer.position, device, shape=(1,), dtype=np.int64, dtypes=None)
    rows, _, _ = check_transitions(fn, device, "batch", batch)
    check_array(fn, "index", index, device, shape=(rows,), dtype=np.int64, dtypes=None)
    check_array(fn, "discount", discount, device, shape=(rows,), dtype=np.float64)
    check_batch_rows(fn, buffer, batch)
    for name, value in (("num_envs", num_envs), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ShapeError(f"{fn}: '{name}' must be a positive int, got {value!r}")
    if num_envs > capacity:
        raise ShapeError(f"{fn}: 'num_envs' ({num_envs}) exceeds the buffer's {capacity} rows")
    return device, buffer, index, int(num_envs), int(n), check_number(fn, "gamma", gamma, 0, 1), batch, discount


def n_step_gather_arguments(buffer, index, num_envs, n, gamma, batch, discount) -> tuple:
    """The arguments of n_step_gather's kernels, on every device: ``index``, the ring's arrays, its
    position, ``num_envs``, ``n``, ``gamma``, the batch's arrays, ``discount``."""
    return index, *transition_arrays(buffer), buffer.position, num_envs, n, gamma, *transition_arrays(batch), discount


@generic(inplace=("target",))
def bootstrap_target(device, reward, discount, target) -> tuple:
    """``target = reward + discount * target`` per row, in float64 (n-step: ``target`` holds
    ``(1 - terminated) Q(next_obs)`` from td_target with reward 0 and gamma 1)."""
    fn = "bootstrap_target"
    check_device(fn, device)
    check_array(fn, "reward", reward, device, shape=(None,))
    n = reward.shape[0]
    check_array(fn, "discount", discount, device, shape=(n,), dtype=np.float64)
    check_array(fn, "target", target, device, shape=(n, 1), dtype=reward.dtype)
    return device, reward, discount, target
