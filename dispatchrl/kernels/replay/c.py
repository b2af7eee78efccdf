"""C methods of the replay generic functions: C99 blocks mirroring the CPU kernels statement by
statement (float64 trees, the same stream positions, rows in order)."""

import numpy as np

from ...backends.c import CKernel, axes, c_method
from ...devices import C
from ...staging import launch
from ..offpolicy.api import RING_FIELDS, TRANSITION_FIELDS, transition_arrays
from ..random.c import UNIFORM_HELPERS
from . import api

__all__ = ["copy_transition"]

#: file-level helpers: set a leaf and refresh its ancestors; descend to the row holding a mass
TREE_HELPERS = """\
/* sum tree + min tree over 2 L doubles: node 1 the root, row i the leaf L + i */
static inline void dispatchrl_tree_set(double *sum_tree, double *min_tree, int64_t leaves, int64_t row, double value)
{
    int64_t node = leaves + row;
    sum_tree[node] = value;
    min_tree[node] = value;
    node /= 2;
    while (node >= 1) {
        sum_tree[node] = sum_tree[2 * node] + sum_tree[2 * node + 1];
        const double a = min_tree[2 * node], b = min_tree[2 * node + 1];
        min_tree[node] = a <= b ? a : b;
        node /= 2;
    }
}

static inline int64_t dispatchrl_tree_descend(const double *sum_tree, int64_t leaves, double mass)
{
    int64_t node = 1;
    while (node < leaves) {
        const double left = sum_tree[2 * node];
        if (mass >= left) {
            mass -= left;
            node = 2 * node + 1;
        } else {
            node = 2 * node;
        }
    }
    return node - leaves;
}
"""

PRIORITY_MARK_NEW = """
const double value = pow(max_priority[0] + eps, alpha);
for (int i = 0; i < COUNT; i++) dispatchrl_tree_set(sum_tree, min_tree, LEAVES, (position[0] + i) % CAPACITY, value);
"""


@api.priority_mark_new.dispatch
def priority_mark_new(device: C, sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps):
    params = ("sum_tree", "min_tree", "max_priority", "position", "alpha", "eps")
    kernel = CKernel(
        "priority_mark_new",
        PRIORITY_MARK_NEW,
        params,
        ("sum_tree", "min_tree"),
        dict(COUNT=count, CAPACITY=capacity, LEAVES=sum_tree.shape[0] // 2),
        sum_tree.dtype,
        (TREE_HELPERS,),
    )
    launch(device, kernel, sum_tree, min_tree, max_priority, position, alpha, eps)


PRIORITY_UPDATE = """
for (int i = 0; i < B; i++) {
    const double raw = (double)priority[i];
    const double p = raw < 0 ? -raw : raw;
    if (p > max_priority[0]) max_priority[0] = p;
    dispatchrl_tree_set(sum_tree, min_tree, LEAVES, index[i], pow(p + eps, alpha));
}
"""


c_method(
    api.priority_update,
    PRIORITY_UPDATE,
    lambda arg: dict(B=arg.index.shape[0], LEAVES=arg.sum_tree.shape[0] // 2),
    "priority",
    helpers=(TREE_HELPERS,),
)


PRIORITY_SAMPLE = """
const uint64_t key = rng[0], base = rng[1];
const double total = sum_tree[1], p_min = min_tree[1];
const int64_t last = size[0] - 1;
for (int k = 0; k < B; k++) {
    int64_t row = dispatchrl_tree_descend(sum_tree, LEAVES, dispatchrl_uniform01(key, base + (uint64_t)k) * total);
    if (row > last) row = last;
    index[k] = row;
    weight[k] = (T)pow(sum_tree[LEAVES + row] / p_min, -beta[0]);
}
rng[1] = base + B;
"""


c_method(
    api.priority_sample,
    PRIORITY_SAMPLE,
    lambda arg: dict(B=arg.index.shape[0], LEAVES=arg.sum_tree.shape[0] // 2),
    "weight",
    helpers=(*UNIFORM_HELPERS, TREE_HELPERS),
)


def copy_transition(k: str, row: str, source: str = "b_", to: str = "") -> str:
    """C statements (a loop body's) copying row ``row`` of the ``source``-prefixed transition
    arrays into row ``k`` of the ``to``-prefixed ones, as cpu.copy_transition: a batch's row from
    the buffer by default, a step's row into the ring in replay_add."""
    lines = (
        f"for (int j = 0; j < O; j++) {to}obs[{k} * O + j] = {source}obs[{row} * O + j];",
        f"for (int j = 0; j < A; j++) {to}action[{k} * A + j] = {source}action[{row} * A + j];",
        f"{to}reward[{k}] = {source}reward[{row}];",
        f"for (int j = 0; j < O; j++) {to}next_obs[{k} * O + j] = {source}next_obs[{row} * O + j];",
        f"{to}terminated[{k}] = {source}terminated[{row}];",
        f"{to}truncated[{k}] = {source}truncated[{row}];",
    )
    return "\n".join("    " + line for line in lines)


REPLAY_GATHER = f"""
for (int k = 0; k < B; k++) {{
    const int64_t row = index[k];
{copy_transition("k", "row")}
}}
"""


@api.replay_gather.dispatch
def replay_gather(device: C, buffer, index, batch):
    (b, o), a = batch.obs.shape, batch.action.shape[1]
    params = ("index", *RING_FIELDS, *TRANSITION_FIELDS)
    kernel = CKernel("replay_gather", REPLAY_GATHER, params, TRANSITION_FIELDS, dict(B=b, O=o, A=a), batch.obs.dtype)
    launch(device, kernel, index, *transition_arrays(buffer), *transition_arrays(batch))


SCALE_ROWS = """
for (int i = 0; i < M; i++)
    for (int j = 0; j < K; j++) x[i * K + j] *= weight[i];
"""


c_method(api.scale_rows, SCALE_ROWS, axes("x", "M", "K"), "x")


TD_PRIORITY = """
for (int i = 0; i < B; i++) {
    const T e1 = q1[i] - target[i], e2 = q2[i] - target[i];
    const T sum = (e1 < 0 ? -e1 : e1) + (e2 < 0 ? -e2 : e2);
    priority[i] = (T)(sum * 0.5);
}
"""


c_method(api.td_priority, TD_PRIORITY, axes("priority", "B"), "priority")


LINEAR_ANNEAL = """
const double fraction = (double)step[0] / steps;
out[0] = start + (end - start) * (fraction < 1.0 ? fraction : 1.0);
"""


c_method(api.linear_anneal, LINEAR_ANNEAL, lambda arg: {}, "out")


UNIFORM_INDEX = """
const uint64_t key = rng[0], base = rng[1];
const double filled = (double)size[0];
for (int k = 0; k < B; k++) index[k] = (int64_t)(dispatchrl_uniform01(key, base + (uint64_t)k) * filled);
rng[1] = base + B;
"""


c_method(api.uniform_index, UNIFORM_INDEX, axes("index", "B"), np.float64, helpers=UNIFORM_HELPERS)


N_STEP_GATHER = """
const int64_t newest = (position[0] - 1 + CAPACITY) % CAPACITY;
for (int k = 0; k < B; k++) {
    int64_t row = index[k];
    for (int j = 0; j < O; j++) obs[k * O + j] = b_obs[row * O + j];
    for (int j = 0; j < A; j++) action[k * A + j] = b_action[row * A + j];
    double total = 0.0, scale = 1.0;
    for (int j = 0; j < NSTEP; j++) {
        total += scale * (double)b_reward[row];
        scale *= gamma;
        /* the window ends after n transitions, at an episode's end, or at the env's newest one */
        if (j == NSTEP - 1 || b_terminated[row] || b_truncated[row] || (newest - row + CAPACITY) % CAPACITY < NENVS)
            break;
        row = (row + NENVS) % CAPACITY;
    }
    reward[k] = (T)total;
    discount[k] = scale;
    for (int j = 0; j < O; j++) next_obs[k * O + j] = b_next_obs[row * O + j];
    terminated[k] = b_terminated[row];
    truncated[k] = b_truncated[row];
}
"""


@api.n_step_gather.dispatch
def n_step_gather(device: C, buffer, index, num_envs, n, gamma, batch, discount):
    (b, o), a = batch.obs.shape, batch.action.shape[1]
    params = ("index", *RING_FIELDS, "position", "gamma", *TRANSITION_FIELDS, "discount")
    kernel = CKernel(
        "n_step_gather",
        N_STEP_GATHER,
        params,
        (*TRANSITION_FIELDS, "discount"),
        dict(B=b, O=o, A=a, CAPACITY=buffer.obs.shape[0], NENVS=num_envs, NSTEP=n),
        batch.obs.dtype,
    )
    launch(
        device, kernel, index, *transition_arrays(buffer), buffer.position, gamma, *transition_arrays(batch), discount
    )


BOOTSTRAP_TARGET = """
for (int i = 0; i < B; i++) target[i] = (T)((double)reward[i] + discount[i] * (double)target[i]);
"""


c_method(api.bootstrap_target, BOOTSTRAP_TARGET, axes("reward", "B"), "target")
