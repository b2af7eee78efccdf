"""Argument checks shared by every generic-function declaration: each raises a dispatchrl error
naming the function and the argument, before any method runs."""

from typing import Any

import numpy as np

from .activation import Activation
from .arrays import Array
from .devices import Device
from .errors import ConfigError, DeviceError, DTypeError, ShapeError

__all__ = ["FLOATS", "check_activation", "check_array", "check_device", "check_number"]

#: the float dtypes kernels accept unless a declaration says otherwise
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def check_device(fn: str, device: object) -> None:
    if not isinstance(device, Device):
        raise DeviceError(f"{fn}: argument 'device' must be a dispatchrl Device such as CPU(), got {device!r}")


def check_array(
    fn: str, name: str, x: object, device: Device, shape: tuple | None = None, dtype=None, dtypes: tuple | None = FLOATS
) -> Array:
    """Validate argument ``name``; ``shape`` may hold None for a free dimension."""
    if not isinstance(x, Array):
        raise DeviceError(
            f"{fn}: argument '{name}' must be a dispatchrl Array on {device!r}, got "
            f"{type(x).__name__} (wrap host data with dispatchrl.asarray(device, x))"
        )
    # a method accepts any array in the call's memory space (host: Generic, CPU, C and their
    # subclasses share numpy memory), so an override may call its parent device's method
    if x.device.memory != device.memory:
        raise DeviceError(
            f"{fn}: argument '{name}' is on {x.device!r} ({x.device.memory} memory) but the call "
            f"is on {device!r} ({device.memory} memory); transfer it explicitly with "
            "dispatchrl.asarray"
        )
    if dtype is not None and x.dtype != dtype:
        raise DTypeError(f"{fn}: argument '{name}' has dtype {x.dtype.name}, expected {np.dtype(dtype).name}")
    if dtype is None and dtypes is not None and x.dtype not in dtypes:
        raise DTypeError(
            f"{fn}: argument '{name}' has dtype {x.dtype.name}, expected one of " + ", ".join(d.name for d in dtypes)
        )
    if shape is not None and (len(shape) != x.ndim or any(e is not None and e != s for e, s in zip(shape, x.shape))):
        expected = "(" + ", ".join("*" if e is None else str(e) for e in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ShapeError(f"{fn}: argument '{name}' has shape {x.shape}, expected {expected}")
    return x


def check_number(
    fn: str,
    name: str,
    value: Any,
    low: float = -np.inf,
    high: float = np.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{fn}: argument '{name}' must be a number, got {value!r}") from None
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if not np.isfinite(value) or too_low or too_high:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ConfigError(f"{fn}: argument '{name}' must be finite and in {interval}, got {value}")
    return value


def check_activation(fn: str, activation: "str | Activation") -> Activation:
    """The :class:`Activation` named by ``activation`` (a name such as "relu", or a member)."""
    return Activation.of(activation, fn)
