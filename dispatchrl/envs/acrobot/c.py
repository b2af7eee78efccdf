"""C methods of the Acrobots (continuous and discrete): one C loop over the N envs per call (see
:mod:`dispatchrl.backends.c`).

The physics is :mod:`.cpu`'s, expression by expression (same constants, same evaluation order,
float64, no contraction into fused multiply-adds), but sin and cos are the C device's own
(``backends/c/mathlib.py``, not libm): they differ in the last bits, and the chaotic Acrobot then
drifts from the CPU's and gymnasium's trajectories (past 1e-6 within ~200 steps). Resets draw the
same counter-stream positions.
"""

from ..shared.c import PI_C, TWO_PI_C, kernel_methods, reset_source
from .env import MAX_VEL_1, MAX_VEL_2, Acrobot, AcrobotContinuous

__all__ = ["PHYSICS", "RESET", "STEP", "STEP_DISCRETE"]

#: the file-level helpers of the step
PHYSICS = f"""\
/* gymnasium AcrobotEnv._dsdt, "book" dynamics, term by term with its constants */
static inline void dispatchrl_acrobot_dsdt(const double s[4], double a, double out[4])
{{
    const double m1 = 1.0, m2 = 1.0, l1 = 1.0, lc1 = 0.5, lc2 = 0.5, I1 = 1.0, I2 = 1.0, g = 9.8;
    const double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
    const double d1 = m1 * (lc1 * lc1) + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * cos(theta2)) + I1 + I2;
    const double d2 = m2 * ((lc2 * lc2) + l1 * lc2 * cos(theta2)) + I2;
    const double phi2 = m2 * lc2 * g * cos(theta1 + theta2 - {PI_C} / 2.0);
    const double phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * sin(theta2)
                        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
                        + (m1 * lc1 + m2 * l1) * g * cos(theta1 - {PI_C} / 2)
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
    while (x > {PI_C}) x = x - {TWO_PI_C};
    while (x < -{PI_C}) x = x + {TWO_PI_C};
    return x;
}}

/* gymnasium's rk4 over [0, dt]: one step with dt = 0.2, then wrap and clip (envs/acrobot/cpu.py acrobot_rk4) */
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
    s[2] = s[2] < -{MAX_VEL_1!r} ? -{MAX_VEL_1!r} : (s[2] > {MAX_VEL_1!r} ? {MAX_VEL_1!r} : s[2]);
    s[3] = s[3] < -{MAX_VEL_2!r} ? -{MAX_VEL_2!r} : (s[3] > {MAX_VEL_2!r} ? {MAX_VEL_2!r} : s[3]);
}}
"""

STEP = """
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

_CONTINUOUS_TORQUE = """\
    const double a = (double)action[i];
    const double torque = a < -1.0 ? -1.0 : (a > 1.0 ? 1.0 : a);
"""
#: Acrobot-v1's step: the continuous one at torque index - 1, the index clamped into [0, 2] (cpu.py
#: acrobot_index_torque; NaN reads as 0)
STEP_DISCRETE = STEP.replace(
    _CONTINUOUS_TORQUE, "    const double torque = action[i] >= 2.0f ? 1.0 : (action[i] >= 1.0f ? 0.0 : -1.0);\n"
)

RESET = reset_source(
    """\
    /* gymnasium draws the reset state in float64 and stores it as float32 */
    for (int j = 0; j < 4; j++)
        physics[4 * i + j] = dispatchrl_round_f32(-0.1 + 0.2 * dispatchrl_uniform01(key, base + (uint64_t)(4 * i + j)));
    obs[6 * i] = (float)cos(physics[4 * i]);
    obs[6 * i + 1] = (float)sin(physics[4 * i]);
    obs[6 * i + 2] = (float)cos(physics[4 * i + 1]);
    obs[6 * i + 3] = (float)sin(physics[4 * i + 1]);
    obs[6 * i + 4] = (float)physics[4 * i + 2];
    obs[6 * i + 5] = (float)physics[4 * i + 3];
""",
    4,
)


kernel_methods(AcrobotContinuous, "acrobot", STEP, RESET, PHYSICS)
kernel_methods(Acrobot, "acrobot", STEP_DISCRETE, RESET, PHYSICS, step_name="acrobot_discrete_step")
