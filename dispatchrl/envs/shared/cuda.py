"""How the envs' CUDA methods are made and launched: one thread per env, the kernels generated
(:func:`~dispatchrl.backends.cuda.per_index`) from each env's CPU per-env bodies (``<env>_step_at``,
``<env>_reset_at`` in its ``cpu.py``), their helpers compiled as device functions from the same
Python source (:func:`~dispatchrl.backends.cuda.device_twin`), so CPU and CUDA evaluate identical
expressions; a reset advances the counter stream in a launch of its own. Imported with the envs'
CUDA modules, when a CUDA device is first made."""

from collections.abc import Callable
from typing import Any

import numpy as np

from ...backends.cuda import Launch, device_twin, grid_1d, per_index
from ...devices import CUDA
from ...kernels.core.cuda import increment_kernel
from ...kernels.random.cuda import uniform01
from ...staging import launch
from .. import api
from . import cpu, state_args, step_args

__all__ = ["device_twins", "kernel_methods", "launch_per_env", "launch_reset", "launch_step", "per_env_reset"]

clear_reset_at = device_twin(cpu.clear_reset_at)


def env_reset_at(i, key, base, physics, steps, obs, reward, terminated, truncated, only_done) -> None:
    """Stands in :func:`_reset_from_stream_at` for the env's reset body that
    :func:`per_env_reset` binds in its place."""
    raise NotImplementedError("bound by per_env_reset")


def _reset_from_stream_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done) -> None:
    # the CPU kernel reads the stream's key and position once, before its loop over the envs; here
    # each thread reads them (launch_reset advances rng[1] in a launch of its own, after all read)
    env_reset_at(i, rng[0], rng[1], physics, steps, obs, reward, terminated, truncated, only_done)


def device_twins(*helpers, **aliases) -> dict[str, Any]:
    """An env's CPU helpers (its ``cpu.py``'s ``@njit`` functions) compiled as device functions
    (:func:`~dispatchrl.backends.cuda.device_twin`), by the name the CPU source calls them: its
    own for ``helpers``, the keyword for ``aliases`` (a shared helper an env names its own way).
    Each is compiled after the ones before it (``helpers`` first, callees before their callers)
    and sees their twins as its callees. Bind them all into the env's kernels (``**twins``): a
    body reads only the names it calls."""
    named = [(getattr(helper, "py_func", helper).__name__, helper) for helper in helpers]
    twins: dict[str, Any] = {}
    for name, helper in [*named, *aliases.items()]:
        twins[name] = device_twin(helper, **twins)
    return twins


def per_env_reset(reset_at, name: str, **callees) -> Any:
    """The grid kernel ``<name>_kernel`` (with its block form) over ``rng`` and the state's arrays
    running the CPU per-env reset body ``reset_at(i, key, base, physics, ..., only_done)`` once per
    env; its ``uniform01`` and ``clear_reset_at`` are rebound to their device twins, ``callees``
    the other helpers it calls."""
    body = device_twin(reset_at, uniform01=uniform01, clear_reset_at=clear_reset_at, **callees)
    return per_index(_reset_from_stream_at, "physics.shape[0]", name=name, env_reset_at=body)


def launch_per_env(device, kernel, n, *args) -> None:
    """``kernel`` over ``n`` envs, one thread each."""
    launch(device, Launch(kernel, *grid_1d(n)), *args)


def launch_step(device, kernel, env, state, action, *numbers) -> None:
    """A step kernel over the envs: the state's arrays with ``action`` (:func:`step_args`), then
    the env's scalar ``numbers``."""
    launch_per_env(device, kernel, env.num_envs, *step_args(state, action), *numbers)


def launch_reset(device, kernel, env, state, rng, only_done, draws_per_env, *parameters) -> None:
    """A reset kernel over the envs (``rng``, the state's arrays, ``only_done``, then the env's
    ``parameters``), then ``rng[1]`` advanced by ``draws_per_env`` per env."""
    launch_per_env(device, kernel, env.num_envs, rng, *state_args(state), only_done, *parameters)
    # the counter advances after every thread has read it (a separate launch orders the two)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(draws_per_env * env.num_envs))


def kernel_methods(
    env_type: type,
    step_kernel: Any,
    reset_kernel: Any,
    draws_per_env: int,
    numbers=("max_episode_steps",),
    parameters: Callable[[Any, Any], Any] | None = None,
):
    """Register ``env_step``, ``env_reset`` and ``env_reset_done`` of ``env_type`` on CUDA, as the
    host devices' (``shared/host.py``): :func:`launch_step` with the env's attributes named in
    ``numbers``, :func:`launch_reset` advancing the stream by ``draws_per_env`` per env. An env
    whose kernels read a parameter array gives ``parameters(device, env)``: the step kernel takes
    it before the numbers, the reset kernel after ``only_done`` (:func:`launch_reset`)."""

    def own(device, env) -> tuple:
        return () if parameters is None else (parameters(device, env),)

    @api.env_step.dispatch
    def env_step(device: CUDA, env: env_type, state, action):  # type: ignore[valid-type]
        launch_step(device, step_kernel, env, state, action, *own(device, env), *[getattr(env, n) for n in numbers])

    @api.env_reset.dispatch
    def env_reset(device: CUDA, env: env_type, state, rng):  # type: ignore[valid-type]
        launch_reset(device, reset_kernel, env, state, rng, False, draws_per_env, *own(device, env))

    @api.env_reset_done.dispatch
    def env_reset_done(device: CUDA, env: env_type, state, rng):  # type: ignore[valid-type]
        launch_reset(device, reset_kernel, env, state, rng, True, draws_per_env, *own(device, env))
