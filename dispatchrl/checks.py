"""Argument checks shared by every generic-function declaration: each raises a dispatchrl error
naming the function and the argument, before any method runs."""

import json
import re
from typing import Any

import numpy as np

from .activation import Activation
from .arrays import Array
from .devices import Device
from .errors import ConfigError, DeviceError, DTypeError, ShapeError

__all__ = [
    "FLOATS",
    "JSON_MAX_DEPTH",
    "check_activation",
    "check_array",
    "check_device",
    "check_json_text",
    "check_number",
    "load_json",
    "utf8_text",
]

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


# ---------------------------------------------------------------- JSON from users and files

#: JSON nested deeper than this is refused: Python's json recurses once per level (a RecursionError
#: near 1000), and no config, sweep SPEC or checkpoint metadata nests more than a few levels
JSON_MAX_DEPTH = 100
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def utf8_text(data: str | bytes, where: str) -> str:
    """``data`` as text: bytes must be UTF-8; a str must not hold undecodable bytes (the lone
    surrogates Python gives non-UTF-8 bytes of argv or a file read with surrogateescape)."""
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{where}: not UTF-8 text (byte {e.start}: {data[e.start : e.start + 1]!r})") from None
    try:
        data.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text (an undecodable byte at character {e.start})") from None
    return data


def check_json_text(data: str | bytes, where: str, max_depth: int = JSON_MAX_DEPTH) -> str:
    """``data`` as text that is UTF-8 and nests at most ``max_depth`` arrays or objects (brackets
    inside strings do not count), else a ConfigError naming ``where`` (a flag or a file)."""
    text = utf8_text(data, where)
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif match.group() in "]}":
            depth -= 1
    if deepest > max_depth:
        raise ConfigError(f"{where}: JSON nested {deepest} levels deep; at most {max_depth} are accepted")
    return text


def load_json(data: str | bytes, where: str, max_depth: int = JSON_MAX_DEPTH) -> Any:
    """Parse JSON from a user or a file named ``where``: not UTF-8, nested deeper than
    ``max_depth``, or not JSON is a ConfigError naming ``where``, never a RecursionError or a
    UnicodeDecodeError."""
    text = check_json_text(data, where, max_depth)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: not valid JSON ({e})") from None
    except RecursionError:  # deep within a caller's own recursion
        raise ConfigError(f"{where}: JSON nested too deeply to parse") from None
