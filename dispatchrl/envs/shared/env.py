"""What the built-in env descriptions (``envs/<env>/env.py``) share: :class:`BuiltinEnv` refuses
a ``num_envs`` or ``max_episode_steps`` that is not a count, :class:`DiscreteEnv` adds
gymnasium's discrete actions (an index per env, in float32)."""

from typing import ClassVar

import numpy as np

from ...spaces import Discrete
from ..api import NativeEnv, check_count

__all__ = ["BuiltinEnv", "DiscreteEnv"]


class BuiltinEnv(NativeEnv):
    """A built-in :class:`~dispatchrl.envs.api.NativeEnv` (a frozen dataclass with fields
    ``num_envs`` and ``max_episode_steps``): both must be ints >= 1, a ConfigError naming the class
    says which is not. A subclass with more to check calls ``super().__post_init__()`` first."""

    def __post_init__(self) -> None:
        check_count(type(self).__name__, "num_envs", self.num_envs)
        check_count(type(self).__name__, "max_episode_steps", self.max_episode_steps)


class DiscreteEnv(BuiltinEnv):
    """A built-in env with gymnasium's ``num_actions`` discrete actions: the action is an index in
    float32 (as every native env's actions are), bounded by 0 and ``num_actions - 1``; the kernels
    clamp it into that range."""

    num_actions: ClassVar[int]
    action_dim = 1  # the index, one column

    action_low = property(lambda self: np.zeros(1, np.float32))
    action_high = property(lambda self: np.full(1, self.num_actions - 1, np.float32))

    @property
    def action_space(self) -> Discrete:  # type: ignore[override]
        """The actions :func:`~dispatchrl.envs.env_step` takes: an index in ``range(num_actions)``."""
        return Discrete(self.num_actions)

    def policy_action_space(self) -> Discrete:  # type: ignore[override]
        """A policy picks one of the ``num_actions`` indices."""
        return Discrete(self.num_actions)
