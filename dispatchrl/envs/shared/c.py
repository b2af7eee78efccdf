"""How the envs' C kernels are built (see :mod:`dispatchrl.backends.c`): one C loop over the N envs
per call, the per-env physics as file-level helper functions beside it."""

import numpy as np

from ...backends.c import CKernel
from ...kernels.random.c import UNIFORM01
from . import PI, STATE_FIELDS, TWO_PI

__all__ = ["PI_C", "ROUND_F32", "TWO_PI_C", "reset_kernel", "reset_source", "step_kernel"]

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
