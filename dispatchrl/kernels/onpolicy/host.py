"""The host methods of the PPO generic functions that Generic and CPU share: each launches its
device's kernel (:func:`~dispatchrl.kernels.lowering.kernels_for`: the Numba loop of ``cpu`` on a
CPU, the numpy reference of ``generic`` elsewhere)."""

from types import ModuleType

from ...devices import Generic
from ...staging import launch
from ..lowering import kernels_for
from . import api, cpu, generic
from .generic import gather_arguments, store_arguments

__all__: list[str] = []  # methods only: importing the module registers them


def _kernels(device: Generic) -> ModuleType:
    return kernels_for(device, generic, cpu)


@api.gae.dispatch
def gae(device: Generic, reward, value, next_value, terminated, truncated, gamma, lam, advantage, returns):
    launch(
        device,
        _kernels(device).gae_kernel,
        reward,
        value,
        next_value,
        terminated,
        truncated,
        gamma,
        lam,
        advantage,
        returns,
    )


@api.discounted_returns.dispatch
def discounted_returns(device: Generic, reward, next_value, terminated, truncated, gamma, returns, n):
    launch(
        device, _kernels(device).discounted_returns_kernel, reward, next_value, terminated, truncated, gamma, returns, n
    )


@api.running_stats_update.dispatch
def running_stats_update(device: Generic, stats, x):
    launch(device, _kernels(device).running_stats_update_kernel, x, stats.mean, stats.var, stats.count, stats.nonfinite)


@api.normalize_observations.dispatch
def normalize_observations(device: Generic, stats, x, out):
    launch(device, _kernels(device).normalize_observations_kernel, x, stats.mean, stats.var, out)


@api.gaussian_sample.dispatch
def gaussian_sample(device: Generic, rng, mean, log_std, action, log_prob):
    launch(device, _kernels(device).gaussian_sample_kernel, rng, mean, log_std, action, log_prob)


@api.gaussian_log_prob.dispatch
def gaussian_log_prob(device: Generic, mean, log_std, action, log_prob):
    launch(device, _kernels(device).gaussian_log_prob_kernel, mean, log_std, action, log_prob)


@api.categorical_sample.dispatch
def categorical_sample(device: Generic, rng, logits, action, log_prob):
    launch(device, _kernels(device).categorical_sample_kernel, rng, logits, action, log_prob)


@api.ppo_categorical_gradient.dispatch
def ppo_categorical_gradient(
    device: Generic, logits, action, old_log_prob, advantage, old_logits, clip, entropy_coef, normalize, d_logits, info
):
    launch(
        device,
        _kernels(device).ppo_categorical_gradient_kernel,
        logits,
        action,
        old_log_prob,
        advantage,
        old_logits,
        clip,
        entropy_coef,
        normalize,
        d_logits,
        info,
    )


@api.ppo_policy_gradient.dispatch
def ppo_policy_gradient(
    device: Generic,
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
    launch(
        device,
        _kernels(device).ppo_policy_gradient_kernel,
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


@api.adaptive_learning_rate.dispatch
def adaptive_learning_rate(device: Generic, kl, lr, target, factor, low, high):
    launch(device, _kernels(device).adaptive_learning_rate_kernel, kl, lr, target, factor, low, high)


@api.rollout_store.dispatch
def rollout_store(
    device: Generic, rollout, step, obs, action, mean, log_prob, value, next_value, reward, terminated, truncated
):
    launch(
        device,
        _kernels(device).rollout_store_kernel,
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


@api.random_permutation.dispatch
def random_permutation(device: Generic, rng, perm):
    launch(device, _kernels(device).random_permutation_kernel, rng, perm)


@api.gather_minibatch.dispatch
def gather_minibatch(device: Generic, rollout, perm, counter, batch):
    launch(device, _kernels(device).gather_minibatch_kernel, perm, counter, *gather_arguments(rollout, batch))


@api.explained_variance.dispatch
def explained_variance(device: Generic, value, returns, out):
    launch(device, _kernels(device).explained_variance_kernel, value, returns, out)
