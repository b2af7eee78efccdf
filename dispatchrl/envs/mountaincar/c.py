"""C methods of MountainCar: one C loop over the N envs per call (see :mod:`dispatchrl.backends.c`).

The physics is :mod:`.cpu`'s, expression by expression (same constants, same evaluation order,
float64, no contraction into fused multiply-adds). Resets draw the same counter-stream positions.
"""

from ..shared.c import kernel_methods, reset_source
from .env import FORCE, GOAL_POSITION, GOAL_VELOCITY, GRAVITY, MAX_POSITION, MAX_SPEED, MIN_POSITION, MountainCar

__all__ = ["PHYSICS", "RESET", "STEP"]

#: the file-level helper of the step
PHYSICS = f"""\
/* gymnasium MountainCarEnv.step, term by term with its constants (envs/mountaincar/cpu.py); returns terminated */
static inline bool dispatchrl_mountaincar_physics(double s[2], double push)
{{
    double position = s[0], velocity = s[1];
    velocity = velocity + (push * {FORCE!r} + cos(3 * position) * (-{GRAVITY!r}));
    velocity = velocity < -{MAX_SPEED!r} ? -{MAX_SPEED!r} : (velocity > {MAX_SPEED!r} ? {MAX_SPEED!r} : velocity);
    position = position + velocity;
    position = position < {MIN_POSITION!r} ? {MIN_POSITION!r} : (position > {MAX_POSITION!r} ? {MAX_POSITION!r} : position);
    if (position == {MIN_POSITION!r} && velocity < 0) velocity = 0.0;
    s[0] = position;
    s[1] = velocity;
    return position >= {GOAL_POSITION!r} && velocity >= {GOAL_VELOCITY!r};
}}
"""

STEP = """
for (int i = 0; i < N; i++) {
    /* the index clamped into [0, 2] (NaN reads as 0), minus 1 */
    const double push = action[i] >= 2.0f ? 1.0 : (action[i] >= 1.0f ? 0.0 : -1.0);
    double s[2] = {physics[2 * i], physics[2 * i + 1]};
    terminated[i] = dispatchrl_mountaincar_physics(s, push);
    physics[2 * i] = s[0];
    physics[2 * i + 1] = s[1];
    obs[2 * i] = (float)s[0];
    obs[2 * i + 1] = (float)s[1];
    reward[i] = -1.0f;
    steps[i] += 1;
    truncated[i] = steps[i] >= MAX_STEPS;
}
"""

RESET = reset_source(
    """\
    /* gymnasium's U(-0.6, -0.4), at rest */
    physics[2 * i] = -0.6 + 0.2 * dispatchrl_uniform01(key, base + (uint64_t)i);
    physics[2 * i + 1] = 0.0;
    obs[2 * i] = (float)physics[2 * i];
    obs[2 * i + 1] = 0.0f;
""",
    1,
)


kernel_methods(MountainCar, "mountaincar", STEP, RESET, PHYSICS)
