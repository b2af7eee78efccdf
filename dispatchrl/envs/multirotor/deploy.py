"""The multirotor's firmware entry point in an exported policy: ``controller(observation, rpm)``,
the policy's action mapped to the four rotors' RPM setpoints as the env maps it (RLtools'
learning-to-fly Crazyflie firmware calls a controller of this shape at 100 Hz)."""

__all__ = ["controller_c"]


def _float(value: float) -> str:
    text = f"{float(value):.9g}"  # 9 significant digits round-trip every float32
    return text + (".0f" if not any(c in text for c in ".en") else "f")


def controller_c(env, name: str) -> tuple[str, str]:
    """(header declaration, source definition) of the controller for a policy exported as ``name``
    on ``env`` (a :class:`~dispatchrl.envs.multirotor.Multirotor`): ``controller`` for the default
    name ``policy``, else ``<name>_controller``, so that two exported policies link together."""
    p, history = env.parameters, env.action_history
    n_obs, function = env.observation_dim, "controller" if name == "policy" else f"{name}_controller"
    rotors = ", ".join(f"({x:g}, {y:g})" for x, y, _ in p.rotor_positions)
    end = 18 + 4 * history
    integral = (
        f"""
     [{end}, {n_obs})  the position-error integral, per axis: after each step
                I = clip(I + {env.position_integral:g} * {env.dt:g} * position error, -1, 1); zeros after a reset"""
        if env.integral_columns
        else ""
    )
    header = f"""
/* The multirotor's firmware entry point: one control step (every {env.dt:g} s), RPM setpoints for the
   four rotors from {name}_forward's action a in [-1, 1], clipped to [-1, 1] as the env clips it:
   rpm = (a + 1) / 2 * (rpm_max - rpm_min) + rpm_min, rpm_min = {p.rpm_min:g}, rpm_max = {p.rpm_max:g}.
   observation[{n_obs}], SI units, the frame x forward, y left, z up (gravity along -z), float32:
     [0, 3)     position error: position - target, world frame, m
     [3, 12)    rotation matrix body -> world, row-major (R00 R01 R02 R10 ... R22)
     [12, 15)   linear velocity, world frame, m/s
     [15, 18)   angular velocity, body frame, rad/s
     [18, {end})  the last {history} actions a (4 each, in [-1, 1], before the RPM mapping),
                oldest first; zeros after a reset{integral}
   rpm[4]: in the order of the rotors at body (x, y) = {rotors} m. */
void {function}(const float observation[{n_obs}], float rpm[4]);
"""
    source = f"""
void {function}(const float observation[{n_obs}], float rpm[4])
{{
    float action[4];
    {name}_forward(observation, action);
    for (int i = 0; i < 4; i++) {{
        const float a = action[i] < -1.0f ? -1.0f : (action[i] > 1.0f ? 1.0f : action[i]);
        rpm[i] = (a + 1.0f) * 0.5f * ({_float(p.rpm_max)} - {_float(p.rpm_min)}) + {_float(p.rpm_min)};
    }}
}}
"""
    return header, source
