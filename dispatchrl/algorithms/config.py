"""Config validation shared by every algorithm: field rules, the predicates they use, and the
fields TD3 and SAC have in common."""

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..activation import Activation
from ..errors import ConfigError
from ..nn import NETWORKS, check_device_methods, network_constructor

__all__ = [
    "HIDDEN_ACTIVATIONS",
    "NETWORK_RULES",
    "PRIORITY_RULES",
    "OffPolicyConfig",
    "Rule",
    "activation_name",
    "finite",
    "hidden_sizes",
    "network_constructors",
    "network_name",
    "non_negative",
    "non_negative_int",
    "positive",
    "positive_int",
    "unit_interval",
    "validate_fields",
    "validate_off_policy",
]

#: a field's rule: (predicate on the value, what the value must be, for the error message)
Rule = tuple[Callable[[Any], bool], str]

#: the activations a Config's hidden layers may use: every Activation but the identity
HIDDEN_ACTIVATIONS = tuple(member.label for member in Activation if member is not Activation.IDENTITY)


def validate_fields(config: object, rules: Mapping[str, Rule]) -> None:
    """``rules``: field → (predicate, expectation); raise ConfigError naming the first bad field."""
    for name, (ok, expected) in rules.items():
        value = getattr(config, name)
        try:
            good = ok(value)
        except TypeError:
            good = False
        if not good:
            raise ConfigError(f"{type(config).__name__}.{name} must be {expected}, got {value!r}")


def positive_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and bool(v >= 1)


def non_negative_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and bool(v >= 0)


def unit_interval(v: object) -> bool:
    return isinstance(v, (int, float)) and 0 <= v <= 1


def positive(v: object) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def non_negative(v: object) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v >= 0


def finite(v: object) -> bool:
    return isinstance(v, (int, float)) and bool(np.isfinite(v))


def hidden_sizes(v: Any) -> bool:
    return len(v) >= 1 and all(positive_int(h) for h in v)


def activation_name(v: object) -> bool:
    return v in HIDDEN_ACTIVATIONS


def network_name(v: object) -> bool:
    return isinstance(v, str) and (v in NETWORKS or ":" in v)


_NETWORK = "a name in dispatchrl.nn.NETWORKS or 'module:function'"

#: the rules of the network constructor fields every algorithm's Config has
NETWORK_RULES: dict[str, Rule] = {
    "network": (network_name, _NETWORK),
    "actor_network": (lambda v: v is None or network_name(v), f"None (use network) or {_NETWORK}"),
    "critic_network": (lambda v: v is None or network_name(v), f"None (use network) or {_NETWORK}"),
}


#: the rules of the prioritized-replay fields (TD3, SAC and DQN name them alike)
PRIORITY_RULES: dict[str, Rule] = {
    "prioritized": (lambda v: isinstance(v, bool), "true or false"),
    "priority_alpha": (non_negative, "a number >= 0"),
    "priority_beta": (unit_interval, "in [0, 1]"),
    "priority_eps": (non_negative, "a number >= 0"),
    "priority_beta_steps": (lambda v: v is None or positive_int(v), "None or a positive int"),
}


def network_constructors(config: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The (actor, critic) constructors of ``config``: ``actor_network`` / ``critic_network``
    where set, else ``network`` for that role (a ConfigError names the field that failed). The
    networks they make are checked to have their own methods for the device they are made on
    (:func:`dispatchrl.nn.check_device_methods`)."""

    def constructor(role: str) -> Callable[..., Any]:
        field = f"{role}_network" if getattr(config, f"{role}_network") is not None else "network"
        name = f"{type(config).__name__}.{field}"
        make = network_constructor(getattr(config, field), name)

        def make_checked(device: Any, *args: Any, **kwargs: Any) -> Any:
            net = make(device, *args, **kwargs)
            check_device_methods(device, net, f"{name}={getattr(config, field)!r} ({role})")
            return net

        return make_checked

    return constructor("actor"), constructor("critic")


def validate_off_policy(config: Any, extra_rules: Mapping[str, Rule]) -> None:
    """The fields TD3 and SAC share, then the algorithm's own."""
    validate_fields(
        config,
        {
            "total_steps": (positive_int, "a positive int"),
            "warmup_steps": (non_negative_int, "an int >= 0"),
            "batch_size": (positive_int, "a positive int"),
            "hidden": (hidden_sizes, "a tuple of positive ints"),
            "activation": (activation_name, "'relu', 'tanh' or 'gelu'"),
            **NETWORK_RULES,
            "gamma": (unit_interval, "in [0, 1]"),
            "polyak": (unit_interval, "in [0, 1]"),
            "actor_lr": (positive, "a positive number"),
            "critic_lr": (positive, "a positive number"),
            "weight_decay": (lambda v: non_negative(v) and v <= 2, "a number in [0, 2]"),
            "policy_delay": (positive_int, "a positive int"),
            "train_freq": (positive_int, "a positive int"),
            "replay_capacity": (lambda v: v is None or positive_int(v), "None or a positive int"),
            "num_envs": (positive_int, "a positive int"),
            "check_every": (non_negative_int, "an int >= 0 (0 turns the divergence check off)"),
            **PRIORITY_RULES,
            "n_step": (positive_int, "a positive int"),
            "memmap_path": (lambda v: v is None or isinstance(v, (str, os.PathLike)), "None or a folder path"),
            "asymmetric_critic": (lambda v: isinstance(v, bool), "true or false"),
            **extra_rules,
        },
    )
    if config.total_steps < config.num_envs:
        raise ConfigError(
            f"{type(config).__name__}.total_steps ({config.total_steps}) must be >= num_envs ({config.num_envs})"
        )


@dataclass
class OffPolicyConfig:
    """The hyperparameters TD3 and SAC share; defaults are the RLtools paper's Pendulum benchmark."""

    total_steps: int = 10_000  # environment steps, summed over all envs
    warmup_steps: int = 100  # uniform random actions, no updates
    batch_size: int = 100  # transitions sampled per gradient step
    hidden: tuple[int, ...] = (64, 64)  # hidden layer widths of the actor and critics
    activation: str = "relu"  # hidden activation: relu, tanh or gelu
    network: str = "mlp"  # actor and critics' constructor (nn.NETWORKS name or "module:function")
    actor_network: str | None = None  # the actor's constructor; wins over network (None: network's)
    critic_network: str | None = None  # the critics' constructor; wins over network (None: network's)
    gamma: float = 0.99  # discount factor
    polyak: float = 0.995  # target ← polyak·target + (1 − polyak)·online
    actor_lr: float = 1e-3  # the actor's Adam learning rate
    critic_lr: float = 1e-3  # the critics' Adam learning rate
    weight_decay: float = 0.0  # RLtools' Adam weight decay: each step w -= weight_decay/2 · w, weights only
    policy_delay: int = 1  # actor (and target or temperature) updates every policy_delay updates
    train_freq: int = 1  # one update every train_freq env steps (SB3's train_freq)
    replay_capacity: int | None = None  # replay buffer rows; None: total_steps
    num_envs: int = 1  # parallel environments
    check_every: int = 1000  # divergence check (NaN/inf) every this many steps; 0: off
    prioritized: bool = False  # prioritized replay (sum tree), priorities = twin critics' mean |TD error|
    priority_alpha: float = 0.6  # stored value (priority + eps) ** alpha
    priority_beta: float = 0.4  # importance-weight exponent, annealed linearly to 1 over total_steps
    priority_eps: float = 1e-6  # added to every priority, so none is 0
    priority_beta_steps: int | None = None  # env steps (per env) over which β reaches 1; None: the run's
    n_step: int = 1  # n-step returns: targets sum n discounted rewards, cut at episode ends, then bootstrap
    memmap_path: str | None = None  # the replay ring in numpy memmaps under this folder (None: in memory)
    asymmetric_critic: bool = False  # the critics see the env's privileged observation, the actor its own (native envs)

    def validate(self) -> None:
        validate_off_policy(self, self.extra_rules())

    def extra_rules(self) -> dict[str, Rule]:
        """The algorithm's own fields' rules (checked after the shared ones)."""
        return {}

    @property
    def capacity(self) -> int:
        return self.replay_capacity or self.total_steps
