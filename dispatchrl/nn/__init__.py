"""Neural-network building blocks written once against the generic functions.

The algorithms use networks only through :mod:`dispatchrl.nn.network` (functions dispatched on the
network type); :class:`MLP` is the built-in network.
"""

from . import cpu  # noqa: F401  (importing registers the CPU methods)
from .mlp import MLP, MLPBuffers, Parameter, mlp, mlp_backward, mlp_buffers, mlp_forward, parameter
from .network import (
    NETWORKS,
    HeadPolicy,
    NetworkFunction,
    NetworkPolicy,
    PolicyHead,
    adam_update,
    backward,
    check_device_methods,
    clip_gradient_norm,
    decay_weights,
    deployable,
    forward,
    head_policy,
    is_network,
    load_parameters,
    make_buffers,
    mlp_train_step,
    network_constructor,
    orthogonal_init,
    parameter_groups,
    parameters,
    polyak_average,
    raw_output,
    regression_demo,
)
from .policy import Policy

__all__ = [
    "MLP",
    "NETWORKS",
    "HeadPolicy",
    "MLPBuffers",
    "NetworkFunction",
    "NetworkPolicy",
    "Parameter",
    "Policy",
    "PolicyHead",
    "adam_update",
    "backward",
    "check_device_methods",
    "clip_gradient_norm",
    "decay_weights",
    "deployable",
    "forward",
    "head_policy",
    "is_network",
    "load_parameters",
    "make_buffers",
    "mlp",
    "mlp_backward",
    "mlp_buffers",
    "mlp_forward",
    "mlp_train_step",
    "network_constructor",
    "orthogonal_init",
    "parameter",
    "parameter_groups",
    "parameters",
    "polyak_average",
    "raw_output",
    "regression_demo",
]
