"""How the envs' C kernels are built (see :mod:`dispatchrl.backends.c`): one C loop over the N envs
per call, the per-env physics as file-level helper functions beside it."""

import numpy as np

from ...backends.c import CKernel
from ...devices import C
from ...kernels.random.c import UNIFORM01
from ...staging import launch
from .. import api
from . import PI, STATE_FIELDS, TWO_PI, state_args, step_args

__all__ = ["PI_C", "ROUND_F32", "TWO_PI_C", "kernel_methods", "reset_kernel", "reset_source", "step_kernel"]

#: pi and 2 pi as C double literals
PI_C, TWO_PI_C = repr(PI), repr(TWO_PI)

#: float64 -> float32 -> float64, as gymnasium's float32 values round. Through a volatile: GCC 12
#: at -O3 -march=native vectorises a plain ``(double)(float)x`` into no rounding at all
ROUND_F32 = """\
static inline double dispatchrl_round_f32(double x)
{
    volatile float f = (float)x;
    return (double)f;
}
"""

_STATE_OUT = frozenset(STATE_FIELDS)


def step_kernel(name, body, env, numbers, physics) -> CKernel:
    """The step ``body`` over the state, ``action`` and the scalar ``numbers``, with the env's
    ``physics`` helper functions; N and MAX_STEPS are constants."""
    consts = dict(N=env.num_envs, MAX_STEPS=env.max_episode_steps)
    params = ("physics", "steps", "action", "obs", "reward", "terminated", "truncated", *numbers)
    return CKernel(name, body, params, _STATE_OUT, consts, np.float32, (ROUND_F32, physics))


def reset_source(per_env: str, draws_per_env: int) -> str:
    """A reset kernel's body: ``per_env`` (C statements writing env i's fresh physics and
    observation from stream positions after ``base``) for each env the reset writes, then its step
    counter zeroed (a full reset clears rewards and flags too) and the stream advanced by
    ``draws_per_env`` per env."""
    advance = "(uint64_t)N" if draws_per_env == 1 else f"{draws_per_env} * (uint64_t)N"
    return f"""
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < N; i++) {{
    if (ONLY_DONE && !(terminated[i] || truncated[i])) continue;
{per_env}    steps[i] = 0;
    if (!ONLY_DONE) {{
        reward[i] = 0.0f;
        terminated[i] = false;
        truncated[i] = false;
    }}
}}
rng[1] = base + {advance};
"""


def reset_kernel(name, body, env, only_done) -> CKernel:
    """The reset ``body`` over ``rng`` and the state; N and ONLY_DONE are constants."""
    consts = dict(N=env.num_envs, ONLY_DONE=int(only_done))
    return CKernel(
        name, body, ("rng", *STATE_FIELDS), {"rng", *STATE_FIELDS}, consts, np.float32, (UNIFORM01, ROUND_F32)
    )


def kernel_methods(env_type: type, name: str, step: str, reset: str, physics: str, numbers=None, step_name=None):
    """Register ``env_step``, ``env_reset`` and ``env_reset_done`` of ``env_type`` on C, as the
    host devices' (``shared/host.py``): the kernels ``<name>_step`` (or ``step_name``) of body
    ``step`` with the ``physics`` helpers, ``<name>_reset`` and ``<name>_reset_done`` of body
    ``reset``. ``numbers`` maps the step kernel's scalar parameters to the env's attributes."""
    numbers = dict(numbers or {})
    step_name = step_name or f"{name}_step"

    @api.env_step.dispatch
    def env_step(device: C, env: env_type, state, action):  # type: ignore[valid-type]
        kernel = step_kernel(step_name, step, env, tuple(numbers), physics)
        launch(device, kernel, *step_args(state, action), *[getattr(env, a) for a in numbers.values()])

    @api.env_reset.dispatch
    def env_reset(device: C, env: env_type, state, rng):  # type: ignore[valid-type]
        launch(device, reset_kernel(f"{name}_reset", reset, env, False), rng, *state_args(state))

    @api.env_reset_done.dispatch
    def env_reset_done(device: C, env: env_type, state, rng):  # type: ignore[valid-type]
        launch(device, reset_kernel(f"{name}_reset_done", reset, env, True), rng, *state_args(state))
