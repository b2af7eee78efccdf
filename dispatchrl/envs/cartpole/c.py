"""C methods of CartPole: one C loop over the N envs per call (see :mod:`dispatchrl.backends.c`).

The physics is :mod:`.cpu`'s, expression by expression (same constants, same evaluation order,
float64, no contraction into fused multiply-adds), so trajectories match the CPU kernels and
gymnasium. Resets draw the same counter-stream positions.
"""

from ..shared.c import kernel_methods, reset_source
from . import env  # gymnasium's constants, as env.NAME
from .env import CartPole

__all__ = ["PHYSICS", "RESET", "STEP"]

#: the file-level helper of the step
PHYSICS = f"""\
/* gymnasium CartPoleEnv.step's Euler update, term by term with its constants (envs/cartpole/cpu.py) */
static inline void dispatchrl_cartpole_physics(double s[4], double force)
{{
    const double x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    const double costheta = cos(theta);
    const double sintheta = sin(theta);
    const double temp = (force + {env.POLEMASS_LENGTH!r} * (theta_dot * theta_dot) * sintheta) / {env.TOTAL_MASS!r};
    const double thetaacc = ({env.GRAVITY!r} * sintheta - costheta * temp)
                            / ({env.LENGTH!r} * (4.0 / 3.0 - {env.MASSPOLE!r} * (costheta * costheta) / {env.TOTAL_MASS!r}));
    const double xacc = temp - {env.POLEMASS_LENGTH!r} * thetaacc * costheta / {env.TOTAL_MASS!r};
    s[0] = x + {env.TAU!r} * x_dot;
    s[1] = x_dot + {env.TAU!r} * xacc;
    s[2] = theta + {env.TAU!r} * theta_dot;
    s[3] = theta_dot + {env.TAU!r} * thetaacc;
}}
"""

STEP = f"""
for (int i = 0; i < N; i++) {{
    /* the index clamped into [0, 1] (NaN reads as 0): 1 pushes right */
    const double force = action[i] >= 1.0f ? {env.FORCE_MAG!r} : -{env.FORCE_MAG!r};
    double s[4];
    for (int j = 0; j < 4; j++) s[j] = physics[4 * i + j];
    dispatchrl_cartpole_physics(s, force);
    for (int j = 0; j < 4; j++) {{
        physics[4 * i + j] = s[j];
        obs[4 * i + j] = (float)s[j];
    }}
    terminated[i] = s[0] < -{env.X_THRESHOLD!r} || s[0] > {env.X_THRESHOLD!r} || s[2] < -{env.THETA_THRESHOLD!r} || s[2] > {env.THETA_THRESHOLD!r};
    reward[i] = 1.0f; /* gymnasium rewards the terminal step too */
    steps[i] += 1;
    truncated[i] = steps[i] >= MAX_STEPS;
}}
"""

RESET = reset_source(
    """\
    /* gymnasium's U(-0.05, 0.05), kept in float64 as gymnasium keeps it */
    for (int j = 0; j < 4; j++) {
        physics[4 * i + j] = -0.05 + 0.1 * dispatchrl_uniform01(key, base + (uint64_t)(4 * i + j));
        obs[4 * i + j] = (float)physics[4 * i + j];
    }
""",
    4,
)


kernel_methods(CartPole, "cartpole", STEP, RESET, PHYSICS)
