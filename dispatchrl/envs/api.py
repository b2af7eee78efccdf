"""Native environments as generic functions: env descriptions, per-device state, declarations.

An env description is an instance of a :class:`NativeEnv` subclass (the built-ins' in
``envs/<env>/env.py``, or a user's own), usually a frozen dataclass of static
configuration; :func:`env_state` allocates its per-device arrays; :func:`env_reset`,
:func:`env_step` and :func:`env_reset_done` are generic functions dispatching on the device and
on the env type. Their methods only ``launch`` kernels, so they can be staged with
:func:`dispatchrl.fuse` into one compiled training step. :class:`NativeEnv` documents the protocol;
the algorithms and the driver use nothing else.

Physics state is float64 (gymnasium integrates in float64; float32 state drifts away from its
trajectories within an episode); observations and rewards are float32.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..arrays import Array, to_numpy, zeros
from ..checks import check_array, check_device
from ..dispatch import generic
from ..errors import ConfigError, DTypeError, ShapeError
from ..spaces import Box

__all__ = [
    "EnvState",
    "NativeEnv",
    "check_action",
    "check_count",
    "env_critic_observation",
    "env_reset",
    "env_reset_done",
    "env_state",
    "env_step",
]


def check_count(cls, name, value, minimum=1) -> None:
    """Refuse a count that is not an int >= ``minimum`` (a ConfigError naming ``cls.name``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{cls}: '{name}' must be an int >= {minimum}, got {value!r}")


class NativeEnv:
    """The native env protocol: a batch of ``num_envs`` envs whose step is fused into training.

    A subclass (usually a frozen dataclass with fields ``num_envs`` and ``max_episode_steps``)
    provides:

    - class attributes ``observation_dim``, ``action_dim`` and ``physics_dim`` (the float64
      per-env state :func:`env_state` allocates), and ``action_low`` / ``action_high`` /
      ``observation_high`` (float32 arrays, attributes or properties);
    - methods of the generic functions :func:`env_reset`, :func:`env_step` and
      :func:`env_reset_done` for each device it runs on, annotated with the env type
      (``def env_step(device: drl.CPU, env: MyEnv, state, action)``), each launching kernels
      over the :class:`EnvState` arrays: Numba ``@njit`` kernels on CPU keep the training step one
      compiled loop. Resets draw from the counter stream ``rng`` (``dispatchrl.kernels.random.cpu
      .uniform01(key, counter)``) and advance ``rng[1]`` by the same amount whatever is reset.

    And, with defaults here, what a training run needs to know:

    - ``name``: the run's env name in results and checkpoints (default: ``module:Class``, which
      ``dispatchrl train --env`` and checkpoint loading resolve back to the class);
    - ``eval_id``: the gymnasium id evaluating trained policies (see
      :func:`dispatchrl.envs.register_native_env`), or None: then, if the class defines
      :meth:`evaluation_env`, one env of it does (stepped by its CPU methods), else none;
    - :meth:`training_env`: the description a run trains on (e.g. normalised actions);
    - :meth:`policy_action_bounds`: the bounds a deployed policy's [-1, 1] output maps onto
      (:meth:`policy_action_space` is them as a :class:`~dispatchrl.spaces.Box`);
    - :meth:`task_metrics`: what a trained policy achieves beyond its return (none by default),
      and :meth:`selection_score`: what keep-best selection maximises (default: the return);
    - ``selection_evaluations``: how many keep-best evaluations ``dispatchrl train`` makes over a
      run by default (10; more for a task whose policies come and go between evaluations);
    - :meth:`exported_policy_c`: C an exported policy of this env adds (none by default);
    - ``critic_observation_dim``: the width of the privileged observation an asymmetric critic
      sees (``asymmetric_critic=True`` in TD3/SAC), written by its methods of
      :func:`env_critic_observation`; None (the default): the env has none.
    """

    observation_dim: int
    action_dim: int
    physics_dim: int
    num_envs: int
    max_episode_steps: int
    action_low: np.ndarray  # float32 (action_dim,), physical units
    action_high: np.ndarray
    #: gymnasium id evaluating a trained policy (None: the run is not evaluated through gymnasium)
    eval_id: str | None = None
    #: width of :func:`env_critic_observation`'s rows (None: no privileged observation)
    critic_observation_dim: int | None = None
    #: keep-best evaluations over a ``dispatchrl train`` run by default (every total_steps / this)
    selection_evaluations: int = 10

    @property
    def name(self) -> str:
        return f"{type(self).__module__}:{type(self).__qualname__}"

    def training_env(self) -> "NativeEnv":
        """The description a run trains on (the policy acts in [-1, 1])."""
        return self

    def policy_action_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) in the env's physical action units, onto which the policy's [-1, 1] maps."""
        return np.asarray(self.action_low, np.float32), np.asarray(self.action_high, np.float32)

    @property
    def action_space(self) -> Box:
        """The actions :func:`env_step` takes: a Box of ``action_low`` .. ``action_high``."""
        return Box(self.action_low, self.action_high)

    def policy_action_space(self) -> Box:
        """The Box of :meth:`policy_action_bounds`, onto which a trained policy's [-1, 1] maps."""
        return Box(*self.policy_action_bounds())

    def evaluation_env(self) -> "NativeEnv":
        """The description a trained policy is evaluated on where ``eval_id`` is None (one env
        is made of it, its time limit ``max_episode_steps``), for a class that defines it."""
        return self

    def exported_policy_c(self, name: str) -> tuple[str, str]:
        """C text that ``dispatchrl export`` adds to a policy of this env exported as ``name``
        (``<name>.h``, ``<name>.c``; ``<name>_forward`` maps an observation to the policy's
        [-1, 1] action): (declarations for the header, definitions for the source), e.g. a
        firmware's entry point in physical units (the multirotor's ``controller``). None by
        default."""
        return "", ""

    def selection_score(self, policy: Callable[[np.ndarray], np.ndarray]) -> float | None:
        """What keep-best selection (``EvalCallback(deploy_best=True)``) maximises for the
        deterministic ``policy``, on episodes held out from :meth:`task_metrics`'; None (the
        default): the evaluation return. For a task whose evaluation return can favour failing
        (the multirotor's: under the curriculum's final weights a crash ends a poor hover's
        negative rewards early)."""
        return None

    def task_metrics(self, policy: Callable[[np.ndarray], np.ndarray]) -> dict[str, float]:
        """What the deterministic ``policy`` (a batch of observations → a batch of actions)
        achieves on the task beyond its return, by name (the multirotor's ``eval_success``);
        the CLI's evaluations and EvalCallback report them. None by default."""
        return {}


@dataclass
class EnvState:
    """Per-device state of a batch of N native envs. ``terminated``/``truncated``/``reward``
    describe the last transition and are left alone by :func:`env_reset_done`."""

    physics: Array  # (N, physics_dim) float64
    steps: Array  # (N,) int64, steps since the last reset
    obs: Array  # (N, observation_dim) float32
    reward: Array  # (N,) float32
    terminated: Array  # (N,) bool
    truncated: Array  # (N,) bool

    def validate_checkpoint(self, values, context) -> None:
        """Between steps every env has been reset at its time limit: 0 <= steps < limit."""
        limit = getattr(context.get("env"), "max_episode_steps", None)
        if limit is not None:
            values.require("steps", 0, limit - 1, "steps since the env's last reset, below its time limit")


def _check_env(fn, env) -> None:
    if not isinstance(env, NativeEnv):
        raise ConfigError(
            f"{fn}: argument 'env' must be a native env (a dispatchrl.envs.NativeEnv such as "
            f"Pendulum), got {type(env).__name__}"
        )


def env_state(device, env):
    """Allocate the state arrays of ``env`` on ``device`` (zeros: call :func:`env_reset`)."""
    check_device("env_state", device)
    _check_env("env_state", env)
    n = env.num_envs
    return EnvState(
        zeros(device, (n, env.physics_dim), np.float64),
        zeros(device, n, np.int64),
        zeros(device, (n, env.observation_dim), np.float32),
        zeros(device, n, np.float32),
        zeros(device, n, np.bool_),
        zeros(device, n, np.bool_),
    )


def _check_state(fn, device, env, state) -> None:
    _check_env(fn, env)
    if not isinstance(state, EnvState):
        raise ConfigError(
            f"{fn}: argument 'state' must be an EnvState from env_state(device, env), got {type(state).__name__}"
        )
    n = env.num_envs
    check_array(fn, "state.physics", state.physics, device, (n, env.physics_dim), np.float64)
    check_array(fn, "state.steps", state.steps, device, (n,), np.int64)
    check_array(fn, "state.obs", state.obs, device, (n, env.observation_dim), np.float32)
    check_array(fn, "state.reward", state.reward, device, (n,), np.float32)
    check_array(fn, "state.terminated", state.terminated, device, (n,), np.bool_)
    check_array(fn, "state.truncated", state.truncated, device, (n,), np.bool_)


def _check_rng(fn, device, rng) -> None:
    check_array(fn, "rng", rng, device, (2,), np.uint64)


@generic(inplace=("rng",), outputs=("state",))
def env_reset(device, env, state, rng):
    """Reset all N envs from the counter random stream ``rng``: draws from gymnasium's reset
    distribution, writes ``state.obs`` and clears step counters, rewards and flags."""
    check_device("env_reset", device)
    _check_state("env_reset", device, env, state)
    _check_rng("env_reset", device, rng)
    return device, env, state, rng


@generic(inplace=("state",))
def env_step(device, env, state, action):
    """Advance all N envs by one step with ``action`` (N, action_dim) float32; writes the next
    observation, reward, terminated and truncated (step count reached max_episode_steps) into
    ``state``. Envs are not reset here: see :func:`env_reset_done`."""
    check_device("env_step", device)
    _check_state("env_step", device, env, state)
    check_array("env_step", "action", action, device, (env.num_envs, env.action_dim), np.float32)
    return device, env, state, action


@generic(inplace=("state", "rng"))
def env_reset_done(device, env, state, rng):
    """Reset the envs whose ``terminated | truncated`` flag is set, writing their fresh
    observation into ``state.obs``. The stream advances by the same amount whatever is done
    (every env draws, only done envs use the draw), so all devices stay in step."""
    check_device("env_reset_done", device)
    _check_state("env_reset_done", device, env, state)
    _check_rng("env_reset_done", device, rng)
    return device, env, state, rng


def check_action(env, action, name="action"):
    """Refuse an action batch of the wrong shape or dtype, or holding NaN/inf (reads values:
    a Python-level check for APIs outside fused steps)."""
    host = to_numpy(action) if isinstance(action, Array) else np.asarray(action)
    shape = (env.num_envs, env.action_dim)
    if host.dtype != np.float32:
        raise DTypeError(f"{name}: has dtype {host.dtype}, expected float32")
    if host.shape != shape:
        raise ShapeError(f"{name}: has shape {host.shape}, expected {shape}")
    bad = ~np.isfinite(host)
    if bad.any():
        raise ConfigError(
            f"{name}: must be finite, got {host[bad][0]} at index {tuple(int(i) for i in np.argwhere(bad)[0])}"
        )
    return host


@generic(outputs=("out",))
def env_critic_observation(device, env, state, out) -> tuple:
    """The privileged observation of each env's current state, for an asymmetric critic: ``out``
    (N, ``env.critic_observation_dim``) float32, e.g. the multirotor's noise-free state with its
    disturbance and rotor speeds. Reads ``state``, changes nothing in it."""
    check_device("env_critic_observation", device)
    _check_state("env_critic_observation", device, env, state)
    if env.critic_observation_dim is None:
        raise ConfigError(f"env_critic_observation: env {env.name} has no critic observation (critic_observation_dim)")
    shape = (env.num_envs, env.critic_observation_dim)
    check_array("env_critic_observation", "out", out, device, shape, np.float32)
    return device, env, state, out
