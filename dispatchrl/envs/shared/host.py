"""How the envs' Generic and CPU methods are made: each is one launch of the env's kernel on that
device (the numpy reference on Generic, the Numba loop on CPU)."""

from collections.abc import Callable
from typing import Any

from ...backends.cpu import batch_kernel
from ...staging import launch
from .. import api
from . import state_args, step_args

__all__ = ["kernel_methods"]


def _batch(kernel: Any, env: Any) -> Any:
    return batch_kernel(kernel, env.num_envs)


def kernel_methods(
    device_type: type,
    env_type: type,
    step_kernel: Any,
    reset_kernel: Any,
    numbers=("max_episode_steps",),
    parameters: Callable[[Any, Any], Any] | None = None,
):
    """Register ``env_step``, ``env_reset`` and ``env_reset_done`` of ``env_type`` on
    ``device_type``: one launch each (of the kernel's threaded twin for a large batch, see
    :func:`~dispatchrl.backends.cpu.batch_kernel`), of ``step_kernel`` over the state's arrays with the action
    (:func:`step_args`), then the env's attributes named in ``numbers``; of ``reset_kernel`` over
    the stream, the state's arrays (:func:`state_args`) and ``only_done``. An env whose kernels
    read a parameter array (the multirotor's) gives ``parameters(device, env)``: both kernels take
    it right after the state's arrays."""

    def own(device, env) -> tuple:
        return () if parameters is None else (parameters(device, env),)

    @api.env_step.dispatch
    def env_step(device: device_type, env: env_type, state, action):  # type: ignore[valid-type]
        kernel = _batch(step_kernel, env)
        launch(device, kernel, *step_args(state, action), *own(device, env), *[getattr(env, name) for name in numbers])

    @api.env_reset.dispatch
    def env_reset(device: device_type, env: env_type, state, rng):  # type: ignore[valid-type]
        launch(device, _batch(reset_kernel, env), rng, *state_args(state), *own(device, env), False)

    @api.env_reset_done.dispatch
    def env_reset_done(device: device_type, env: env_type, state, rng):  # type: ignore[valid-type]
        launch(device, _batch(reset_kernel, env), rng, *state_args(state), *own(device, env), True)
