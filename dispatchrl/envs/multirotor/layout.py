"""The layouts every backend's multirotor kernels share: the columns of a physics row, the
counter-stream positions of a reset and of a step's observation noise, and the entries of the
float64 parameter array (:func:`~dispatchrl.envs.multirotor.env.parameter_array`)."""

import numpy as np

__all__ = [
    "AGE",
    "CRITIC_COLUMNS",
    "CURRICULUM_STAGES",
    "FORCE",
    "HISTORY",
    "INTEGRAL_COLUMNS",
    "INTEGRATED",
    "KEY",
    "NOISE_DRAWS",
    "OMEGA",
    "ORIENTATION_TRIES",
    "PARAMETERS",
    "POS",
    "P_CURRICULUM",
    "P_CURRICULUM_TABLE",
    "P_DISTURBANCE",
    "P_DT",
    "P_EXTENSIONS",
    "P_GRAVITY",
    "P_INIT",
    "P_J",
    "P_MASS",
    "P_NOISE",
    "P_REWARD",
    "P_ROTOR",
    "P_RPM_MAX",
    "P_RPM_MIN",
    "P_TAU",
    "P_TERMINATION",
    "P_THRUST",
    "P_TORQUE_CONSTANT",
    "P_YAW",
    "QUAT",
    "RESET_DRAWS",
    "RPM",
    "TORQUE",
    "VEL",
]

#: columns of a physics row: position (3), quaternion w x y z (4), linear velocity (3), angular
#: velocity in the body frame (3), rotor RPM (4), the episode's disturbance force (world frame) and
#: torque (body frame), its observation-noise key, the env's steps since it was made (for the
#: curriculum; resets keep it), then the action history, oldest first, then, where the task has
#: one (``position_integral`` > 0), the position-error integral (INTEGRAL_COLUMNS)
POS, QUAT, VEL, OMEGA, RPM, FORCE, TORQUE, KEY, AGE, HISTORY = 0, 3, 7, 10, 13, 17, 20, 23, 24, 25
INTEGRATED = 17  # the RK4 state: position .. RPM
INTEGRAL_COLUMNS = 3  # the position-error integral, per axis, last in the physics row and the observations
#: the counter-stream positions one env's reset draws: guidance, position, velocities,
#: disturbance (Box–Muller pairs), noise key, then 3 per orientation try
RESET_DRAWS = 256
ORIENTATION_TRIES = (RESET_DRAWS - 23) // 3
NOISE_DRAWS = 18  # observation-noise stream positions per step (one per normal: standard_normal_icdf)
#: the critic's privileged observation: position, rotation matrix (row-major), linear and angular
#: velocity without noise, rotor RPMs mapped to [-1, 1], the disturbance as the linear (world) and
#: angular (body) accelerations it causes (then the position-error integral, where the task has one)
CRITIC_COLUMNS = 28

#: entries of the kernels' float64 parameter array (:func:`parameter_array`)
(
    P_MASS,
    P_J,  # 3
    P_THRUST,  # 3
    P_TORQUE_CONSTANT,
    P_TAU,
    P_RPM_MIN,
    P_RPM_MAX,
    P_GRAVITY,
    P_DT,
    P_ROTOR,  # 4 × (x, y, z)
    P_YAW,  # 4
    P_INIT,  # guidance, position, angle, linear velocity, angular velocity
    P_NOISE,  # position, orientation, linear velocity, angular velocity
    P_DISTURBANCE,  # force, torque
    P_TERMINATION,  # position, linear velocity, angular velocity
    P_REWARD,  # scale, constant, termination penalty, action baseline, then the 4 weights
    P_CURRICULUM,  # steps per stage (per env; 0: off), then per weight: factor, limit (4 × 2)
) = np.cumsum([0, 1, 3, 3, 1, 1, 1, 1, 1, 1, 12, 4, 5, 4, 2, 3, 8]).tolist()
#: then the reward weights of curriculum stages 0 .. CURRICULUM_STAGES - 1 (4 per stage), computed
#: once with Python's pow (libm's, as Numba's): a step reads its weights instead of calling pow 3
#: times; later stages call pow (the paper's weights reach their limits by stage 14)
CURRICULUM_STAGES = 256
P_CURRICULUM_TABLE = P_CURRICULUM + 9
#: then the task's extensions of the paper's: the cost form of position and velocity (0: squared,
#: 1: norm), the gain of the observed position-error integral (0: none)
P_EXTENSIONS = P_CURRICULUM_TABLE + 4 * CURRICULUM_STAGES
PARAMETERS = P_EXTENSIONS + 2
