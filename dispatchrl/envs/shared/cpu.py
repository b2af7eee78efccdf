"""Numba helpers the envs' CPU per-env bodies share (``shared/cuda.py`` compiles them as CUDA
device functions from the same source), and the envs' CPU kernels generated from those bodies."""

from numba import njit

from ...backends.cpu import JIT_EXACT_INNER, per_index

__all__ = ["clear_reset_at", "index_minus_one", "per_env", "per_env_reset"]


@njit(**JIT_EXACT_INNER)
def clear_reset_at(i, steps, reward, terminated, truncated, only_done):
    """Zero env i's step counter; a full reset also clears its reward and flags."""
    steps[i] = 0
    if not only_done:
        reward[i] = 0.0
        terminated[i] = False
        truncated[i] = False


@njit(**JIT_EXACT_INNER)
def index_minus_one(a):
    """gymnasium's ``action - 1`` for a three-action index ``a`` (a float) clamped into [0, 2]:
    -1.0, 0.0 or 1.0, anything below 1 (a negative index, NaN) reading as 0, so no index is out of
    range (MountainCar's push, Acrobot-v1's torque)."""
    if a >= 2.0:
        return 1.0
    if a >= 1.0:
        return 0.0
    return -1.0


def per_env(body, name: str):
    """The CPU kernel ``name`` running the per-env body ``body(i, physics, ...)`` for each env."""
    return per_index(body, "physics.shape[0]", name, threaded=True)


def per_env_reset(reset_at, name: str, draws_per_env: int):
    """The CPU reset kernel ``name`` over ``rng`` and the state's arrays: the per-env reset body
    ``reset_at(i, key, base, physics, ..., only_done)`` for each env, reading the stream's key and
    position once, then the position advanced by ``draws_per_env`` per env."""
    state = reset_at.py_func.__code__.co_varnames[3 : reset_at.py_func.__code__.co_argcount]
    draws = "" if draws_per_env == 1 else f"{draws_per_env} * "
    return per_index(
        reset_at,
        "physics.shape[0]",
        name,
        params=("rng", *state),
        before=["key, base = rng[0], rng[1]"],
        after=[f"rng[1] = base + np.uint64({draws}physics.shape[0])"],
        threaded=True,
    )
