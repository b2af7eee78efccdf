"""CUDA methods of the PPO generic functions: one thread per env for the backward-in-time
recursions, one per row for sampling, storing and gathering, one block with a shared-memory tree
for the minibatch reductions of the policy gradient."""

import math

import numpy as np
from numba import cuda

from ...backends.cuda import (
    DYNAMIC_SHARED,
    Launch,
    device_twin,
    flat,
    lanes_block,
    lanes_reduce,
    lanes_total,
    launch_1d,
    launch_2d,
    launch_once,
    once,
    per_index,
)
from ...devices import CUDA
from ...errors import ShapeError
from ...staging import launch
from ..core.cuda import increment_kernel
from ..random.cuda import standard_normal, uniform01
from . import api, cpu
from .generic import GATHER_RECORDS, STORE_RECORDS, gather_arguments, store_arguments

__all__ = ["n_step_return"]

n_step_return = device_twin(cpu.n_step_return)

_LOG_2PI = api.LOG_2PI
_NORMALIZE_EPS = api.NORMALIZE_EPS
_MAX_A = api.MAX_CUDA_ACTION_DIM
_THREADS = 128
_SLOTS = (_MAX_A + 3) * _THREADS  # per-thread partial sums: A log-std gradients, KL, surrogate, clipped


def _gae_at(j, reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns, with_returns) -> None:
    steps = reward.shape[0]
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


gae_kernel = per_index(_gae_at, "reward.shape[1]")


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


def _discounted_returns_at(j, reward, next_value, terminated, truncated, gamma, returns, n) -> None:
    for t in range(reward.shape[0]):
        returns[t, j] = n_step_return(reward, next_value, terminated, truncated, gamma, t, j, n)


discounted_returns_kernel = per_index(_discounted_returns_at, "reward.shape[1]")


@api.discounted_returns.dispatch
def discounted_returns(device: CUDA, reward, next_value, terminated, truncated, gamma, returns, n):
    launch_1d(
        device, discounted_returns_kernel, reward.shape[1], reward, next_value, terminated, truncated, gamma, returns, n
    )


@cuda.jit(device=True)
def _count_nonfinite(nonfinite) -> None:
    cuda.atomic.add(nonfinite, 0, 1)  # type: ignore[call-arg]


running_stats_update_kernel = per_index(cpu.running_stats_update_at, "x.shape[1]", count_nonfinite=_count_nonfinite)


def _add_count(count, rows) -> None:
    count[0] += rows


add_count_kernel = once(_add_count)  # after every column read the old count


@api.running_stats_update.dispatch
def running_stats_update(device: CUDA, stats, x):
    launch_1d(device, running_stats_update_kernel, x.shape[1], x, stats.mean, stats.var, stats.count, stats.nonfinite)
    launch_once(device, add_count_kernel, stats.count, float(x.shape[0]))


def _normalize_observations_at(i, d, x, mean, var, out) -> None:
    out[i, d] = (x[i, d] - mean[d]) / math.sqrt(var[d] + _NORMALIZE_EPS)


normalize_observations_kernel = per_index(_normalize_observations_at, "x.shape[0]", "x.shape[1]")


@api.normalize_observations.dispatch
def normalize_observations(device: CUDA, stats, x, out):
    launch_2d(device, normalize_observations_kernel, x.shape, x, stats.mean, stats.var, out)


def _gaussian_sample_at(i, rng, mean, log_std, action, log_prob) -> None:
    a_dim = mean.shape[1]
    total = 0.0
    for j in range(a_dim):
        eps = standard_normal(rng[0], rng[1] + np.uint64(2 * (i * a_dim + j)))
        ls = np.float64(log_std[j])
        action[i, j] = mean[i, j] + math.exp(ls) * eps
        total += -0.5 * eps * eps - ls - 0.5 * _LOG_2PI
    log_prob[i] = total


gaussian_sample_kernel = per_index(_gaussian_sample_at, "mean.shape[0]")


@api.gaussian_sample.dispatch
def gaussian_sample(device: CUDA, rng, mean, log_std, action, log_prob):
    launch_1d(device, gaussian_sample_kernel, mean.shape[0], rng, mean, log_std, action, log_prob)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(2 * mean.size))


categorical_sample_kernel = per_index(cpu.categorical_sample_at, "logits.shape[0]", uniform01=uniform01)


@api.categorical_sample.dispatch
def categorical_sample(device: CUDA, rng, logits, action, log_prob):
    launch_1d(device, categorical_sample_kernel, logits.shape[0], rng, logits, action, log_prob)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(logits.shape[0]))


clipped_surrogate = device_twin(cpu.clipped_surrogate)
gaussian_log_prob_and_kl = device_twin(cpu.gaussian_log_prob_and_kl)
#: one thread: a minibatch's B × K logits are bookkeeping-sized (CartPole: 256 × 2)
ppo_categorical_gradient_kernel = once(
    cpu.ppo_categorical_gradient_kernel,
    advantage_standardisation=device_twin(cpu.advantage_standardisation, lanes_total=device_twin(cpu.lanes_total)),
    clipped_surrogate=clipped_surrogate,
)


@api.ppo_categorical_gradient.dispatch
def ppo_categorical_gradient(device: CUDA, *args):
    launch_once(device, ppo_categorical_gradient_kernel, *args)


gaussian_log_prob_kernel = per_index(cpu.gaussian_log_prob_at, "mean.shape[0]")


@api.gaussian_log_prob.dispatch
def gaussian_log_prob(device: CUDA, mean, log_std, action, log_prob):
    launch_1d(device, gaussian_log_prob_kernel, mean.shape[0], mean, log_std, action, log_prob)


ppo_policy_gradient_kernel = lanes_block(
    cpu.ppo_policy_gradient_lanes,
    "ppo_policy_gradient",
    _THREADS,
    advantage_standardisation=device_twin(cpu.advantage_standardisation, lanes_total=lanes_total),
    gaussian_log_prob_and_kl=gaussian_log_prob_and_kl,
    clipped_surrogate=clipped_surrogate,
    lanes_reduce=lanes_reduce,
)
DYNAMIC_SHARED[ppo_policy_gradient_kernel] = lambda *args: 8 * _SLOTS


@api.ppo_policy_gradient.dispatch
def ppo_policy_gradient(device: CUDA, mean, *args):
    if mean.shape[1] > _MAX_A:
        raise ShapeError(f"ppo_policy_gradient: the CUDA method supports action_dim <= {_MAX_A}, got {mean.shape[1]}")
    launch(device, Launch(ppo_policy_gradient_kernel, (1,), (_THREADS,), 8 * _SLOTS), mean, *args)


scale_by_running_std_kernel = per_index(cpu.scale_by_running_std_at, "x.size")


@api.scale_by_running_std.dispatch
def scale_by_running_std(device: CUDA, var, x, divide):
    launch_1d(device, scale_by_running_std_kernel, x.size, var, flat(x), divide)


adaptive_learning_rate_kernel = once(cpu.adaptive_learning_rate_kernel)


@api.adaptive_learning_rate.dispatch
def adaptive_learning_rate(device: CUDA, kl, lr, target, factor, low, high):
    launch_once(device, adaptive_learning_rate_kernel, kl, lr, target, factor, low, high)


rollout_store_kernel = per_index(cpu.store_env_step, "r_reward.shape[1]", name="rollout_store", fields=STORE_RECORDS)


@api.rollout_store.dispatch
def rollout_store(device: CUDA, rollout, step, *step_arrays):
    # step_arrays: the step's arrays in STORE_FIELDS order
    launch_1d(device, rollout_store_kernel, step_arrays[0].shape[0], step, *step_arrays, *store_arguments(rollout))


# Fisher–Yates is sequential; n is a rollout's size
random_permutation_kernel = once(cpu.random_permutation_kernel, uniform01=uniform01)


@api.random_permutation.dispatch
def random_permutation(device: CUDA, rng, perm):
    launch_once(device, random_permutation_kernel, rng, perm)


gather_minibatch_kernel = per_index(cpu.gather_minibatch_at, "b_obs.shape[0]", fields=GATHER_RECORDS)


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


# once per iteration over the rollout: one thread, the CPU's order of sums
explained_variance_kernel = once(cpu.explained_variance_kernel)


@api.explained_variance.dispatch
def explained_variance(device: CUDA, value, returns, out):
    launch_once(device, explained_variance_kernel, value, returns, out)
