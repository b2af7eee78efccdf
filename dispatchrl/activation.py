"""Activation functions as an enum: the kernels branch on its members (compile-time constants in
fused steps); users name them by string ("relu") or pass the member (``Activation.RELU``)."""

import enum

from .errors import ConfigError

__all__ = ["ACTIVATIONS", "Activation"]


class Activation(enum.IntEnum):
    """The integer value is what kernels receive (a literal in generated fused steps)."""

    IDENTITY = 0
    RELU = 1
    TANH = 2
    GELU = 3

    @property
    def label(self) -> str:
        """The user-facing name: ``"relu"``."""
        return self.name.lower()

    @classmethod
    def of(cls, value: "str | Activation", fn: str = "activation") -> "Activation":
        """The member named by ``value`` (a name such as "relu", or a member); ConfigError naming
        ``fn`` otherwise."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value in ACTIVATIONS:
            return ACTIVATIONS[value]
        raise ConfigError(
            f"{fn}: argument 'activation' must be one of {sorted(ACTIVATIONS)} or an Activation, got {value!r}"
        )


#: activation name → member, the names users pass
ACTIVATIONS = {member.label: member for member in Activation}
