"""C methods of the off-policy generic functions: C99 blocks with static shapes (see
:mod:`dispatchrl.backends.c`).

They mirror the CPU kernels statement by statement: scalars in double where the CPU kernels
compute in float64, and the same counter-based SplitMix64 stream positions, so replay rows and
noise are the same numbers on every device.
"""

import math

from ...backends.c import CKernel, axes, c_method
from ...devices import C
from ...staging import launch
from ..random.c import NORMAL_HELPERS, UNIFORM_HELPERS
from ..replay.c import copy_transition
from . import api
from .api import RING_FIELDS, TRANSITION_FIELDS, episode_log_arrays, transition_arrays

__all__: list[str] = []


REPLAY_ADD = f"""
for (int i = 0; i < N; i++) {{
    const int64_t row = position[0];
{copy_transition("row", "i", source="", to="b_")}
    position[0] = (row + 1) % CAPACITY;
    size[0] = size[0] + 1 < CAPACITY ? size[0] + 1 : CAPACITY;
}}
"""


@api.replay_add.dispatch
def replay_add(device: C, buffer, *transition):
    # transition: the step's arrays in TRANSITION_FIELDS order (rows shaped as the buffer's, checked)
    n, (capacity, o), a = transition[0].shape[0], buffer.obs.shape, buffer.action.shape[1]
    params = (*TRANSITION_FIELDS, *RING_FIELDS, "position", "size")
    kernel = CKernel(
        "replay_add", REPLAY_ADD, params, params[6:], dict(N=n, O=o, A=a, CAPACITY=capacity), buffer.obs.dtype
    )
    launch(device, kernel, *transition, *transition_arrays(buffer), buffer.position, buffer.size)


REPLAY_SAMPLE = f"""
const uint64_t key = rng[0], base = rng[1];
const double filled = (double)size[0];
for (int k = 0; k < B; k++) {{
    const int64_t row = (int64_t)(dispatchrl_uniform01(key, base + (uint64_t)k) * filled);
{copy_transition("k", "row")}
}}
rng[1] = base + B;
"""


@api.replay_sample.dispatch
def replay_sample(device: C, rng, buffer, batch):
    (b, o), a = batch.obs.shape, batch.action.shape[1]
    params = ("rng", *RING_FIELDS, "size", *TRANSITION_FIELDS)
    kernel = CKernel(
        "replay_sample",
        REPLAY_SAMPLE,
        params,
        ("rng", *TRANSITION_FIELDS),
        dict(B=b, O=o, A=a),
        batch.obs.dtype,
        UNIFORM_HELPERS,
        overwrites=TRANSITION_FIELDS,
    )
    launch(device, kernel, rng, *transition_arrays(buffer), buffer.size, *transition_arrays(batch))


CONCAT_COLUMNS = """
for (int i = 0; i < M; i++) {
    for (int j = 0; j < NA; j++) out[i * (NA + NB) + j] = a[i * NA + j];
    for (int j = 0; j < NB; j++) out[i * (NA + NB) + NA + j] = b[i * NB + j];
}
"""


c_method(
    api.concat_columns, CONCAT_COLUMNS, lambda arg: dict(M=arg.a.shape[0], NA=arg.a.shape[1], NB=arg.b.shape[1]), "a"
)


SLICE_COLUMNS = """
for (int i = 0; i < M; i++)
    for (int j = 0; j < NOUT; j++) out[i * NOUT + j] = x[i * NX + START + j];
"""


c_method(
    api.slice_columns,
    SLICE_COLUMNS,
    lambda arg: dict(M=arg.x.shape[0], NX=arg.x.shape[1], NOUT=arg.out.shape[1], START=arg.start),
    "x",
    constants=("start",),
)


ADD_CLIPPED_NOISE = """
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < SIZE; i++) {
    const double e = std * dispatchrl_standard_normal(key, base + 2 * (uint64_t)i);
    const double noise = fmin(fmax(e, -noise_clip), noise_clip);
    x[i] = (T)fmin(fmax((double)x[i] + noise, low), high);
}
rng[1] = base + 2 * (uint64_t)SIZE;
"""


c_method(api.add_clipped_noise, ADD_CLIPPED_NOISE, lambda arg: {"SIZE": arg.x.size}, "x", helpers=NORMAL_HELPERS)


TD_TARGET = """
for (int i = 0; i < N; i++) {
    const double q = q1[i] < q2[i] ? (double)q1[i] : (double)q2[i];
    target[i] = (T)((double)reward[i] + (terminated[i] ? 0.0 : gamma * q));
}
"""


c_method(api.td_target, TD_TARGET, axes("reward", "N"), "reward")


TRACK_EPISODES = """
for (int i = 0; i < N; i++) {
    running_return[i] += (double)reward[i];
    running_length[i] += 1;
    if (terminated[i] || truncated[i]) {
        const int64_t slot = count[0];
        if (slot >= 0) {  /* a ring: the driver reads it at every chunk boundary */
            const int64_t at = slot % CAPACITY;
            returns[at] = running_return[i];
            lengths[at] = running_length[i];
            end_steps[at] = step[0];
        }
        count[0] = slot + 1;
        running_return[i] = 0.0;
        running_length[i] = 0;
    }
}
"""


@api.track_episodes.dispatch
def track_episodes(device: C, log, reward, terminated, truncated, step):
    params = ("reward", "terminated", "truncated", "step", *api.EPISODE_LOG_FIELDS)
    kernel = CKernel(
        "track_episodes",
        TRACK_EPISODES,
        params,
        params[4:],
        dict(N=reward.shape[0], CAPACITY=log.returns.shape[0]),
        reward.dtype,
    )
    launch(
        device,
        kernel,
        reward,
        terminated,
        truncated,
        step,
        *episode_log_arrays(log),
    )


_CLAMP_LOG_STD = f"fmin(fmax(@, {api.LOG_STD_MIN!r}), {api.LOG_STD_MAX!r})"
_HALF_LOG_2PI = repr(0.5 * math.log(2 * math.pi))

GAUSSIAN_TANH_SAMPLE = f"""
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < B; i++) {{
    double total = 0.0;
    for (int j = 0; j < A; j++) {{
        const double eps = dispatchrl_standard_normal(key, base + 2 * (uint64_t)(i * A + j));
        const double log_std = {_CLAMP_LOG_STD.replace("@", "(double)actor_out[i * 2 * A + A + j]")};
        const double a = tanh((double)actor_out[i * 2 * A + j] + exp(log_std) * eps);
        noise[i * A + j] = (T)eps;
        action[i * A + j] = (T)a;
        total += -0.5 * eps * eps - log_std - {_HALF_LOG_2PI} - log(1.0 - a * a + 1e-6);
    }}
    log_prob[i] = (T)total;
}}
rng[1] = base + 2 * (uint64_t)(B * A);
"""


c_method(api.gaussian_tanh_sample, GAUSSIAN_TANH_SAMPLE, axes("action", "B", "A"), "action", helpers=NORMAL_HELPERS)


GAUSSIAN_TANH_BACKWARD = f"""
const double scale = exp((double)log_alpha[0]) / B;
for (int i = 0; i < B; i++) {{
    for (int j = 0; j < A; j++) {{
        const double a = (double)action[i * A + j];
        const double one_minus = 1.0 - a * a;
        const double d_u = (double)d_action[i * A + j] * one_minus + scale * 2.0 * a * one_minus / (one_minus + 1e-6);
        const double raw = (double)actor_out[i * 2 * A + A + j];
        d_actor_out[i * 2 * A + j] = (T)d_u;
        d_actor_out[i * 2 * A + A + j] = ({api.LOG_STD_MIN!r} < raw && raw < {api.LOG_STD_MAX!r})
            ? (T)(d_u * exp(raw) * (double)noise[i * A + j] - scale) : (T)0;
    }}
}}
"""


c_method(api.gaussian_tanh_backward, GAUSSIAN_TANH_BACKWARD, axes("action", "B", "A"), "action")


SOFT_TD_TARGET = """
const double alpha = exp((double)log_alpha[0]);
for (int i = 0; i < N; i++) {
    const double q = q1[i] < q2[i] ? (double)q1[i] : (double)q2[i];
    const double soft_q = q - alpha * (double)log_prob[i];
    target[i] = (T)((double)reward[i] + (terminated[i] ? 0.0 : gamma * soft_q));
}
"""


c_method(api.soft_td_target, SOFT_TD_TARGET, axes("reward", "N"), "reward")


ENTROPY_TEMPERATURE_GRADIENT = """
double total = 0.0;
for (int i = 0; i < N; i++) total += (double)log_prob[i] + target_entropy;
grad[0] = (T)(-total / N);
"""


c_method(api.entropy_temperature_gradient, ENTROPY_TEMPERATURE_GRADIENT, axes("log_prob", "N"), "log_prob")


SELECT_MIN_ROWS = """
for (int i = 0; i < M; i++) {
    const T *source = a[i] <= b[i] ? x : y;
    for (int j = 0; j < N; j++) out[i * N + j] = source[i * N + j];
}
"""


c_method(api.select_min_rows, SELECT_MIN_ROWS, axes("x", "M", "N"), "x")


ACCUMULATE_CRITIC_STATS = """
double loss = 0.0, q = 0.0;
for (int i = 0; i < N; i++) {
    const double e1 = (double)q1[i] - (double)target[i], e2 = (double)q2[i] - (double)target[i];
    loss += e1 * e1 + e2 * e2;
    q += (double)q1[i] + (double)q2[i];
}
stats[0] += 1.0;
stats[1] += loss / N;
stats[2] += q / (2 * N);
"""


c_method(api.accumulate_critic_stats, ACCUMULATE_CRITIC_STATS, axes("q1", "N"), "q1")


ACCUMULATE_ACTOR_STATS = """
double total = 0.0;
for (int i = 0; i < N; i++) total += (double)q[i];
stats[0] += 1.0;
stats[1] -= total / N;
"""


c_method(api.accumulate_actor_stats, ACCUMULATE_ACTOR_STATS, axes("q", "N"), "q")


ACCUMULATE_SAC_ACTOR_STATS = """
const double alpha = exp((double)log_alpha[0]);
double loss = 0.0, log_prob_sum = 0.0;
for (int i = 0; i < N; i++) {
    const double q = q1[i] < q2[i] ? (double)q1[i] : (double)q2[i];
    loss += alpha * (double)log_prob[i] - q;
    log_prob_sum += (double)log_prob[i];
}
stats[0] += 1.0;
stats[1] += loss / N;
stats[2] -= log_prob_sum / N;
"""


c_method(api.accumulate_sac_actor_stats, ACCUMULATE_SAC_ACTOR_STATS, axes("q1", "N"), "q1")


# ---------------------------------------------------------------- DQN (the CPU row bodies)

_TAKEN_COLUMN = """
static inline int64_t dispatchrl_taken_column(double a, int64_t k)
{
    int64_t c = (int64_t)a;
    return c < 0 ? 0 : (c > k - 1 ? k - 1 : c);
}
"""

EPSILON_GREEDY = """
const uint64_t key = rng[0], base = rng[1];
const double ratio = (double)step[0] / decay_steps;
const double eps = initial_eps + (final_eps - initial_eps) * (ratio < 1.0 ? ratio : 1.0);
for (int i = 0; i < N; i++) {
    int64_t chosen;
    if (dispatchrl_uniform01(key, base + 2 * (uint64_t)i) < eps) {
        chosen = (int64_t)(dispatchrl_uniform01(key, base + 2 * (uint64_t)i + 1) * (double)K);
        if (chosen > K - 1) chosen = K - 1;
    } else {  /* the first maximum */
        chosen = 0;
        for (int j = 1; j < K; j++)
            if (q[i * K + j] > q[i * K + chosen]) chosen = j;
    }
    action[i] = (T)chosen;
}
rng[1] = base + 2 * (uint64_t)N;
"""


c_method(api.epsilon_greedy, EPSILON_GREEDY, axes("q", "N", "K"), "q", helpers=UNIFORM_HELPERS)


DQN_TARGETS = """
for (int i = 0; i < N; i++) {
    const T *by = (DOUBLE ? q_next_online : q_next_target) + i * K;  /* the row choosing the action */
    int chosen = 0;  /* its first maximum */
    for (int j = 1; j < K; j++)
        if (by[j] > by[chosen]) chosen = j;
    const double bootstrap = terminated[i] ? 0.0 : gamma * (double)q_next_target[i * K + chosen];
    target[i] = (T)((double)reward[i] + bootstrap);
}
"""


@api.dqn_targets.dispatch
def dqn_targets(device: C, q_next_online, q_next_target, reward, terminated, gamma, target, double=True):
    kernel = CKernel(
        "dqn_targets",
        DQN_TARGETS,
        ("q_next_online", "q_next_target", "reward", "terminated", "gamma", "target"),
        ("target",),
        dict(N=reward.shape[0], K=q_next_target.shape[1], DOUBLE=int(double)),
        reward.dtype,
        overwrites=("target",),
    )
    launch(device, kernel, q_next_online, q_next_target, reward, terminated, gamma, target)


Q_HUBER_GRADIENT = """
for (int i = 0; i < B; i++) {
    const int64_t taken = dispatchrl_taken_column((double)action[i], K);
    for (int j = 0; j < K; j++) d_q[i * K + j] = (T)0;
    const double error = (double)q[i * K + taken] - (double)target[i];
    d_q[i * K + taken] = (T)((error < -1.0 ? -1.0 : (error > 1.0 ? 1.0 : error)) / B);
}
"""


c_method(api.q_huber_gradient, Q_HUBER_GRADIENT, axes("q", "B", "K"), "q", helpers=(_TAKEN_COLUMN,))


ACCUMULATE_Q_STATS = """
double loss = 0.0, total = 0.0;
for (int i = 0; i < B; i++) {
    const double taken = (double)q[i * K + dispatchrl_taken_column((double)action[i], K)];
    const double error = fabs(taken - (double)target[i]);
    loss += error <= 1.0 ? 0.5 * error * error : error - 0.5;
    total += taken;
}
stats[0] += 1.0;
stats[1] += loss / B;
stats[2] += total / B;
"""


c_method(api.accumulate_q_stats, ACCUMULATE_Q_STATS, axes("q", "B", "K"), "q", helpers=(_TAKEN_COLUMN,))


TAKEN_Q = """
for (int i = 0; i < B; i++) out[i] = q[i * K + dispatchrl_taken_column((double)action[i], K)];
"""


c_method(api.taken_q, TAKEN_Q, axes("q", "B", "K"), "q", helpers=(_TAKEN_COLUMN,))


DUELING_Q = """
for (int i = 0; i < R; i++) {
    double total = 0.0;
    for (int j = 0; j < N; j++) total += (double)raw[i * (N + 1) + 1 + j];
    const double mean = total / N;
    for (int j = 0; j < N; j++)
        q[i * N + j] = (T)((double)raw[i * (N + 1)] + (double)raw[i * (N + 1) + 1 + j] - mean);
}
"""


c_method(api.dueling_q, DUELING_Q, axes("q", "R", "N"), "q")


DUELING_Q_BACKWARD = """
for (int i = 0; i < R; i++) {
    double total = 0.0;
    for (int j = 0; j < N; j++) total += (double)d_q[i * N + j];
    d_raw[i * (N + 1)] = (T)total;
    const double mean = total / N;
    for (int j = 0; j < N; j++) d_raw[i * (N + 1) + 1 + j] = (T)((double)d_q[i * N + j] - mean);
}
"""


c_method(api.dueling_q_backward, DUELING_Q_BACKWARD, axes("d_q", "R", "N"), "d_q")
