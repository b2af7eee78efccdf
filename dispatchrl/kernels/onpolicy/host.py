"""The host methods of the PPO generic functions that Generic and CPU share: each launches its
device's kernel (:func:`~dispatchrl.kernels.lowering.kernels_for`: the Numba loop of ``cpu`` on a
CPU, the numpy reference of ``generic`` elsewhere); the functions whose kernels take the call's
arguments as declared get theirs from :func:`~dispatchrl.kernels.lowering.launch_as_declared`, at
the end."""

from types import ModuleType

from ...devices import Generic
from ...staging import launch
from ..lowering import kernels_for, launch_as_declared
from . import api, cpu, generic
from .generic import gather_arguments, store_arguments

__all__: list[str] = []  # methods only: importing the module registers them


def _kernels(device: Generic) -> ModuleType:
    return kernels_for(device, generic, cpu)


@api.running_stats_update.dispatch
def running_stats_update(device: Generic, stats, x):
    launch(device, _kernels(device).running_stats_update_kernel, x, stats.mean, stats.var, stats.count, stats.nonfinite)


@api.normalize_observations.dispatch
def normalize_observations(device: Generic, stats, x, out):
    launch(device, _kernels(device).normalize_observations_kernel, x, stats.mean, stats.var, out)


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


@api.gather_minibatch.dispatch
def gather_minibatch(device: Generic, rollout, perm, counter, batch):
    launch(device, _kernels(device).gather_minibatch_kernel, perm, counter, *gather_arguments(rollout, batch))


launch_as_declared(
    generic,
    cpu,
    api.gae,
    api.discounted_returns,
    api.gaussian_sample,
    api.gaussian_log_prob,
    api.categorical_sample,
    api.ppo_categorical_gradient,
    api.ppo_policy_gradient,
    api.adaptive_learning_rate,
    api.random_permutation,
    api.explained_variance,
)
