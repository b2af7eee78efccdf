"""CUDA methods of the PPO generic functions: one thread per env for the backward-in-time
recursions, one per row for sampling, storing and gathering, one block with a shared-memory tree
for the minibatch reductions of the policy gradient."""

import math

import numpy as np
from numba import cuda

from ...backends.cuda import Launch, block_form, device_twin, flat, launch_1d, launch_2d
from ...devices import CUDA
from ...errors import ShapeError
from ...staging import launch
from ..core.cuda import increment_kernel
from ..random.cuda import standard_normal, uniform01
from . import api, cpu
from .generic import gather_arguments, store_arguments

__all__ = ["n_step_return", "store_env_step"]

n_step_return = device_twin(cpu.n_step_return)
store_env_step = device_twin(cpu.store_env_step)

_LOG_2PI = api.LOG_2PI
_NORMALIZE_EPS = api.NORMALIZE_EPS
_MAX_A = api.MAX_CUDA_ACTION_DIM
_THREADS = 128
_SLOTS = (_MAX_A + 3) * _THREADS  # per-thread partial sums: A log-std gradients, KL, surrogate, clipped


def _single(device, kernel, *args) -> None:
    launch(device, Launch(kernel, (1,), (1,)), *args)


@cuda.jit(device=True)
def _gae_at(j, reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns, with_returns, steps):
    carry = 0.0
    for k in range(steps):
        t = steps - 1 - k
        term = terminated[t, j]
        bootstrap = 0.0 if term else gamma * next_value[t, j]
        if k == 0 or term or truncated[t, j]:
            carry = 0.0
        v = value[t, j]
        a = reward[t, j] + bootstrap - v + gamma * lam * carry
        advantage[t, j] = a
        if with_returns:
            returns[t, j] = a + v
        carry = a


@cuda.jit
def gae_kernel(reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns, with_returns):
    j = cuda.grid(1)
    steps, envs = reward.shape
    if j < envs:
        _gae_at(
            j, reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns, with_returns, steps
        )


@block_form(gae_kernel, lambda reward, *rest: reward.shape)
@cuda.jit(device=True)
def gae_block(
    reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns, with_returns, steps, envs
):
    for j in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        _gae_at(
            j, reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns, with_returns, steps
        )


@api.gae.dispatch
def gae(device: CUDA, reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns):
    # real CUDA cannot pass None into a kernel (the simulator can): without returns, advantage
    # stands in for the unused argument
    launch_1d(
        device,
        gae_kernel,
        reward.shape[1],
        reward,
        value,
        next_value,
        terminated,
        truncated,
        gamma,
        lam,
        advantage,
        advantage if returns is None else returns,
        returns is not None,
    )


@cuda.jit
def discounted_returns_kernel(reward, next_value, terminated, truncated, gamma, returns, n):
    j = cuda.grid(1)
    steps, envs = reward.shape
    if j < envs:
        for t in range(steps):
            returns[t, j] = n_step_return(reward, next_value, terminated, truncated, gamma, t, j, n)


@block_form(discounted_returns_kernel, lambda reward, *rest: reward.shape)
@cuda.jit(device=True)
def discounted_returns_block(reward, next_value, terminated, truncated, gamma, returns, n, steps, envs):
    for j in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        for t in range(steps):
            returns[t, j] = n_step_return(reward, next_value, terminated, truncated, gamma, t, j, n)


@api.discounted_returns.dispatch
def discounted_returns(device: CUDA, reward, next_value, terminated, truncated, gamma, returns, n):
    launch_1d(
        device, discounted_returns_kernel, reward.shape[1], reward, next_value, terminated, truncated, gamma, returns, n
    )


@cuda.jit(device=True)
def _running_stats_update_at(d, x, mean, var, count, nonfinite, rows):
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
        cuda.atomic.add(nonfinite, 0, 1)
    else:
        batch_mean = s / rows
        m2 = 0.0
        for i in range(rows):
            dx = np.float64(x[i, d]) - batch_mean
            m2 += dx * dx
        delta = batch_mean - mean[d]
        mean[d] += delta * rows / total
        var[d] = (var[d] * old + m2 + delta * delta * old * rows / total) / total


@cuda.jit
def running_stats_update_kernel(x, mean, var, count, nonfinite):
    d = cuda.grid(1)
    rows, dim = x.shape
    if d < dim:
        _running_stats_update_at(d, x, mean, var, count, nonfinite, rows)


@block_form(running_stats_update_kernel, lambda x, *rest: x.shape)
@cuda.jit(device=True)
def running_stats_update_block(x, mean, var, count, nonfinite, rows, dim):
    for d in range(cuda.threadIdx.x, dim, cuda.blockDim.x):
        _running_stats_update_at(d, x, mean, var, count, nonfinite, rows)


@cuda.jit
def add_count_kernel(count, rows):
    if cuda.grid(1) == 0:  # after every column read the old count
        count[0] += rows


@block_form(add_count_kernel)
@cuda.jit(device=True)
def add_count_block(count, rows):
    if cuda.threadIdx.x == 0:
        count[0] += rows


@api.running_stats_update.dispatch
def running_stats_update(device: CUDA, stats, x):
    launch_1d(device, running_stats_update_kernel, x.shape[1], x, stats.mean, stats.var, stats.count, stats.nonfinite)
    _single(device, add_count_kernel, stats.count, float(x.shape[0]))


@cuda.jit
def normalize_observations_kernel(x, mean, var, out):
    i, d = cuda.grid(2)
    if i < x.shape[0] and d < x.shape[1]:
        out[i, d] = (x[i, d] - mean[d]) / math.sqrt(var[d] + _NORMALIZE_EPS)


@block_form(normalize_observations_kernel, lambda x, *rest: x.shape)
@cuda.jit(device=True)
def normalize_observations_block(x, mean, var, out, rows, dim):
    for k in range(cuda.threadIdx.x, rows * dim, cuda.blockDim.x):
        i, d = k // dim, k % dim
        out[i, d] = (x[i, d] - mean[d]) / math.sqrt(var[d] + _NORMALIZE_EPS)


@api.normalize_observations.dispatch
def normalize_observations(device: CUDA, stats, x, out):
    launch_2d(device, normalize_observations_kernel, x.shape, x, stats.mean, stats.var, out)


@cuda.jit(device=True)
def _gaussian_sample_at(i, rng, mean, log_std, action, log_prob, a_dim):
    total = 0.0
    for j in range(a_dim):
        eps = standard_normal(rng[0], rng[1] + np.uint64(2 * (i * a_dim + j)))
        ls = np.float64(log_std[j])
        action[i, j] = mean[i, j] + math.exp(ls) * eps
        total += -0.5 * eps * eps - ls - 0.5 * _LOG_2PI
    log_prob[i] = total


@cuda.jit
def gaussian_sample_kernel(rng, mean, log_std, action, log_prob):
    i = cuda.grid(1)
    batch, a_dim = mean.shape
    if i < batch:
        _gaussian_sample_at(i, rng, mean, log_std, action, log_prob, a_dim)


@block_form(gaussian_sample_kernel, lambda rng, mean, *rest: mean.shape)
@cuda.jit(device=True)
def gaussian_sample_block(rng, mean, log_std, action, log_prob, batch, a_dim):
    for i in range(cuda.threadIdx.x, batch, cuda.blockDim.x):
        _gaussian_sample_at(i, rng, mean, log_std, action, log_prob, a_dim)


@api.gaussian_sample.dispatch
def gaussian_sample(device: CUDA, rng, mean, log_std, action, log_prob):
    launch_1d(device, gaussian_sample_kernel, mean.shape[0], rng, mean, log_std, action, log_prob)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(2 * mean.size))


@cuda.jit(device=True)
def _gaussian_log_prob_at(i, mean, log_std, action, log_prob, a_dim):
    total = 0.0
    for j in range(a_dim):
        ls = np.float64(log_std[j])
        z = (np.float64(action[i, j]) - mean[i, j]) * math.exp(-ls)
        total += -0.5 * z * z - ls - 0.5 * _LOG_2PI
    log_prob[i] = total


@cuda.jit
def gaussian_log_prob_kernel(mean, log_std, action, log_prob):
    i = cuda.grid(1)
    if i < mean.shape[0]:
        _gaussian_log_prob_at(i, mean, log_std, action, log_prob, mean.shape[1])


@block_form(gaussian_log_prob_kernel, lambda mean, *rest: mean.shape)
@cuda.jit(device=True)
def gaussian_log_prob_block(mean, log_std, action, log_prob, batch, a_dim):
    for i in range(cuda.threadIdx.x, batch, cuda.blockDim.x):
        _gaussian_log_prob_at(i, mean, log_std, action, log_prob, a_dim)


@api.gaussian_log_prob.dispatch
def gaussian_log_prob(device: CUDA, mean, log_std, action, log_prob):
    launch_1d(device, gaussian_log_prob_kernel, mean.shape[0], mean, log_std, action, log_prob)


@cuda.jit(device=True)
def _block_sum(partial, columns, tid, lanes):
    """Tree-reduce ``columns`` groups of ``lanes`` partial sums (slots c * _THREADS + lane) in
    shared memory into each group's slot 0; every thread of the block calls it."""
    stride = lanes // 2
    while stride > 0:
        if tid < stride:
            for c in range(columns):
                partial[c * _THREADS + tid] += partial[c * _THREADS + tid + stride]
        cuda.syncthreads()
        stride //= 2


@cuda.jit(device=True)
def ppo_policy_gradient_block(
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
    """The whole minibatch by one block: its first min(blockDim, _THREADS) threads (a power of two)
    take rows in turn, every thread joins the barriers. The same sums in the same order for any
    block of at least _THREADS threads (the launch uses exactly _THREADS)."""
    partial = cuda.shared.array(_SLOTS, dtype=np.float64)
    grad = cuda.local.array(_MAX_A, dtype=np.float64)
    tid = cuda.threadIdx.x
    lanes = min(cuda.blockDim.x, _THREADS)
    first = tid if tid < lanes else mean.shape[0]  # threads past the lanes take no rows
    batch, a_dim = mean.shape
    shift = 0.0
    scale = 1.0
    if normalize:
        s = 0.0
        for i in range(first, batch, lanes):
            s += advantage[i]
        if tid < lanes:
            partial[tid] = s
        cuda.syncthreads()
        _block_sum(partial, 1, tid, lanes)
        shift = partial[0] / batch
        cuda.syncthreads()
        s = 0.0
        for i in range(first, batch, lanes):
            d = advantage[i] - shift
            s += d * d
        if tid < lanes:
            partial[tid] = s
        cuda.syncthreads()
        _block_sum(partial, 1, tid, lanes)
        scale = 1.0 / (math.sqrt(partial[0] / batch) + 1e-8)
        cuda.syncthreads()
    for j in range(a_dim):
        grad[j] = 0.0
    kl_total = 0.0
    surrogate_total = 0.0
    clipped_count = 0.0
    for i in range(first, batch, lanes):
        lp = 0.0
        kl = 0.0
        for j in range(a_dim):
            ls = np.float64(log_std[j])
            z = (np.float64(action[i, j]) - mean[i, j]) * math.exp(-ls)
            lp += -0.5 * z * z - ls - 0.5 * _LOG_2PI
            old_ls = np.float64(old_log_std[j])
            diff = np.float64(mean[i, j]) - old_mean[i, j]
            kl += ls - old_ls + (math.exp(2 * old_ls) + diff * diff) * 0.5 * math.exp(-2 * ls) - 0.5
        kl_total += kl
        adv = (advantage[i] - shift) * scale
        ratio = math.exp(lp - old_log_prob[i])
        unclipped = ratio * adv
        clipped = min(max(ratio, 1.0 - clip), 1.0 + clip) * adv
        if abs(ratio - 1.0) > clip:
            clipped_count += 1.0
        g = 0.0
        if unclipped <= clipped:
            surrogate_total += unclipped
            g = -adv * ratio / batch
        else:
            surrogate_total += clipped
        for j in range(a_dim):
            inv_std = math.exp(-np.float64(log_std[j]))
            z = (np.float64(action[i, j]) - mean[i, j]) * inv_std
            d_mean[i, j] = g * z * inv_std
            grad[j] += g * (z * z - 1.0)
    if tid < lanes:
        for j in range(a_dim):
            partial[j * _THREADS + tid] = grad[j]
        partial[a_dim * _THREADS + tid] = kl_total
        partial[(a_dim + 1) * _THREADS + tid] = surrogate_total
        partial[(a_dim + 2) * _THREADS + tid] = clipped_count
    cuda.syncthreads()
    _block_sum(partial, a_dim + 3, tid, lanes)
    if tid == 0:
        entropy = 0.0
        for j in range(a_dim):
            d_log_std[j] = partial[j * _THREADS] - entropy_coef
            entropy += np.float64(log_std[j]) + 0.5 * (_LOG_2PI + 1.0)
        info[0] = partial[a_dim * _THREADS] / batch
        info[1] = partial[(a_dim + 1) * _THREADS] / batch
        info[2] = entropy
        info[3] = partial[(a_dim + 2) * _THREADS] / batch


@cuda.jit
def ppo_policy_gradient_kernel(
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
    ppo_policy_gradient_block(
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
    )


block_form(ppo_policy_gradient_kernel)(ppo_policy_gradient_block)


@api.ppo_policy_gradient.dispatch
def ppo_policy_gradient(
    device: CUDA,
    mean,
    log_std,
    action,
    old_log_prob,
    advantage,
    old_mean,
    old_log_std,
    clip,
    entropy_coef,
    normalize_advantage,
    d_mean,
    d_log_std,
    info,
):
    if mean.shape[1] > _MAX_A:
        raise ShapeError(f"ppo_policy_gradient: the CUDA method supports action_dim <= {_MAX_A}, got {mean.shape[1]}")
    launch(
        device,
        Launch(ppo_policy_gradient_kernel, (1,), (_THREADS,)),
        mean,
        log_std,
        action,
        old_log_prob,
        advantage,
        old_mean,
        old_log_std,
        clip,
        entropy_coef,
        normalize_advantage,
        d_mean,
        d_log_std,
        info,
    )


@cuda.jit(device=True)
def _adaptive_learning_rate(kl, lr, target, factor, low, high):
    if kl[0] < 0.5 * target:
        lr[0] = min(max(lr[0] * factor, low), high)
    elif kl[0] > 2.0 * target:
        lr[0] = min(max(lr[0] / factor, low), high)


@cuda.jit
def adaptive_learning_rate_kernel(kl, lr, target, factor, low, high):
    if cuda.grid(1) == 0:
        _adaptive_learning_rate(kl, lr, target, factor, low, high)


@block_form(adaptive_learning_rate_kernel)
@cuda.jit(device=True)
def adaptive_learning_rate_block(kl, lr, target, factor, low, high):
    if cuda.threadIdx.x == 0:
        _adaptive_learning_rate(kl, lr, target, factor, low, high)


@api.adaptive_learning_rate.dispatch
def adaptive_learning_rate(device: CUDA, kl, lr, target, factor, low, high):
    _single(device, adaptive_learning_rate_kernel, kl, lr, target, factor, low, high)


@cuda.jit
def rollout_store_kernel(
    step,
    obs,
    action,
    mean,
    log_prob,
    value,
    next_value,
    reward,
    terminated,
    truncated,
    r_obs,
    r_action,
    r_mean,
    r_log_prob,
    r_value,
    r_next_value,
    r_reward,
    r_terminated,
    r_truncated,
):
    n = cuda.grid(1)
    if n < r_reward.shape[1]:
        store_env_step(
            n,
            step,
            obs,
            action,
            mean,
            log_prob,
            value,
            next_value,
            reward,
            terminated,
            truncated,
            r_obs,
            r_action,
            r_mean,
            r_log_prob,
            r_value,
            r_next_value,
            r_reward,
            r_terminated,
            r_truncated,
        )


@block_form(rollout_store_kernel, lambda *args: (args[-3].shape[1],))
@cuda.jit(device=True)
def rollout_store_block(
    step,
    obs,
    action,
    mean,
    log_prob,
    value,
    next_value,
    reward,
    terminated,
    truncated,
    r_obs,
    r_action,
    r_mean,
    r_log_prob,
    r_value,
    r_next_value,
    r_reward,
    r_terminated,
    r_truncated,
    envs,
):
    for n in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        store_env_step(
            n,
            step,
            obs,
            action,
            mean,
            log_prob,
            value,
            next_value,
            reward,
            terminated,
            truncated,
            r_obs,
            r_action,
            r_mean,
            r_log_prob,
            r_value,
            r_next_value,
            r_reward,
            r_terminated,
            r_truncated,
        )


@api.rollout_store.dispatch
def rollout_store(
    device: CUDA, rollout, step, obs, action, mean, log_prob, value, next_value, reward, terminated, truncated
):
    launch_1d(
        device,
        rollout_store_kernel,
        reward.shape[0],
        step,
        obs,
        action,
        mean,
        log_prob,
        value,
        next_value,
        reward,
        terminated,
        truncated,
        *store_arguments(rollout),
    )


@cuda.jit(device=True)
def _random_permutation(rng, perm):
    n = perm.shape[0]
    key = rng[0]
    base = rng[1]
    for i in range(n):
        perm[i] = i
    for i in range(n - 1, 0, -1):
        j = min(np.int64(uniform01(key, base + np.uint64(i)) * (i + 1)), i)
        tmp = perm[i]
        perm[i] = perm[j]
        perm[j] = tmp
    rng[1] = base + np.uint64(n)


@cuda.jit
def random_permutation_kernel(rng, perm):
    if cuda.grid(1) == 0:  # Fisher–Yates is sequential; n is a rollout's size
        _random_permutation(rng, perm)


@block_form(random_permutation_kernel)
@cuda.jit(device=True)
def random_permutation_block(rng, perm):
    if cuda.threadIdx.x == 0:
        _random_permutation(rng, perm)


@api.random_permutation.dispatch
def random_permutation(device: CUDA, rng, perm):
    _single(device, random_permutation_kernel, rng, perm)


@cuda.jit
def gather_minibatch_kernel(
    perm,
    counter,
    obs,
    action,
    mean,
    log_prob,
    advantage,
    returns,
    b_obs,
    b_action,
    b_mean,
    b_log_prob,
    b_advantage,
    b_returns,
):
    i = cuda.grid(1)
    rows = b_obs.shape[0]
    if i < rows:
        _gather_minibatch_at(
            i,
            perm,
            counter,
            obs,
            action,
            mean,
            log_prob,
            advantage,
            returns,
            b_obs,
            b_action,
            b_mean,
            b_log_prob,
            b_advantage,
            b_returns,
            rows,
        )


@cuda.jit(device=True)
def _gather_minibatch_at(
    i,
    perm,
    counter,
    obs,
    action,
    mean,
    log_prob,
    advantage,
    returns,
    b_obs,
    b_action,
    b_mean,
    b_log_prob,
    b_advantage,
    b_returns,
    rows,
):
    k = counter[0] % (perm.shape[0] // rows)
    src = perm[k * rows + i]
    for d in range(obs.shape[1]):
        b_obs[i, d] = obs[src, d]
    for d in range(action.shape[1]):
        b_action[i, d] = action[src, d]
        b_mean[i, d] = mean[src, d]
    b_log_prob[i] = log_prob[src]
    b_advantage[i] = advantage[src]
    b_returns[i, 0] = returns[src]


@block_form(gather_minibatch_kernel, lambda *args: (args[8].shape[0],))
@cuda.jit(device=True)
def gather_minibatch_block(
    perm,
    counter,
    obs,
    action,
    mean,
    log_prob,
    advantage,
    returns,
    b_obs,
    b_action,
    b_mean,
    b_log_prob,
    b_advantage,
    b_returns,
    rows,
):
    for i in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        _gather_minibatch_at(
            i,
            perm,
            counter,
            obs,
            action,
            mean,
            log_prob,
            advantage,
            returns,
            b_obs,
            b_action,
            b_mean,
            b_log_prob,
            b_advantage,
            b_returns,
            rows,
        )


@api.gather_minibatch.dispatch
def gather_minibatch(device: CUDA, rollout, perm, counter, batch):
    (obs, action, mean, log_prob, advantage, returns, *rest) = gather_arguments(rollout, batch)
    launch_1d(
        device,
        gather_minibatch_kernel,
        batch.obs.shape[0],
        perm,
        counter,
        obs,
        action,
        mean,
        flat(log_prob),
        flat(advantage),
        flat(returns),
        *rest,
    )


@cuda.jit(device=True)
def _explained_variance(value, returns, out):
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


@cuda.jit
def explained_variance_kernel(value, returns, out):
    if cuda.grid(1) == 0:  # once per iteration over the rollout: one thread, the CPU's order of sums
        _explained_variance(value, returns, out)


@block_form(explained_variance_kernel)
@cuda.jit(device=True)
def explained_variance_block(value, returns, out):
    if cuda.threadIdx.x == 0:
        _explained_variance(value, returns, out)


@api.explained_variance.dispatch
def explained_variance(device: CUDA, value, returns, out):
    launch(device, Launch(explained_variance_kernel, (1,), (1,)), value, returns, out)
