"""Experience storage: the fused steps' device replay ring and episode logs (off-policy), rollouts,
minibatches and observation statistics (on-policy), filled by kernels; and the host-side data layer
of TorchRL's design: TensorDict and a composable ReplayBuffer (storages, samplers, n-step)."""

from .buffers import (
    DeviceStorage,
    MemmapStorage,
    NStep,
    PrioritizedSampler,
    ReplayBuffer,
    RingStorage,
    RoundRobinWriter,
    UniformSampler,
    WithoutReplacementSampler,
)
from .replay import (
    EpisodeLog,
    ReplayRing,
    Transitions,
    episode_log,
    memmap_replay_buffer,
    replay_buffer,
    transitions,
)
from .rollout import Minibatch, ObsStats, Rollout, minibatch, obs_stats, rollout
from .tensordict import TensorDict, cat, stack

__all__ = [
    "DeviceStorage",
    "EpisodeLog",
    "MemmapStorage",
    "Minibatch",
    "NStep",
    "ObsStats",
    "PrioritizedSampler",
    "ReplayBuffer",
    "ReplayRing",
    "RingStorage",
    "Rollout",
    "RoundRobinWriter",
    "TensorDict",
    "Transitions",
    "UniformSampler",
    "WithoutReplacementSampler",
    "cat",
    "episode_log",
    "memmap_replay_buffer",
    "minibatch",
    "obs_stats",
    "replay_buffer",
    "rollout",
    "stack",
    "transitions",
]
