"""Parallel MuJoCo Ant-v5: N MjData stepped by a pool of threads, gymnasium's Ant-v5 semantics.

``mj_step`` releases the GIL, so threads stepping separate MjData objects run in parallel. Each
thread copies its envs' qpos, qvel, cfrc_ext and torso position into shared (N, ·) arrays; the
observation, reward and termination are then computed for the whole batch with numpy, as
gymnasium's AntEnv computes them for one env:

- obs = [qpos[2:], qvel, clip(cfrc_ext[1:], -1, 1).ravel()] (105 values);
- forward reward = Δx of the torso ``xpos`` over dt = 5 × 0.01 s (xpos as left by mj_step);
- healthy = finite qpos, qvel and 0.2 <= z <= 1.0; reward = forward + healthy − (ctrl + contact);
- ctrl cost = 0.5 Σ a² (float32, like gymnasium's), contact cost = 5e-4 Σ clip(cfrc_ext)²;
- reset: mj_resetData, qpos0 + U(±0.1), 0.1 N(0, 1) velocities, mj_forward.

mujoco is imported here only, so it stays an optional dependency.
"""

import os
from concurrent.futures import ThreadPoolExecutor

import gymnasium
import numpy as np

from ...errors import ConfigError
from ...spaces import Box
from ..batch import check_actions

__all__ = ["MAIN_BODY", "AntBatch", "ant_model", "default_threads", "load_mujoco"]

FRAME_SKIP = 5
FORWARD_REWARD_WEIGHT = 1.0
CTRL_COST_WEIGHT = 0.5
CONTACT_COST_WEIGHT = 5e-4
HEALTHY_REWARD = 1.0
HEALTHY_Z = (0.2, 1.0)
CONTACT_FORCE_RANGE = (-1.0, 1.0)
RESET_NOISE = 0.1
MAIN_BODY = 1  # the torso


def load_mujoco():
    """The mujoco module, or a ConfigError saying how to install it."""
    try:
        import mujoco
    except ImportError:
        raise ConfigError("Ant needs the 'mujoco' package: pip install dispatchrl[mujoco]") from None
    return mujoco


def ant_model():
    """gymnasium's ant.xml, compiled (found on disk: importing gymnasium.envs.mujoco would pull in
    its renderer's dependencies)."""
    path = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets", "ant.xml")
    return load_mujoco().MjModel.from_xml_path(path)


def default_threads():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class AntBatch:
    """N Ant-v5 envs with the batch API of :mod:`dispatchrl.envs.batch` (same-step autoreset,
    ``final_obs``). Env i draws its resets from its own generator, seeded ``seed + i`` like
    gymnasium's vector envs, so each env replays gymnasium Ant-v5 reset with that seed."""

    def __init__(self, num_envs=1, num_threads=None, max_episode_steps=1000, obs_dtype=np.float32, autoreset=True):
        mujoco = load_mujoco()
        for name, value in (("num_envs", num_envs), ("max_episode_steps", max_episode_steps)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ConfigError(f"AntBatch: '{name}' must be an int >= 1, got {value!r}")
        num_threads = default_threads() if num_threads is None else num_threads
        if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)) or num_threads <= 0:
            raise ConfigError(f"AntBatch: 'num_threads' must be an int >= 1, got {num_threads!r}")
        self._mj = mujoco
        self.model = ant_model()
        self.datas = [mujoco.MjData(self.model) for _ in range(num_envs)]
        m = self.model
        self.num_envs, self.max_episode_steps, self.obs_dtype = int(num_envs), int(max_episode_steps), obs_dtype
        self.num_threads = min(int(num_threads), self.num_envs)
        self.dt = m.opt.timestep * FRAME_SKIP
        self.init_qpos, self.init_qvel = self.datas[0].qpos.copy(), self.datas[0].qvel.copy()
        self.observation_dim = (m.nq - 2) + m.nv + (m.nbody - 1) * 6
        self.action_dim = m.nu
        self.action_low, self.action_high = m.actuator_ctrlrange.astype(np.float32).T.copy()
        self.action_space = Box(self.action_low, self.action_high)
        # MjData's arrays are views on its memory: take them once, not per step
        self._views = [(d.ctrl, d.qpos, d.qvel, d.cfrc_ext, d.xpos[MAIN_BODY]) for d in self.datas]
        n = self.num_envs
        self.qpos, self.qvel = np.zeros((n, m.nq)), np.zeros((n, m.nv))
        self.cfrc_ext, self.xy = np.zeros((n, m.nbody, 6)), np.zeros((n, 2))
        self.steps = np.zeros(n, np.int64)
        self._rngs = [None] * n
        self._chunks = [c for c in np.array_split(np.arange(n), self.num_threads) if len(c)]
        self._pool = ThreadPoolExecutor(self.num_threads) if self.num_threads > 1 else None
        self.autoreset = bool(autoreset)
        self.final_obs = None

    # --- per-env work, run by the pool threads ---

    def _gather(self, i):
        _, qpos, qvel, cfrc, xpos = self._views[i]
        self.qpos[i], self.qvel[i], self.cfrc_ext[i], self.xy[i] = qpos, qvel, cfrc, xpos[:2]

    def _step_chunk(self, chunk, actions):
        mj, m, datas = self._mj, self.model, self.datas
        for i in chunk:
            self._views[i][0][:] = actions[i]
            mj.mj_step(m, datas[i], nstep=FRAME_SKIP)  # releases the GIL
            # contact forces (cfrc_ext) are only computed by the RNE post-constraint pass
            mj.mj_rnePostConstraint(m, datas[i])
            self._gather(i)

    def _reset_env(self, i, np_random):
        """gymnasium AntEnv.reset for env i with generator ``np_random``."""
        mj, m, d = self._mj, self.model, self.datas[i]
        mj.mj_resetData(m, d)
        qpos = self.init_qpos + np_random.uniform(low=-RESET_NOISE, high=RESET_NOISE, size=m.nq)
        qvel = self.init_qvel + RESET_NOISE * np_random.standard_normal(m.nv)
        d.qpos[:], d.qvel[:] = qpos, qvel
        mj.mj_forward(m, d)
        self._gather(i)
        self.steps[i] = 0

    # --- batched math ---

    def _observations(self, rows=slice(None)):
        forces = np.clip(self.cfrc_ext[rows, 1:], *CONTACT_FORCE_RANGE).reshape(len(self.qpos[rows]), -1)
        return np.concatenate([self.qpos[rows, 2:], self.qvel[rows], forces], axis=1).astype(self.obs_dtype)

    def healthy(self):
        z = self.qpos[:, 2]
        finite = np.isfinite(self.qpos).all(axis=1) & np.isfinite(self.qvel).all(axis=1)
        return finite & (HEALTHY_Z[0] <= z) & (z <= HEALTHY_Z[1])

    def reset(self, seed=None, np_randoms=None):
        """Reset every env; returns obs (N, observation_dim). ``np_randoms`` (one generator per
        env) replaces the seeded ones, e.g. a gymnasium env's ``np_random``."""
        from gymnasium.utils import seeding

        if np_randoms is None:
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
                raise ConfigError(f"reset: 'seed' must be None or an int >= 0, got {seed!r}")
            np_randoms = [seeding.np_random(None if seed is None else int(seed) + i)[0] for i in range(self.num_envs)]
        self._rngs = list(np_randoms)
        for i in range(self.num_envs):
            self._reset_env(i, self._rngs[i])
        obs = self._observations()
        self.final_obs = obs.copy()
        return obs

    def step(self, actions):
        """Step all envs (same-step autoreset, see :mod:`dispatchrl.envs.batch`, unless made with
        ``autoreset=False``); ``info`` holds gymnasium Ant-v5's info terms, batched."""
        if self.final_obs is None:
            raise ConfigError("step: call reset() before the first step")
        actions = check_actions(actions, self.num_envs, self.action_dim)
        xy_before = self.xy.copy()
        if self._pool is None:
            self._step_chunk(range(self.num_envs), actions)
        else:
            for f in [self._pool.submit(self._step_chunk, c, actions) for c in self._chunks]:
                f.result()
        xy_velocity = (self.xy - xy_before) / self.dt
        forward = xy_velocity[:, 0] * FORWARD_REWARD_WEIGHT
        healthy = self.healthy()
        healthy_reward = healthy * HEALTHY_REWARD
        # gymnasium: float32 action → float32 ctrl cost; contact cost over all bodies, float64
        ctrl_cost = CTRL_COST_WEIGHT * np.sum(np.square(actions), axis=1)
        contact_cost = CONTACT_COST_WEIGHT * np.sum(
            np.square(np.clip(self.cfrc_ext, *CONTACT_FORCE_RANGE)).reshape(self.num_envs, -1), axis=1
        )
        reward = (forward + healthy_reward) - (ctrl_cost + contact_cost)
        terminated = ~healthy
        self.steps += 1
        truncated = self.steps >= self.max_episode_steps
        obs = self._observations()
        final = obs.copy()
        ended = np.flatnonzero(terminated | truncated) if self.autoreset else ()
        for i in ended:  # only envs that ended: rare
            self._reset_env(i, self._rngs[i])
            obs[i] = self._observations(slice(i, i + 1))[0]
        self.final_obs = final
        info = {
            "x_position": self.qpos[:, 0].copy(),
            "y_position": self.qpos[:, 1].copy(),
            "x_velocity": xy_velocity[:, 0],
            "y_velocity": xy_velocity[:, 1],
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
            "reward_survive": healthy_reward,
        }
        return obs, reward, terminated, truncated, info

    def close(self):
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
