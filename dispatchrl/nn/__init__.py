"""Neural-network building blocks written once against the generic functions."""

from .policy import Policy
from .mlp import (MLP, MLPBuffers, Parameter, adam_update, mlp, mlp_backward, mlp_buffers,
                  mlp_forward, mlp_train_step, parameter, polyak_average)

__all__ = ["MLP", "MLPBuffers", "Parameter", "Policy", "adam_update", "mlp", "mlp_backward", "mlp_buffers",
           "mlp_forward", "mlp_train_step", "parameter", "polyak_average"]
