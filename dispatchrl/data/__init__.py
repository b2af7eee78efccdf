"""Experience storage: replay buffers and episode logs (off-policy), rollouts, minibatches and
observation statistics (on-policy); device arrays, filled by kernels."""

from .replay import EpisodeLog, ReplayBuffer, Transitions, episode_log, replay_buffer, transitions
from .rollout import Minibatch, ObsStats, Rollout, minibatch, obs_stats, rollout

__all__ = ["EpisodeLog", "ReplayBuffer", "Transitions", "episode_log", "replay_buffer", "transitions",
           "ObsStats", "Rollout", "Minibatch", "obs_stats", "rollout", "minibatch"]
