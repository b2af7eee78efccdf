"""Batched env objects with a numpy API, and their gymnasium VectorEnv form.

Every batch (:class:`NativeBatch` for Pendulum/Acrobot on a device, :class:`GymnasiumBatch`
for any gymnasium env with a Box observation space, :class:`dispatchrl.envs.ant.AntBatch` for
threaded MuJoCo Ant) has:

- ``num_envs``, ``observation_dim``, ``action_space`` (a :class:`dispatchrl.spaces.Box` or
  :class:`~dispatchrl.spaces.Discrete`), ``action_dim`` (its columns) and, for a Box,
  ``action_low``, ``action_high``;
- ``reset(seed=None) -> obs`` (N, observation_dim) float32;
- ``step(actions) -> obs, reward, terminated, truncated, info`` with **same-step autoreset**: an
  env that terminated or truncated is reset inside the step, so ``obs`` row i is already the
  first observation of its next episode, while ``final_obs`` row i holds the true next
  observation of the transition that ended (rows of envs that did not end equal ``obs``). Store
  ``final_obs`` as next_obs in a replay buffer and act on ``obs``.

Arrays returned are fresh copies the caller may keep. Actions must be (N, action_dim) numbers
without NaN/inf (a Discrete's: integer indices in range); anything else raises a dispatchrl error
before the envs are touched.
"""

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..arrays import assign, to_numpy, zeros
from ..devices import CPU, Device
from ..errors import ConfigError, DTypeError, ShapeError
from ..kernels.core.api import copy
from ..kernels.random.api import rng
from ..spaces import Box, Discrete, from_gymnasium_space, to_gymnasium_space
from ..staging import fuse
from .api import NativeEnv, env_reset, env_reset_done, env_state, env_step

__all__ = [
    "BatchVectorEnv",
    "GymnasiumBatch",
    "NativeBatch",
    "VectorBatch",
    "check_actions",
    "from_gymnasium",
]


def check_actions(actions, num_envs, action_dim, name="actions"):
    """Host action batch → float32 (num_envs, action_dim), refusing bad shapes, dtypes, NaN/inf."""
    a = np.asarray(actions)
    if a.dtype.kind not in "fiu":
        raise DTypeError(f"{name}: expected real numbers (float32), got dtype {a.dtype}")
    if a.shape != (num_envs, action_dim):
        raise ShapeError(f"{name}: has shape {a.shape}, expected ({num_envs}, {action_dim})")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        bad = np.argwhere(~np.isfinite(a))[0]
        raise ConfigError(f"{name}: must be finite, got {a[tuple(bad)]} at index {tuple(int(i) for i in bad)}")
    return a


def _checked(space, actions, num_envs, env_name) -> np.ndarray:
    """A batch's actions checked for its action space: float32 (num_envs, dim) in a Box, int64
    indices (num_envs, 1) in a Discrete; errors name the env."""
    name = f"actions for env {env_name!r}"
    if isinstance(space, Discrete):
        return space.check(check_actions(actions, num_envs, 1, name), name)
    return check_actions(actions, num_envs, space.dim, name)


def _env_name(env) -> str:
    """A gymnasium env's (or VectorEnv's) id, else its class name, for error messages."""
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None else type(getattr(env, "unwrapped", env)).__name__


def _seed_from(seed):
    if seed is None:
        return int(np.random.SeedSequence().entropy % (2**63))
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise ConfigError(f"seed: expected None or an int in [0, 2**63), got {seed!r}")
    return int(seed)


class NativeBatch:
    """N native envs (a :class:`~dispatchrl.envs.NativeEnv` description) stepped on ``device`` by one
    staged step per call: env_step, copy of the next obs to ``final_obs``, env_reset_done.
    Resets draw from dispatchrl's counter stream seeded by ``reset(seed)``, so they are the same
    on every device (but not gymnasium's own reset draws: use the gymnasium env for those)."""

    def __init__(self, env, device=None):
        if not isinstance(env, NativeEnv):
            raise ConfigError(
                f"NativeBatch: 'env' must be a native env (a dispatchrl.envs.NativeEnv such as "
                f"Pendulum), got {type(env).__name__}"
            )
        device = CPU() if device is None else device
        if not isinstance(device, Device):
            raise ConfigError(f"NativeBatch: 'device' must be a dispatchrl Device, got {device!r}")
        self.env, self.device = env, device
        self.num_envs, self.observation_dim, self.action_dim = env.num_envs, env.observation_dim, env.action_dim
        self.action_low, self.action_high = env.action_low, env.action_high
        self.action_space = env.action_space
        self.state = env_state(device, env)
        self.rng = rng(device, 0)
        self.action = zeros(device, (env.num_envs, env.action_dim), np.float32)
        self.final = zeros(device, (env.num_envs, env.observation_dim), np.float32)
        self._step = fuse(device, self._staged_step)
        self.final_obs = None

    def _staged_step(self, device):
        env_step(device, self.env, self.state, self.action)
        copy(device, self.state.obs, self.final)
        env_reset_done(device, self.env, self.state, self.rng)

    def reset(self, seed=None):
        assign(self.rng, to_numpy(rng(self.device, _seed_from(seed))))
        env_reset(self.device, self.env, self.state, self.rng)
        obs = to_numpy(self.state.obs)
        self.final_obs = obs.copy()
        return obs

    def step(self, actions):
        if self.final_obs is None:
            raise ConfigError("step: call reset() before the first step")
        # a Discrete env's indices are checked as indices, then stepped as float32 (the kernels' form)
        assign(
            self.action,
            _checked(self.action_space, actions, self.num_envs, self.env.name).astype(np.float32, copy=False),
        )
        self._step()
        s = self.state
        self.final_obs = to_numpy(self.final)
        return (to_numpy(s.obs), to_numpy(s.reward), to_numpy(s.terminated), to_numpy(s.truncated), {})

    def close(self):
        pass


class GymnasiumBatch:
    """N copies of a gymnasium env with a Box observation space and a Box or Discrete action
    space, stepped one after another from Python (the generic path: any env works, but it is far
    slower than a native batch). Env i is reset with ``seed + i``, as gymnasium's vector envs do;
    observations are returned as float32."""

    def __init__(self, envs):
        self.envs = envs
        space, act = envs[0].observation_space, envs[0].action_space
        if not isinstance(space, gymnasium.spaces.Box):
            raise ConfigError(
                f"from_gymnasium: the env's observation_space must be a gymnasium Box, got {type(space).__name__}"
            )
        self.action_space = from_gymnasium_space(act, "from_gymnasium: the env's action_space")
        self.num_envs = len(envs)
        self.observation_dim = int(np.prod(space.shape))
        self.action_dim = self.action_space.columns
        self._action_shape = act.shape
        if isinstance(self.action_space, Box):
            self.action_low, self.action_high = self.action_space.low, self.action_space.high
        self._act_dtype = act.dtype
        self.final_obs = None

    def reset(self, seed=None):
        obs = np.empty((self.num_envs, self.observation_dim), np.float32)
        for i, env in enumerate(self.envs):
            obs[i] = np.asarray(env.reset(seed=None if seed is None else int(seed) + i)[0]).reshape(-1)
        self.final_obs = obs.copy()
        return obs

    def step(self, actions):
        if self.final_obs is None:
            raise ConfigError("step: call reset() before the first step")
        actions = _checked(self.action_space, actions, self.num_envs, _env_name(self.envs[0]))
        n = self.num_envs
        obs, final = np.empty((n, self.observation_dim), np.float32), np.empty((n, self.observation_dim), np.float32)
        reward = np.empty(n, np.float32)
        terminated, truncated = np.empty(n, bool), np.empty(n, bool)
        for i, env in enumerate(self.envs):
            o, r, te, tr, _ = env.step(actions[i].reshape(self._action_shape).astype(self._act_dtype))
            final[i] = np.asarray(o).reshape(-1)
            reward[i], terminated[i], truncated[i] = r, te, tr
            obs[i] = np.asarray(env.reset()[0]).reshape(-1) if te or tr else final[i]
        self.final_obs = final
        return obs, reward, terminated, truncated, {}

    def close(self):
        for env in self.envs:
            env.close()


def from_gymnasium(id_or_env, num_envs=1, **kwargs):
    """Wrap any gymnasium env with a Box observation space and a Box or Discrete action space as a
    batch of ``num_envs``
    (an id is passed to ``gymnasium.make`` with ``kwargs``; an env instance is used as env 0 and
    copied through its spec). Python-stepped: use the native envs where they exist."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs <= 0:
        raise ConfigError(f"from_gymnasium: 'num_envs' must be an int >= 1, got {num_envs!r}")

    def make(spec):
        try:
            return gymnasium.make(spec, **kwargs)
        except gymnasium.error.Error as e:
            raise ConfigError(f"from_gymnasium: cannot make env {getattr(spec, 'id', spec)!r}: {e}") from None

    if isinstance(id_or_env, str):
        envs = [make(id_or_env) for _ in range(num_envs)]
    elif isinstance(id_or_env, gymnasium.Env):
        if num_envs > 1 and id_or_env.spec is None:
            raise ConfigError(
                "from_gymnasium: an env instance without a spec cannot be copied; pass its id or num_envs=1"
            )
        envs = [id_or_env] + [make(id_or_env.spec) for _ in range(num_envs - 1)]
    else:
        raise ConfigError(f"from_gymnasium: expected an env id or a gymnasium.Env, got {type(id_or_env).__name__}")
    return GymnasiumBatch(envs)


class VectorBatch:
    """A gymnasium ``VectorEnv`` (a user's, or the ``AsyncVectorEnv`` dispatchrl makes for Python
    envs with num_envs > 1) as a batch. It must autoreset in the same step
    (``autoreset_mode=AutoresetMode.SAME_STEP``), so every step is a transition to store."""

    def __init__(self, envs):
        mode = envs.metadata.get("autoreset_mode")
        if mode not in (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP.value):
            envs.close()
            raise ConfigError(
                f"env: a VectorEnv must autoreset in the same step, got autoreset_mode={mode!r}; make it with "
                "autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP (or pass the env id, a callable or "
                "an env instance: dispatchrl then vectorizes it)"
            )
        space, act = envs.single_observation_space, envs.single_action_space
        try:
            if not isinstance(space, gymnasium.spaces.Box):
                raise ConfigError(
                    f"env: the VectorEnv's single observation_space must be a gymnasium Box, got {type(space).__name__}"
                )
            self.action_space = from_gymnasium_space(act, "env: the VectorEnv's single action_space")
        except ConfigError:
            envs.close()
            raise
        self.envs = envs
        self.num_envs = envs.num_envs
        self.observation_dim = int(np.prod(space.shape))
        self.action_dim = self.action_space.columns
        self._action_shape, self._act_dtype = act.shape, act.dtype
        if isinstance(self.action_space, Box):
            self.action_low, self.action_high = self.action_space.low, self.action_space.high
        self.final_obs = None

    def _rows(self, obs):
        return np.asarray(obs, np.float32).reshape(self.num_envs, self.observation_dim).copy()

    def reset(self, seed=None):
        obs = self._rows(self.envs.reset(seed=None if seed is None else int(seed))[0])
        self.final_obs = obs.copy()
        return obs

    def step(self, actions):
        if self.final_obs is None:
            raise ConfigError("step: call reset() before the first step")
        actions = _checked(self.action_space, actions, self.num_envs, _env_name(self.envs))
        shaped = actions.reshape(self.num_envs, *self._action_shape).astype(self._act_dtype)
        obs, reward, terminated, truncated, info = self.envs.step(shaped)
        obs = self._rows(obs)
        final = obs.copy()
        if "_final_obs" in info:  # rows that ended: their true last observation
            for i in np.flatnonzero(info["_final_obs"]):
                final[i] = np.asarray(info["final_obs"][i], np.float32).reshape(-1)
        self.final_obs = final
        return (
            obs,
            np.asarray(reward, np.float32).copy(),
            np.asarray(terminated, bool).copy(),
            np.asarray(truncated, bool).copy(),
            {},
        )

    def close(self):
        self.envs.close()


class BatchVectorEnv(VectorEnv):
    """A batch as a gymnasium ``VectorEnv`` (autoreset mode SAME_STEP: ``info["final_obs"]``
    holds, as gymnasium does, an object array with the final observation of each env that
    ended, masked by ``info["_final_obs"]``; ``batch.final_obs`` has them as one array)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, batch, observation_high=None):
        self.batch = batch
        self.num_envs = batch.num_envs
        high = (
            np.full(batch.observation_dim, np.inf, np.float32)
            if observation_high is None
            else np.asarray(observation_high, np.float32)
        )
        self.single_observation_space = gymnasium.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = to_gymnasium_space(batch.action_space)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed=None, options=None):
        return self.batch.reset(seed), {}

    def step(self, actions):
        if isinstance(self.batch.action_space, Discrete) and np.shape(actions) == (self.num_envs,):
            actions = np.reshape(actions, (self.num_envs, 1))  # gymnasium batches indices as (N,)
        obs, reward, terminated, truncated, info = self.batch.step(actions)
        done = terminated | truncated
        if done.any():
            final = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final[i] = self.batch.final_obs[i]
            info = dict(info, final_obs=final, _final_obs=done.copy())
        return obs, reward, terminated, truncated, info

    def close_extras(self, **kwargs):
        self.batch.close()
