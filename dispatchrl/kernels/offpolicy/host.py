"""Off-policy host methods shared by Generic and CPU (see :mod:`dispatchrl.kernels.lowering`)."""

import numpy as np

from ...arrays import zeros
from ...devices import Generic
from ...staging import launch
from ..lowering import KernelModules
from ..replay import cpu as replay_cpu
from ..replay import generic as replay_generic
from . import api, cpu, generic
from .api import episode_log_arrays, transition_arrays

__all__: list[str] = []  # methods only: importing the module registers them


_kernels = KernelModules(generic, cpu)
_replay_kernels = KernelModules(replay_generic, replay_cpu)


@api.replay_add.dispatch
def replay_add(device: Generic, buffer, *transition):
    # transition: the step's obs, action, reward, next_obs, terminated, truncated (TRANSITION_FIELDS)
    launch(
        device,
        _kernels(device).replay_add_kernel,
        *transition,
        *transition_arrays(buffer),
        buffer.position,
        buffer.size,
    )


@api.replay_sample.dispatch
def replay_sample(device: Generic, rng, buffer, batch):
    # the rows uniform_index draws from the same stream, then replay_gather: on a CPU every row is
    # prefetched first, so a large ring's cache misses overlap (the same rows and bits as drawing
    # and copying in one loop); the index scratch is made when the call is staged
    index = zeros(device, batch.obs.shape[0], np.int64)
    replay = _replay_kernels(device)
    launch(device, replay.uniform_index_kernel, rng, buffer.size, index)
    launch(device, replay.replay_gather_kernel, index, *transition_arrays(buffer), *transition_arrays(batch))


@api.track_episodes.dispatch
def track_episodes(device: Generic, log, reward, terminated, truncated, step):
    launch(
        device,
        _kernels(device).track_episodes_kernel,
        reward,
        terminated,
        truncated,
        step,
        *episode_log_arrays(log),
    )


_kernels.launch_as_declared(
    api.concat_columns,
    api.slice_columns,
    api.add_clipped_noise,
    api.td_target,
    api.gaussian_tanh_sample,
    api.gaussian_tanh_backward,
    api.soft_td_target,
    api.entropy_temperature_gradient,
    api.select_min_rows,
    api.accumulate_critic_stats,
    api.accumulate_actor_stats,
    api.accumulate_sac_actor_stats,
    api.epsilon_greedy,
    api.q_huber_gradient,
    api.accumulate_q_stats,
    api.taken_q,
    api.dueling_q,
    api.dueling_q_backward,
    api.dqn_targets,
)
