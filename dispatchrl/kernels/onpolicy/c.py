"""C methods of the on-policy (PPO) generic functions: C99 blocks with static shapes (see
:mod:`dispatchrl.backends.c`), so a PPO step on the C device, and the exported trainer, is
generated C from end to end.

They mirror the CPU kernels statement by statement: GAE in the rollout's dtype, statistics,
log-probabilities and the policy gradient in double, and the same counter-based SplitMix64 stream
positions for sampling and shuffling, so noise and permutations are the same numbers on every
device. Arrays are flat: (T, N) scalars are ``[t * N + n]``, (T·N, D) rows ``[row * D + d]``.
"""

from typing import Any

from ...backends.c import CKernel, axes, c_method
from ...devices import C
from ...staging import launch
from ..random.c import NORMAL_HELPERS, UNIFORM_HELPERS
from . import api
from .generic import GATHER_FIELDS, STORE_FIELDS, STORE_RECORDS, gather_arguments, store_arguments

__all__: list[str] = []

_HALF_LOG_2PI = repr(0.5 * api.LOG_2PI)
_EPS = repr(api.NORMALIZE_EPS)

GAE = """
const T g = (T)gamma, gl = (T)(gamma * lam), zero = (T)0;
{
    const int t = STEPS - 1; /* the last row: a cut rollout bootstraps, nothing to continue from */
    for (int j = 0; j < ENVS; j++) {
        const T v = value[t * ENVS + j];
        const T a = reward[t * ENVS + j] - v + (terminated[t * ENVS + j] ? zero : g * next_value[t * ENVS + j]);
        advantage[t * ENVS + j] = a;
        @RETURNS
    }
}
for (int t = STEPS - 2; t >= 0; t--) {
    for (int j = 0; j < ENVS; j++) {
        const T v = value[t * ENVS + j];
        const T ahead = advantage[(t + 1) * ENVS + j];
        const T a = reward[t * ENVS + j] - v + (terminated[t * ENVS + j] ? zero
            : g * next_value[t * ENVS + j] + (truncated[t * ENVS + j] ? zero : gl * ahead));
        advantage[t * ENVS + j] = a;
        @RETURNS
    }
}
"""


@api.gae.dispatch
def gae(device: C, reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns):
    params = ["reward", "value", "next_value", "terminated", "truncated", "gamma", "lam", "advantage"]
    args = [reward, value, next_value, terminated, truncated, gamma, lam, advantage]
    store = ""
    if returns is not None:
        params, args, store = params + ["returns"], args + [returns], "returns[t * ENVS + j] = a + v;"
    steps, envs = reward.shape
    kernel = CKernel(
        "gae" if returns is not None else "gae advantages",
        GAE.replace("@RETURNS", store),
        params,
        ("advantage", "returns"),
        dict(STEPS=steps, ENVS=envs),
        reward.dtype,
        overwrites=params[7:],
    )
    launch(device, kernel, *args)


DISCOUNTED_RETURNS = """
if (NSTEP >= STEPS) { /* return-to-go: one backward sweep */
    for (int t = STEPS - 1; t >= 0; t--) {
        for (int j = 0; j < ENVS; j++) {
            const int i = t * ENVS + j;
            double tail;
            if (terminated[i]) tail = 0.0;
            else if (truncated[i] || t == STEPS - 1) tail = (double)next_value[i];
            else tail = (double)returns[i + ENVS];
            returns[i] = (T)((double)reward[i] + gamma * tail);
        }
    }
} else {
    for (int t = 0; t < STEPS; t++) {
        for (int j = 0; j < ENVS; j++) {
            double total = 0.0, discount = 1.0;
            const int last = NSTEP < STEPS - t ? NSTEP : STEPS - t;
            for (int k = 0; k < last; k++) {
                const int row = t + k, i = row * ENVS + j;
                total += discount * (double)reward[i];
                discount *= gamma;
                if (terminated[i]) break;
                if (truncated[i] || k == NSTEP - 1 || row == STEPS - 1) {
                    total += discount * (double)next_value[i];
                    break;
                }
            }
            returns[t * ENVS + j] = (T)total;
        }
    }
}
"""


@api.discounted_returns.dispatch
def discounted_returns(device: C, reward, next_value, terminated, truncated, gamma, returns, n):
    steps, envs = reward.shape
    kernel = CKernel(
        "discounted_returns",
        DISCOUNTED_RETURNS,
        ("reward", "next_value", "terminated", "truncated", "gamma", "returns"),
        ("returns",),
        dict(STEPS=steps, ENVS=envs, NSTEP=min(n, steps)),
        reward.dtype,
        overwrites=("returns",),
    )
    launch(device, kernel, reward, next_value, terminated, truncated, gamma, returns)


# x - x is 0 for finite x and NaN for NaN or inf (no libm, and no fast-math to fold it away)
RUNNING_STATS_UPDATE = """
const double old = count[0];
const double total = old + ROWS;
for (int d = 0; d < DIM; d++) {
    double s = 0.0;
    int finite = 1;
    for (int i = 0; i < ROWS; i++) {
        const double xi = (double)x[i * DIM + d];
        const double z = xi - xi;
        if (z != z) finite = 0;
        s += xi;
    }
    if (!finite) {
        nonfinite[0] += 1;
        continue;
    }
    const double batch_mean = s / ROWS;
    double m2 = 0.0;
    for (int i = 0; i < ROWS; i++) {
        const double dx = (double)x[i * DIM + d] - batch_mean;
        m2 += dx * dx;
    }
    const double delta = batch_mean - mean[d];
    mean[d] += delta * ROWS / total;
    var[d] = (var[d] * old + m2 + delta * delta * old * ROWS / total) / total;
}
count[0] = total;
"""


@api.running_stats_update.dispatch
def running_stats_update(device: C, stats, x):
    kernel = CKernel(
        "running_stats_update",
        RUNNING_STATS_UPDATE,
        ("x", "mean", "var", "count", "nonfinite"),
        ("mean", "var", "count", "nonfinite"),
        dict(ROWS=x.shape[0], DIM=x.shape[1]),
        x.dtype,
    )
    launch(device, kernel, x, stats.mean, stats.var, stats.count, stats.nonfinite)


NORMALIZE_OBSERVATIONS = f"""
for (int i = 0; i < ROWS; i++)
    for (int d = 0; d < DIM; d++)
        out[i * DIM + d] = (T)(((double)x[i * DIM + d] - mean[d]) / sqrt(var[d] + {_EPS}));
"""


@api.normalize_observations.dispatch
def normalize_observations(device: C, stats, x, out):
    kernel = CKernel(
        "normalize_observations",
        NORMALIZE_OBSERVATIONS,
        ("x", "mean", "var", "out"),
        ("out",),
        dict(ROWS=x.shape[0], DIM=x.shape[1]),
        out.dtype,
        overwrites=("out",),
    )
    launch(device, kernel, x, stats.mean, stats.var, out)


SCALE_BY_RUNNING_STD = f"""
const double std = sqrt(var[0] + {_EPS});
for (int i = 0; i < SIZE; i++) x[i] = (T)(DIVIDE ? (double)x[i] / std : (double)x[i] * std);
"""


c_method(
    api.scale_by_running_std,
    SCALE_BY_RUNNING_STD,
    lambda arg: dict(SIZE=arg.x.size, DIVIDE=int(arg.divide)),
    "x",
    constants=("divide",),
)


GAUSSIAN_SAMPLE = f"""
const uint64_t key = rng[0], base = rng[1];
double std[A];
for (int j = 0; j < A; j++) std[j] = exp((double)log_std[j]);
for (int i = 0; i < B; i++) {{
    double total = 0.0;
    for (int j = 0; j < A; j++) {{
        const double eps = dispatchrl_standard_normal(key, base + 2 * (uint64_t)(i * A + j));
        const double ls = (double)log_std[j];
        action[i * A + j] = (T)((double)mean[i * A + j] + std[j] * eps);
        total += -0.5 * eps * eps - ls - {_HALF_LOG_2PI};
    }}
    log_prob[i] = (T)total;
}}
rng[1] = base + 2 * (uint64_t)(B * A);
"""


c_method(api.gaussian_sample, GAUSSIAN_SAMPLE, axes("mean", "B", "A"), "mean", helpers=NORMAL_HELPERS)


GAUSSIAN_LOG_PROB = f"""
for (int i = 0; i < B; i++) {{
    double total = 0.0;
    for (int j = 0; j < A; j++) {{
        const double ls = (double)log_std[j];
        const double z = ((double)action[i * A + j] - (double)mean[i * A + j]) * exp(-ls);
        total += -0.5 * z * z - ls - {_HALF_LOG_2PI};
    }}
    log_prob[i] = (T)total;
}}
"""


c_method(api.gaussian_log_prob, GAUSSIAN_LOG_PROB, axes("mean", "B", "A"), "mean")


#: Â = (advantage - shift) * scale, standardised over the minibatch with normalize (both policy gradients)
ADVANTAGE_STANDARDISATION = """
double shift = 0.0, scale = 1.0;
if (normalize) {
    double s = 0.0;
    for (int i = 0; i < B; i++) s += (double)advantage[i];
    shift = s / B;
    double s2 = 0.0;
    for (int i = 0; i < B; i++) {
        const double d = (double)advantage[i] - shift;
        s2 += d * d;
    }
    scale = 1.0 / (sqrt(s2 / B) + 1e-8);
}
"""

#: a row's clipped surrogate min(ρ Â, clip(ρ, 1 ± clip) Â), its clipped count and g = ∂loss/∂log π(a)
#: (the unclipped term carries the gradient): both policy gradients, after ratio and adv
CLIPPED_SURROGATE = """\
    const double unclipped = ratio * adv;
    const double low = 1.0 - clip, high = 1.0 + clip;
    const double clipped = (ratio < low ? low : ratio > high ? high : ratio) * adv;
    if (fabs(ratio - 1.0) > clip) clipped_count += 1;
    double g;
    if (unclipped <= clipped) {
        surrogate_total += unclipped;
        g = -adv * ratio / B;
    } else {
        surrogate_total += clipped;
        g = 0.0;
    }"""

CATEGORICAL_SAMPLE = """
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < B; i++) {
    double m = (double)logits[i * K];
    for (int k = 1; k < K; k++) m = fmax(m, (double)logits[i * K + k]);
    double total = 0.0;
    for (int k = 0; k < K; k++) total += exp((double)logits[i * K + k] - m);
    const double lse = m + log(total);
    const double u = dispatchrl_uniform01(key, base + (uint64_t)i);
    int chosen = K - 1;
    double cdf = 0.0;
    for (int k = 0; k < K; k++) {
        cdf += exp((double)logits[i * K + k] - lse);
        if (u < cdf) {
            chosen = k;
            break;
        }
    }
    action[i] = (T)chosen;
    log_prob[i] = (T)((double)logits[i * K + chosen] - lse);
}
rng[1] = base + (uint64_t)B;
"""


c_method(api.categorical_sample, CATEGORICAL_SAMPLE, axes("logits", "B", "K"), "logits", helpers=UNIFORM_HELPERS)


PPO_CATEGORICAL_GRADIENT = (
    ADVANTAGE_STANDARDISATION
    + f"""
double kl_total = 0.0, surrogate_total = 0.0, entropy_total = 0.0;
int64_t clipped_count = 0;
for (int i = 0; i < B; i++) {{
    double m = (double)logits[i * K], old_m = (double)old_logits[i * K];
    for (int k = 1; k < K; k++) {{
        m = fmax(m, (double)logits[i * K + k]);
        old_m = fmax(old_m, (double)old_logits[i * K + k]);
    }}
    double total = 0.0, old_total = 0.0;
    for (int k = 0; k < K; k++) {{
        total += exp((double)logits[i * K + k] - m);
        old_total += exp((double)old_logits[i * K + k] - old_m);
    }}
    const double lse = m + log(total), old_lse = old_m + log(old_total);
    int64_t a = (int64_t)action[i];
    a = a < 0 ? 0 : a > K - 1 ? K - 1 : a;
    double entropy = 0.0, kl = 0.0;
    for (int k = 0; k < K; k++) {{
        const double lp_k = (double)logits[i * K + k] - lse;
        const double old_lp_k = (double)old_logits[i * K + k] - old_lse;
        entropy -= exp(lp_k) * lp_k;
        kl += exp(old_lp_k) * (old_lp_k - lp_k);
    }}
    kl_total += kl;
    entropy_total += entropy;
    const double adv = ((double)advantage[i] - shift) * scale;
    const double ratio = exp((double)logits[i * K + a] - lse - (double)old_log_prob[i]);
{CLIPPED_SURROGATE}
    for (int k = 0; k < K; k++) {{
        const double lp_k = (double)logits[i * K + k] - lse;
        const double p = exp(lp_k);
        const double hit = k == a ? 1.0 : 0.0;
        d_logits[i * K + k] = (T)(g * (hit - p) + entropy_coef * p * (lp_k + entropy) / B);
    }}
}}
info[0] = kl_total / B;
info[1] = surrogate_total / B;
info[2] = entropy_total / B;
info[3] = (double)clipped_count / B;
"""
)


PPO_POLICY_GRADIENT = (
    ADVANTAGE_STANDARDISATION
    + f"""
double grad_log_std[A], inv_std[A], old_var[A], inv_var[A];
for (int j = 0; j < A; j++) {{
    /* the per-column exps once, not once per row (the same values: the same calls on the same inputs) */
    const double ls = (double)log_std[j];
    grad_log_std[j] = 0.0;
    inv_std[j] = exp(-ls);
    old_var[j] = exp(2 * (double)old_log_std[j]);
    inv_var[j] = exp(-2 * ls);
}}
double kl_total = 0.0, surrogate_total = 0.0;
int64_t clipped_count = 0;
for (int i = 0; i < B; i++) {{
    double lp = 0.0, kl = 0.0;
    for (int j = 0; j < A; j++) {{
        const double ls = (double)log_std[j];
        const double z = ((double)action[i * A + j] - (double)mean[i * A + j]) * inv_std[j];
        lp += -0.5 * z * z - ls - {_HALF_LOG_2PI};
        const double old_ls = (double)old_log_std[j];
        const double diff = (double)mean[i * A + j] - (double)old_mean[i * A + j];
        kl += ls - old_ls + (old_var[j] + diff * diff) * 0.5 * inv_var[j] - 0.5;
    }}
    kl_total += kl;
    const double adv = ((double)advantage[i] - shift) * scale;
    const double ratio = exp(lp - (double)old_log_prob[i]);
{CLIPPED_SURROGATE}
    for (int j = 0; j < A; j++) {{
        const double z = ((double)action[i * A + j] - (double)mean[i * A + j]) * inv_std[j];
        d_mean[i * A + j] = (T)(g * z * inv_std[j]);
        grad_log_std[j] += g * (z * z - 1.0);
    }}
}}
double entropy = 0.0;
for (int j = 0; j < A; j++) {{
    d_log_std[j] = (T)(grad_log_std[j] - entropy_coef);
    entropy += (double)log_std[j] + 0.5 * ({api.LOG_2PI!r} + 1.0);
}}
info[0] = kl_total / B;
info[1] = surrogate_total / B;
info[2] = entropy;
info[3] = (double)clipped_count / B;
"""
)


def _policy_gradient_method(function, body, columns: str) -> None:
    """Register the C method of a PPO policy gradient: one CKernel of ``body`` over the declaration's
    parameters (``normalize_advantage`` is ``normalize`` in the bodies) writing its outputs; B rows
    and ``columns`` columns of the first argument (the means or the logits)."""
    params = tuple("normalize" if name == "normalize_advantage" else name for name in function.parameters[1:])

    def method(device: C, first, *args) -> Any:  # Any: plum keeps caching the call (see dispatch)
        shape = {"B": first.shape[0], columns: first.shape[1]}
        kernel = CKernel(
            function.__name__, body, params, function.outputs, shape, first.dtype, overwrites=function.outputs
        )
        launch(device, kernel, first, *args)

    function.dispatch(method)


_policy_gradient_method(api.ppo_categorical_gradient, PPO_CATEGORICAL_GRADIENT, "K")
_policy_gradient_method(api.ppo_policy_gradient, PPO_POLICY_GRADIENT, "A")


ADAPTIVE_LEARNING_RATE = """
if (kl[0] < 0.5 * target) {
    const double v = lr[0] * factor;
    lr[0] = v < low ? low : v > high ? high : v;
} else if (kl[0] > 2.0 * target) {
    const double v = lr[0] / factor;
    lr[0] = v < low ? low : v > high ? high : v;
}
"""


c_method(api.adaptive_learning_rate, ADAPTIVE_LEARNING_RATE, lambda arg: {}, "lr")


ROLLOUT_STORE = """
const int64_t t = ((step[0] % STEPS) + STEPS) % STEPS;
for (int n = 0; n < N; n++) {
    const int64_t row = t * N + n;
    for (int d = 0; d < O; d++) r_obs[row * O + d] = obs[n * O + d];
    for (int d = 0; d < A; d++) r_action[row * A + d] = action[n * A + d];
    for (int d = 0; d < M; d++) r_mean[row * M + d] = mean[n * M + d]; /* means or logits */
    r_log_prob[row] = log_prob[n];
    r_value[row] = value[n];
    r_next_value[row] = next_value[n];
    r_reward[row] = reward[n];
    r_terminated[row] = terminated[n];
    r_truncated[row] = truncated[n];
}
"""

_STORE_OUTPUTS = STORE_RECORDS["rollout"]


@api.rollout_store.dispatch
def rollout_store(device: C, rollout, step, *step_arrays):
    # step_arrays: the step's arrays in STORE_FIELDS order
    obs, action, mean = step_arrays[:3]
    steps, envs = rollout.reward.shape
    kernel = CKernel(
        "rollout_store",
        ROLLOUT_STORE,
        ("step", *STORE_FIELDS, *_STORE_OUTPUTS),
        _STORE_OUTPUTS,
        dict(STEPS=steps, N=envs, O=obs.shape[1], A=action.shape[1], M=mean.shape[1]),
        rollout.reward.dtype,
    )
    launch(device, kernel, step, *step_arrays, *store_arguments(rollout))


RANDOM_PERMUTATION = """
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < SIZE; i++) perm[i] = i;
for (int i = SIZE - 1; i > 0; i--) {
    int64_t j = (int64_t)(dispatchrl_uniform01(key, base + (uint64_t)i) * (double)(i + 1));
    if (j > i) j = i;
    const int64_t swap = perm[i];
    perm[i] = perm[j];
    perm[j] = swap;
}
rng[1] = base + (uint64_t)SIZE;
"""


c_method(api.random_permutation, RANDOM_PERMUTATION, axes("perm", "SIZE"), "perm", helpers=UNIFORM_HELPERS)


GATHER_MINIBATCH = """
const int64_t k = ((counter[0] % (ROWS / B)) + ROWS / B) % (ROWS / B);
for (int i = 0; i < B; i++) {
    const int64_t src = perm[k * B + i];
    for (int d = 0; d < O; d++) b_obs[i * O + d] = obs[src * O + d];
    for (int d = 0; d < A; d++) b_action[i * A + d] = action[src * A + d];
    for (int d = 0; d < M; d++) b_mean[i * M + d] = mean[src * M + d];
    b_log_prob[i] = log_prob[src];
    b_advantage[i] = advantage[src];
    b_returns[i] = returns[src];
}
"""


@api.gather_minibatch.dispatch
def gather_minibatch(device: C, rollout, perm, counter, batch):
    params = ("perm", "counter", *GATHER_FIELDS, *("b_" + name for name in GATHER_FIELDS))
    kernel = CKernel(
        "gather_minibatch",
        GATHER_MINIBATCH,
        params,
        params[8:],
        dict(
            ROWS=perm.shape[0],
            B=batch.obs.shape[0],
            O=batch.obs.shape[1],
            A=batch.action.shape[1],
            M=batch.mean.shape[1],
        ),
        rollout.reward.dtype,
        overwrites=params[8:],
    )
    launch(device, kernel, perm, counter, *gather_arguments(rollout, batch))


EXPLAINED_VARIANCE = """
double sum_y = 0.0, sum_r = 0.0;
for (int i = 0; i < SIZE; i++) {
    sum_y += (double)returns[i];
    sum_r += (double)returns[i] - (double)value[i];
}
const double mean_y = sum_y / SIZE, mean_r = sum_r / SIZE;
double var_y = 0.0, var_r = 0.0;
for (int i = 0; i < SIZE; i++) {
    const double dy = (double)returns[i] - mean_y, dr = (double)returns[i] - (double)value[i] - mean_r;
    var_y += dy * dy;
    var_r += dr * dr;
}
out[0] = var_y > 0.0 ? 1.0 - var_r / var_y : 0.0;
"""


c_method(api.explained_variance, EXPLAINED_VARIANCE, lambda arg: {"SIZE": arg.value.size}, "value")
