"""CPU (Numba) methods of the replay generic functions (row by row, in order, as generic.py)."""

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ...arrays import zeros
from ...backends.cpu import JIT_EXACT, JIT_EXACT_INLINED, JIT_EXACT_INNER, per_index
from ...devices import CPU
from ...staging import launch
from ..offpolicy.api import TRANSITION_RECORDS
from ..random.cpu import uniform01
from . import api

__all__ = [
    "AT_HEADER",
    "LEAF_FIELDS",
    "address_pointer",
    "checked_priority_update_at",
    "copy_transition",
    "n_step_row",
    "prefetch_item",
    "prefetch_row",
    "prioritized_rows_at",
    "priority_sample_lockstep",
    "priority_update_lockstep",
    "select_float",
    "set_leaf",
    "tree_descend",
    "uniform_rows_at",
]


@intrinsic
def select_float(typingctx, condition, if_true, if_false):
    """``if_true if condition else if_false`` for two floats of one type, without a branch.

    LLVM turns a float select whose condition comes from a load into a branch (it expects the
    load to miss and the branch to be predicted); in a sum-tree descent or a min-tree update the
    condition is a coin flip, and the mispredictions cost more than everything else (a 128-draw
    descent of a 1024-leaf tree: 12 -> 5 us). The operands go through an empty inline asm (any
    target: no instruction) as integers, which the optimiser cannot turn back into a float
    select, so the select stays an integer one (cmov / csel). The result is the same bits."""
    if not (isinstance(if_true, types.Float) and if_true == if_false and isinstance(condition, types.Boolean)):
        return None

    def codegen(context, builder, signature, args) -> ir.Value:
        float_type = context.get_value_type(signature.args[1])
        bits = ir.IntType(8 * context.get_abi_sizeof(float_type))
        opaque = ir.InlineAsm(ir.FunctionType(bits, [bits]), "", "=r,0")
        chosen = builder.select(
            context.cast(builder, args[0], signature.args[0], types.boolean),
            builder.call(opaque, [builder.bitcast(args[1], bits)]),
            builder.call(opaque, [builder.bitcast(args[2], bits)]),
        )
        return builder.bitcast(chosen, float_type)

    return if_true(condition, if_true, if_false), codegen


@njit(**JIT_EXACT)  # wrapped: data.buffers' PrioritizedSampler calls it from Python
def set_leaf(sum_tree, min_tree, row, value):
    node = sum_tree.shape[0] // 2 + row
    sum_tree[node] = value
    min_tree[node] = value
    node //= 2
    while node >= 1:
        sum_tree[node] = sum_tree[2 * node] + sum_tree[2 * node + 1]
        a, b = min_tree[2 * node], min_tree[2 * node + 1]
        min_tree[node] = select_float(a <= b, a, b)  # a branch here mispredicts: see select_float
        node //= 2


@njit(**JIT_EXACT_INNER)
def tree_descend(sum_tree, mass):
    """The leaf (row) whose cumulative interval holds ``mass``."""
    leaves = sum_tree.shape[0] // 2
    node = 1
    while node < leaves:
        left = sum_tree[2 * node]
        right = mass >= left
        mass = select_float(right, mass - left, mass)  # a branch here mispredicts: see select_float
        node = 2 * node + np.int64(right)
    return node - leaves


@njit(**JIT_EXACT)
def priority_mark_new_kernel(sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps):
    value = (max_priority[0] + eps) ** alpha
    for i in range(count):
        set_leaf(sum_tree, min_tree, (position[0] + i) % capacity, value)


@njit(**JIT_EXACT)
def priority_update_kernel(sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    for i in range(index.shape[0]):
        p = abs(np.float64(priority[i]))
        if p > max_priority[0]:
            max_priority[0] = p
        set_leaf(sum_tree, min_tree, index[i], (p + eps) ** alpha)


@api.priority_update.dispatch
def priority_update(device: CPU, sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    # priority_update_kernel's result, bit for bit, with the B walks overlapped (NOTES.md: with
    # the lockstep sample, a fused sample + update ~2x faster); the nodes' scratch is made when
    # the call is staged
    node = zeros(device, index.shape[0], np.uint64)
    launch(device, priority_update_lockstep, sum_tree, min_tree, max_priority, index, priority, alpha, eps, node)


@njit(**JIT_EXACT_INNER)
def priority_sample_at(k, rng, sum_tree, min_tree, size, beta, index, weight):
    """Draw ``k`` of priority_sample: a descent of the sum tree, its row and importance weight."""
    leaves = sum_tree.shape[0] // 2
    row = tree_descend(sum_tree, uniform01(rng[0], rng[1] + np.uint64(k)) * sum_tree[1])
    if row > size[0] - 1:
        row = size[0] - 1
    index[k] = row
    weight[k] = (sum_tree[leaves + row] / min_tree[1]) ** -beta[0]


@njit(**JIT_EXACT)
def priority_sample_kernel(rng, sum_tree, min_tree, size, beta, index, weight):
    for k in range(index.shape[0]):
        priority_sample_at(k, rng, sum_tree, min_tree, size, beta, index, weight)
    rng[1] = rng[1] + np.uint64(index.shape[0])


@api.priority_sample.dispatch
def priority_sample(device: CPU, rng, sum_tree, min_tree, size, beta, index, weight):
    # priority_sample_kernel's draws, bit for bit, the B descents overlapped (scratch as above)
    mass = zeros(device, index.shape[0], np.float64)
    launch(device, priority_sample_lockstep, rng, sum_tree, min_tree, size, beta, index, weight, mass)


@njit(**JIT_EXACT_INLINED)
def copy_transition(k, row, source, target):
    """Row ``row`` of the transition arrays ``source`` copied into row ``k`` of ``target`` (tuples in
    TRANSITION_FIELDS order): a ring's row into a batch (gathers and uniform draws) or a step's
    into a ring (adds)."""
    s_obs, s_action, s_reward, s_next_obs, s_terminated, s_truncated = source
    obs, action, reward, next_obs, terminated, truncated = target
    # element loops: a row assignment compiles Numba's shape-mismatch error formatting
    # (string code, ~2 s of a cold compile) for a check that cannot fail here
    for j in range(obs.shape[1]):
        obs[k, j] = s_obs[row, j]
        next_obs[k, j] = s_next_obs[row, j]
    for j in range(action.shape[1]):
        action[k, j] = s_action[row, j]
    reward[k] = s_reward[row]
    terminated[k] = s_terminated[row]
    truncated[k] = s_truncated[row]


@njit(**JIT_EXACT_INLINED)
def replay_gather_at(k, index, ring, transition):
    """Row ``k`` of replay_gather: the ring's row ``index[k]`` copied into the batch."""
    copy_transition(k, index[k], ring, transition)


@njit(**JIT_EXACT)
def replay_gather_kernel(index, *arrays):
    # arrays: the ring's, then the batch's (RING_FIELDS, TRANSITION_FIELDS)
    ring, transition = arrays[:6], arrays[6:]
    b_obs, b_action, b_reward, b_next_obs, b_terminated, b_truncated = ring
    for k in range(index.shape[0]):  # every row's lines first: the misses overlap (see prefetch_row)
        row = index[k]
        prefetch_row(b_obs, row)
        prefetch_row(b_next_obs, row)
        prefetch_row(b_action, row)
        prefetch_item(b_reward, row)
        prefetch_item(b_terminated, row)
        prefetch_item(b_truncated, row)
    for k in range(index.shape[0]):
        replay_gather_at(k, index, ring, transition)


@njit(**JIT_EXACT_INNER)
def scale_rows_at(i, j, weight, x):
    x[i, j] *= weight[i]


@njit(**JIT_EXACT)
def scale_rows_kernel(weight, x):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            scale_rows_at(i, j, weight, x)


@njit(**JIT_EXACT_INNER)
def td_priority_at(i, q1, q2, target, priority):
    # the sum in the arrays' precision; halving is exact in any precision
    priority[i] = (abs(q1[i, 0] - target[i, 0]) + abs(q2[i, 0] - target[i, 0])) * 0.5


@njit(**JIT_EXACT)
def td_priority_kernel(q1, q2, target, priority):
    for i in range(priority.shape[0]):
        td_priority_at(i, q1, q2, target, priority)


@njit(**JIT_EXACT)
def linear_anneal_kernel(step, start, end, steps, out):
    out[0] = start + (end - start) * min(1.0, np.float64(step[0]) / steps)


@njit(**JIT_EXACT_INNER)
def uniform_index_at(k, rng, size, index):
    index[k] = np.int64(uniform01(rng[0], rng[1] + np.uint64(k)) * size[0])


@njit(**JIT_EXACT)
def uniform_index_kernel(rng, size, index):
    for k in range(index.shape[0]):
        uniform_index_at(k, rng, size, index)
    rng[1] = rng[1] + np.uint64(index.shape[0])


@njit(**JIT_EXACT_INNER)
def n_step_row(k, index, b_reward, b_terminated, b_truncated, position, num_envs, n, gamma, reward, discount):
    """Row k's window: writes reward[k] and discount[k], returns the window's last row."""
    capacity = b_reward.shape[0]
    newest = (position[0] - 1 + capacity) % capacity
    row = index[k]
    total = 0.0
    scale = 1.0
    for j in range(n):
        total += scale * np.float64(b_reward[row])
        scale *= gamma
        # the window ends after n transitions, at an episode's end, or at the env's newest one
        if j == n - 1 or b_terminated[row] or b_truncated[row] or (newest - row + capacity) % capacity < num_envs:
            break
        row = (row + num_envs) % capacity
    reward[k] = total
    discount[k] = scale
    return row


@njit(**JIT_EXACT_INLINED)
def n_step_gather_at(k, index, ring, position, num_envs, n, gamma, transition, discount):
    """Row ``k`` of n_step_gather: the first transition of its window, the window's discounted
    reward and discount, and its last transition's next observation and flags."""
    b_obs, b_action, b_reward, b_next_obs, b_terminated, b_truncated = ring
    obs, action, reward, next_obs, terminated, truncated = transition
    first = index[k]
    for j in range(obs.shape[1]):
        obs[k, j] = b_obs[first, j]
    for j in range(action.shape[1]):
        action[k, j] = b_action[first, j]
    row = n_step_row(k, index, b_reward, b_terminated, b_truncated, position, num_envs, n, gamma, reward, discount)
    for j in range(obs.shape[1]):
        next_obs[k, j] = b_next_obs[row, j]
    terminated[k] = b_terminated[row]
    truncated[k] = b_truncated[row]


n_step_gather_kernel = per_index(n_step_gather_at, "index.shape[0]", "n_step_gather_kernel", fields=TRANSITION_RECORDS)


@njit(**JIT_EXACT_INNER)
def bootstrap_target_at(i, reward, discount, target):
    target[i, 0] = np.float64(reward[i]) + discount[i] * np.float64(target[i, 0])


@njit(**JIT_EXACT)
def bootstrap_target_kernel(reward, discount, target):
    for i in range(reward.shape[0]):
        bootstrap_target_at(i, reward, discount, target)


def _prefetch(builder: ir.IRBuilder, pointer: ir.Value) -> None:
    """Emit llvm.prefetch(pointer, read, high locality, data cache): a hint, no effect on results."""
    byte_pointer = ir.IntType(8).as_pointer()
    fn = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(ir.VoidType(), [byte_pointer, ir.IntType(32), ir.IntType(32), ir.IntType(32)]),
        "llvm.prefetch.p0i8",
    )
    read, keep, data = (ir.Constant(ir.IntType(32), v) for v in (0, 3, 1))
    builder.call(fn, [builder.bitcast(pointer, byte_pointer), read, keep, data])


@intrinsic
def prefetch_row(typingctx, source, row):
    """Hint the CPU to load the first and last byte of ``source[row]`` (a 2-D C array) into cache
    (llvm.prefetch: a hint, no effect on results). A gather of random rows issues all its loads
    first this way, so their cache misses overlap instead of following one another."""

    def codegen(context, builder, signature, args) -> ir.Value:
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        first = cgutils.get_item_pointer(context, builder, array_type, array, [args[1], zero])
        last_column = builder.sub(builder.extract_value(array.shape, 1), context.get_constant(types.intp, 1))
        last = cgutils.get_item_pointer(context, builder, array_type, array, [args[1], last_column])
        for pointer in (first, last):
            _prefetch(builder, pointer)
        return context.get_dummy_value()

    return types.void(source, types.intp), codegen


@intrinsic
def address_pointer(typingctx, address):
    """The raw pointer at integer ``address`` (for :func:`numba.carray`)."""

    def codegen(context, builder, signature, args) -> ir.Value:
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

    return types.voidptr(types.int64), codegen


#: Layout of the ``at`` arrays of :func:`uniform_rows_at` / :func:`prioritized_rows_at` /
#: :func:`checked_priority_update_at`: a header
#: of addresses and sizes, then LEAF_FIELDS entries per leaf (rows' address in the storage,
#: address of the output, stored rows, bytes per row, 8-byte words per row when the row is whole
#: 8-aligned words in both, else 0).
AT_HEADER = 11
LEAF_FIELDS = 5


@intrinsic
def prefetch_item(typingctx, array, i):
    """Hint the CPU to load ``array[i]`` (1-D) into cache, as :func:`prefetch_row`."""

    def codegen(context, builder, signature, args) -> ir.Value:
        array_type = signature.args[0]
        pointer = cgutils.get_item_pointer(
            context, builder, array_type, context.make_array(array_type)(context, builder, args[0]), [args[1]]
        )
        _prefetch(builder, pointer)
        return context.get_dummy_value()

    return types.void(array, types.intp), codegen


@njit(**JIT_EXACT)
def priority_sample_lockstep(rng, sum_tree, min_tree, size, beta, index, weight, mass):
    """:func:`priority_sample_kernel`'s draws, bit for bit, with the B descents taken level by
    level together (``index`` holds the nodes, ``mass`` the B remaining masses): each level's B
    loads are independent, so their cache misses overlap instead of following one another."""
    leaves = sum_tree.shape[0] // 2
    key, base = rng[0], rng[1]
    total = sum_tree[1]
    p_min = min_tree[1]
    last = size[0] - 1
    count = index.shape[0]
    nodes = index.view(np.uint64)  # unsigned: indexing with it needs no negative-index wraparound
    one = np.uint64(1)
    for k in range(count):
        mass[k] = uniform01(key, base + np.uint64(k)) * total
        nodes[k] = one
    node_level = 1
    while node_level < leaves:  # the tree is perfect: every descent has the same depth
        for k in range(count):  # branch-free (selects): a mispredicted branch would also discard the loads after it
            node = nodes[k] + nodes[k]
            left = sum_tree[node]
            here = mass[k]
            right = here >= left
            mass[k] = select_float(right, here - left, here)
            nodes[k] = node + np.uint64(right)
        node_level *= 2
    for k in range(count):
        row = index[k] - leaves
        if row > last:
            row = last
        index[k] = row
        weight[k] = (sum_tree[leaves + row] / p_min) ** -beta[0]
    rng[1] = base + np.uint64(count)


@njit(**JIT_EXACT_INNER)
def _copy_rows(source, index, output):
    """output[k] = source[index[k]], element by element."""
    for k in range(index.shape[0]):
        row = index[k]
        for j in range(output.shape[1]):
            output[k, j] = source[row, j]


@njit(**JIT_EXACT_INNER)
def _leaves_at(at, index):
    """Rows ``index`` of every leaf described in ``at`` (from AT_HEADER on) into its output, all
    rows prefetched first."""
    leaves = (at.shape[0] - AT_HEADER) // LEAF_FIELDS
    for s in range(leaves):
        base = AT_HEADER + LEAF_FIELDS * s
        source = carray(address_pointer(at[base]), (at[base + 2], at[base + 3]), np.uint8)
        for k in range(index.shape[0]):
            prefetch_row(source, index[k])
    for s in range(leaves):
        base = AT_HEADER + LEAF_FIELDS * s
        rows, width, words_per_row = at[base + 2], at[base + 3], at[base + 4]
        if words_per_row > 0:  # whole 8-byte words (the float32 (3, 4) leaves): 8x fewer moves
            words = carray(address_pointer(at[base]), (rows, words_per_row), np.uint64)
            _copy_rows(words, index, carray(address_pointer(at[base + 1]), (index.shape[0], words_per_row), np.uint64))
        else:
            source = carray(address_pointer(at[base]), (rows, width), np.uint8)
            _copy_rows(source, index, carray(address_pointer(at[base + 1]), (index.shape[0], width), np.uint8))


@njit(**JIT_EXACT)  # wrapped: data.buffers' PreparedSample calls its entry point from Python
def uniform_rows_at(at):
    """:func:`uniform_rows_kernel` with every array given by address in the one int64 array
    ``at`` (header: rng, counters, index, batch size; then the leaves, see AT_HEADER): Python
    passes one array per call, so the call unboxes one argument instead of one per array."""
    rng = carray(address_pointer(at[0]), 2, np.uint64)
    counters = carray(address_pointer(at[1]), 2, np.int64)
    index = carray(address_pointer(at[2]), at[3], np.int64)
    length = counters[0]
    if length <= 0:
        return False
    key, base = rng[0], rng[1]
    for k in range(index.shape[0]):
        index[k] = np.int64(uniform01(key, base + np.uint64(k)) * length)
    rng[1] = base + np.uint64(index.shape[0])
    _leaves_at(at, index)
    return True


@njit(**JIT_EXACT)  # wrapped: data.buffers' PreparedSample calls its entry point from Python
def prioritized_rows_at(at):
    """:func:`priority_sample` (as :func:`priority_sample_lockstep`) then the rows gathered, by
    address (header: rng, counters, index, batch size, sum tree, min tree, tree length, beta,
    weight, a float64 scratch of batch size, max priority; then the leaves). False (nothing drawn)
    when the buffer is empty."""
    rng = carray(address_pointer(at[0]), 2, np.uint64)
    counters = carray(address_pointer(at[1]), 2, np.int64)
    index = carray(address_pointer(at[2]), at[3], np.int64)
    if counters[0] <= 0:
        return False
    sum_tree = carray(address_pointer(at[4]), at[6], np.float64)
    min_tree = carray(address_pointer(at[5]), at[6], np.float64)
    beta = carray(address_pointer(at[7]), 1, np.float64)
    weight = carray(address_pointer(at[8]), at[3], np.float32)
    mass = carray(address_pointer(at[9]), at[3], np.float64)
    priority_sample_lockstep(rng, sum_tree, min_tree, counters, beta, index, weight, mass)
    _leaves_at(at, index)
    return True


@njit(**JIT_EXACT)
def priority_update_lockstep(sum_tree, min_tree, max_priority, index, priority, alpha, eps, node):
    """:func:`priority_update_kernel`'s trees and max priority, bit for bit, with the B walks to the
    root taken level by level together (``node`` is a uint64 scratch of B nodes).

    :func:`set_leaf` recomputes each ancestor from its two children, so after B walks in order
    every touched node holds the value of its final children, and a leaf the value of its last
    write: writing the leaves in order, then recomputing each level's touched nodes after the
    level below is done, gives the same tree (a node touched twice is recomputed twice, to the
    same value; on the top levels of at most 64 nodes each touched node is recomputed once).
    Each level's B recomputations are independent (their loads overlap) and the min is a
    select, not a branch the coin-flip comparisons would mispredict."""
    leaves = sum_tree.shape[0] // 2
    count = index.shape[0]
    one = np.uint64(1)
    for k in range(count):  # the leaves' lines in both trees: the writes below would miss one by one
        prefetch_item(sum_tree, leaves + index[k])
        prefetch_item(min_tree, leaves + index[k])
    for k in range(count):
        p = abs(np.float64(priority[k]))
        if p > max_priority[0]:
            max_priority[0] = p
        value = (p + eps) ** alpha
        leaf = np.uint64(leaves + index[k])  # unsigned: indexing with it needs no negative-index wraparound
        sum_tree[leaf] = value
        min_tree[leaf] = value
        node[k] = leaf >> one
    width = leaves // 2  # nodes on the level being recomputed
    while width > 64 or width > count:
        for k in range(count):
            parent = node[k]
            child = parent + parent
            sum_tree[parent] = sum_tree[child] + sum_tree[child + one]
            a, b = min_tree[child], min_tree[child + one]
            min_tree[parent] = select_float(a <= b, a, b)
            node[k] = parent >> one
        width //= 2
    # the top levels have at most 64 nodes, shared by many walks: recompute each touched one once
    touched = np.uint64(0)  # bit j: node width + j
    for k in range(count):
        touched |= one << (node[k] - np.uint64(width))
    while width >= 1:
        above = np.uint64(0)
        for j in range(width):
            if (touched >> np.uint64(j)) & one:
                parent = np.uint64(width + j)
                child = parent + parent
                sum_tree[parent] = sum_tree[child] + sum_tree[child + one]
                a, b = min_tree[child], min_tree[child + one]
                min_tree[parent] = select_float(a <= b, a, b)
                above |= one << np.uint64(j >> 1)
        touched = above
        width //= 2


@njit(**JIT_EXACT)  # wrapped: data.buffers' PreparedSample calls its entry point from Python
def checked_priority_update_at(at, priority, alpha, eps):
    """:func:`priority_update_kernel` for the rows ``at`` last drew (its header, see
    :func:`prioritized_rows_at`), as :func:`priority_update_lockstep` (the draws' scratch is free
    again and holds the walks' nodes). False (nothing written) unless every priority is finite
    and >= 0."""
    for i in range(priority.shape[0]):
        p = priority[i]
        if not (p >= 0.0 and p < np.inf):
            return False
    index = carray(address_pointer(at[2]), at[3], np.int64)
    sum_tree = carray(address_pointer(at[4]), at[6], np.float64)
    min_tree = carray(address_pointer(at[5]), at[6], np.float64)
    node = carray(address_pointer(at[9]), at[3], np.uint64)
    max_priority = carray(address_pointer(at[10]), 1, np.float64)
    priority_update_lockstep(sum_tree, min_tree, max_priority, index, priority, alpha, eps, node)
    return True
