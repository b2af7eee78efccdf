"""C methods of the multirotor: one C loop over the N envs per call (see :mod:`dispatchrl.backends.c`).

The physics is :mod:`.cpu`'s, expression by expression (same evaluation order, float64, no
contraction into fused multiply-adds: the C device compiles with ``-ffp-contract=off``), and
resets and observation noise draw the same counter-stream positions. The kernels take the same
float64 parameter array as the CPU ones (:func:`.env.parameter_array`, a ``const double *``), so
one compiled step serves any vehicle, and ``export-trainer`` writes it as one more constant array.

Two of the CPU's libm calls have no twin in the C device's own math (:mod:`dispatchrl.backends.c.mathlib`),
so their results come from Python's libm, which is the one Numba calls:

- the curriculum's ``factor ** stage`` (``pow``; the C device's is ``exp(y log x)``, a few ulp
  off): the parameters hold the weights of the first layout.CURRICULUM_STAGES stages;
- the orientation test ``|2 acos(cw)| <= init_max_angle`` (no ``acos``): ``acos`` is monotone, so
  it is ``cw >= c`` for the smallest double ``c`` that passes it, found here by bisection.

The C device's sin, cos and log differ from libm's in the last bit at times, so the initial
attitude, the disturbance and the noise can differ from the CPU's by an ulp: physics then agrees
to ~1e-14 (RPMs are ~1e4), the float32 observations and rewards almost always exactly; a step
from the same state gives the CPU's bits.
"""

import functools
import math
import struct

import numpy as np

from ...backends.c import CKernel
from ...devices import C
from ...kernels.random.c import NORMAL_HELPERS, STANDARD_NORMAL_ICDF
from ...staging import launch
from .. import api
from ..shared import STATE_FIELDS, TWO_PI, state_args, step_args
from . import layout
from .env import Multirotor, parameter_array

__all__ = ["CRITIC", "PHYSICS", "RESET", "STEP", "cos_limit"]


def _ordered(x: float) -> int:
    """An integer key of the double x, in the doubles' order."""
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    return bits if bits >= 0 else -(bits & 0x7FFFFFFFFFFFFFFF)


def _double(key: int) -> float:
    bits = key if key >= 0 else (-key) | -0x8000000000000000
    return struct.unpack("<d", struct.pack("<q", bits))[0]


@functools.cache
def cos_limit(max_angle: float) -> float:
    """The smallest double ``c`` in [-1, 1] with ``|2 acos(c)| <= max_angle`` (libm's acos, as
    Numba's): the CPU's orientation test is then ``cw >= c``. 1.0 always passes (acos(1) = 0)."""

    def passes(c: float) -> bool:
        return abs(2.0 * math.acos(c)) <= max_angle

    if passes(-1.0):
        return -1.0
    low, high = _ordered(-1.0), _ordered(1.0)  # fails at low, passes at high
    while high - low > 1:
        middle = (low + high) // 2
        if passes(_double(middle)):
            high = middle
        else:
            low = middle
    return _double(high)


#: the file-level helpers: multirotor_derivative, state_plus, the observation
PHYSICS = f"""\
/* envs/multirotor/cpu.py multirotor_derivative: d/dt of the 17-state s under commanded RPMs cmd
   and the episode's disturbance d (world-frame force, body-frame torque) */
static inline void dispatchrl_multirotor_derivative(const double *s, const double *cmd, const double *d,
                                                    const double *p, double *out)
{{
    const double qw = s[3], qx = s[4], qy = s[5], qz = s[6];
    const double wx = s[10], wy = s[11], wz = s[12];
    double thrust = 0.0, tx = 0.0, ty = 0.0, tz = 0.0;
    for (int j = 0; j < 4; j++) {{
        const double rpm = s[13 + j];
        const double t = p[{layout.P_THRUST}] + p[{layout.P_THRUST + 1}] * rpm + p[{layout.P_THRUST + 2}] * rpm * rpm;
        thrust += t;
        tx += p[{layout.P_ROTOR} + 3 * j + 1] * t;
        ty -= p[{layout.P_ROTOR} + 3 * j] * t;
        tz += p[{layout.P_YAW} + j] * p[{layout.P_TORQUE_CONSTANT}] * t;
    }}
    const double cx = 2.0 * (qy * thrust), cy = 2.0 * (-qx * thrust);
    const double fx = -qz * cy + qw * cx;
    const double fy = qz * cx + qw * cy;
    const double fz = qx * cy - qy * cx + thrust;
    const double inv_mass = 1.0 / p[{layout.P_MASS}];
    const double jx = p[{layout.P_J}], jy = p[{layout.P_J + 1}], jz = p[{layout.P_J + 2}];
    tx += d[3] - (wy * (jz * wz) - wz * (jy * wy));
    ty += d[4] - (wz * (jx * wx) - wx * (jz * wz));
    tz += d[5] - (wx * (jy * wy) - wy * (jx * wx));
    const double tau = p[{layout.P_TAU}];
    out[0] = s[7];
    out[1] = s[8];
    out[2] = s[9];
    out[3] = 0.5 * (-qx * wx - qy * wy - qz * wz);
    out[4] = 0.5 * (qw * wx + qy * wz - qz * wy);
    out[5] = 0.5 * (qw * wy + qz * wx - qx * wz);
    out[6] = 0.5 * (qw * wz + qx * wy - qy * wx);
    out[7] = (fx + d[0]) * inv_mass;
    out[8] = (fy + d[1]) * inv_mass;
    out[9] = (fz + d[2]) * inv_mass - p[{layout.P_GRAVITY}];
    out[10] = tx / jx;
    out[11] = ty / jy;
    out[12] = tz / jz;
    for (int j = 0; j < 4; j++) out[13 + j] = (cmd[j] - s[13 + j]) / tau;
}}

/* s + h k (state_plus) */
static inline void dispatchrl_multirotor_plus(const double *s, const double *k, double h, double *out)
{{
    for (int j = 0; j < 17; j++) out[j] = s[j] + h * k[j];
}}

/* multirotor_observe_at: position, rotation matrix, velocities with the episode key's noise at
   this step's stream positions, then the row's last `tail` columns: the action history and the
   position-error integral */
static inline void dispatchrl_multirotor_observe(const double *row, int64_t steps, int tail, const double *p,
                                                 float *out)
{{
    const uint64_t key = (uint64_t)row[{layout.KEY}];
    const uint64_t base = (uint64_t)steps * {layout.NOISE_DRAWS};
    const double qw = row[{layout.QUAT}], qx = row[{layout.QUAT + 1}], qy = row[{layout.QUAT + 2}], qz = row[{layout.QUAT + 3}];
    const double rotation[9] = {{
        1.0 - 2.0 * qy * qy - 2.0 * qz * qz, 2.0 * qx * qy - 2.0 * qw * qz, 2.0 * qx * qz + 2.0 * qw * qy,
        2.0 * qx * qy + 2.0 * qw * qz, 1.0 - 2.0 * qx * qx - 2.0 * qz * qz, 2.0 * qy * qz - 2.0 * qw * qx,
        2.0 * qx * qz - 2.0 * qw * qy, 2.0 * qy * qz + 2.0 * qw * qx, 1.0 - 2.0 * qx * qx - 2.0 * qy * qy,
    }};
    for (int c = 0; c < 18; c++) {{
        double value, sigma;
        if (c < 3) {{
            value = row[{layout.POS} + c];
            sigma = p[{layout.P_NOISE}];
        }} else if (c < 12) {{
            value = rotation[c - 3];
            sigma = p[{layout.P_NOISE + 1}];
        }} else if (c < 15) {{
            value = row[{layout.VEL} + c - 12];
            sigma = p[{layout.P_NOISE + 2}];
        }} else {{
            value = row[{layout.OMEGA} + c - 15];
            sigma = p[{layout.P_NOISE + 3}];
        }}
        if (sigma > 0.0) value += sigma * dispatchrl_standard_normal_icdf(key, base + (uint64_t)c);
        out[c] = (float)value;
    }}
    for (int k = 0; k < tail; k++) out[18 + k] = (float)row[{layout.HISTORY} + k];
}}
"""

#: multirotor_step_at over the N envs; HISTORY_LEN actions of history, INTEGRAL columns of the
#: position-error integral, rows of PHYS and OBS_DIM
STEP = f"""
const double low = p[{layout.P_RPM_MIN}], high = p[{layout.P_RPM_MAX}];
const double half = 0.5 * (high - low);
const double dt = p[{layout.P_DT}];
for (int i = 0; i < N; i++) {{
    double *const row = physics + (int64_t)i * PHYS;
    double a[4], cmd[4];
    for (int j = 0; j < 4; j++) {{
        double x = (double)action[4 * i + j];
        x = x < -1.0 ? -1.0 : x;
        a[j] = x > 1.0 ? 1.0 : x;
        cmd[j] = a[j] * half + low + half;
    }}
    /* the curriculum's weights for this env's age: stage floor(age / steps per stage) >= 0 */
    const double stage = p[{layout.P_CURRICULUM}] > 0.0 ? (double)(int64_t)(row[{layout.AGE}] / p[{layout.P_CURRICULUM}]) : 0.0;
    double weights[4];
    for (int k = 0; k < 4; k++) {{
        if (stage < (double){layout.CURRICULUM_STAGES}) {{
            weights[k] = p[{layout.P_CURRICULUM_TABLE} + 4 * (int64_t)stage + k];
        }} else {{ /* beyond the table: pow is the C device's (at the limit in every config we know) */
            const double weight = p[{layout.P_REWARD + 4} + k], factor = p[{layout.P_CURRICULUM + 1} + 2 * k];
            const double limit = p[{layout.P_CURRICULUM + 2} + 2 * k];
            const double raised = weight * pow(factor, stage);
            weights[k] = factor > 1.0 ? (limit < raised ? limit : raised) : weight;
        }}
    }}
    double s[17];
    for (int j = 0; j < 17; j++) s[j] = row[j];
    double position_cost = s[0] * s[0] + s[1] * s[1] + s[2] * s[2];
    const double orientation_cost = 1.0 - s[3] * s[3];
    double velocity_cost = s[7] * s[7] + s[8] * s[8] + s[9] * s[9];
    if (p[{layout.P_EXTENSIONS}] > 0.0) {{ /* norms instead of the paper's squares */
        position_cost = sqrt(position_cost);
        velocity_cost = sqrt(velocity_cost);
    }}
    const double baseline = p[{layout.P_REWARD + 3}];
    const double d0 = a[0] - baseline, d1 = a[1] - baseline, d2 = a[2] - baseline, d3 = a[3] - baseline;
    const double action_cost = d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3;
    const double cost = weights[0] * position_cost + weights[1] * orientation_cost
                        + weights[2] * velocity_cost + weights[3] * action_cost;
    const double disturbance[6] = {{
        row[{layout.FORCE}], row[{layout.FORCE + 1}], row[{layout.FORCE + 2}], row[{layout.TORQUE}], row[{layout.TORQUE + 1}], row[{layout.TORQUE + 2}],
    }};
    double k1[17], k2[17], k3[17], k4[17], t[17];
    dispatchrl_multirotor_derivative(s, cmd, disturbance, p, k1);
    dispatchrl_multirotor_plus(s, k1, 0.5 * dt, t);
    dispatchrl_multirotor_derivative(t, cmd, disturbance, p, k2);
    dispatchrl_multirotor_plus(s, k2, 0.5 * dt, t);
    dispatchrl_multirotor_derivative(t, cmd, disturbance, p, k3);
    dispatchrl_multirotor_plus(s, k3, dt, t);
    dispatchrl_multirotor_derivative(t, cmd, disturbance, p, k4);
    /* s + dt/6 (k1 + 2 k2 + 2 k3 + k4) */
    const double w = dt / 6.0;
    double n[17];
    for (int j = 0; j < 17; j++) n[j] = s[j] + w * (k1[j] + 2.0 * k2[j] + 2.0 * k3[j] + k4[j]);
    const double norm = sqrt(n[3] * n[3] + n[4] * n[4] + n[5] * n[5] + n[6] * n[6]);
    bool done = false;
    for (int j = 0; j < 17; j++) {{
        double value = n[j];
        if (3 <= j && j < 7) {{
            value = value / norm;
        }} else if (j >= 13) {{
            value = value < low ? low : value;
            value = value > high ? high : value;
        }}
        row[j] = value;
        if (j < 3) {{
            done = done || fabs(value) > p[{layout.P_TERMINATION}];
        }} else if (7 <= j && j < 10) {{
            done = done || fabs(value) > p[{layout.P_TERMINATION + 1}];
        }} else if (10 <= j && j < 13) {{
            done = done || fabs(value) > p[{layout.P_TERMINATION + 2}];
        }}
    }}
    for (int k = 0; k < 4 * (HISTORY_LEN - 1); k++) row[{layout.HISTORY} + k] = row[{layout.HISTORY} + 4 + k];
    if (HISTORY_LEN > 0) {{
        for (int j = 0; j < 4; j++) row[{layout.HISTORY} + 4 * (HISTORY_LEN - 1) + j] = a[j];
    }}
    for (int k = 0; k < INTEGRAL; k++) {{ /* of the position after the step */
        const double value = row[PHYS - INTEGRAL + k] + p[{layout.P_EXTENSIONS + 1}] * dt * row[{layout.POS} + k];
        row[PHYS - INTEGRAL + k] = value < -1.0 ? -1.0 : (value > 1.0 ? 1.0 : value);
    }}
    row[{layout.AGE}] += 1.0;
    steps[i] += 1;
    reward[i] = (float)(done ? p[{layout.P_REWARD + 2}] : p[{layout.P_REWARD + 1}] - p[{layout.P_REWARD}] * cost);
    terminated[i] = done;
    truncated[i] = steps[i] >= MAX_STEPS;
    dispatchrl_multirotor_observe(row, steps[i], 4 * HISTORY_LEN + INTEGRAL, p, obs + (int64_t)i * OBS_DIM);
}}
"""

#: multirotor_reset_at over the N envs: layout.RESET_DRAWS stream positions each
RESET = f"""
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < N; i++) {{
    if (ONLY_DONE && !(terminated[i] || truncated[i])) continue;
    double *const row = physics + (int64_t)i * PHYS;
    const uint64_t b = base + (uint64_t)i * {layout.RESET_DRAWS};
    const bool guidance = dispatchrl_uniform01(key, b) < p[{layout.P_INIT}];
    for (int k = 0; k < 3; k++) {{
        row[{layout.POS} + k] = guidance ? 0.0 : p[{layout.P_INIT + 1}] * (2.0 * dispatchrl_uniform01(key, b + 1 + k) - 1.0);
        row[{layout.VEL} + k] = p[{layout.P_INIT + 3}] * (2.0 * dispatchrl_uniform01(key, b + 4 + k) - 1.0);
        row[{layout.OMEGA} + k] = p[{layout.P_INIT + 4}] * (2.0 * dispatchrl_uniform01(key, b + 7 + k) - 1.0);
        row[{layout.FORCE} + k] = p[{layout.P_DISTURBANCE}] * dispatchrl_standard_normal(key, b + (uint64_t)(10 + 2 * k));
        row[{layout.TORQUE} + k] = p[{layout.P_DISTURBANCE + 1}] * dispatchrl_standard_normal(key, b + (uint64_t)(16 + 2 * k));
    }}
    /* floor(u 2^52), u >= 0: exact in float64 */
    row[{layout.KEY}] = (double)(int64_t)(dispatchrl_uniform01(key, b + 22) * 4503599627370496.0);
    /* a uniformly random attitude (Shoemake's method), redrawn until its angle is within the limit:
       |2 acos(cw)| <= max angle is cw >= cos_limit (see cos_limit in envs/multirotor/c.py) */
    double qw = 1.0, qx = 0.0, qy = 0.0, qz = 0.0;
    if (p[{layout.P_INIT + 2}] > 0.0 && !guidance) {{
        for (int t = 0; t < {layout.ORIENTATION_TRIES}; t++) {{
            const double u0 = dispatchrl_uniform01(key, b + (uint64_t)(23 + 3 * t));
            const double u1 = dispatchrl_uniform01(key, b + (uint64_t)(24 + 3 * t));
            const double u2 = dispatchrl_uniform01(key, b + (uint64_t)(25 + 3 * t));
            const double cw = sqrt(1.0 - u0) * sin({TWO_PI!r} * u1);
            if (cw >= cos_limit) {{
                qw = cw;
                qx = sqrt(1.0 - u0) * cos({TWO_PI!r} * u1);
                qy = sqrt(u0) * sin({TWO_PI!r} * u2);
                qz = sqrt(u0) * cos({TWO_PI!r} * u2);
                break;
            }}
        }}
    }}
    row[{layout.QUAT}] = qw;
    row[{layout.QUAT + 1}] = qx;
    row[{layout.QUAT + 2}] = qy;
    row[{layout.QUAT + 3}] = qz;
    const double middle = 0.5 * (p[{layout.P_RPM_MIN}] + p[{layout.P_RPM_MAX}]);
    for (int j = 0; j < 4; j++) row[{layout.RPM} + j] = middle;
    for (int k = 0; k < 4 * HISTORY_LEN + INTEGRAL; k++) row[{layout.HISTORY} + k] = 0.0;
    steps[i] = 0;
    if (!ONLY_DONE) {{
        reward[i] = 0.0f;
        terminated[i] = false;
        truncated[i] = false;
    }}
    dispatchrl_multirotor_observe(row, steps[i], 4 * HISTORY_LEN + INTEGRAL, p, obs + (int64_t)i * OBS_DIM);
}}
rng[1] = base + (uint64_t){layout.RESET_DRAWS} * N;
"""


#: multirotor_critic_observe_at over the N envs: CRITIC_DIM floats per env (layout.CRITIC_COLUMNS,
#: then the INTEGRAL columns of the position-error integral)
CRITIC = f"""
const double low = p[{layout.P_RPM_MIN}], high = p[{layout.P_RPM_MAX}];
for (int i = 0; i < N; i++) {{
    const double *const row = physics + (int64_t)i * PHYS;
    float *const o = out + (int64_t)i * CRITIC_DIM;
    const double qw = row[{layout.QUAT}], qx = row[{layout.QUAT + 1}], qy = row[{layout.QUAT + 2}], qz = row[{layout.QUAT + 3}];
    const double rotation[9] = {{
        1.0 - 2.0 * qy * qy - 2.0 * qz * qz, 2.0 * qx * qy - 2.0 * qw * qz, 2.0 * qx * qz + 2.0 * qw * qy,
        2.0 * qx * qy + 2.0 * qw * qz, 1.0 - 2.0 * qx * qx - 2.0 * qz * qz, 2.0 * qy * qz - 2.0 * qw * qx,
        2.0 * qx * qz - 2.0 * qw * qy, 2.0 * qy * qz + 2.0 * qw * qx, 1.0 - 2.0 * qx * qx - 2.0 * qy * qy,
    }};
    for (int c = 0; c < 3; c++) o[c] = (float)row[{layout.POS} + c];
    for (int c = 0; c < 9; c++) o[3 + c] = (float)rotation[c];
    for (int c = 0; c < 3; c++) o[12 + c] = (float)row[{layout.VEL} + c];
    for (int c = 0; c < 3; c++) o[15 + c] = (float)row[{layout.OMEGA} + c];
    for (int c = 0; c < 4; c++) o[18 + c] = (float)(2.0 * (row[{layout.RPM} + c] - low) / (high - low) - 1.0);
    for (int c = 0; c < 3; c++) o[22 + c] = (float)(row[{layout.FORCE} + c] / p[{layout.P_MASS}]);
    for (int c = 0; c < 3; c++) o[25 + c] = (float)(row[{layout.TORQUE} + c] / p[{layout.P_J} + c]);
    for (int c = 0; c < INTEGRAL; c++) o[{layout.CRITIC_COLUMNS} + c] = (float)row[PHYS - INTEGRAL + c];
}}
"""


def _shapes(env: Multirotor) -> dict[str, int]:
    return dict(
        N=env.num_envs,
        PHYS=env.physics_dim,
        OBS_DIM=env.observation_dim,
        HISTORY_LEN=env.action_history,
        INTEGRAL=env.integral_columns,
    )


def step_kernel(env: Multirotor) -> CKernel:
    consts = dict(_shapes(env), MAX_STEPS=env.max_episode_steps)
    params = ("physics", "steps", "action", "obs", "reward", "terminated", "truncated", "p")
    helpers = (*NORMAL_HELPERS, STANDARD_NORMAL_ICDF, PHYSICS)
    return CKernel("multirotor_step", STEP, params, frozenset(STATE_FIELDS), consts, np.float32, helpers)


def reset_kernel(env: Multirotor, only_done: bool) -> CKernel:
    consts = dict(_shapes(env), ONLY_DONE=int(only_done))
    params = ("rng", *STATE_FIELDS, "p", "cos_limit")
    outputs = {"rng", *STATE_FIELDS}
    helpers = (*NORMAL_HELPERS, STANDARD_NORMAL_ICDF, PHYSICS)
    name = "multirotor_reset_done" if only_done else "multirotor_reset"
    return CKernel(name, RESET, params, outputs, consts, np.float32, helpers)


def critic_kernel(env: Multirotor) -> CKernel:
    consts = dict(
        N=env.num_envs, PHYS=env.physics_dim, INTEGRAL=env.integral_columns, CRITIC_DIM=env.critic_observation_dim
    )
    return CKernel(
        "multirotor_critic_observation", CRITIC, ("physics", "out", "p"), {"out"}, consts, np.float32, (), {"out"}
    )


@api.env_step.dispatch
def env_step(device: C, env: Multirotor, state, action):
    launch(device, step_kernel(env), *step_args(state, action), parameter_array(device, env))


def _reset(device: C, env: Multirotor, state, rng, only_done: bool) -> None:
    p = parameter_array(device, env)
    launch(device, reset_kernel(env, only_done), rng, *state_args(state), p, cos_limit(env.init_max_angle))


@api.env_reset.dispatch
def env_reset(device: C, env: Multirotor, state, rng):
    _reset(device, env, state, rng, False)


@api.env_reset_done.dispatch
def env_reset_done(device: C, env: Multirotor, state, rng):
    _reset(device, env, state, rng, True)


@api.env_critic_observation.dispatch
def env_critic_observation(device: C, env: Multirotor, state, out) -> None:
    launch(device, critic_kernel(env), state.physics, out, parameter_array(device, env))
