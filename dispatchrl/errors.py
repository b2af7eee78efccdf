"""The exceptions dispatchrl raises on purpose, all subclasses of :class:`DispatchRLError`. Bad
input is refused before any kernel runs; two report what happened during a run instead:
:class:`TrainingDiverged` (a NaN or inf, found after the steps that made it) and
:class:`CheckpointWriteError` (a save that failed, e.g. on a full disk, possibly mid-run)."""

__all__ = [
    "DIVERGENCE_HINT",
    "CheckpointError",
    "CheckpointWriteError",
    "ConfigError",
    "DTypeError",
    "DeviceError",
    "DispatchRLError",
    "EmptyBufferError",
    "LockedError",
    "MissingKeyError",
    "ShapeError",
    "TrainingDiverged",
]


class DispatchRLError(Exception):
    """Base class of every error dispatchrl raises on purpose."""


class ShapeError(DispatchRLError, ValueError):
    """An array has the wrong shape, rank or memory layout."""


class DTypeError(DispatchRLError, TypeError):
    """An array has the wrong dtype."""


class DeviceError(DispatchRLError, RuntimeError):
    """A device is unavailable, or arguments live on different devices."""


class ConfigError(DispatchRLError, ValueError):
    """A configuration value or option is invalid."""


class CheckpointError(DispatchRLError, ValueError):
    """A checkpoint file is missing, truncated, malformed or does not match the run."""


class CheckpointWriteError(DispatchRLError, OSError):
    """A checkpoint could not be written (a full disk, an I/O error): nothing was replaced, the
    partial file was removed. ``path`` is where it was saving, ``last_good`` the newest complete
    checkpoint there (None if there is none), ``errno`` the operating system's error number."""

    def __init__(self, message: str, path: str, last_good: str | None, errno: int | None = None) -> None:
        super().__init__(message)
        self.path, self.last_good, self.errno = path, last_good, errno


class TrainingDiverged(DispatchRLError, ArithmeticError):
    """Training produced a NaN or inf (a loss, target, observation or weights): the run stopped.
    ``quantity`` names the first one found, ``first_step``..``last_step`` (environment steps per
    env) the range in which it happened; nothing from the diverged state was saved."""

    def __init__(self, message: str, quantity: str = "", first_step: int = 0, last_step: int = 0) -> None:
        super().__init__(message)
        self.quantity, self.first_step, self.last_step = quantity, first_step, last_step


class LockedError(DispatchRLError, RuntimeError):
    """A locked container (a TensorDict after ``lock_()``) was asked to add or remove an entry."""


class MissingKeyError(DispatchRLError, KeyError):
    """A key is not in a TensorDict or a storage."""


class EmptyBufferError(DispatchRLError, RuntimeError):
    """A replay buffer was sampled before anything was written to it."""


#: the one-line advice of a diverged run (the driver and PPO raise it, the CLI prints it)
DIVERGENCE_HINT = (
    "lower the learning rates (actor_lr/critic_lr, PPO: lr), check the env's rewards and "
    "observations, or resume from the last good checkpoint with other settings"
)
