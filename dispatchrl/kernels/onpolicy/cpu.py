"""CPU (Numba) methods of the PPO generic functions.

GAE runs backwards in time with the envs as the inner, contiguous loop, so every time step is
one vectorised sweep over N envs (a (T, N) layout; Tianshou's flat buffer recursion is serial)."""

import math

import numpy as np
from numba import njit

from ...backends.cpu import (
    JIT_EXACT,
    JIT_EXACT_INLINED,
    JIT_EXACT_INNER,
    JIT_FAST,
    JIT_FAST_INNER,
    lanes_reduce,
    lanes_total,
    one_lane,
    per_index,
)
from ..random.cpu import standard_normal, uniform01
from . import api
from .generic import STORE_RECORDS

__all__ = ["categorical_sample_at", "n_step_return", "ppo_categorical_gradient_kernel", "store_env_step"]

_LOG_2PI = api.LOG_2PI
_NORMALIZE_EPS = api.NORMALIZE_EPS


@njit(**JIT_FAST)
def gae_kernel(reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns):
    steps, envs = reward.shape
    real = reward.dtype.type
    g, gl, zero = real(gamma), real(gamma * lam), real(0)
    t = steps - 1
    for j in range(envs):  # the last row: a cut rollout bootstraps, nothing to continue from
        v = value[t, j]
        a = reward[t, j] - v + (zero if terminated[t, j] else g * next_value[t, j])
        advantage[t, j] = a
        if returns is not None:  # None is a compile-time type: the branch is pruned
            returns[t, j] = a + v
    for t in range(steps - 2, -1, -1):
        # row views: one contiguous, branch-free (select) sweep over the envs per time step
        r, va, nv, te, tr = reward[t], value[t], next_value[t], terminated[t], truncated[t]
        ahead, adv = advantage[t + 1], advantage[t]
        for j in range(envs):
            v = va[j]
            a = r[j] - v + (zero if te[j] else g * nv[j] + (zero if tr[j] else gl * ahead[j]))
            adv[j] = a
            if returns is not None:
                returns[t, j] = a + v


@njit(**JIT_FAST_INNER)
def n_step_return(reward, next_value, terminated, truncated, gamma, t, j, n):
    """G_t of env j: up to n rewards, stopping at the episode's or the rollout's end; also
    compiled as the CUDA device function, so both backends share it."""
    steps = reward.shape[0]
    total = 0.0
    discount = 1.0
    for k in range(min(n, steps - t)):
        i = t + k
        total += discount * reward[i, j]
        discount *= gamma
        if terminated[i, j]:
            break
        if truncated[i, j] or k == n - 1 or i == steps - 1:
            total += discount * next_value[i, j]
            break
    return total


@njit(**JIT_FAST)
def discounted_returns_kernel(reward, next_value, terminated, truncated, gamma, returns, n):
    steps, envs = reward.shape
    if n >= steps:  # return-to-go: one backward sweep
        for t in range(steps - 1, -1, -1):
            for j in range(envs):
                if terminated[t, j]:
                    tail = 0.0
                elif truncated[t, j] or t == steps - 1:
                    tail = next_value[t, j]
                else:
                    tail = returns[t + 1, j]
                returns[t, j] = reward[t, j] + gamma * tail
        return
    for t in range(steps):
        for j in range(envs):
            returns[t, j] = n_step_return(reward, next_value, terminated, truncated, gamma, t, j, n)


@njit(**JIT_EXACT_INNER)
def count_nonfinite(nonfinite) -> None:
    """One more column met a non-finite value (CUDA's twin adds atomically: columns run at once)."""
    nonfinite[0] += 1


@njit(**JIT_EXACT_INNER)
def running_stats_update_at(d, x, mean, var, count, nonfinite) -> None:
    """Column ``d`` of the running statistics merged with the batch ``x`` (Chan et al.), from the
    count before it (the kernel adds the batch's rows after every column); a column with a
    non-finite value is left as it was and counted."""
    rows = x.shape[0]
    old = count[0]
    total = old + rows
    s = 0.0
    finite = True
    for i in range(rows):
        xi = np.float64(x[i, d])
        if math.isnan(xi) or math.isinf(xi):
            finite = False
        s += xi
    if not finite:
        count_nonfinite(nonfinite)
        return
    batch_mean = s / rows
    m2 = 0.0
    for i in range(rows):
        dx = np.float64(x[i, d]) - batch_mean
        m2 += dx * dx
    delta = batch_mean - mean[d]
    mean[d] += delta * rows / total
    var[d] = (var[d] * old + m2 + delta * delta * old * rows / total) / total


running_stats_update_kernel = per_index(
    running_stats_update_at, "x.shape[1]", "running_stats_update_kernel", after=["count[0] += x.shape[0]"]
)


@njit(**JIT_EXACT_INNER)
def scale_by_running_std_at(i, var, x, divide) -> None:
    """x[i] times (or over) the running std, in float64: the one body of the CPU loop and the
    CUDA kernels (per_index)."""
    std = math.sqrt(var[0] + api.NORMALIZE_EPS)
    v = np.float64(x[i])
    x[i] = x.dtype.type(v / std if divide else v * std)


scale_by_running_std_kernel = per_index(
    scale_by_running_std_at, "x.size", "scale_by_running_std_kernel", before=["x = x.reshape(x.size)"]
)


@njit(**JIT_FAST)
def normalize_observations_kernel(x, mean, var, out):
    rows, dim = x.shape
    real = out.dtype.type
    for i in range(rows):
        for d in range(dim):
            out[i, d] = real((x[i, d] - mean[d]) / math.sqrt(var[d] + _NORMALIZE_EPS))


@njit(**JIT_EXACT)
def gaussian_sample_kernel(rng, mean, log_std, action, log_prob):
    batch, a_dim = mean.shape
    key, base = rng[0], rng[1]
    for i in range(batch):
        total = 0.0
        for j in range(a_dim):
            eps = standard_normal(key, base + np.uint64(2 * (i * a_dim + j)))
            ls = np.float64(log_std[j])
            action[i, j] = mean[i, j] + math.exp(ls) * eps
            total += -0.5 * eps * eps - ls - 0.5 * _LOG_2PI
        log_prob[i] = total
    rng[1] = base + np.uint64(2 * batch * a_dim)


@njit(**JIT_FAST_INNER)
def gaussian_log_prob_at(i, mean, log_std, action, log_prob) -> None:
    """Row ``i``'s log π(a) under the diagonal Gaussian (mean, exp(log_std))."""
    total = 0.0
    for j in range(mean.shape[1]):
        ls = np.float64(log_std[j])
        z = (np.float64(action[i, j]) - mean[i, j]) * math.exp(-ls)
        total += -0.5 * z * z - ls - 0.5 * _LOG_2PI
    log_prob[i] = total


gaussian_log_prob_kernel = per_index(
    gaussian_log_prob_at, "mean.shape[0]", "gaussian_log_prob_kernel", options="JIT_FAST"
)


@njit(**JIT_FAST)
def advantage_standardisation(advantage, normalize, lane, lanes, partial):
    """``(shift, scale)`` with ``(advantage - shift) * scale`` standardised over the minibatch
    (mean 0, std 1), or (0, 1) without ``normalize``: both policy gradients' Â. Summed by
    ``lanes`` lanes (see :func:`dispatchrl.backends.cpu.one_lane`; one: ``partial`` unused)."""
    batch = advantage.shape[0]
    first = lane if lane < lanes else batch
    shift, scale = 0.0, 1.0
    if normalize:
        s = 0.0
        for i in range(first, batch, lanes):
            s += advantage[i]
        shift = lanes_total(partial, s, lane, lanes) / batch
        s2 = 0.0
        for i in range(first, batch, lanes):
            d = advantage[i] - shift
            s2 += d * d
        scale = 1.0 / (math.sqrt(lanes_total(partial, s2, lane, lanes) / batch) + 1e-8)
    return shift, scale


@njit(**JIT_FAST_INNER)
def gaussian_log_prob_and_kl(i, mean, log_std, action, old_mean, old_log_std):
    """Row i's log π(a) under the diagonal Gaussian (mean, exp(log_std)) and KL(π_old ‖ π) from the
    rollout's Gaussian (old_mean, exp(old_log_std)), summed over the action's components."""
    lp, kl = 0.0, 0.0
    for j in range(mean.shape[1]):
        ls = np.float64(log_std[j])
        z = (np.float64(action[i, j]) - mean[i, j]) * math.exp(-ls)
        lp += -0.5 * z * z - ls - 0.5 * _LOG_2PI
        old_ls = np.float64(old_log_std[j])
        diff = np.float64(mean[i, j]) - old_mean[i, j]
        kl += ls - old_ls + (math.exp(2 * old_ls) + diff * diff) * 0.5 * math.exp(-2 * ls) - 0.5
    return lp, kl


@njit(**JIT_FAST_INNER)
def clipped_surrogate(ratio, adv, clip, batch):
    """One sample of PPO's clipped surrogate: its term ``min(ρ Â, clip(ρ, 1 ± clip) Â)``, ``g`` =
    ∂(−term / batch)/∂log π(a) (0 where the clipped side is the minimum: no gradient), and
    whether ρ left [1 − clip, 1 + clip]."""
    unclipped = ratio * adv
    clipped = min(max(ratio, 1.0 - clip), 1.0 + clip) * adv
    outside = abs(ratio - 1.0) > clip
    if unclipped <= clipped:
        return unclipped, -adv * ratio / batch, outside
    return clipped, 0.0, outside


@njit(**JIT_FAST_INNER)
def ppo_policy_gradient_lanes(
    lane,
    lanes,
    partial,
    mean,
    log_std,
    action,
    old_log_prob,
    advantage,
    old_mean,
    old_log_std,
    clip,
    entropy_coef,
    normalize,
    d_mean,
    d_log_std,
    info,
):
    """The Gaussian policy gradient by ``lanes`` cooperating lanes (CPU: one, CUDA: a block's
    threads; see :func:`dispatchrl.backends.cpu.one_lane`): lane ``lane`` takes rows lane, lane +
    lanes, ...; its partial sums (A log-std gradients, KL, surrogate, clipped count) go to
    ``partial[c * lanes + lane]``, which lanes_reduce sums per column for lane 0 to finish."""
    batch, a_dim = mean.shape
    first = lane if lane < lanes else batch  # lanes past the reduction's take no rows
    shift, scale = advantage_standardisation(advantage, normalize, lane, lanes, partial)
    if lane < lanes:
        for j in range(a_dim):
            partial[j * lanes + lane] = 0.0
    kl_total, surrogate_total, clipped_count = 0.0, 0.0, 0.0
    for i in range(first, batch, lanes):
        lp, kl = gaussian_log_prob_and_kl(i, mean, log_std, action, old_mean, old_log_std)
        kl_total += kl
        term, g, outside = clipped_surrogate(
            math.exp(lp - old_log_prob[i]), (advantage[i] - shift) * scale, clip, batch
        )
        surrogate_total += term
        if outside:
            clipped_count += 1.0
        for j in range(a_dim):
            inv_std = math.exp(-np.float64(log_std[j]))
            z = (np.float64(action[i, j]) - mean[i, j]) * inv_std
            d_mean[i, j] = g * z * inv_std
            partial[j * lanes + lane] += g * (z * z - 1.0)
    if lane < lanes:
        partial[a_dim * lanes + lane] = kl_total
        partial[(a_dim + 1) * lanes + lane] = surrogate_total
        partial[(a_dim + 2) * lanes + lane] = clipped_count
    lanes_reduce(partial, a_dim + 3, lane, lanes)
    if lane == 0:
        entropy = 0.0
        for j in range(a_dim):
            d_log_std[j] = partial[j * lanes] - entropy_coef
            entropy += np.float64(log_std[j]) + 0.5 * (_LOG_2PI + 1.0)
        info[0] = partial[a_dim * lanes] / batch
        info[1] = partial[(a_dim + 1) * lanes] / batch
        info[2] = entropy
        info[3] = partial[(a_dim + 2) * lanes] / batch


ppo_policy_gradient_kernel = one_lane(ppo_policy_gradient_lanes, "ppo_policy_gradient_kernel", "mean.shape[1] + 3")


@njit(**JIT_EXACT_INNER)
def categorical_sample_at(i, rng, logits, action, log_prob):
    """Row ``i`` of categorical_sample (the CUDA kernel's element body too): the first index whose
    cumulative softmax probability exceeds one uniform draw (the last where rounding leaves the
    sum below it), in float64."""
    k_n = logits.shape[1]
    m = np.float64(logits[i, 0])
    for k in range(1, k_n):
        m = max(m, np.float64(logits[i, k]))
    total = 0.0
    for k in range(k_n):
        total += math.exp(np.float64(logits[i, k]) - m)
    lse = m + math.log(total)
    u = uniform01(rng[0], rng[1] + np.uint64(i))
    chosen = k_n - 1
    cdf = 0.0
    for k in range(k_n):
        cdf += math.exp(np.float64(logits[i, k]) - lse)
        if u < cdf:
            chosen = k
            break
    action[i, 0] = chosen
    log_prob[i] = np.float64(logits[i, chosen]) - lse


@njit(**JIT_EXACT)
def categorical_sample_kernel(rng, logits, action, log_prob):
    for i in range(logits.shape[0]):
        categorical_sample_at(i, rng, logits, action, log_prob)
    rng[1] = rng[1] + np.uint64(logits.shape[0])


@njit(**JIT_FAST)
def ppo_categorical_gradient_kernel(
    logits, action, old_log_prob, advantage, old_logits, clip, entropy_coef, normalize, d_logits, info
):
    """One thread's whole minibatch (CUDA runs it once, as bookkeeping-sized work: B × K is small)."""
    batch, k_n = logits.shape
    shift, scale = advantage_standardisation(advantage, normalize, 0, 1, info)  # one lane: info unused
    kl_total, surrogate_total, entropy_total, clipped_count = 0.0, 0.0, 0.0, 0
    for i in range(batch):
        m, old_m = np.float64(logits[i, 0]), np.float64(old_logits[i, 0])
        for k in range(1, k_n):
            m = max(m, np.float64(logits[i, k]))
            old_m = max(old_m, np.float64(old_logits[i, k]))
        total, old_total = 0.0, 0.0
        for k in range(k_n):
            total += math.exp(np.float64(logits[i, k]) - m)
            old_total += math.exp(np.float64(old_logits[i, k]) - old_m)
        lse, old_lse = m + math.log(total), old_m + math.log(old_total)
        a = min(max(np.int64(action[i, 0]), 0), k_n - 1)
        entropy, kl = 0.0, 0.0
        for k in range(k_n):
            lp_k = np.float64(logits[i, k]) - lse
            old_lp_k = np.float64(old_logits[i, k]) - old_lse
            entropy -= math.exp(lp_k) * lp_k
            kl += math.exp(old_lp_k) * (old_lp_k - lp_k)
        kl_total += kl
        entropy_total += entropy
        ratio = math.exp(np.float64(logits[i, a]) - lse - old_log_prob[i])
        term, g, outside = clipped_surrogate(ratio, (advantage[i] - shift) * scale, clip, batch)
        surrogate_total += term
        clipped_count += outside
        for k in range(k_n):
            lp_k = np.float64(logits[i, k]) - lse
            p = math.exp(lp_k)
            # ∂log π(a)/∂l_k = 1[k = a] − p_k; ∂H/∂l_k = −p_k (log p_k + H)
            hit = 1.0 if k == a else 0.0
            d_logits[i, k] = g * (hit - p) + entropy_coef * p * (lp_k + entropy) / batch
    info[0] = kl_total / batch
    info[1] = surrogate_total / batch
    info[2] = entropy_total / batch
    info[3] = clipped_count / batch


@njit(**JIT_EXACT)
def adaptive_learning_rate_kernel(kl, lr, target, factor, low, high):
    if kl[0] < 0.5 * target:
        lr[0] = min(max(lr[0] * factor, low), high)
    elif kl[0] > 2.0 * target:
        lr[0] = min(max(lr[0] / factor, low), high)


@njit(**JIT_EXACT_INLINED)
def store_env_step(n, step, env_step, rollout):
    """Write env n's step into the rollout's row block step[0] mod T; also compiled as the CUDA
    device function, so both backends share it (records: STORE_RECORDS)."""
    obs, action, mean, log_prob, value, next_value, reward, terminated, truncated = env_step
    r_obs, r_action, r_mean, r_log_prob, r_value, r_next_value, r_reward, r_terminated, r_truncated = rollout
    steps, envs = r_reward.shape
    t = step[0] % steps
    row = t * envs + n
    for d in range(obs.shape[1]):
        r_obs[row, d] = obs[n, d]
    for d in range(action.shape[1]):
        r_action[row, d] = action[n, d]
    for d in range(mean.shape[1]):  # a Gaussian's means, or a categorical policy's logits
        r_mean[row, d] = mean[n, d]
    r_log_prob[t, n] = log_prob[n]
    r_value[t, n] = value[n, 0]
    r_next_value[t, n] = next_value[n, 0]
    r_reward[t, n] = reward[n]
    r_terminated[t, n] = terminated[n]
    r_truncated[t, n] = truncated[n]


rollout_store_kernel = per_index(store_env_step, "obs.shape[0]", "rollout_store_kernel", fields=STORE_RECORDS)


@njit(**JIT_EXACT)
def random_permutation_kernel(rng, perm):
    n = perm.shape[0]
    key, base = rng[0], rng[1]
    for i in range(n):
        perm[i] = i
    for i in range(n - 1, 0, -1):
        j = min(np.int64(uniform01(key, base + np.uint64(i)) * (i + 1)), i)
        tmp = perm[i]
        perm[i] = perm[j]
        perm[j] = tmp
    rng[1] = base + np.uint64(n)


@njit(**JIT_EXACT_INLINED)
def gather_minibatch_at(i, perm, counter, rollout, minibatch):
    """Row ``i`` of the minibatch ``counter[0]`` of the permutation (records: GATHER_RECORDS; the
    rollout's log_prob, advantage and returns flat)."""
    obs, action, mean, log_prob, advantage, returns = rollout
    b_obs, b_action, b_mean, b_log_prob, b_advantage, b_returns = minibatch
    rows = b_obs.shape[0]
    k = counter[0] % (perm.shape[0] // rows)
    src = perm[k * rows + i]
    for d in range(obs.shape[1]):
        b_obs[i, d] = obs[src, d]
    for d in range(action.shape[1]):
        b_action[i, d] = action[src, d]
    for d in range(mean.shape[1]):
        b_mean[i, d] = mean[src, d]
    b_log_prob[i] = log_prob[src]
    b_advantage[i] = advantage[src]
    b_returns[i, 0] = returns[src]


@njit(**JIT_EXACT)
def gather_minibatch_kernel(perm, counter, obs, action, mean, log_prob, advantage, returns, *minibatch):
    rollout = (
        obs,
        action,
        mean,
        log_prob.reshape(log_prob.size),
        advantage.reshape(advantage.size),
        returns.reshape(returns.size),
    )
    for i in range(minibatch[0].shape[0]):
        gather_minibatch_at(i, perm, counter, rollout, minibatch)


@njit(**JIT_EXACT)
def explained_variance_kernel(value, returns, out):
    rows, cols = value.shape
    n = rows * cols
    sum_y, sum_r = 0.0, 0.0
    for i in range(rows):
        for j in range(cols):
            y = np.float64(returns[i, j])  # float64 sums (the simulator's numpy would keep float32)
            sum_y += y
            sum_r += y - value[i, j]
    mean_y, mean_r = sum_y / n, sum_r / n
    var_y, var_r = 0.0, 0.0
    for i in range(rows):
        for j in range(cols):
            dy = np.float64(returns[i, j]) - mean_y
            dr = np.float64(returns[i, j]) - value[i, j] - mean_r
            var_y += dy * dy
            var_r += dr * dr
    out[0] = 1.0 - var_r / var_y if var_y > 0.0 else 0.0
