"""Declarations of the on-policy (PPO) generic functions: advantage estimation, returns,
observation statistics, the Gaussian policy head, rollout storage and minibatching, and the
adaptive learning rate (held in an Array that ``adam_step`` reads, so a fused step can change it).

Rollouts are (time, envs) batches: scalar quantities are (T, N) arrays, per-step rows
(observations, actions) are (T·N, D) arrays whose row ``t·N + n`` is env n at step t.

Timestep types (Tianshou, table 1) are encoded by two flags and ``next_value``:

============  ===========  ==========  ===============================================
type          terminated   truncated   bootstrap
============  ===========  ==========  ===============================================
ordinary      False        False       γ·next_value, advantage continues from t + 1
terminated    True         any         none: the episode really ended
truncated     False        True        γ·V(final observation) in ``next_value``, advantage
                                       does not continue (the next row is a new episode)
cut rollout   False        False       last row t = T − 1: γ·next_value (the value after
                                       the rollout), nothing to continue from
============  ===========  ==========  ===============================================
"""

import numpy as np

from ...checks import check_array, check_device, check_number
from ...dispatch import generic
from ...errors import ShapeError

__all__ = [
    "FLOAT64",
    "LOG_2PI",
    "MAX_CUDA_ACTION_DIM",
    "NORMALIZE_EPS",
    "adaptive_learning_rate",
    "categorical_sample",
    "check_rollout",
    "discounted_returns",
    "explained_variance",
    "gae",
    "gather_minibatch",
    "gaussian_log_prob",
    "gaussian_sample",
    "normalize_observations",
    "ppo_categorical_gradient",
    "ppo_policy_gradient",
    "random_permutation",
    "rollout_store",
    "running_stats_update",
    "scale_by_running_std",
]

FLOAT64 = np.dtype(np.float64)
#: normalised observation = (x − mean) / sqrt(var + NORMALIZE_EPS)
NORMALIZE_EPS = 1e-8
#: CUDA's policy-gradient kernel reduces per action dimension in shared memory
MAX_CUDA_ACTION_DIM = 32
LOG_2PI = float(np.log(2 * np.pi))


def _check_timesteps(fn, device, reward, others):
    check_array(fn, "reward", reward, device, shape=(None, None))
    for name, arr in others:
        check_array(fn, name, arr, device, shape=reward.shape, dtype=reward.dtype)


def _check_flags(fn, device, shape, terminated, truncated):
    check_array(fn, "terminated", terminated, device, shape=shape, dtype=np.bool_)
    check_array(fn, "truncated", truncated, device, shape=shape, dtype=np.bool_)


@generic(outputs=("advantage", "returns"))
def gae(device, reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns=None):
    """Generalised advantage estimation over a (T, N) rollout with partial-episode bootstrapping:
    ``δ_t = r_t + γ (1 − terminated_t) next_value_t − value_t`` and
    ``A_t = δ_t + γλ (1 − terminated_t)(1 − truncated_t) A_{t+1}`` with ``A_T = 0``;
    ``returns = A + value`` (the TD(λ) target). ``next_value_t`` is V of the true next
    observation (of the final observation on truncation, of the observation after the rollout on
    the last row). See the module docstring for the timestep types. ``returns=None`` skips the
    returns (one output stream less, for callers that need only advantages)."""
    fn = "gae"
    check_device(fn, device)
    outputs = (("advantage", advantage),) + ((("returns", returns),) if returns is not None else ())
    _check_timesteps(fn, device, reward, (("value", value), ("next_value", next_value)) + outputs)
    _check_flags(fn, device, reward.shape, terminated, truncated)
    return (
        device,
        reward,
        value,
        next_value,
        terminated,
        truncated,
        check_number(fn, "gamma", gamma, 0, 1),
        check_number(fn, "lam", lam, 0, 1),
        advantage,
        returns,
    )


@generic(outputs=("returns",))
def discounted_returns(device, reward, next_value, terminated, truncated, gamma, returns, n=None):
    """n-step discounted returns over a (T, N) rollout, bootstrapping as :func:`gae` does:
    ``G_t = Σ_{k<m} γ^k r_{t+k} + γ^m next_value_{t+m−1}`` where the sum stops at the first of
    n steps, the episode's end or the rollout's end; a termination adds no bootstrap.
    ``n=None`` gives the full discounted return-to-go (λ = 1)."""
    fn = "discounted_returns"
    check_device(fn, device)
    _check_timesteps(fn, device, reward, (("next_value", next_value), ("returns", returns)))
    _check_flags(fn, device, reward.shape, terminated, truncated)
    if n is None:
        n = reward.shape[0]
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ShapeError(f"{fn}: argument 'n' must be None or an int >= 1, got {n!r}")
    return device, reward, next_value, terminated, truncated, check_number(fn, "gamma", gamma, 0, 1), returns, int(n)


def _check_stats(fn, device, stats, dim=None):
    check_array(fn, "stats.mean", stats.mean, device, shape=(dim,), dtype=FLOAT64)
    dim = stats.mean.shape[0]
    check_array(fn, "stats.var", stats.var, device, shape=(dim,), dtype=FLOAT64)
    check_array(fn, "stats.count", stats.count, device, shape=(1,), dtype=FLOAT64)
    check_array(fn, "stats.nonfinite", stats.nonfinite, device, shape=(1,), dtype=np.int64)
    return dim


@generic(inplace=("stats",))
def running_stats_update(device, stats, x):
    """Fold the rows of ``x`` (B, D) into running per-column mean and variance (Chan et al.'s
    parallel update, float64). A column whose rows hold NaN or inf is left unchanged and counted
    in ``stats.nonfinite``, which callers check after each fused rollout (values cannot raise
    inside a compiled step)."""
    fn = "running_stats_update"
    check_device(fn, device)
    check_array(fn, "x", x, device, shape=(None, None))
    _check_stats(fn, device, stats, x.shape[1])
    return device, stats, x


@generic(outputs=("out",))
def normalize_observations(device, stats, x, out):
    """``out = (x − stats.mean) / sqrt(stats.var + 1e-8)`` row by row."""
    fn = "normalize_observations"
    check_device(fn, device)
    check_array(fn, "x", x, device, shape=(None, None))
    _check_stats(fn, device, stats, x.shape[1])
    check_array(fn, "out", out, device, shape=x.shape, dtype=x.dtype)
    return device, stats, x, out


@generic(inplace=("x",))
def scale_by_running_std(device, var, x, divide):
    """``x *= sqrt(var[0] + 1e-8)``, or ``x /=`` it with ``divide``, each element in float64 and
    rounded to x's dtype: values and returns between a critic's units and the env's, by the
    running variance of the returns (Tianshou's ``rew_norm``; ``var`` is a (1,) float64 array)."""
    fn = "scale_by_running_std"
    check_device(fn, device)
    check_array(fn, "var", var, device, shape=(1,), dtype=FLOAT64)
    check_array(fn, "x", x, device)
    return device, var, x, bool(divide)


def _check_gaussian(fn, device, mean, log_std, action):
    check_array(fn, "mean", mean, device, shape=(None, None))
    check_array(fn, "log_std", log_std, device, shape=(mean.shape[1],), dtype=mean.dtype)
    check_array(fn, "action", action, device, shape=mean.shape, dtype=mean.dtype)


@generic(inplace=("rng",), outputs=("action", "log_prob"))
def gaussian_sample(device, rng, mean, log_std, action, log_prob):
    """Diagonal Gaussian policy with a state-independent ``log_std`` (A,): ``action = mean +
    exp(log_std)·ε``, ε ~ N(0, 1) from the counter stream, and ``log_prob`` (B,) its density."""
    fn = "gaussian_sample"
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    _check_gaussian(fn, device, mean, log_std, action)
    check_array(fn, "log_prob", log_prob, device, shape=(mean.shape[0],), dtype=mean.dtype)
    return device, rng, mean, log_std, action, log_prob


@generic(outputs=("log_prob",))
def gaussian_log_prob(device, mean, log_std, action, log_prob):
    """``log_prob[i] = Σ_j log N(action[i, j]; mean[i, j], exp(log_std[j])²)``."""
    fn = "gaussian_log_prob"
    check_device(fn, device)
    _check_gaussian(fn, device, mean, log_std, action)
    check_array(fn, "log_prob", log_prob, device, shape=(mean.shape[0],), dtype=mean.dtype)
    return device, mean, log_std, action, log_prob


def _loss_settings(fn, clip, entropy_coef, normalize_advantage) -> tuple:
    """Both policy gradients' loss settings, checked, as their kernels take them."""
    return (
        check_number(fn, "clip", clip, 0, low_open=True),
        check_number(fn, "entropy_coef", entropy_coef),
        bool(normalize_advantage),
    )


@generic(outputs=("d_mean", "d_log_std", "info"))
def ppo_policy_gradient(
    device,
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
    """Gradient of PPO's actor loss ``−mean_i min(ρ_i Â_i, clip(ρ_i, 1 ± clip) Â_i) −
    entropy_coef · H`` for a minibatch: w.r.t. the Gaussian means (``d_mean`` (B, A), to
    backpropagate through the actor) and the state-independent ``log_std`` (``d_log_std``).
    ``ρ = exp(log π(a) − old_log_prob)``; with ``normalize_advantage`` Â is the advantage
    standardised over the minibatch. ``info`` (4,) receives the mean KL(π_old ‖ π) between the
    rollout's Gaussians (``old_mean``, ``old_log_std``) and the current ones, the mean clipped
    surrogate, the entropy and the fraction of clipped samples."""
    fn = "ppo_policy_gradient"
    check_device(fn, device)
    _check_gaussian(fn, device, mean, log_std, action)
    batch = mean.shape[0]
    for name, arr in (("old_log_prob", old_log_prob), ("advantage", advantage)):
        check_array(fn, name, arr, device, shape=(batch,), dtype=mean.dtype)
    check_array(fn, "old_mean", old_mean, device, shape=mean.shape, dtype=mean.dtype)
    check_array(fn, "old_log_std", old_log_std, device, shape=log_std.shape, dtype=mean.dtype)
    check_array(fn, "d_mean", d_mean, device, shape=mean.shape, dtype=mean.dtype)
    check_array(fn, "d_log_std", d_log_std, device, shape=log_std.shape, dtype=mean.dtype)
    check_array(fn, "info", info, device, shape=(4,), dtype=FLOAT64)
    return (
        device,
        mean,
        log_std,
        action,
        old_log_prob,
        advantage,
        old_mean,
        old_log_std,
        *_loss_settings(fn, clip, entropy_coef, normalize_advantage),
        d_mean,
        d_log_std,
        info,
    )


@generic(inplace=("rng",), outputs=("action", "log_prob"))
def categorical_sample(device, rng, logits, action, log_prob):
    """Categorical policy over ``logits`` (B, K): ``action[i, 0]`` ← an index drawn from
    softmax(logits[i]) by inverting its CDF at one uniform of the counter stream (held as a float:
    the fused steps' action arrays are float), ``log_prob[i]`` ← its log-softmax."""
    fn = "categorical_sample"
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    check_array(fn, "logits", logits, device, shape=(None, None))
    check_array(fn, "action", action, device, shape=(logits.shape[0], 1), dtype=logits.dtype)
    check_array(fn, "log_prob", log_prob, device, shape=(logits.shape[0],), dtype=logits.dtype)
    return device, rng, logits, action, log_prob


@generic(outputs=("d_logits", "info"))
def ppo_categorical_gradient(
    device, logits, action, old_log_prob, advantage, old_logits, clip, entropy_coef, normalize_advantage, d_logits, info
):
    """Gradient of PPO's actor loss ``−mean_i min(ρ_i Â_i, clip(ρ_i, 1 ± clip) Â_i) −
    entropy_coef · mean_i H_i`` for a categorical policy, w.r.t. the logits (``d_logits`` (B, K),
    to backpropagate through the actor). ``ρ = exp(log π(a) − old_log_prob)``; Â as in
    :func:`ppo_policy_gradient`. ``info`` (4,): the mean KL(π_old ‖ π) from ``old_logits`` (the
    rollout's), the mean clipped surrogate, the mean entropy, the fraction of clipped samples."""
    fn = "ppo_categorical_gradient"
    check_device(fn, device)
    check_array(fn, "logits", logits, device, shape=(None, None))
    batch = logits.shape[0]
    check_array(fn, "action", action, device, shape=(batch, 1), dtype=logits.dtype)
    for name, arr in (("old_log_prob", old_log_prob), ("advantage", advantage)):
        check_array(fn, name, arr, device, shape=(batch,), dtype=logits.dtype)
    for name, arr in (("old_logits", old_logits), ("d_logits", d_logits)):
        check_array(fn, name, arr, device, shape=logits.shape, dtype=logits.dtype)
    check_array(fn, "info", info, device, shape=(4,), dtype=FLOAT64)
    return (
        device,
        logits,
        action,
        old_log_prob,
        advantage,
        old_logits,
        *_loss_settings(fn, clip, entropy_coef, normalize_advantage),
        d_logits,
        info,
    )


@generic(inplace=("lr",))
def adaptive_learning_rate(device, kl, lr, target, factor, low, high):
    """RLtools appendix F (from rl_games): ``lr ← clip(lr·factor, low, high)`` if ``kl < target/2``,
    ``lr ← clip(lr/factor, low, high)`` if ``kl > 2·target``, else unchanged; ``kl`` is ``info[0]``
    of :func:`ppo_policy_gradient` (any float64 array whose element 0 is the KL)."""
    fn = "adaptive_learning_rate"
    check_device(fn, device)
    check_array(fn, "kl", kl, device, shape=(None,), dtype=FLOAT64)
    check_array(fn, "lr", lr, device, shape=(1,), dtype=FLOAT64)
    low = check_number(fn, "low", low, 0, low_open=True)
    return (
        device,
        kl,
        lr,
        check_number(fn, "target", target, 0, low_open=True),
        check_number(fn, "factor", factor, 1),
        low,
        check_number(fn, "high", high, low),
    )


def check_rollout(fn, device, rollout):
    """(T, N, obs_dim, action_dim) of a Rollout (dispatchrl.data.rollout), every field checked."""
    check_array(fn, "rollout.reward", rollout.reward, device, shape=(None, None))
    steps, envs = rollout.reward.shape
    dtype = rollout.reward.dtype
    for name in ("value", "next_value", "log_prob", "advantage", "returns"):
        check_array(fn, f"rollout.{name}", getattr(rollout, name), device, shape=(steps, envs), dtype=dtype)
    _check_flags(fn, device, (steps, envs), rollout.terminated, rollout.truncated)
    check_array(fn, "rollout.obs", rollout.obs, device, shape=(steps * envs, None), dtype=dtype)
    check_array(fn, "rollout.action", rollout.action, device, shape=(steps * envs, None), dtype=dtype)
    # the policy's distribution parameters: a Gaussian's means (A columns) or categorical logits
    check_array(fn, "rollout.mean", rollout.mean, device, shape=(steps * envs, None), dtype=dtype)
    return steps, envs, rollout.obs.shape[1], rollout.action.shape[1]


@generic(outputs=("rollout",))
def rollout_store(device, rollout, step, obs, action, mean, log_prob, value, next_value, reward, terminated, truncated):
    """Write one environment step of N envs into row block ``t = step[0] mod T`` of ``rollout``:
    observations (N, O), sampled actions (N, A) and the policy's parameters (N, M: Gaussian means,
    or categorical logits), log-probs (N,), values and
    next values (N, 1) (critic outputs), rewards and flags (N,)."""
    fn = "rollout_store"
    check_device(fn, device)
    _steps, envs, obs_dim, action_dim = check_rollout(fn, device, rollout)
    dtype = rollout.reward.dtype
    check_array(fn, "step", step, device, shape=(1,), dtype=np.int64)
    check_array(fn, "obs", obs, device, shape=(envs, obs_dim), dtype=dtype)
    check_array(fn, "action", action, device, shape=(envs, action_dim), dtype=dtype)
    check_array(fn, "mean", mean, device, shape=(envs, rollout.mean.shape[1]), dtype=dtype)
    check_array(fn, "log_prob", log_prob, device, shape=(envs,), dtype=dtype)
    check_array(fn, "value", value, device, shape=(envs, 1), dtype=dtype)
    check_array(fn, "next_value", next_value, device, shape=(envs, 1), dtype=dtype)
    check_array(fn, "reward", reward, device, shape=(envs,), dtype=dtype)
    _check_flags(fn, device, (envs,), terminated, truncated)
    return device, rollout, step, obs, action, mean, log_prob, value, next_value, reward, terminated, truncated


@generic(inplace=("rng",), outputs=("perm",))
def random_permutation(device, rng, perm):
    """``perm`` ← a uniformly random permutation of 0..n−1 (Fisher–Yates over the counter stream;
    the same on every device)."""
    fn = "random_permutation"
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    check_array(fn, "perm", perm, device, shape=(None,), dtype=np.int64)
    return device, rng, perm


@generic(outputs=("batch",))
def gather_minibatch(device, rollout, perm, counter, batch):
    """Minibatch ``k = counter[0] mod (T·N / B)`` of the shuffled rollout: row i of ``batch`` is
    rollout row ``perm[k·B + i]`` (obs, action, mean, log_prob, advantage, returns)."""
    fn = "gather_minibatch"
    check_device(fn, device)
    steps, envs, obs_dim, action_dim = check_rollout(fn, device, rollout)
    dtype = rollout.reward.dtype
    check_array(fn, "perm", perm, device, shape=(steps * envs,), dtype=np.int64)
    check_array(fn, "counter", counter, device, shape=(1,), dtype=np.int64)
    check_array(fn, "batch.obs", batch.obs, device, shape=(None, obs_dim), dtype=dtype)
    rows = batch.obs.shape[0]
    if (steps * envs) % rows:
        raise ShapeError(
            f"{fn}: the minibatch size {rows} does not divide the rollout's {steps}×{envs} = {steps * envs} rows"
        )
    check_array(fn, "batch.action", batch.action, device, shape=(rows, action_dim), dtype=dtype)
    check_array(fn, "batch.mean", batch.mean, device, shape=(rows, rollout.mean.shape[1]), dtype=dtype)
    check_array(fn, "batch.log_prob", batch.log_prob, device, shape=(rows,), dtype=dtype)
    check_array(fn, "batch.advantage", batch.advantage, device, shape=(rows,), dtype=dtype)
    check_array(fn, "batch.returns", batch.returns, device, shape=(rows, 1), dtype=dtype)
    return device, rollout, perm, counter, batch


@generic(outputs=("out",))
def explained_variance(device, value, returns, out):
    """``out[0] = 1 − Var(returns − value) / Var(returns)`` over every element, in float64: how
    much of the return's variance the value function explains (1: all, 0: none, negative: worse
    than predicting the mean). 0 where the returns do not vary (a finite value for checkpoints)."""
    fn = "explained_variance"
    check_device(fn, device)
    check_array(fn, "value", value, device, shape=(None, None))
    check_array(fn, "returns", returns, device, shape=value.shape, dtype=value.dtype)
    check_array(fn, "out", out, device, shape=(1,), dtype=FLOAT64)
    return device, value, returns, out
