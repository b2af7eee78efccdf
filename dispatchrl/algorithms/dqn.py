"""DQN (Mnih et al. 2015) with Double-DQN targets (van Hasselt et al. 2016) and the Huber loss,
written once over generic functions; the device decides the rest. Stable-Baselines3's names and
behaviour, rl-zoo's CartPole-v1 defaults.

Per environment step: act ε-greedily on the Q network (uniform random before ``learning_starts``,
then ε decaying linearly over ``exploration_fraction`` of the run), store the transition in the
replay ring, and every ``target_update_interval`` env steps move the target network towards the
online one (``tau`` = 1: a copy). Every ``train_freq`` env steps the driver runs
``gradient_steps`` fused gradient steps (:func:`update`), once past ``learning_starts``.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import checkpoint
from ..arrays import Array, zeros
from ..checkpoint import SCRATCH
from ..data import EpisodeLog, ReplayRing, TensorDict
from ..devices import Device
from ..envs import EnvState
from ..errors import ConfigError
from ..kernels.core.api import increment
from ..kernels.offpolicy.api import accumulate_q_stats, dqn_targets, epsilon_greedy, q_huber_gradient, taken_q
from ..nn import (
    PolicyHead,
    adam_update,
    backward,
    check_device_methods,
    forward,
    head_policy,
    make_buffers,
    network_constructor,
    polyak_average,
)
from ..spaces import Discrete
from ..staging import Below, Every, when
from . import memory, offpolicy
from .acting import head_act
from .config import (
    ACTIVATION,
    CHECK_EVERY,
    FLAG,
    FOLDER,
    HIDDEN,
    NETWORK,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    OPTIONAL_POSITIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    UNIT_INTERVAL,
    validate_fields,
)
from .divergence import trained_quantities
from .dueling import DuelingQNetwork
from .protocol import Schedule

__all__ = [
    "ACTION_SPACES",
    "NAME",
    "Config",
    "State",
    "act",
    "build",
    "check_iteration",
    "collect",
    "config_for",
    "memory_estimate",
    "native_step",
    "policy",
    "policy_head",
    "schedule",
    "store",
    "update",
    "update_target",
    "watched",
]

NAME = "dqn"
#: the action spaces it takes (others are refused before anything is built)
ACTION_SPACES: tuple[type, ...] = (Discrete,)


# ---------------------------------------------------------------- hyperparameters


@dataclass
class Config:
    """Stable-Baselines3's DQN names; defaults are rl-zoo's CartPole-v1 ones. SB3's
    ``max_grad_norm`` (10) has no counterpart: the core kernels have no gradient-norm clip.
    Prioritized replay (TD3's ``prioritized`` and ``priority_*`` fields) is off by default, as
    SB3's DQN has none.

    ``dueling=True`` (SB3 has none; Tianshou's and TorchRL's dueling DQN): the network built by
    ``network`` has n + 1 outputs [V, A_1..A_n] and Q_j = V + A_j − mean_k A_k
    (:class:`~dispatchrl.algorithms.dueling.DuelingQNetwork`); the deployed policy is still an
    n-output network (the combine folded into its last layer)."""

    total_steps: int = POSITIVE_INT(50_000)  # environment steps, summed over all envs
    learning_rate: float = POSITIVE(2.3e-3)  # Adam's
    batch_size: int = POSITIVE_INT(64)  # transitions sampled per gradient step
    buffer_size: int = POSITIVE_INT(100_000)  # replay buffer rows
    learning_starts: int = NON_NEGATIVE_INT(1000)
    """env steps (summed over envs) of uniform random actions before learning"""
    gamma: float = UNIT_INTERVAL(0.99)  # discount factor
    tau: float = UNIT_INTERVAL(1.0)  # target ← tau·online + (1 − tau)·target; 1: a copy (SB3's hard update)
    target_update_interval: int = POSITIVE_INT(10)  # env steps (summed over envs, as SB3) between target updates
    train_freq: int = POSITIVE_INT(256)  # env steps per env between training phases
    gradient_steps: int = POSITIVE_INT(128)  # gradient steps per training phase
    exploration_fraction: float = UNIT_INTERVAL(0.16)  # of total_steps, over which ε decays linearly
    exploration_initial_eps: float = UNIT_INTERVAL(1.0)  # ε when the decay starts (step 0)
    exploration_final_eps: float = UNIT_INTERVAL(0.04)  # ε after the decay, to the end of the run
    double_q: bool = FLAG(True)  # Double-DQN targets (the online net picks a'); False: max of the target net
    hidden: tuple[int, ...] = HIDDEN((256, 256))  # hidden layer widths of the Q network
    activation: str = ACTIVATION("relu")  # hidden activation: relu, tanh or gelu
    network: str = NETWORK("mlp")  # the Q network's constructor (nn.NETWORKS name or "module:function")
    num_envs: int = POSITIVE_INT(1)  # parallel environments
    check_every: int = CHECK_EVERY(1000)  # divergence check (NaN/inf) every this many steps; 0: off
    prioritized: bool = FLAG(False)  # prioritized replay (sum tree), priorities = |TD error| of the taken action
    priority_alpha: float = NON_NEGATIVE(0.6)  # stored value (priority + eps) ** alpha
    priority_beta: float = UNIT_INTERVAL(0.4)  # importance-weight exponent, annealed linearly to 1 over total_steps
    priority_eps: float = NON_NEGATIVE(1e-6)  # added to every priority, so none is 0
    priority_beta_steps: int | None = OPTIONAL_POSITIVE_INT(None)
    """env steps (per env) over which β reaches 1; None: the run's"""
    n_step: int = POSITIVE_INT(1)
    """n-step returns: targets sum n discounted rewards, cut at episode ends, then bootstrap"""
    memmap_path: str | None = FOLDER(None)  # the replay ring in numpy memmaps under this folder (None: in memory)
    dueling: bool = FLAG(False)
    """dueling head (Wang et al. 2016): the network outputs [V, A_1..A_n], Q_j = V + A_j − mean A"""

    def validate(self) -> None:
        validate_fields(self)
        if self.total_steps < self.num_envs * self.train_freq:
            raise ConfigError(
                f"Config.total_steps ({self.total_steps}) must be >= num_envs × train_freq "
                f"({self.num_envs} × {self.train_freq}): a run is whole training phases"
            )

    @property
    def capacity(self) -> int:
        return self.buffer_size

    @property
    def warmup_steps(self) -> int:
        """Env steps per env of uniform random actions: SB3 acts randomly while
        ``num_timesteps < learning_starts``."""
        return -(-self.learning_starts // self.num_envs)

    @property
    def decay_steps(self) -> float:
        """Env steps per env over which ε goes from initial to final (at least one)."""
        return max(self.exploration_fraction * self.total_steps / self.num_envs, 1.0)


def config_for(env: object) -> Config:
    """The per-env default configuration: rl-zoo's hyperparameters for Acrobot-v1 and
    MountainCar-v0 (SB3's ``gradient_steps=-1``, one gradient step per env step, written out),
    its CartPole-v1 ones for any other env."""
    name = env.lower() if isinstance(env, str) else ""
    if name in ("acrobot-v1", "dispatchrl/acrobot-v1"):
        return Config(
            total_steps=100_000,
            learning_rate=6.3e-4,
            batch_size=128,
            buffer_size=50_000,
            learning_starts=0,
            target_update_interval=250,
            train_freq=4,
            gradient_steps=4,
            exploration_fraction=0.12,
            exploration_final_eps=0.1,
        )
    if name in ("mountaincar", "mountaincar-v0", "dispatchrl/mountaincar-v0"):
        return Config(
            total_steps=120_000,
            learning_rate=4e-3,
            batch_size=128,
            buffer_size=10_000,
            learning_starts=1000,
            gamma=0.98,
            target_update_interval=600,
            train_freq=16,
            gradient_steps=8,
            exploration_fraction=0.2,
            exploration_final_eps=0.07,
        )
    return Config()


# ---------------------------------------------------------------- state


@dataclass
class State:
    # the Q network and its target are made by config.network (nn.MLP by default) and used
    # through dispatchrl.nn's network functions, with buffers from nn.make_buffers
    q_net: Any
    q_target_net: Any
    q_act: Any = field(metadata=SCRATCH)  # Q network buffers, N rows (acting)
    q_batch: Any = field(metadata=SCRATCH)  # Q network buffers, B rows (next obs, then obs)
    target_batch: Any = field(metadata=SCRATCH)  # target network buffers, B rows
    q_target: Array = field(metadata=SCRATCH)  # (B, 1) the TD targets
    replay: ReplayRing
    batch: TensorDict = field(metadata=SCRATCH)  # B rows sampled from the replay buffer (Transitions' keys)
    transition: TensorDict = field(metadata=SCRATCH)  # the current transition, N rows
    action: Array = field(metadata=SCRATCH)  # (N, 1) the chosen action indices, as floats
    episodes: EpisodeLog | None  # attached by the driver (its ring sized for the driver's chunks)
    rng: Array
    step: Array  # int64 (1,): environment steps taken (per env)
    updates: Array  # int64 (1,): gradient steps taken
    # running float64 sums for logging (never reset, never read by training): the Q network is
    # DQN's critic, so the logger reads them as TD3's critic_loss and q_mean
    critic_stats: Array  # (3,) [gradient steps, Σ Huber loss, Σ mean Q of the taken actions]
    env_state: EnvState | None = None
    priorities: offpolicy.Priorities | None = None  # config.prioritized
    n_step: offpolicy.NStepBatch | None = None  # config.n_step > 1
    q_taken: Array | None = field(default=None, metadata=SCRATCH)  # (B, 1) the taken actions' Q (prioritized)

    prepare_resume = offpolicy.prepare_resume

    def validate_checkpoint(self, values: checkpoint.FieldValues, context: dict[str, Any]) -> None:
        """TD3's replay and episode invariants, then: at most ``gradient_steps`` gradient steps
        per ``train_freq`` env steps past ``learning_starts``, and the Q network's Adam steps are
        the gradient steps."""
        offpolicy.validate_checkpoint(self, values, context)
        config = context.get("config")
        if config is None:
            return
        # the training phases so far that ran: those ending past learning_starts
        started = (config.learning_starts // config.num_envs) // config.train_freq
        phases = max(int(values.scalar("step")) // config.train_freq - started, 0)
        updates = values.require(
            "updates",
            0,
            phases * config.gradient_steps,
            "gradient steps, gradient_steps per train_freq env steps past learning_starts",
        )
        for name, _ in checkpoint.named_arrays(self.q_net, "q_net."):
            if name.endswith(".t."):
                values.require(name[:-1], updates, updates, "Adam steps, one per gradient step")


def build(device: Device, config: Config, obs_dim: int, action_space: Discrete | int, seed: int) -> State:
    """The whole DQN training state on ``device`` for ``obs_dim`` observations and a Discrete
    ``action_space`` (or its number of actions n: one Q-value each): the Q network and its target,
    optimiser moments, replay ring (actions stored as their index, one column), batch and acting
    buffers, RNG stream and counters."""
    actions = action_space.n if isinstance(action_space, Discrete) else Discrete(action_space).n
    envs, rows = config.num_envs, config.batch_size
    sizes = (obs_dim, *config.hidden, actions + config.dueling)  # dueling: V, then A per action
    make = network_constructor(config.network, "Config.network")

    def q_network(trainable: bool = True) -> Any:
        net = make(device, sizes, config.activation, "identity", seed=seed * 8, trainable=trainable)
        check_device_methods(device, net, f"Config.network={config.network!r} (Q network)")
        return DuelingQNetwork(net) if config.dueling else net

    q_net = q_network()
    return State(
        q_net=q_net,
        q_target_net=q_network(trainable=False),  # the same seed: starts as a copy
        q_act=make_buffers(device, q_net, envs),
        q_batch=make_buffers(device, q_net, rows),
        target_batch=make_buffers(device, q_net, rows),
        q_target=zeros(device, (rows, 1)),
        updates=zeros(device, 1, np.int64),
        q_taken=zeros(device, (rows, 1)) if config.prioritized else None,
        **offpolicy.replay_fields(device, config, obs_dim, 1, seed),  # an action is one column, its index
    )


# ---------------------------------------------------------------- acting


def act(device: Device, config: Config, state: State, obs: Array, action: Array, deterministic: bool = False) -> None:
    """Write the action index for ``obs`` into ``action``: the greedy one (``deterministic``), or
    ε-greedy as training explores: uniform before ``learning_starts`` (ε = 1), then ε from the
    linear schedule. Both draw the same stream positions, so the stream does not depend on which
    branch ran."""
    if deterministic:
        head_act(device, policy_head(state), state.q_act, obs, action)
        return

    def uniform(device: Device) -> None:
        epsilon_greedy(device, state.rng, state.q_act.output, state.step, 1.0, 1.0, 1.0, action)

    def explore(device: Device) -> None:
        forward(device, state.q_net, state.q_act, obs)
        epsilon_greedy(
            device,
            state.rng,
            state.q_act.output,
            state.step,
            config.exploration_initial_eps,
            config.exploration_final_eps,
            config.decay_steps,
            action,
        )

    when(device, Below(state.step, config.warmup_steps), uniform, explore)


def collect(device: Device, config: Config, state: State, obs: Array) -> None:
    """Training's acting: ``state.action`` for ``obs``, ε-greedy."""
    act(device, config, state, obs, state.action)


def update_target(device: Device, config: Config, state: State) -> None:
    """After every ``target_update_interval`` env steps (SB3's count: per env, the interval
    divided by num_envs): target ← tau·online + (1 − tau)·target."""
    period = max(config.target_update_interval // config.num_envs, 1)

    def move(device: Device) -> None:
        polyak_average(device, state.q_target_net, state.q_net, 1.0 - config.tau)

    when(device, Every(state.step, period, period - 1), move)  # step counts the steps before this one


# ---------------------------------------------------------------- learning


def train_q(device: Device, config: Config, state: State) -> None:
    """One gradient step of the Q network towards the (Double-)DQN target on a sampled batch."""
    batch, q, target = state.batch, state.q_batch, state.target_batch
    offpolicy.sample_batch(device, config, state)
    # target: r + γ(1 − terminated) Q'(s', argmax_a Q(s', a)) (Double DQN), or max_a Q'(s', a)
    forward(device, state.q_target_net, target, batch.next_obs)
    if config.double_q:
        forward(device, state.q_net, q, batch.next_obs)
    chooser = q.output if config.double_q else target.output
    reward, gamma = offpolicy.target_reward_and_gamma(config, state)
    dqn_targets(device, chooser, target.output, reward, batch.terminated, gamma, state.q_target, config.double_q)
    offpolicy.bootstrap(device, state, state.q_target)
    # Huber loss of the taken actions' Q
    forward(device, state.q_net, q, batch.obs)
    accumulate_q_stats(device, q.output, batch.action, state.q_target, state.critic_stats)
    q_huber_gradient(device, q.output, batch.action, state.q_target, q.d_output)
    offpolicy.weight_gradient(device, state, q.d_output)  # only the taken column is nonzero
    backward(device, state.q_net, q, batch.obs, q.d_output)
    adam_update(device, state.q_net, config.learning_rate)
    if state.q_taken is not None:  # priorities: |TD error| of the taken action, Q before this update
        taken_q(device, q.output, batch.action, state.q_taken)
        offpolicy.update_priorities(device, config, state, state.q_taken, state.q_taken, state.q_target)


def update(device: Device, config: Config, state: State) -> None:
    """One gradient step, once more than ``learning_starts`` env steps were taken (SB3's test)."""

    def learn(device: Device) -> None:
        train_q(device, config, state)
        increment(device, state.updates)

    when(device, Below(state.step, config.learning_starts // config.num_envs + 1), None, learn)


# ---------------------------------------------------------------- the driver's entry points


def schedule(config: Config) -> Schedule:
    """The driver's schedule: ``train_freq`` env steps, then ``gradient_steps`` updates."""
    return Schedule(env_steps=config.train_freq, updates=config.gradient_steps)


def native_step(device: Device, config: Config, env: Any, state: State) -> None:
    """One fused step on a native env: act, step the env, store the transition, update the target."""
    offpolicy.native_step(device, collect, update_target, config, env, state)


def store(device: Device, config: Config, state: State) -> None:
    """Record ``state.transition`` (written by the driver from a Python-stepped env), then update
    the target network when its interval comes round."""
    offpolicy.store(device, update_target, config, state)


check_iteration = offpolicy.check_iteration


def policy_head(state: State) -> PolicyHead:
    """The greedy action: the argmax of the Q network's outputs."""
    return PolicyHead(state.q_net, "argmax")


#: the large buffers :func:`build` and the driver will allocate (checked before they are)
memory_estimate = memory.dqn_allocations


def watched(state: State) -> list[tuple[str, Array]]:
    """What the divergence check reads of ``state``, most likely cause first: the loss's target,
    then the networks' parameters (the driver adds the observation and reward)."""
    return [("TD target (Q loss)", state.q_target), *trained_quantities(state)]


def policy(state: State, action_low: Any = None, action_high: Any = None) -> Callable[[np.ndarray], np.ndarray]:
    """The greedy host policy: int64 action indices (the bounds are unused: a Discrete space)."""
    return head_policy(policy_head(state), Discrete(state.q_act.output.shape[1]))
