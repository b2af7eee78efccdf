"""gymnasium ``Env`` classes over the native kernels (each built-in env's own, with its
registration spec, is in its package: ``envs/pendulum/gym.py``; :mod:`.registry` registers them).

``gymnasium.make("dispatchrl/Pendulum-v1")`` gives an env that steps with dispatchrl's CPU
kernels (one staged step per call) but draws its resets from ``self.np_random`` exactly as
gymnasium's Pendulum-v1 / Acrobot-v1 do, so with the same seed and actions the two produce the
same episodes. Truncation comes from gymnasium's TimeLimit (``max_episode_steps`` of the spec).

Any other native env registers the same way with :func:`register_native_env`: its
:class:`NativeGymEnv` resets with the env's own ``env_reset`` kernel, drawing the stream's key from
``self.np_random``.
"""

import dataclasses
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from ..arrays import assign, to_numpy, zeros
from ..devices import CPU
from ..errors import ConfigError, ShapeError
from ..kernels.random.api import rng
from ..spaces import Discrete, to_gymnasium_space
from ..staging import fuse
from .api import NativeEnv, env_reset, env_state, env_step
from .batch import BatchVectorEnv, NativeBatch

__all__ = ["NO_LIMIT", "NativeGymEnv", "NativeGymEnvBase", "gymnasium_spec", "native_eval_env", "register_native_env"]

NO_LIMIT = 2**62  # the kernels' own truncation is switched off: TimeLimit does it


class NativeGymEnvBase(gymnasium.Env):
    """A gymnasium ``Env`` over one env of a native env description, stepped by its CPU kernels
    (one staged step per call); a subclass resets it and may draw its frame (``_frame``)."""

    metadata = {"render_modes": [], "render_fps": 20}

    def __init__(self, env, render_mode=None):
        modes = self.metadata["render_modes"]
        if render_mode is not None and render_mode not in modes:
            raise ConfigError(
                f"{type(self).__name__}: rendering is not supported, got render_mode={render_mode!r}"
                if not modes
                else f"{type(self).__name__}: render_mode must be None or one of {modes}, got {render_mode!r}"
            )
        self.render_mode = render_mode
        self._env = env
        self._device = CPU()
        self._state = env_state(self._device, env)
        self._action = zeros(self._device, (1, env.action_dim), np.float32)
        self._step = fuse(self._device, lambda device: env_step(device, env, self._state, self._action))
        self._ready = False
        self.action_space = to_gymnasium_space(env.action_space)
        self.observation_space = spaces.Box(-env.observation_high, env.observation_high, dtype=np.float32)

    def _set_physics(self, physics) -> None:
        assign(self._state.physics, np.asarray(physics, np.float64).reshape(1, -1))
        self._ready = True

    def step(self, action):
        if not self._ready:
            raise ConfigError(f"{type(self).__name__}: call reset() before step()")
        space = self._env.action_space
        if isinstance(space, Discrete):  # one index, in range, as gymnasium's own env asserts
            action = space.check(np.asarray(action), "step: argument 'action'")
        a = np.asarray(action, dtype=np.float32)
        if a.shape != self.action_space.shape:
            raise ShapeError(f"step: argument 'action' has shape {a.shape}, expected {self.action_space.shape}")
        if not np.isfinite(a).all():
            raise ConfigError(f"step: argument 'action' must be finite, got {a}")
        self._action.data[0] = a
        self._step()
        s = self._state
        return (s.obs.data[0].copy(), float(s.reward.data[0]), bool(s.terminated.data[0]), False, {})

    @property
    def state(self):
        """The float64 physics state, as gymnasium's env keeps it."""
        return to_numpy(self._state.physics)[0]

    def render(self):
        """With ``render_mode="rgb_array"``: the current frame, uint8 (H, W, 3), drawn with numpy."""
        if self.render_mode != "rgb_array" or not self._ready:
            return None
        return self._frame(self.state)


class NativeGymEnv(NativeGymEnvBase):
    """A gymnasium ``Env`` over one env of any native env description (stepped and reset by its
    CPU methods). Its time limit comes from the registration's TimeLimit, as for the built-ins."""

    def __init__(self, env: NativeEnv, render_mode=None):
        if not isinstance(env, NativeEnv):
            raise ConfigError(f"NativeGymEnv: 'env' must be a dispatchrl.envs.NativeEnv, got {type(env).__name__}")
        if env.num_envs != 1:
            env = dataclasses.replace(env, num_envs=1)  # type: ignore[type-var]  # native envs are dataclasses
        super().__init__(env, render_mode)
        self._rng = rng(self._device, 0)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        assign(self._rng, to_numpy(rng(self._device, int(self.np_random.integers(2**63)))))
        env_reset(self._device, self._env, self._state, self._rng)
        self._ready = True
        return self._state.obs.data[0].copy(), {}


def native_eval_env(env: NativeEnv) -> gymnasium.Env:
    """One gymnasium env of ``env.evaluation_env()`` with its time limit: what evaluates a native
    env that has no gymnasium id (or a variant its id does not describe)."""
    from gymnasium.wrappers import TimeLimit

    return TimeLimit(NativeGymEnv(env.evaluation_env()), env.max_episode_steps)


def register_native_env(env_id: str, env: NativeEnv, **kwargs) -> None:
    """Register ``env`` (a native env description, made with num_envs=1) as gymnasium id
    ``env_id``, with its ``max_episode_steps`` as the TimeLimit; other ``gymnasium.register``
    arguments pass through. Idempotent for an id already registered."""
    if not isinstance(env, NativeEnv):
        raise ConfigError(f"register_native_env: 'env' must be a dispatchrl.envs.NativeEnv, got {type(env).__name__}")
    if env_id in gymnasium.registry:
        return
    kwargs.setdefault("max_episode_steps", env.max_episode_steps)
    gymnasium.register(id=env_id, entry_point=lambda render_mode=None: NativeGymEnv(env, render_mode), **kwargs)  # type: ignore[arg-type]


def gymnasium_spec(env_id: str, entry_point: type, native_type: type, max_episode_steps: int) -> dict[str, Any]:
    """``gymnasium.register`` arguments of a built-in native env: its Env class ``entry_point`` and
    a ``gymnasium.make_vec`` entry point that batches ``native_type(num_envs,
    max_episode_steps=..., **fields)`` on ``device`` (the CPU by default)."""

    def make_vector(num_envs=1, max_episode_steps=max_episode_steps, device=None, render_mode=None, **fields):
        env = native_type(num_envs, max_episode_steps=max_episode_steps, **fields)
        return BatchVectorEnv(NativeBatch(env, device), env.observation_high)

    make_vector.__doc__ = f"``gymnasium.make_vec({env_id!r}, num_envs)`` entry point."
    return dict(id=env_id, entry_point=entry_point, vector_entry_point=make_vector, max_episode_steps=max_episode_steps)
