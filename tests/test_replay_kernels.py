"""The replay kernel family (prioritized sum/min trees, row gather) on every device: the same bits
as the float64 numpy reference, fused as well as eager."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from testkit import n_step_windows

import dispatchrl as drl
from dispatchrl.data import replay_buffer, transitions
from dispatchrl.errors import ShapeError
from dispatchrl.kernels.core.api import increment
from dispatchrl.kernels.offpolicy.api import replay_add
from dispatchrl.kernels.replay import (
    linear_anneal,
    priority_mark_new,
    priority_sample,
    priority_update,
    replay_gather,
    scale_rows,
    td_priority,
)
from dispatchrl.kernels.replay.api import EMPTY, tree_leaves

CAPACITY, ALPHA, BETA, EPS = 6, 0.6, 0.4, 1e-6


def trees(device, capacity=CAPACITY):
    leaves = tree_leaves(capacity)
    return (
        drl.zeros(device, 2 * leaves, np.float64),
        drl.asarray(device, np.full(2 * leaves, EMPTY)),
        drl.asarray(device, np.ones(1)),
    )


def reference(capacity, steps):
    """Float64 numpy: stored values per row, then sum/min over the stored rows."""
    stored = np.zeros(capacity)
    max_p = 1.0
    filled = np.zeros(capacity, bool)
    for kind, a, b in steps:
        if kind == "new":
            for i in range(b):
                row = (a + i) % capacity
                stored[row] = (max_p + EPS) ** ALPHA
                filled[row] = True
        else:
            for i, p in zip(a, b):
                max_p = max(max_p, abs(float(p)))
                stored[i] = (abs(float(p)) + EPS) ** ALPHA
    return stored, filled, max_p


def run_steps(device):
    sum_tree, min_tree, max_p = trees(device)
    steps = [
        ("new", 0, 4),
        ("update", [0, 2, 2], np.array([0.5, -3.0, 0.25], np.float32)),
        ("new", 4, 3),
        ("update", [5, 1], np.array([7.0, 0.0], np.float32)),
    ]
    for kind, a, b in steps:
        if kind == "new":
            priority_mark_new(
                device, sum_tree, min_tree, max_p, drl.asarray(device, np.array([a], np.int64)), b, CAPACITY, ALPHA, EPS
            )
        else:
            priority_update(
                device,
                sum_tree,
                min_tree,
                max_p,
                drl.asarray(device, np.array(a, np.int64)),
                drl.asarray(device, b),
                ALPHA,
                EPS,
            )
    return sum_tree, min_tree, max_p, steps


def test_priority_trees_match_the_reference(device):
    sum_tree, min_tree, max_p, steps = run_steps(device)
    stored, filled, expected_max = reference(CAPACITY, steps)
    leaves = tree_leaves(CAPACITY)
    s, m = drl.to_numpy(sum_tree), drl.to_numpy(min_tree)
    np.testing.assert_allclose(s[leaves : leaves + CAPACITY], stored, rtol=1e-15)
    assert s[1] == pytest.approx(stored.sum(), rel=1e-14)
    assert m[1] == pytest.approx(stored[filled].min(), rel=1e-15)
    assert drl.to_numpy(max_p)[0] == expected_max == 7.0


def test_priority_sample_and_gather_agree_bit_for_bit_across_devices(device):
    outs = {}
    for dev in (drl.Generic(), device):
        sum_tree, min_tree, max_p, _ = run_steps(dev)
        rng = drl.rng(dev, 17)
        index = drl.zeros(dev, 32, np.int64)
        weight = drl.zeros(dev, 32, np.float32)
        size = drl.asarray(dev, np.array([CAPACITY], np.int64))
        priority_sample(dev, rng, sum_tree, min_tree, size, drl.asarray(dev, np.array([BETA])), index, weight)
        outs[type(dev).__name__ if dev is not device else "dev"] = (
            drl.to_numpy(index),
            drl.to_numpy(weight),
            drl.to_numpy(rng),
        )
    ref, got = outs["Generic"], outs["dev"]
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(a, b)
    # the weights are the formula over the stored values
    stored, filled, _ = reference(CAPACITY, run_steps(drl.Generic())[3])
    prob = stored / stored.sum()
    expected = (CAPACITY * prob[got[0]]) ** -BETA / (CAPACITY * prob.min()) ** -BETA
    np.testing.assert_allclose(got[1], expected, rtol=1e-6)
    assert got[2][1] == 32 + drl.to_numpy(drl.rng(drl.Generic(), 17))[1]


def test_replay_gather_rows(device):
    buffer = replay_buffer(device, 5, 3, 2)
    g = np.random.default_rng(1)
    rows = (
        g.normal(size=(5, 3)),
        g.normal(size=(5, 2)),
        g.normal(size=5),
        g.normal(size=(5, 3)),
        g.random(5) < 0.5,
        g.random(5) < 0.5,
    )
    replay_add(device, buffer, *(drl.asarray(device, r, np.bool_ if r.dtype == bool else np.float32) for r in rows))
    batch = transitions(device, 4, 3, 2)
    index = np.array([4, 0, 4, 2], np.int64)
    replay_gather(device, buffer, drl.asarray(device, index), batch)
    for got, r in zip((batch.obs, batch.action, batch.reward, batch.next_obs, batch.terminated, batch.truncated), rows):
        np.testing.assert_array_equal(drl.to_numpy(got), r[index].astype(got.dtype))


def test_fused_prioritized_step_matches_eager(device):
    """Mark new rows, sample, update from the sampled rows: one fused step, n times, vs eager."""

    def step(dev, sum_tree, min_tree, max_p, position, rng, size, index, weight, beta, step_count, x, q, priority):
        priority_mark_new(dev, sum_tree, min_tree, max_p, position, 2, CAPACITY, ALPHA, EPS)
        linear_anneal(dev, step_count, BETA, 1.0, 2.5, beta)
        priority_sample(dev, rng, sum_tree, min_tree, size, beta, index, weight)
        scale_rows(dev, weight, x)
        td_priority(dev, q[0], q[1], q[2], priority)
        priority_update(dev, sum_tree, min_tree, max_p, index, priority, ALPHA, EPS)
        increment(dev, step_count)

    def state(dev):
        sum_tree, min_tree, max_p = trees(dev)
        g = np.random.default_rng(4)
        q = tuple(drl.asarray(dev, g.normal(size=(4, 1)), np.float32) for _ in range(3))
        return (
            sum_tree,
            min_tree,
            max_p,
            drl.asarray(dev, np.array([3], np.int64)),
            drl.rng(dev, 5),
            drl.asarray(dev, np.array([CAPACITY], np.int64)),
            drl.zeros(dev, 4, np.int64),
            drl.zeros(dev, 4, np.float32),
            drl.zeros(dev, 1, np.float64),
            drl.zeros(dev, 1, np.int64),
            drl.asarray(dev, g.normal(size=(4, 3)), np.float32),
            q,
            drl.zeros(dev, 4, np.float32),
        )

    eager = state(drl.Generic())
    for _ in range(3):
        step(drl.Generic(), *eager)
    fused_args = state(device)
    fused = drl.fuse(device, step, *fused_args)
    fused(3)
    for a, b in zip(eager, fused_args):
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            np.testing.assert_array_equal(drl.to_numpy(x), drl.to_numpy(y))
    assert drl.to_numpy(eager[8])[0] == BETA + (1 - BETA) * (2 / 2.5)  # annealed: step 2 of 2.5


def test_scale_rows_td_priority_linear_anneal_against_numpy(device):
    g = np.random.default_rng(2)
    x, w = g.normal(size=(5, 3)).astype(np.float32), g.uniform(0, 2, 5).astype(np.float32)
    dx = drl.asarray(device, x)
    scale_rows(device, drl.asarray(device, w), dx)
    np.testing.assert_array_equal(drl.to_numpy(dx), x * w[:, None])
    q1, q2, t = (g.normal(size=(5, 1)).astype(np.float32) for _ in range(3))
    out = drl.zeros(device, 5, np.float32)
    td_priority(device, *(drl.asarray(device, a) for a in (q1, q2, t)), out)
    np.testing.assert_array_equal(drl.to_numpy(out), ((np.abs(q1 - t) + np.abs(q2 - t)) * np.float32(0.5))[:, 0])
    beta = drl.zeros(device, 1, np.float64)
    for step, expected in ((0, 0.4), (50, 0.4 + 0.6 * 0.5), (100, 1.0), (150, 1.0)):
        linear_anneal(device, drl.asarray(device, np.array([step], np.int64)), 0.4, 1.0, 100, beta)
        assert drl.to_numpy(beta)[0] == expected


def test_declarations_refuse_bad_arguments():
    dev = drl.CPU()
    sum_tree, min_tree, max_p = trees(dev)
    position = drl.asarray(dev, np.array([0], np.int64))
    with pytest.raises(ShapeError, match="capacity"):
        priority_mark_new(dev, sum_tree, min_tree, max_p, position, 1, 99, ALPHA, EPS)
    with pytest.raises(ShapeError, match="count"):
        priority_mark_new(dev, sum_tree, min_tree, max_p, position, 7, CAPACITY, ALPHA, EPS)
    with pytest.raises(ShapeError, match="sum_tree"):
        priority_mark_new(
            dev, drl.zeros(dev, 6, np.float64), drl.zeros(dev, 6, np.float64), max_p, position, 1, 3, ALPHA, EPS
        )
    with pytest.raises(drl.ConfigError):
        linear_anneal(dev, position, 0.4, 1.0, 0, drl.zeros(dev, 1, np.float64))


def n_step_reference(rows, position, size, index, num_envs, n, gamma):
    """Float64 numpy n-step windows over a ring written ``num_envs`` rows per step."""
    _, _, reward, next_obs, terminated, truncated = rows
    newest = (position - 1) % len(reward)
    total, discount, _, last = n_step_windows(reward, terminated, truncated, newest, index, num_envs, n, gamma)
    return {
        "reward": total,
        "next_obs": next_obs[last],
        "terminated": terminated[last],
        "truncated": truncated[last],
        "discount": discount,
    }


@pytest.mark.parametrize("steps", [5, 9])  # partly filled; wrapped (position 2 of 7 rows)
def test_n_step_gather_matches_float64_reference(device, steps):
    from dispatchrl.kernels.replay import bootstrap_target, n_step_gather, uniform_index

    capacity, envs, n, gamma = 7 * 2, 2, 3, 0.9
    g = np.random.default_rng(steps)
    buffer = replay_buffer(device, capacity, 3, 2)
    written = []
    for _ in range(steps):
        step = (
            g.normal(size=(envs, 3)),
            g.normal(size=(envs, 2)),
            g.normal(size=envs),
            g.normal(size=(envs, 3)),
            g.random(envs) < 0.15,
            g.random(envs) < 0.15,
        )
        written.append(step)
        replay_add(device, buffer, *(drl.asarray(device, r, np.bool_ if r.dtype == bool else np.float32) for r in step))
    rows = [drl.to_numpy(x) for x in (buffer.obs, buffer.action, buffer.reward, buffer.next_obs)]
    rows += [drl.to_numpy(buffer.terminated), drl.to_numpy(buffer.truncated)]
    position, size = int(drl.to_numpy(buffer.position)[0]), int(drl.to_numpy(buffer.size)[0])
    assert rows[4].any() and rows[5].any()  # windows cut by terminations and by truncations
    batch, discount, index = (
        transitions(device, 16, 3, 2),
        drl.zeros(device, 16, np.float64),
        drl.zeros(device, 16, np.int64),
    )
    rng = drl.rng(device, 3)
    uniform_index(device, rng, buffer.size, index)
    got_index = drl.to_numpy(index)
    assert got_index.min() >= 0 and got_index.max() < size
    n_step_gather(device, buffer, index, envs, n, gamma, batch, discount)
    ref = n_step_reference(rows, position, size, got_index, envs, n, gamma)
    np.testing.assert_array_equal(drl.to_numpy(batch.obs), rows[0][got_index])
    np.testing.assert_array_equal(drl.to_numpy(batch.action), rows[1][got_index])
    np.testing.assert_allclose(drl.to_numpy(batch.reward), ref["reward"], rtol=1e-6)
    np.testing.assert_allclose(drl.to_numpy(discount), ref["discount"], rtol=1e-14)
    for key in ("next_obs", "terminated", "truncated"):
        np.testing.assert_array_equal(drl.to_numpy(getattr(batch, key)), ref[key], err_msg=key)
    # the target: reward + discount * (1 - terminated) Q, in float64 then rounded
    q = g.normal(size=(16, 1)).astype(np.float32)
    target = drl.asarray(device, q)
    bootstrap_target(device, batch.reward, discount, target)
    expected = drl.to_numpy(batch.reward).astype(np.float64) + ref["discount"] * q[:, 0]
    np.testing.assert_array_equal(drl.to_numpy(target)[:, 0], expected.astype(np.float32))
    # every device draws the same rows and windows, bit for bit
    generic = drl.Generic()
    g_buffer = replay_buffer(generic, capacity, 3, 2)
    for step in written:
        replay_add(
            generic, g_buffer, *(drl.asarray(generic, r, np.bool_ if r.dtype == bool else np.float32) for r in step)
        )
    g_batch, g_discount, g_index = (
        transitions(generic, 16, 3, 2),
        drl.zeros(generic, 16, np.float64),
        drl.zeros(generic, 16, np.int64),
    )
    uniform_index(generic, drl.rng(generic, 3), g_buffer.size, g_index)
    n_step_gather(generic, g_buffer, g_index, envs, n, gamma, g_batch, g_discount)
    np.testing.assert_array_equal(drl.to_numpy(g_index), got_index)
    np.testing.assert_array_equal(drl.to_numpy(g_batch.reward), drl.to_numpy(batch.reward))
    np.testing.assert_array_equal(drl.to_numpy(g_discount), drl.to_numpy(discount))


@pytest.mark.parametrize("capacity", [1, 5, 64, 1000])
def test_lockstep_priority_draws_match_the_kernel(capacity):
    """The prepared sampler's level-by-level descents draw the rows and weights of
    priority_sample_kernel bit for bit (random priorities, a partly filled buffer)."""
    from dispatchrl.kernels.replay.cpu import (
        priority_mark_new_kernel,
        priority_sample_kernel,
        priority_sample_lockstep,
        priority_update_kernel,
    )

    g = np.random.default_rng(capacity)
    leaves = tree_leaves(capacity)
    sum_tree, min_tree = np.zeros(2 * leaves), np.full(2 * leaves, EMPTY)
    max_priority = np.ones(1)
    stored = max(1, capacity * 3 // 4)
    priority_mark_new_kernel(sum_tree, min_tree, max_priority, np.zeros(1, np.int64), stored, capacity, 0.6, 1e-8)
    rows = g.integers(0, stored, 50)
    priority_update_kernel(sum_tree, min_tree, max_priority, rows, g.exponential(1.0, 50), 0.6, 1e-8)
    size, beta = np.array([stored, 0], np.int64), np.array([0.4])
    for batch in (1, 7, 128):
        rng_a, rng_b = np.array([11, 3], np.uint64), np.array([11, 3], np.uint64)
        index_a, index_b = np.zeros(batch, np.int64), np.full(batch, -1, np.int64)
        weight_a, weight_b = np.zeros(batch, np.float32), np.zeros(batch, np.float32)
        priority_sample_kernel(rng_a, sum_tree, min_tree, size, beta, index_a, weight_a)
        priority_sample_lockstep(rng_b, sum_tree, min_tree, size, beta, index_b, weight_b, np.zeros(batch))
        np.testing.assert_array_equal(index_b, index_a)
        np.testing.assert_array_equal(weight_b, weight_a)
        np.testing.assert_array_equal(rng_b, rng_a)
        assert index_a.max() < stored


def numpy_trees(values, leaves):
    """Float64 numpy: the sum and min trees over leaf ``values`` (EMPTY where unwritten), built
    bottom-up by pairs as the kernels' recomputation from children does."""
    sum_tree, min_tree = np.zeros(2 * leaves), np.full(2 * leaves, EMPTY)
    sum_tree[leaves:], min_tree[leaves:] = np.where(values == EMPTY, 0.0, values), values
    width = leaves
    while width > 1:
        sum_tree[width // 2 : width] = sum_tree[width : 2 * width : 2] + sum_tree[width + 1 : 2 * width : 2]
        min_tree[width // 2 : width] = np.minimum(min_tree[width : 2 * width : 2], min_tree[width + 1 : 2 * width : 2])
        width //= 2
    return sum_tree, min_tree


@given(
    capacity=st.integers(1, 3000),
    batch=st.integers(1, 200),
    seed=st.integers(0, 2**32 - 1),
    zeros=st.floats(0.0, 0.5),
)
def test_lockstep_priority_update_matches_the_kernel_and_numpy(capacity, batch, seed, zeros):
    """The prepared sampler's level-by-level update (every walk to the root taken together)
    writes the trees and max priority of priority_update_kernel (B walks one after the other) bit
    for bit, repeated rows and zero priorities included, and both equal the float64 trees rebuilt
    from the leaves by numpy."""
    from dispatchrl.kernels.replay.cpu import (
        priority_mark_new_kernel,
        priority_update_kernel,
        priority_update_lockstep,
    )

    g = np.random.default_rng(seed)
    leaves = tree_leaves(capacity)
    sum_a, min_a, max_a = np.zeros(2 * leaves), np.full(2 * leaves, EMPTY), np.ones(1)
    stored = int(g.integers(1, capacity + 1))
    priority_mark_new_kernel(sum_a, min_a, max_a, np.zeros(1, np.int64), stored, capacity, ALPHA, EPS)
    sum_b, min_b, max_b = sum_a.copy(), min_a.copy(), max_a.copy()
    values = np.full(leaves, EMPTY)
    values[:stored] = (1.0 + EPS) ** ALPHA
    expected_max = 1.0
    for _ in range(3):
        rows = g.integers(0, min(stored, 1 + int(g.integers(0, stored))), batch)  # often few rows: repeats
        priority = g.exponential(g.choice([0.01, 1.0, 1e3]), batch) * (g.random(batch) >= zeros)
        priority_update_kernel(sum_a, min_a, max_a, rows, priority, ALPHA, EPS)
        priority_update_lockstep(sum_b, min_b, max_b, rows, priority, ALPHA, EPS, np.zeros(batch, np.uint64))
        for a, b in ((sum_a, sum_b), (min_a, min_b), (max_a, max_b)):
            assert a.tobytes() == b.tobytes()
        for row, p in zip(rows, priority):  # the last write of a repeated row wins
            values[row] = (p + EPS) ** ALPHA
        sum_ref, min_ref = numpy_trees(values, leaves)
        np.testing.assert_array_equal(sum_b, sum_ref)
        np.testing.assert_array_equal(min_b, min_ref)
        expected_max = max(expected_max, priority.max())
        assert max_b[0] == expected_max


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_select_float_is_the_conditional_bit_for_bit(dtype):
    from numba import njit

    from dispatchrl.kernels.replay.cpu import select_float

    @njit
    def select_all(condition, a, b, out):
        for i in range(out.shape[0]):
            out[i] = select_float(condition[i], a[i], b[i])

    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.25, np.finfo(dtype).tiny / 2], dtype)
    a, b = np.repeat(special, len(special)), np.tile(special, len(special))
    for condition in (a >= b, np.arange(len(a)) % 3 == 0):
        out = np.zeros_like(a)
        select_all(condition, a, b, out)
        assert out.tobytes() == np.where(condition, a, b).tobytes()
