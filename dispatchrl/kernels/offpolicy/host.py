"""The host methods of the off-policy generic functions that Generic and CPU share: each launches
its device's kernel (:func:`~dispatchrl.kernels.lowering.kernels_for`: the Numba loop of ``cpu``
on a CPU, the numpy reference of ``generic`` elsewhere)."""

from types import ModuleType

from ...devices import Generic
from ...staging import launch
from ..lowering import kernels_for
from . import api, cpu, generic
from .api import transition_arrays

__all__: list[str] = []  # methods only: importing the module registers them


def _kernels(device: Generic) -> ModuleType:
    return kernels_for(device, generic, cpu)


@api.replay_add.dispatch
def replay_add(device: Generic, buffer, obs, action, reward, next_obs, terminated, truncated):
    launch(
        device,
        _kernels(device).replay_add_kernel,
        obs,
        action,
        reward,
        next_obs,
        terminated,
        truncated,
        *transition_arrays(buffer),
        buffer.position,
        buffer.size,
    )


@api.concat_columns.dispatch
def concat_columns(device: Generic, a, b, out):
    launch(device, _kernels(device).concat_columns_kernel, a, b, out)


@api.slice_columns.dispatch
def slice_columns(device: Generic, x, start, out):
    launch(device, _kernels(device).slice_columns_kernel, x, start, out)


@api.add_clipped_noise.dispatch
def add_clipped_noise(device: Generic, rng, x, std, noise_clip, low, high):
    launch(device, _kernels(device).add_clipped_noise_kernel, rng, x, std, noise_clip, low, high)


@api.td_target.dispatch
def td_target(device: Generic, reward, terminated, q1, q2, gamma, target):
    launch(device, _kernels(device).td_target_kernel, reward, terminated, q1, q2, gamma, target)


@api.track_episodes.dispatch
def track_episodes(device: Generic, log, reward, terminated, truncated, step):
    launch(
        device,
        _kernels(device).track_episodes_kernel,
        reward,
        terminated,
        truncated,
        step,
        log.running_return,
        log.running_length,
        log.returns,
        log.lengths,
        log.end_steps,
        log.count,
    )


@api.gaussian_tanh_sample.dispatch
def gaussian_tanh_sample(device: Generic, rng, actor_out, noise, action, log_prob):
    launch(device, _kernels(device).gaussian_tanh_sample_kernel, rng, actor_out, noise, action, log_prob)


@api.gaussian_tanh_backward.dispatch
def gaussian_tanh_backward(device: Generic, actor_out, noise, action, d_action, log_alpha, d_actor_out):
    launch(
        device,
        _kernels(device).gaussian_tanh_backward_kernel,
        actor_out,
        noise,
        action,
        d_action,
        log_alpha,
        d_actor_out,
    )


@api.soft_td_target.dispatch
def soft_td_target(device: Generic, reward, terminated, q1, q2, log_prob, log_alpha, gamma, target):
    launch(
        device, _kernels(device).soft_td_target_kernel, reward, terminated, q1, q2, log_prob, log_alpha, gamma, target
    )


@api.entropy_temperature_gradient.dispatch
def entropy_temperature_gradient(device: Generic, log_prob, target_entropy, grad):
    launch(device, _kernels(device).entropy_temperature_gradient_kernel, log_prob, target_entropy, grad)


@api.select_min_rows.dispatch
def select_min_rows(device: Generic, a, b, x, y, out):
    launch(device, _kernels(device).select_min_rows_kernel, a, b, x, y, out)


@api.accumulate_critic_stats.dispatch
def accumulate_critic_stats(device: Generic, q1, q2, target, stats):
    launch(device, _kernels(device).accumulate_critic_stats_kernel, q1, q2, target, stats)


@api.accumulate_actor_stats.dispatch
def accumulate_actor_stats(device: Generic, q, stats):
    launch(device, _kernels(device).accumulate_actor_stats_kernel, q, stats)


@api.accumulate_sac_actor_stats.dispatch
def accumulate_sac_actor_stats(device: Generic, q1, q2, log_prob, log_alpha, stats):
    launch(device, _kernels(device).accumulate_sac_actor_stats_kernel, q1, q2, log_prob, log_alpha, stats)


@api.epsilon_greedy.dispatch
def epsilon_greedy(device: Generic, rng, q, step, initial_eps, final_eps, decay_steps, action):
    launch(device, _kernels(device).epsilon_greedy_kernel, rng, q, step, initial_eps, final_eps, decay_steps, action)


@api.dqn_targets.dispatch
def dqn_targets(device: Generic, q_next_online, q_next_target, reward, terminated, gamma, target, double=True):
    launch(
        device,
        _kernels(device).dqn_targets_kernel,
        q_next_online,
        q_next_target,
        reward,
        terminated,
        gamma,
        target,
        double,
    )


@api.q_huber_gradient.dispatch
def q_huber_gradient(device: Generic, q, action, target, d_q):
    launch(device, _kernels(device).q_huber_gradient_kernel, q, action, target, d_q)


@api.accumulate_q_stats.dispatch
def accumulate_q_stats(device: Generic, q, action, target, stats):
    launch(device, _kernels(device).accumulate_q_stats_kernel, q, action, target, stats)


@api.taken_q.dispatch
def taken_q(device: Generic, q, action, out):
    launch(device, _kernels(device).taken_q_kernel, q, action, out)


@api.dueling_q.dispatch
def dueling_q(device: Generic, raw, q):
    launch(device, _kernels(device).dueling_q_kernel, raw, q)


@api.dueling_q_backward.dispatch
def dueling_q_backward(device: Generic, d_q, d_raw):
    launch(device, _kernels(device).dueling_q_backward_kernel, d_q, d_raw)
