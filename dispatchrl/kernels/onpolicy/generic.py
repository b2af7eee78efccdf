"""Generic (numpy) methods of the PPO generic functions: the reference and the fallback."""

import numpy as np

from ..random.generic import standard_normal, uniform01
from . import api

__all__ = ["GATHER_FIELDS", "GATHER_RECORDS", "STORE_FIELDS", "STORE_RECORDS", "gather_arguments", "store_arguments"]

#: the rollout's arrays a step writes (rollout_store: the step's arrays of the same names first), in
#: the order every backend's kernel takes them
STORE_FIELDS = ("obs", "action", "mean", "log_prob", "value", "next_value", "reward", "terminated", "truncated")
#: element bodies take the step's arrays as one tuple ``env_step`` and the rollout's (``r_obs``, ...)
#: as ``rollout``; their generated kernels take the arrays one by one (``per_index(..., fields=)``)
STORE_RECORDS = {"env_step": STORE_FIELDS, "rollout": tuple("r_" + name for name in STORE_FIELDS)}
#: the arrays a minibatch gathers from the rollout (gather_minibatch), in the order kernels take them
GATHER_FIELDS = ("obs", "action", "mean", "log_prob", "advantage", "returns")
#: element bodies take them as ``rollout`` and the minibatch's (``b_obs``, ...) as ``minibatch``
GATHER_RECORDS = {"rollout": GATHER_FIELDS, "minibatch": tuple("b_" + name for name in GATHER_FIELDS)}


def gae_kernel(reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns) -> None:
    delta = reward + gamma * np.where(terminated, 0.0, next_value) - value
    carry = np.where(terminated | truncated, 0.0, gamma * lam)
    running = np.zeros(reward.shape[1])
    for t in range(reward.shape[0] - 1, -1, -1):
        running = delta[t] + (carry[t] * running if t + 1 < reward.shape[0] else 0.0)
        advantage[t] = running
    if returns is not None:
        returns[...] = advantage + value


def discounted_returns_kernel(reward, next_value, terminated, truncated, gamma, returns, n) -> None:
    steps = reward.shape[0]
    out = np.zeros(reward.shape)
    for t in range(steps):
        total = np.zeros(reward.shape[1])
        discount = np.ones(reward.shape[1])
        open_ = np.ones(reward.shape[1], dtype=bool)  # still summing this env's rewards
        for k in range(min(n, steps - t)):
            j = t + k
            total += np.where(open_, discount * reward[j], 0.0)
            discount = discount * gamma
            end = terminated[j] | truncated[j] | (k == n - 1) | (j == steps - 1)
            bootstrap = open_ & end & ~terminated[j]
            total += np.where(bootstrap, discount * next_value[j], 0.0)
            open_ &= ~end
        out[t] = total
    returns[...] = out


def running_stats_update_kernel(x, mean, var, count, nonfinite) -> None:
    x = x.astype(np.float64)
    finite = np.all(np.isfinite(x), axis=0)
    nonfinite[0] += int(np.sum(~finite))
    rows = x.shape[0]
    batch_mean = np.mean(np.where(finite, x, 0.0), axis=0)
    batch_var = np.var(np.where(finite, x, 0.0), axis=0)
    total = count[0] + rows
    delta = batch_mean - mean
    new_mean = mean + delta * rows / total
    new_var = (var * count[0] + batch_var * rows + delta * delta * count[0] * rows / total) / total
    mean[...] = np.where(finite, new_mean, mean)
    var[...] = np.where(finite, new_var, var)
    count[0] = total


def normalize_observations_kernel(x, mean, var, out) -> None:
    out[...] = (x - mean) / np.sqrt(var + api.NORMALIZE_EPS)


def gaussian_sample_kernel(rng, mean, log_std, action, log_prob) -> None:
    eps = standard_normal(rng, mean.size).reshape(mean.shape)
    ls = log_std.astype(np.float64)
    action[...] = mean + np.exp(ls) * eps
    log_prob[...] = np.sum(-0.5 * eps * eps - ls - 0.5 * api.LOG_2PI, axis=1)


def _log_prob(mean, log_std, action):
    ls = log_std.astype(np.float64)
    z = (action.astype(np.float64) - mean) / np.exp(ls)
    return np.sum(-0.5 * z * z - ls - 0.5 * api.LOG_2PI, axis=1), z


def gaussian_log_prob_kernel(mean, log_std, action, log_prob) -> None:
    log_prob[...] = _log_prob(mean, log_std, action)[0]


def categorical_sample_kernel(rng, logits, action, log_prob) -> None:
    u = uniform01(rng, logits.shape[0])
    log_p = _log_softmax(logits)
    cdf = np.cumsum(np.exp(log_p), axis=1)
    chosen = np.minimum(np.sum(cdf <= u[:, None], axis=1), logits.shape[1] - 1)
    action[:, 0] = chosen
    log_prob[...] = log_p[np.arange(len(chosen)), chosen]


def _log_softmax(logits):
    x = logits.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - (m + np.log(np.sum(np.exp(x - m), axis=1, keepdims=True)))


def ppo_categorical_gradient_kernel(
    logits, action, old_log_prob, advantage, old_logits, clip, entropy_coef, normalize, d_logits, info
) -> None:
    batch, k_n = logits.shape
    adv = advantage.astype(np.float64)
    if normalize:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    log_p, old_log_p = _log_softmax(logits), _log_softmax(old_logits)
    p = np.exp(log_p)
    a = np.clip(action[:, 0].astype(np.int64), 0, k_n - 1)
    ratio = np.exp(log_p[np.arange(batch), a] - old_log_prob)
    unclipped = ratio * adv
    clipped = np.clip(ratio, 1 - clip, 1 + clip) * adv
    g = np.where(unclipped <= clipped, -adv * ratio / batch, 0.0)
    entropy = -np.sum(p * log_p, axis=1)
    d_logits[...] = g[:, None] * (np.eye(k_n)[a] - p) + entropy_coef * p * (log_p + entropy[:, None]) / batch
    info[0] = np.mean(np.sum(np.exp(old_log_p) * (old_log_p - log_p), axis=1))
    info[1] = np.mean(np.minimum(unclipped, clipped))
    info[2] = np.mean(entropy)
    info[3] = np.mean(np.abs(ratio - 1) > clip)


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
) -> None:
    batch = mean.shape[0]
    adv = advantage.astype(np.float64)
    if normalize:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    log_prob, z = _log_prob(mean, log_std, action)
    std = np.exp(log_std.astype(np.float64))
    ratio = np.exp(log_prob - old_log_prob)
    unclipped = ratio * adv
    clipped = np.clip(ratio, 1 - clip, 1 + clip) * adv
    take = unclipped <= clipped  # min(): the unclipped term carries the gradient
    g = np.where(take, -adv * ratio / batch, 0.0)  # ∂loss/∂log π(a_i)
    d_mean[...] = g[:, None] * z / std
    d_log_std[...] = np.sum(g[:, None] * (z * z - 1), axis=0) - entropy_coef
    old_std = np.exp(old_log_std.astype(np.float64))
    diff = mean.astype(np.float64) - old_mean
    kl = np.log(std / old_std) + (old_std**2 + diff**2) / (2 * std**2) - 0.5
    info[0] = np.mean(np.sum(kl, axis=1))
    info[1] = np.mean(np.minimum(unclipped, clipped))
    info[2] = np.sum(np.log(std) + 0.5 * (api.LOG_2PI + 1))
    info[3] = np.mean(np.abs(ratio - 1) > clip)


def scale_by_running_std_kernel(var, x, divide) -> None:
    std = np.sqrt(var[0] + api.NORMALIZE_EPS)
    v = x.astype(np.float64)
    x[...] = (v / std if divide else v * std).astype(x.dtype)


def adaptive_learning_rate_kernel(kl, lr, target, factor, low, high) -> None:
    if kl[0] < 0.5 * target:
        lr[0] = min(max(lr[0] * factor, low), high)
    elif kl[0] > 2.0 * target:
        lr[0] = min(max(lr[0] / factor, low), high)


def rollout_store_kernel(step, *arrays) -> None:
    # arrays: the step's, then the rollout's, both in STORE_FIELDS order
    new, rollout = dict(zip(STORE_FIELDS, arrays)), dict(zip(STORE_FIELDS, arrays[len(STORE_FIELDS) :]))
    steps, envs = rollout["reward"].shape
    t = int(step[0]) % steps
    for name in ("obs", "action", "mean"):  # rows t*E .. (t+1)*E of (T*E, D)
        rollout[name][t * envs : (t + 1) * envs] = new[name]
    for name in ("log_prob", "value", "next_value", "reward", "terminated", "truncated"):  # row t of (T, E)
        rollout[name][t] = new[name].reshape(envs)


def store_arguments(rollout) -> tuple:
    """The arrays of ``rollout`` one step writes, in :data:`STORE_FIELDS` order."""
    return tuple(getattr(rollout, name) for name in STORE_FIELDS)


def random_permutation_kernel(rng, perm) -> None:
    n = perm.shape[0]
    u = uniform01(rng, n)
    p = np.arange(n, dtype=np.int64)
    for i in range(n - 1, 0, -1):
        j = min(int(u[i] * (i + 1)), i)
        p[i], p[j] = p[j], p[i]
    perm[...] = p


def gather_minibatch_kernel(perm, counter, *arrays) -> None:
    # arrays: the rollout's, then the minibatch's, both in GATHER_FIELDS order
    rollout, batch = dict(zip(GATHER_FIELDS, arrays)), dict(zip(GATHER_FIELDS, arrays[len(GATHER_FIELDS) :]))
    rows = batch["obs"].shape[0]
    k = int(counter[0]) % (perm.shape[0] // rows)
    idx = perm[k * rows : (k + 1) * rows]
    for name in ("obs", "action", "mean"):
        batch[name][...] = rollout[name][idx]
    batch["log_prob"][...] = rollout["log_prob"].reshape(-1)[idx]
    batch["advantage"][...] = rollout["advantage"].reshape(-1)[idx]
    batch["returns"][:, 0] = rollout["returns"].reshape(-1)[idx]


def gather_arguments(rollout, batch) -> tuple:
    """The :data:`GATHER_FIELDS` arrays of ``rollout``, then those of the minibatch ``batch``."""
    return tuple(getattr(source, name) for source in (rollout, batch) for name in GATHER_FIELDS)


def explained_variance_kernel(value, returns, out):
    y = returns.astype(np.float64).ravel()
    var_y = np.mean((y - np.mean(y)) ** 2)
    residual = y - value.astype(np.float64).ravel()
    var_residual = np.mean((residual - np.mean(residual)) ** 2)
    out[0] = 1.0 - var_residual / var_y if var_y > 0.0 else 0.0
