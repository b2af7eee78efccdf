"""Off-policy generic functions (replay, column plumbing, exploration noise, TD targets, episode
log, SAC's squashed Gaussian head, DQN's ε-greedy action, targets, Huber gradient, taken-action Q
and dueling head): declarations in api, methods per backend. CUDA methods register when a CUDA
device is first made."""

from . import api, c, cpu, generic, host  # noqa: F401  (importing registers the methods)
from .api import (
    accumulate_actor_stats,
    accumulate_critic_stats,
    accumulate_q_stats,
    accumulate_sac_actor_stats,
    add_clipped_noise,
    concat_columns,
    dqn_targets,
    dueling_q,
    dueling_q_backward,
    entropy_temperature_gradient,
    epsilon_greedy,
    gaussian_tanh_backward,
    gaussian_tanh_sample,
    q_huber_gradient,
    replay_add,
    replay_sample,
    select_min_rows,
    slice_columns,
    soft_td_target,
    taken_q,
    td_target,
    track_episodes,
)

__all__ = [
    "accumulate_actor_stats",
    "accumulate_critic_stats",
    "accumulate_q_stats",
    "accumulate_sac_actor_stats",
    "add_clipped_noise",
    "concat_columns",
    "dqn_targets",
    "dueling_q",
    "dueling_q_backward",
    "entropy_temperature_gradient",
    "epsilon_greedy",
    "gaussian_tanh_backward",
    "gaussian_tanh_sample",
    "q_huber_gradient",
    "replay_add",
    "replay_sample",
    "select_min_rows",
    "slice_columns",
    "soft_td_target",
    "taken_q",
    "td_target",
    "track_episodes",
]
