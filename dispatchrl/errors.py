"""The exceptions dispatchrl raises for bad input, all refused before any kernel runs."""


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


class LockedError(DispatchRLError, RuntimeError):
    """A locked container (a TensorDict after ``lock_()``) was asked to add or remove an entry."""


class MissingKeyError(DispatchRLError, KeyError):
    """A key is not in a TensorDict or a storage."""


class EmptyBufferError(DispatchRLError, RuntimeError):
    """A replay buffer was sampled before anything was written to it."""
