"""Config validation shared by every algorithm: each field declares its rule beside it
(``batch_size: int = POSITIVE_INT(100)``: a :class:`Rule` called with the default), from the
predicates and named rules here; and the fields TD3 and SAC have in common."""

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import numpy as np

from ..activation import Activation
from ..errors import ConfigError
from ..nn import NETWORKS, check_device_methods, network_constructor

__all__ = [
    "ACTIVATION",
    "CHECK_EVERY",
    "FINITE",
    "FLAG",
    "FOLDER",
    "HIDDEN",
    "HIDDEN_ACTIVATIONS",
    "NETWORK",
    "NON_NEGATIVE",
    "NON_NEGATIVE_INT",
    "OPTIONAL_POSITIVE_INT",
    "POSITIVE",
    "POSITIVE_INT",
    "ROLE_NETWORK",
    "UNIT_INTERVAL",
    "WEIGHT_DECAY",
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


class Rule(NamedTuple):
    """What a Config field's value must be: a predicate, and the words for the error message.
    Called with a default, it declares the field: ``batch_size: int = POSITIVE_INT(100)``."""

    ok: Callable[[Any], bool]
    expected: str

    def __call__(self, default: Any) -> Any:
        return field(default=default, metadata={"rule": self})


#: the activations a Config's hidden layers may use: every Activation but the identity
HIDDEN_ACTIVATIONS = tuple(member.label for member in Activation if member is not Activation.IDENTITY)


def validate_fields(config: object) -> None:
    """Check each field of dataclass ``config`` by the :class:`Rule` that declared it, in
    declaration order (a field declared without one, e.g. a user subclass's, is not checked);
    raise ConfigError naming the first bad field."""
    for f in fields(config):  # type: ignore[arg-type]
        if "rule" not in f.metadata:
            continue
        ok, expected = f.metadata["rule"]
        value = getattr(config, f.name)
        try:
            good = ok(value)
        except TypeError:
            good = False
        if not good:
            raise ConfigError(f"{type(config).__name__}.{f.name} must be {expected}, got {value!r}")


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

# the named rules Config fields are declared with
POSITIVE_INT = Rule(positive_int, "a positive int")
NON_NEGATIVE_INT = Rule(non_negative_int, "an int >= 0")
OPTIONAL_POSITIVE_INT = Rule(lambda v: v is None or positive_int(v), "None or a positive int")
POSITIVE = Rule(positive, "a positive number")
NON_NEGATIVE = Rule(non_negative, "a number >= 0")
FINITE = Rule(finite, "a finite number")
UNIT_INTERVAL = Rule(unit_interval, "in [0, 1]")
FLAG = Rule(lambda v: isinstance(v, bool), "true or false")
HIDDEN = Rule(hidden_sizes, "a tuple of positive ints")
ACTIVATION = Rule(activation_name, "'relu', 'tanh' or 'gelu'")
NETWORK = Rule(network_name, _NETWORK)
ROLE_NETWORK = Rule(lambda v: v is None or network_name(v), f"None (use network) or {_NETWORK}")
CHECK_EVERY = Rule(non_negative_int, "an int >= 0 (0 turns the divergence check off)")
FOLDER = Rule(lambda v: v is None or isinstance(v, (str, os.PathLike)), "None or a folder path")
WEIGHT_DECAY = Rule(lambda v: non_negative(v) and v <= 2, "a number in [0, 2]")


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


def validate_off_policy(config: Any) -> None:
    """Every field by its rule, then what the fields of TD3 and SAC must satisfy together."""
    validate_fields(config)
    if config.total_steps < config.num_envs:
        raise ConfigError(
            f"{type(config).__name__}.total_steps ({config.total_steps}) must be >= num_envs ({config.num_envs})"
        )


@dataclass
class OffPolicyConfig:
    """The hyperparameters TD3 and SAC share; defaults are the RLtools paper's Pendulum benchmark."""

    total_steps: int = POSITIVE_INT(10_000)  # environment steps, summed over all envs
    warmup_steps: int = NON_NEGATIVE_INT(100)  # uniform random actions, no updates
    batch_size: int = POSITIVE_INT(100)  # transitions sampled per gradient step
    hidden: tuple[int, ...] = HIDDEN((64, 64))  # hidden layer widths of the actor and critics
    activation: str = ACTIVATION("relu")  # hidden activation: relu, tanh or gelu
    network: str = NETWORK("mlp")  # actor and critics' constructor (nn.NETWORKS name or "module:function")
    actor_network: str | None = ROLE_NETWORK(None)  # the actor's constructor; wins over network (None: network's)
    critic_network: str | None = ROLE_NETWORK(None)  # the critics' constructor; wins over network (None: network's)
    gamma: float = UNIT_INTERVAL(0.99)  # discount factor
    polyak: float = UNIT_INTERVAL(0.995)  # target ← polyak·target + (1 − polyak)·online
    actor_lr: float = POSITIVE(1e-3)  # the actor's Adam learning rate
    critic_lr: float = POSITIVE(1e-3)  # the critics' Adam learning rate
    weight_decay: float = WEIGHT_DECAY(0.0)
    """RLtools' Adam weight decay: each step w -= weight_decay/2 · w, weights only"""
    policy_delay: int = POSITIVE_INT(1)  # actor (and target or temperature) updates every policy_delay updates
    train_freq: int = POSITIVE_INT(1)  # one update every train_freq env steps (SB3's train_freq)
    replay_capacity: int | None = OPTIONAL_POSITIVE_INT(None)  # replay buffer rows; None: total_steps
    num_envs: int = POSITIVE_INT(1)  # parallel environments
    check_every: int = CHECK_EVERY(1000)  # divergence check (NaN/inf) every this many steps; 0: off
    prioritized: bool = FLAG(False)  # prioritized replay (sum tree), priorities = twin critics' mean |TD error|
    priority_alpha: float = NON_NEGATIVE(0.6)  # stored value (priority + eps) ** alpha
    priority_beta: float = UNIT_INTERVAL(0.4)  # importance-weight exponent, annealed linearly to 1 over total_steps
    priority_eps: float = NON_NEGATIVE(1e-6)  # added to every priority, so none is 0
    priority_beta_steps: int | None = OPTIONAL_POSITIVE_INT(None)
    """env steps (per env) over which β reaches 1; None: the run's"""
    n_step: int = POSITIVE_INT(1)
    """n-step returns: targets sum n discounted rewards, cut at episode ends, then bootstrap"""
    memmap_path: str | None = FOLDER(None)  # the replay ring in numpy memmaps under this folder (None: in memory)
    asymmetric_critic: bool = FLAG(False)
    """the critics see the env's privileged observation, the actor its own (native envs)"""

    def validate(self) -> None:
        validate_off_policy(self)

    @property
    def capacity(self) -> int:
        return self.replay_capacity or self.total_steps
