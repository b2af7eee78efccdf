"""Experience storage: replay buffers and episode logs (device arrays, filled by kernels)."""

from .replay import EpisodeLog, ReplayBuffer, Transitions, episode_log, replay_buffer, transitions

__all__ = ["EpisodeLog", "ReplayBuffer", "Transitions", "episode_log", "replay_buffer", "transitions"]
