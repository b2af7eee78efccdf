"""Neural-network building blocks written once against the generic functions.

The algorithms use networks only through :mod:`dispatchrl.nn.network` (functions dispatched on the
network type); :class:`MLP` is the built-in network.
"""

from . import (
    cpu,  # noqa: F401  (importing registers the CPU methods)
    network,
)
from .mlp import MLP, MLPBuffers, Parameter, mlp, mlp_backward, mlp_buffers, mlp_forward, parameter
from .network import *  # noqa: F403  (its __all__, re-exported whole below)
from .network import PolicyHead, head_policy
from .policy import Policy

__all__ = [
    "MLP",
    "MLPBuffers",
    "Parameter",
    "Policy",
    "PolicyHead",
    "head_policy",
    "mlp",
    "mlp_backward",
    "mlp_buffers",
    "mlp_forward",
    "parameter",
]
__all__ += network.__all__  # re-exported whole
