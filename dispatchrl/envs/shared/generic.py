"""numpy helpers the envs' Generic reset kernels share."""

import numpy as np

__all__ = ["clear_reset", "reset_mask", "write_reset"]


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


def write_reset(fresh, fresh_obs, physics, steps, obs, reward, terminated, truncated, only_done) -> None:
    """Write the fresh states ``fresh`` and their observations ``fresh_obs`` (one row per env) into
    the envs a reset writes, and clear those envs' counters (:func:`clear_reset`)."""
    mask = reset_mask(terminated, truncated, only_done)
    physics[mask] = fresh[mask]
    obs[mask] = fresh_obs[mask]
    clear_reset(mask, steps, reward, terminated, truncated, only_done)
