"""What a divergence shows in, read from an algorithm's state: each algorithm's ``watched``
lists its losses' targets, then :func:`trained_quantities`."""

import dataclasses
from typing import Any

from ..arrays import Array
from ..nn import Parameter, is_network, parameter_groups

__all__ = ["trained_quantities"]


def trained_quantities(state: Any) -> list[tuple[str, Array]]:
    """Every network's parameter groups (through :func:`dispatchrl.nn.parameter_groups`, so a
    user network's own parameters too) and trained scalars of ``state``, in field order."""
    quantities: list[tuple[str, Array]] = []
    for name in (f.name for f in dataclasses.fields(state)):
        value = getattr(state, name)
        if is_network(value):
            quantities += [(f"{name} weights", group.value) for group in parameter_groups(value)]
        elif isinstance(value, Parameter):
            quantities.append((f"{name}", value.value))
    return quantities
