"""C methods of Pendulum: one C loop over the N envs per call (see :mod:`dispatchrl.backends.c`).

The physics is :mod:`.cpu`'s, expression by expression (same constants, same evaluation order,
float64, no contraction into fused multiply-adds, Python's floored ``%``), so trajectories match
the CPU kernels and gymnasium bit for bit. Resets draw the same counter-stream positions.
"""

from ..shared.c import PI_C, TWO_PI_C, kernel_methods, reset_source
from .env import U_COST, Pendulum

__all__ = ["PHYSICS", "RESET", "STEP"]

#: the file-level helpers of the step
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

/* gymnasium PendulumEnv.step (envs/pendulum/cpu.py pendulum_dynamics): cost on the pre-step state,
   velocity first, then angle; the torque terms are float32 products as gymnasium's float32 torque gives */
static inline void dispatchrl_pendulum(double th, double thdot, double u, double gterm,
                                       double *newth, double *newthdot, double *cost)
{{
    const double torque_term = dispatchrl_round_f32(3.0 * u);
    const double torque_cost = dispatchrl_round_f32({U_COST!r} * dispatchrl_round_f32(u * u));
    const double wrapped = dispatchrl_floor_mod(th + {PI_C}, {TWO_PI_C}) - {PI_C};
    *cost = wrapped * wrapped + 0.1 * (thdot * thdot) + torque_cost;
    double v = thdot + (gterm * sin(th) + torque_term) * 0.05;
    v = v < -8.0 ? -8.0 : (v > 8.0 ? 8.0 : v);
    *newthdot = v;
    *newth = th + v * 0.05;
}}
"""

STEP = """
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

RESET = reset_source(
    f"""\
    const double th = -{PI_C} + {TWO_PI_C} * dispatchrl_uniform01(key, base + 2 * (uint64_t)i);
    const double thdot = -1.0 + 2.0 * dispatchrl_uniform01(key, base + 2 * (uint64_t)i + 1);
    physics[2 * i] = th;
    physics[2 * i + 1] = thdot;
    obs[3 * i] = (float)cos(th);
    obs[3 * i + 1] = (float)sin(th);
    obs[3 * i + 2] = (float)thdot;
""",
    2,
)


kernel_methods(Pendulum, "pendulum", STEP, RESET, PHYSICS, numbers={"scale": "action_scale", "gterm": "gterm"})
