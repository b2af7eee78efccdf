"""C methods of the native envs: one C loop over the N envs per call (see :mod:`dispatchrl.backends.c`).

The physics is :mod:`.cpu`'s, expression by expression (same constants, same evaluation order,
float64, no contraction into fused multiply-adds, Python's floored ``%``), so trajectories match
the CPU kernels and gymnasium bit for bit. Resets draw the same counter-stream positions.
"""

import math

import numpy as np

from ..backends.c import CKernel
from ..devices import C
from ..kernels.random.c import UNIFORM01
from ..staging import launch
from . import api
from .api import AcrobotContinuous, Pendulum
from .cpu import ACROBOT_MAX_VEL_1, ACROBOT_MAX_VEL_2, U_COST, pendulum_gterm

__all__: list[str] = []  # methods only: importing the module registers them

PI, TWO_PI = repr(math.pi), repr(2 * math.pi)

#: float64 -> float32 -> float64, as gymnasium's float32 values round. Through a volatile: GCC 12
#: at -O3 -march=native vectorises a plain ``(double)(float)x`` into no rounding at all
ROUND_F32 = """\
static inline double dispatchrl_round_f32(double x)
{
    volatile float f = (float)x;
    return (double)f;
}
"""

PHYSICS = f"""\
/* Python's float %: the result takes the divisor's sign (CPython's float_rem, as Numba) */
static inline double dispatchrl_floor_mod(double x, double y)
{{
    double mod = fmod(x, y);
    if (mod != 0.0) {{
        if ((y < 0) != (mod < 0)) mod += y;
    }} else {{
        mod = copysign(0.0, y);
    }}
    return mod;
}}

/* gymnasium PendulumEnv.step (envs/cpu.py pendulum_dynamics): cost on the pre-step state, velocity
   first, then angle; the torque terms are float32 products as gymnasium's float32 torque gives */
static inline void dispatchrl_pendulum(double th, double thdot, double u, double gterm,
                                       double *newth, double *newthdot, double *cost)
{{
    const double torque_term = dispatchrl_round_f32(3.0 * u);
    const double torque_cost = dispatchrl_round_f32({U_COST!r} * dispatchrl_round_f32(u * u));
    const double wrapped = dispatchrl_floor_mod(th + {PI}, {TWO_PI}) - {PI};
    *cost = wrapped * wrapped + 0.1 * (thdot * thdot) + torque_cost;
    double v = thdot + (gterm * sin(th) + torque_term) * 0.05;
    v = v < -8.0 ? -8.0 : (v > 8.0 ? 8.0 : v);
    *newthdot = v;
    *newth = th + v * 0.05;
}}

/* gymnasium AcrobotEnv._dsdt, "book" dynamics, term by term with its constants */
static inline void dispatchrl_acrobot_dsdt(const double s[4], double a, double out[4])
{{
    const double m1 = 1.0, m2 = 1.0, l1 = 1.0, lc1 = 0.5, lc2 = 0.5, I1 = 1.0, I2 = 1.0, g = 9.8;
    const double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
    const double d1 = m1 * (lc1 * lc1) + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * cos(theta2)) + I1 + I2;
    const double d2 = m2 * ((lc2 * lc2) + l1 * lc2 * cos(theta2)) + I2;
    const double phi2 = m2 * lc2 * g * cos(theta1 + theta2 - {PI} / 2.0);
    const double phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * sin(theta2)
                        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
                        + (m1 * lc1 + m2 * l1) * g * cos(theta1 - {PI} / 2)
                        + phi2;
    const double ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * sin(theta2) - phi2)
                            / (m2 * (lc2 * lc2) + I2 - (d2 * d2) / d1);
    const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    out[0] = dtheta1;
    out[1] = dtheta2;
    out[2] = ddtheta1;
    out[3] = ddtheta2;
}}

/* gymnasium's wrap(x, -pi, pi) */
static inline double dispatchrl_wrap_angle(double x)
{{
    while (x > {PI}) x = x - {TWO_PI};
    while (x < -{PI}) x = x + {TWO_PI};
    return x;
}}

/* gymnasium's rk4 over [0, dt]: one step with dt = 0.2, then wrap and clip (envs/cpu.py acrobot_rk4) */
static inline void dispatchrl_acrobot_rk4(double s[4], double torque)
{{
    double k1[4], k2[4], k3[4], k4[4], t[4];
    dispatchrl_acrobot_dsdt(s, torque, k1);
    for (int j = 0; j < 4; j++) t[j] = s[j] + 0.1 * k1[j];
    dispatchrl_acrobot_dsdt(t, torque, k2);
    for (int j = 0; j < 4; j++) t[j] = s[j] + 0.1 * k2[j];
    dispatchrl_acrobot_dsdt(t, torque, k3);
    for (int j = 0; j < 4; j++) t[j] = s[j] + 0.2 * k3[j];
    dispatchrl_acrobot_dsdt(t, torque, k4);
    const double h = 0.2 / 6.0;
    for (int j = 0; j < 4; j++) s[j] = s[j] + h * (k1[j] + 2 * k2[j] + 2 * k3[j] + k4[j]);
    s[0] = dispatchrl_wrap_angle(s[0]);
    s[1] = dispatchrl_wrap_angle(s[1]);
    s[2] = s[2] < -{ACROBOT_MAX_VEL_1!r} ? -{ACROBOT_MAX_VEL_1!r} : (s[2] > {ACROBOT_MAX_VEL_1!r} ? {ACROBOT_MAX_VEL_1!r} : s[2]);
    s[3] = s[3] < -{ACROBOT_MAX_VEL_2!r} ? -{ACROBOT_MAX_VEL_2!r} : (s[3] > {ACROBOT_MAX_VEL_2!r} ? {ACROBOT_MAX_VEL_2!r} : s[3]);
}}
"""

_STATE = ("physics", "steps", "obs", "reward", "terminated", "truncated")
_STATE_OUT = frozenset(_STATE)

PENDULUM_STEP = """
for (int i = 0; i < N; i++) {
    double u = (double)action[i] * scale;
    u = u < -2.0 ? -2.0 : (u > 2.0 ? 2.0 : u);
    double th, thdot, cost;
    dispatchrl_pendulum(physics[2 * i], physics[2 * i + 1], u, gterm, &th, &thdot, &cost);
    physics[2 * i] = th;
    physics[2 * i + 1] = thdot;
    obs[3 * i] = (float)cos(th);
    obs[3 * i + 1] = (float)sin(th);
    obs[3 * i + 2] = (float)thdot;
    reward[i] = (float)(-cost);
    steps[i] += 1;
    terminated[i] = false;
    truncated[i] = steps[i] >= MAX_STEPS;
}
"""

PENDULUM_RESET = """
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < N; i++) {
    if (ONLY_DONE && !(terminated[i] || truncated[i])) continue;
    const double th = -@PI + @TWO_PI * dispatchrl_uniform01(key, base + 2 * (uint64_t)i);
    const double thdot = -1.0 + 2.0 * dispatchrl_uniform01(key, base + 2 * (uint64_t)i + 1);
    physics[2 * i] = th;
    physics[2 * i + 1] = thdot;
    obs[3 * i] = (float)cos(th);
    obs[3 * i + 1] = (float)sin(th);
    obs[3 * i + 2] = (float)thdot;
    steps[i] = 0;
    if (!ONLY_DONE) {
        reward[i] = 0.0f;
        terminated[i] = false;
        truncated[i] = false;
    }
}
rng[1] = base + 2 * (uint64_t)N;
""".replace("@TWO_PI", TWO_PI).replace("@PI", PI)

ACROBOT_STEP = """
for (int i = 0; i < N; i++) {
    const double a = (double)action[i];
    const double torque = a < -1.0 ? -1.0 : (a > 1.0 ? 1.0 : a);
    double s[4];
    for (int j = 0; j < 4; j++) s[j] = physics[4 * i + j];
    dispatchrl_acrobot_rk4(s, torque);
    for (int j = 0; j < 4; j++) physics[4 * i + j] = s[j];
    obs[6 * i] = (float)cos(s[0]);
    obs[6 * i + 1] = (float)sin(s[0]);
    obs[6 * i + 2] = (float)cos(s[1]);
    obs[6 * i + 3] = (float)sin(s[1]);
    obs[6 * i + 4] = (float)s[2];
    obs[6 * i + 5] = (float)s[3];
    const bool done = -cos(s[0]) - cos(s[1] + s[0]) > 1.0;
    reward[i] = done ? 0.0f : -1.0f;
    terminated[i] = done;
    steps[i] += 1;
    truncated[i] = steps[i] >= MAX_STEPS;
}
"""

ACROBOT_RESET = """
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < N; i++) {
    if (ONLY_DONE && !(terminated[i] || truncated[i])) continue;
    /* gymnasium draws the reset state in float64 and stores it as float32 */
    for (int j = 0; j < 4; j++)
        physics[4 * i + j] = dispatchrl_round_f32(-0.1 + 0.2 * dispatchrl_uniform01(key, base + (uint64_t)(4 * i + j)));
    obs[6 * i] = (float)cos(physics[4 * i]);
    obs[6 * i + 1] = (float)sin(physics[4 * i]);
    obs[6 * i + 2] = (float)cos(physics[4 * i + 1]);
    obs[6 * i + 3] = (float)sin(physics[4 * i + 1]);
    obs[6 * i + 4] = (float)physics[4 * i + 2];
    obs[6 * i + 5] = (float)physics[4 * i + 3];
    steps[i] = 0;
    if (!ONLY_DONE) {
        reward[i] = 0.0f;
        terminated[i] = false;
        truncated[i] = false;
    }
}
rng[1] = base + 4 * (uint64_t)N;
"""


def _step(name, body, env, numbers):
    consts = dict(N=env.num_envs, MAX_STEPS=env.max_episode_steps)
    params = ("physics", "steps", "action", "obs", "reward", "terminated", "truncated", *numbers)
    return CKernel(name, body, params, _STATE_OUT, consts, np.float32, (ROUND_F32, PHYSICS))


def _reset(name, body, env, only_done):
    consts = dict(N=env.num_envs, ONLY_DONE=int(only_done))
    return CKernel(name, body, ("rng", *_STATE), {"rng", *_STATE}, consts, np.float32, (UNIFORM01, ROUND_F32))


def _state_args(state):
    return state.physics, state.steps, state.obs, state.reward, state.terminated, state.truncated


@api.env_step.dispatch
def env_step(device: C, env: Pendulum, state, action):
    kernel = _step("pendulum_step", PENDULUM_STEP, env, ("scale", "gterm"))
    launch(
        device,
        kernel,
        state.physics,
        state.steps,
        action,
        state.obs,
        state.reward,
        state.terminated,
        state.truncated,
        env.action_scale,
        pendulum_gterm(env),
    )


@api.env_reset.dispatch
def env_reset(device: C, env: Pendulum, state, rng):
    launch(device, _reset("pendulum_reset", PENDULUM_RESET, env, False), rng, *_state_args(state))


@api.env_reset_done.dispatch
def env_reset_done(device: C, env: Pendulum, state, rng):
    launch(device, _reset("pendulum_reset_done", PENDULUM_RESET, env, True), rng, *_state_args(state))


@api.env_step.dispatch
def env_step(device: C, env: AcrobotContinuous, state, action):
    kernel = _step("acrobot_step", ACROBOT_STEP, env, ())
    launch(
        device, kernel, state.physics, state.steps, action, state.obs, state.reward, state.terminated, state.truncated
    )


@api.env_reset.dispatch
def env_reset(device: C, env: AcrobotContinuous, state, rng):
    launch(device, _reset("acrobot_reset", ACROBOT_RESET, env, False), rng, *_state_args(state))


@api.env_reset_done.dispatch
def env_reset_done(device: C, env: AcrobotContinuous, state, rng):
    launch(device, _reset("acrobot_reset_done", ACROBOT_RESET, env, True), rng, *_state_args(state))
