"""Action and observation spaces: :class:`Box` (a float32 vector within bounds) and
:class:`Discrete` (one index in ``range(n)``), the one home of what a space means.

Policies act in [-1, 1] on a Box; :meth:`Box.from_unit` maps that onto the env's bounds, written
once here with the float32 operation order every caller used before (so actions stay bit for bit
the same). An algorithm declares the spaces it takes (``ACTION_SPACES``); an env of another space
is refused with a ConfigError before anything is built.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ConfigError

__all__ = [
    "Box",
    "Discrete",
    "Space",
    "as_action_space",
    "from_gymnasium_space",
    "space_names",
    "to_gymnasium_space",
]


@dataclass(frozen=True, eq=False)
class Box:
    """Vectors of ``len(low)`` float32 components, ``low[i] <= x[i] <= high[i]`` (physical units).
    ``low``/``high`` may be infinite (an unbounded output); :meth:`check_finite` refuses that
    where a policy's [-1, 1] must map onto the bounds."""

    low: np.ndarray
    high: np.ndarray

    def __post_init__(self) -> None:
        low = np.asarray(self.low, np.float32).reshape(-1)
        high = np.asarray(self.high, np.float32).reshape(-1)
        if low.shape != high.shape:
            raise ConfigError(f"Box: 'low' has {low.size} components, 'high' {high.size}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    dtype = np.dtype(np.float32)

    @property
    def dim(self) -> int:
        """The number of components (an action's columns)."""
        return int(self.low.size)

    @property
    def columns(self) -> int:
        """Columns an action of this space takes in a transition row."""
        return self.dim

    def check_finite(self, name: str) -> None:
        """Refuse infinite bounds: ConfigError naming ``name`` (the env)."""
        if not (np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high))):
            raise ConfigError(f"env {name!r}: action bounds must be finite, got {self.low}..{self.high}")

    def from_unit(self, unit: Any) -> np.ndarray:
        """[-1, 1] → [low, high]: ``low + (unit + 1) * 0.5 * (high - low)`` (in ``unit``'s
        precision: float32 stays float32, float64 stays float64)."""
        return self.low + (unit + 1) * 0.5 * (self.high - self.low)  # type: ignore[no-any-return]

    def to_unit(self, action: Any) -> np.ndarray:
        """[low, high] → [-1, 1], the inverse of :meth:`from_unit`."""
        return 2 * (action - self.low) / (self.high - self.low) - 1  # type: ignore[no-any-return]

    @property
    def half_range(self) -> np.ndarray:
        """``(high - low) / 2``: the slope of the affine [-1, 1] → [low, high] map (PPO folds it,
        with :attr:`centre`, into its policy's last layer)."""
        return (self.high - self.low) / 2  # type: ignore[no-any-return]

    @property
    def centre(self) -> np.ndarray:
        """``(high + low) / 2``: the intercept of the affine [-1, 1] → [low, high] map."""
        return (self.high + self.low) / 2  # type: ignore[no-any-return]

    def affine_from_unit(self, unit: Any) -> np.ndarray:
        """[-1, 1] → [low, high] as ``unit * half_range + centre``, then clipped (PPO's Gaussian
        mean, which may leave [-1, 1])."""
        return self.clip(unit * self.half_range + self.centre)

    def clip(self, x: Any) -> np.ndarray:
        """``x`` clipped into [low, high]."""
        return np.clip(x, self.low, self.high)  # type: ignore[no-any-return]

    def squash(self, x: Any, how: str) -> np.ndarray:
        """A policy network's output → an action: ``"tanh"`` (the output is tanh's, in [-1, 1]):
        :meth:`from_unit`; ``"clip"``: clipped into the bounds."""
        if how == "tanh":
            return self.from_unit(x)
        if how == "clip":
            return self.clip(x)
        raise ConfigError(f"squash: expected 'tanh' or 'clip', got {how!r}")

    def from_policy(self, actions: Any) -> np.ndarray:
        """A policy's action rows (in [-1, 1], or beyond where Gaussian) → the env's actions:
        clipped to [-1, 1], then mapped onto the bounds."""
        return self.from_unit(np.clip(actions, -1.0, 1.0))

    def __repr__(self) -> str:
        return f"Box({self.dim})"


@dataclass(frozen=True)
class Discrete:
    """One action index in ``range(n)`` (gymnasium's Discrete with ``start`` 0)."""

    n: int

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or self.n < 1:
            raise ConfigError(f"Discrete: 'n' must be an int >= 1, got {self.n!r}")
        object.__setattr__(self, "n", int(self.n))

    dtype = np.dtype(np.int64)
    #: an action is one index: one column of a transition row
    columns = 1

    def check(self, actions: Any, name: str = "actions") -> np.ndarray:
        """Host action indices → int64, refusing non-integers and indices outside ``range(n)``."""
        a = np.asarray(actions)
        if a.dtype.kind not in "iuf" or (a.dtype.kind == "f" and not np.all(np.isfinite(a) & (a == np.round(a)))):
            raise ConfigError(f"{name}: expected action indices (integers in [0, {self.n})), got {a.ravel()[:4]}")
        if a.size and (a.min() < 0 or a.max() >= self.n):
            raise ConfigError(f"{name}: action indices must be in [0, {self.n}), got {a.ravel()[:4]}")
        return a.astype(np.int64)

    def from_policy(self, actions: Any) -> np.ndarray:
        """A policy's action rows (N, 1), each an index held as a float (the fused steps' action
        arrays are float32) → int64 indices (N, 1), refused out of range as :meth:`check` does."""
        return self.check(actions, "policy actions")

    def __repr__(self) -> str:
        return f"Discrete({self.n})"


Space = Box | Discrete


def as_action_space(space: Space | int) -> Space:
    """An algorithm's ``build`` argument: a space, or an int ``A`` for a Box of A components in
    [-1, 1] (what the policies of a Box act in; ``build(..., action_dim, ...)`` as before)."""
    if isinstance(space, (Box, Discrete)):
        return space
    if isinstance(space, bool) or not isinstance(space, (int, np.integer)) or space < 1:
        raise ConfigError(f"build: 'action_space' must be a Box, a Discrete or a positive int, got {space!r}")
    return Box(np.full(int(space), -1.0), np.full(int(space), 1.0))


def space_names(kinds: tuple[type, ...]) -> str:
    """``(Box, Discrete)`` → ``"Box or Discrete"``, for messages."""
    return " or ".join(k.__name__ for k in kinds)


def from_gymnasium_space(space: Any, what: str) -> Space:
    """A gymnasium Box or Discrete → its :class:`Box` / :class:`Discrete` (a Box flattened to a
    vector); any other space (MultiDiscrete, Tuple, Dict, ...) or a Discrete with a nonzero
    ``start`` is refused, naming ``what`` (e.g. "the env's action_space")."""
    import gymnasium

    if isinstance(space, gymnasium.spaces.Box):
        return Box(space.low.reshape(-1).astype(np.float32), space.high.reshape(-1).astype(np.float32))
    if isinstance(space, gymnasium.spaces.Discrete):
        if int(space.start) != 0:
            raise ConfigError(f"{what} must be a Discrete starting at 0, got start={int(space.start)}")
        return Discrete(int(space.n))
    raise ConfigError(f"{what} must be a gymnasium Box or Discrete, got {type(space).__name__}")


def to_gymnasium_space(space: Space) -> Any:
    """A :class:`Box` or :class:`Discrete` as gymnasium's (a Box as float32)."""
    import gymnasium

    if isinstance(space, Discrete):
        return gymnasium.spaces.Discrete(space.n)
    return gymnasium.spaces.Box(space.low, space.high, dtype=np.float32)
