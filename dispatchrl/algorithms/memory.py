"""What a run's state will allocate, estimated from its config before anything is allocated.

:func:`estimate` lists the state's large buffers (networks with their gradients and Adam moments,
the acting and batch buffers with their scratch, the replay buffer or rollout, the episode ring)
as :class:`Allocation` rows naming the Config fields that size them; the driver, export-trainer
and the web build compare the total with the memory available (:func:`check_fits`) and refuse a
config that cannot fit with a ConfigError, instead of a ``MemoryError`` traceback halfway through
the build or the kernel's OOM killer. Networks are sized as the default MLP of the config's
``hidden`` widths (a custom constructor's own size is unknown here), so the numbers are an
estimate of the leading terms, not a bound.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

__all__ = [
    "Allocation",
    "check_fits",
    "dqn_allocations",
    "estimate",
    "mlp_buffer_floats",
    "mlp_parameters",
    "off_policy_allocations",
    "ppo_allocations",
    "total_bytes",
    "transition_bytes",
]

F32, F64, I64 = 4, 8, 8
#: a trainable network holds its weights, their gradients and Adam's two moments
TRAINABLE_COPIES = 4


@dataclass(frozen=True)
class Allocation:
    """``nbytes`` of ``what``, sized by the Config fields ``fields`` (what to lower if too big)."""

    what: str
    nbytes: int
    fields: str


def mlp_parameters(sizes: Sequence[int]) -> int:
    """Weights and biases of an MLP with layer widths ``sizes`` (input first)."""
    return sum(a * b + b for a, b in itertools.pairwise(sizes))


def mlp_buffer_floats(sizes: Sequence[int], rows: int, activation: str, input_gradient: bool = False) -> int:
    """Floats of :func:`dispatchrl.nn.mlp.mlp_buffers` for ``rows`` rows: per layer the output,
    the pre-activation gradient and the input gradient (a separate pre-activation for gelu),
    plus the output gradient."""
    widths = list(sizes[1:])
    per_row = 2 * sum(widths) + sum(widths[:-1]) + widths[-1]
    per_row += sum(widths) if activation == "gelu" else 0
    per_row += sizes[0] if input_gradient else 0
    return rows * per_row


def transition_bytes(rows: int, obs_dim: int, action_dim: int) -> int:
    """Bytes of ``rows`` stored transitions (the replay buffer's and the acting buffers' layout)."""
    return rows * (F32 * (2 * obs_dim + action_dim + 1) + 2)  # obs, next_obs, action, reward; 2 flags


def _episode_ring(episodes: int) -> int:
    return episodes * (F64 + 2 * I64)  # return, length, end step


def _priority_batch_bytes(config: Any) -> int:
    """Prioritized replay's per-batch arrays: the sampled rows, their weights and priorities."""
    return config.batch_size * (I64 + 2 * F64) if config.prioritized else 0


def _priority_tree_bytes(config: Any) -> int:
    """Prioritized replay's sum and min trees over the next power of two of the capacity."""
    return 2 * 2 * (1 << max(0, config.capacity - 1).bit_length()) * F64 if config.prioritized else 0


def off_policy_allocations(
    config: Any, obs_dim: int, action_dim: int, episodes: int, critic_obs_dim: int | None, sac: bool
) -> list[Allocation]:
    """TD3's (``sac`` False) or SAC's buffers: actor, twin critics and their targets, batch and
    acting buffers, the replay ring (none in memory when memmapped), the episode ring."""
    envs, rows, act = config.num_envs, config.batch_size, config.activation
    actor = (obs_dim, *config.hidden, (2 if sac else 1) * action_dim)
    critic = ((critic_obs_dim or obs_dim) + action_dim, *config.hidden, 1)
    # an asymmetric critic's rows are [actor observation | critic observation]
    obs_dim += critic_obs_dim or 0
    # TD3: actor + 2 critics trained, their 3 targets plain; SAC: its targets are full networks too
    copies = mlp_parameters(actor) * (TRAINABLE_COPIES + (0 if sac else 1))
    copies += 2 * mlp_parameters(critic) * (2 * TRAINABLE_COPIES if sac else TRAINABLE_COPIES + 1)
    if sac:  # actor train/next; critics train, next, and through the actor (with input gradients)
        batch = 2 * mlp_buffer_floats(actor, rows, act) + 4 * mlp_buffer_floats(critic, rows, act)
        batch += 2 * mlp_buffer_floats(critic, rows, act, input_gradient=True)
        batch += rows * (4 * (obs_dim + action_dim) + 5 * action_dim + 4)  # critic inputs, noises, log-probs
    else:  # actor; critic 1 with input gradients; critic 2
        batch = mlp_buffer_floats(actor, rows, act) + mlp_buffer_floats(critic, rows, act, input_gradient=True)
        batch += mlp_buffer_floats(critic, rows, act) + rows * (obs_dim + 2 * action_dim + 1)
    batch_bytes = F32 * batch + transition_bytes(rows, obs_dim, action_dim)
    batch_bytes += _priority_batch_bytes(config)
    if config.n_step > 1:
        batch_bytes += rows * (I64 + F64 + F32)
    acting = F32 * (mlp_buffer_floats(actor, envs, act) + envs * 3 * action_dim)
    acting += transition_bytes(envs, obs_dim, action_dim)
    replay = transition_bytes(config.capacity, obs_dim, action_dim) + _priority_tree_bytes(config)
    where = f"replay buffer of {config.capacity} rows"
    return [
        Allocation("networks (weights, gradients, Adam moments, targets)", F32 * copies, "hidden"),
        Allocation("batch buffers and scratch", batch_bytes, "batch_size, hidden"),
        Allocation("acting buffers", acting, "num_envs"),
        Allocation(where, replay if config.memmap_path is None else 0, "replay_capacity (default: total_steps)"),
        Allocation("episode ring", _episode_ring(episodes), "num_envs"),
    ]


def dqn_allocations(
    config: Any, obs_dim: int, action_dim: int, episodes: int, critic_obs_dim: int | None = None
) -> list[Allocation]:
    """DQN's ``memory_estimate``: ``action_dim`` is the Discrete space's n (the Q network's outputs; a
    dueling network has n + 1, and its buffers n Q-values and their gradient per row besides); a
    stored action is one column, its index (``critic_obs_dim``, the protocol's, is unused)."""
    envs, rows, act = config.num_envs, config.batch_size, config.activation
    dueling = getattr(config, "dueling", False)
    q = (obs_dim, *config.hidden, action_dim + dueling)
    combined = 2 * action_dim if dueling else 0  # per buffer row: the Q-values and their gradient
    copies = mlp_parameters(q) * (TRAINABLE_COPIES + 1)  # the Q network trained, its target plain
    batch = F32 * (2 * (mlp_buffer_floats(q, rows, act) + rows * combined) + rows) + transition_bytes(rows, obs_dim, 1)
    if config.n_step > 1:
        batch += rows * (I64 + F64 + F32)
    if config.prioritized:  # and the taken actions' Q, one column
        batch += _priority_batch_bytes(config) + rows * F32
    acting = F32 * (mlp_buffer_floats(q, envs, act) + envs * combined + envs) + transition_bytes(envs, obs_dim, 1)
    replay = transition_bytes(config.capacity, obs_dim, 1) + _priority_tree_bytes(config)
    return [
        Allocation("networks (weights, gradients, Adam moments, target)", F32 * copies, "hidden"),
        Allocation("batch buffers and scratch", batch, "batch_size, hidden"),
        Allocation("acting buffers", acting, "num_envs"),
        Allocation(
            f"replay buffer of {config.capacity} rows", replay if config.memmap_path is None else 0, "buffer_size"
        ),
        Allocation("episode ring", _episode_ring(episodes), "num_envs"),
    ]


def ppo_allocations(
    config: Any, obs_dim: int, action_dim: int, episodes: int, critic_obs_dim: int | None = None
) -> list[Allocation]:
    """PPO's ``memory_estimate``: actor and critic with their Adam moments, minibatch and acting
    buffers, the rollout, the episode ring (``critic_obs_dim``, the protocol's, is unused)."""
    envs, rows, steps, act = config.num_envs, config.batch_size, config.steps_per_env, config.activation
    actor, critic = (obs_dim, *config.hidden, action_dim), (obs_dim, *config.hidden, 1)
    copies = TRAINABLE_COPIES * (mlp_parameters(actor) + mlp_parameters(critic))
    batch = mlp_buffer_floats(actor, rows, act) + mlp_buffer_floats(critic, rows, act)
    batch += rows * (obs_dim + 2 * action_dim + 4)  # the minibatch
    acting = mlp_buffer_floats(actor, envs, act) + 2 * mlp_buffer_floats(critic, envs, act)
    acting = F32 * (acting + envs * (2 * obs_dim + action_dim + 1)) + transition_bytes(envs, obs_dim, action_dim)
    rollout_rows = envs * steps
    rollout = rollout_rows * (F32 * (obs_dim + 2 * action_dim + 6) + 2 + I64)  # + the permutation
    return [
        Allocation("networks (weights, gradients, Adam moments)", F32 * copies, "hidden"),
        Allocation("minibatch buffers and scratch", F32 * batch, "batch_size, hidden"),
        Allocation("acting buffers", acting, "num_envs"),
        Allocation(f"rollout of {rollout_rows} rows", rollout, "num_envs × steps_per_env"),
        Allocation("episode ring", _episode_ring(episodes), "num_envs"),
    ]


def estimate(
    algo: Any, config: Any, obs_dim: int, action_dim: int, episodes: int = 0, critic_obs_dim: int | None = None
) -> list[Allocation]:
    """The large buffers algorithm ``algo``'s state allocates for ``config`` on an env with
    ``obs_dim`` / ``action_dim`` (the policy network's outputs per action: a Discrete space's n
    for DQN), with an episode ring of ``episodes`` rows (the driver's ``episode_ring_capacity``)
    and, for an asymmetric critic, its observation's width ``critic_obs_dim``: what the
    algorithm's module (``algo``, see :class:`~dispatchrl.algorithms.protocol.Algorithm`) says in
    its ``memory_estimate``. A module without one gets the estimate of its replay buffer or
    rollout alone."""
    if isinstance(algo, str):
        raise ConfigError(f"estimate: 'algo' must be an algorithm module (dispatchrl.td3, ...), got the name {algo!r}")
    own = getattr(algo, "memory_estimate", None)
    if own is not None:
        return own(config, obs_dim, action_dim, episodes, critic_obs_dim)
    capacity = getattr(config, "capacity", None)
    if capacity is not None:
        if getattr(config, "memmap_path", None) is not None:
            return []
        replay = transition_bytes(capacity, obs_dim, action_dim)
        return [Allocation(f"replay buffer of {capacity} rows", replay, "replay_capacity")]
    rows = config.num_envs * getattr(config, "steps_per_env", 1)
    return [
        Allocation(
            f"rollout of {rows} rows",
            rows * (transition_bytes(1, obs_dim, action_dim) + 32),
            "num_envs × steps_per_env",
        )
    ]


def total_bytes(allocations: Sequence[Allocation]) -> int:
    return sum(a.nbytes for a in allocations)


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_fits(
    allocations: Sequence[Allocation], available: int | None, who: str, copies: int = 1, what: str = "the run"
) -> None:
    """Raise ConfigError when ``copies`` × the estimate exceeds ``available`` bytes, naming the
    largest buffers and the fields that size them (None: memory unknown, nothing checked)."""
    needed = copies * total_bytes(allocations)
    if available is None or needed <= available:
        return
    # the buffers that matter (at least 5% of the total), largest first
    largest = sorted((a for a in allocations if 20 * a.nbytes >= needed / copies), key=lambda a: -a.nbytes)[:3]
    parts = "; ".join(f"{a.what} needs {_gib(copies * a.nbytes)} (lower {a.fields})" for a in largest)
    times = f" ({copies} copies)" if copies > 1 else ""
    raise ConfigError(
        f"{who}: {what} needs about {_gib(needed)}{times}, more than the {_gib(available)} of memory available: {parts}"
    )
