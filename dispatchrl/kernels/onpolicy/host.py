"""PPO host methods shared by Generic and CPU (see :mod:`dispatchrl.kernels.lowering`)."""

from ...devices import Generic
from ...staging import launch
from ..lowering import KernelModules
from . import api, cpu, generic
from .generic import gather_arguments, store_arguments

__all__: list[str] = []  # methods only: importing the module registers them


_kernels = KernelModules(generic, cpu)


@api.running_stats_update.dispatch
def running_stats_update(device: Generic, stats, x):
    launch(device, _kernels(device).running_stats_update_kernel, x, stats.mean, stats.var, stats.count, stats.nonfinite)


@api.normalize_observations.dispatch
def normalize_observations(device: Generic, stats, x, out):
    launch(device, _kernels(device).normalize_observations_kernel, x, stats.mean, stats.var, out)


@api.rollout_store.dispatch
def rollout_store(device: Generic, rollout, step, *step_arrays):
    # step_arrays: the step's arrays in STORE_FIELDS order
    launch(device, _kernels(device).rollout_store_kernel, step, *step_arrays, *store_arguments(rollout))


@api.gather_minibatch.dispatch
def gather_minibatch(device: Generic, rollout, perm, counter, batch):
    launch(device, _kernels(device).gather_minibatch_kernel, perm, counter, *gather_arguments(rollout, batch))


_kernels.launch_as_declared(
    api.gae,
    api.discounted_returns,
    api.gaussian_sample,
    api.gaussian_log_prob,
    api.categorical_sample,
    api.ppo_categorical_gradient,
    api.ppo_policy_gradient,
    api.adaptive_learning_rate,
    api.scale_by_running_std,
    api.random_permutation,
    api.explained_variance,
)
