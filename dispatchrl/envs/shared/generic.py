"""numpy helpers the envs' Generic reset kernels share."""

import numpy as np

__all__ = ["clear_reset", "reset_mask"]


def reset_mask(terminated, truncated, only_done):
    """The envs a reset writes: the done ones, or all."""
    return (terminated | truncated) if only_done else np.ones(terminated.shape, bool)


def clear_reset(mask, steps, reward, terminated, truncated, only_done) -> None:
    """Zero the step counters of the reset envs; a full reset also clears rewards and flags."""
    steps[mask] = 0
    if not only_done:
        reward[:] = 0.0
        terminated[:] = False
        truncated[:] = False
