"""What the threaded MuJoCo batches share (``envs/ant/``, ``envs/halfcheetah/``, ``envs/hopper/``,
``envs/walker2d/``, ``envs/humanoid/``): :class:`MujocoBatch` loads gymnasium's model, steps N
MjData on threads (each thread's chunk is one Numba call of libmujoco's ``mj_step`` without the
GIL, see :mod:`.mujoco_threads`), copies each env's state arrays into shared (N, ·) arrays, resets env i from its
own generator seeded ``seed + i`` with same-step autoreset and ``final_obs``; a subclass says
which arrays it reads and computes observation, reward and termination for the whole batch with
numpy, as gymnasium's env does for one.
:class:`MujocoEnv` is one env of a batch as a gymnasium Env.

mujoco is imported only when a batch is made, so it stays an optional dependency.
"""

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces

from ...errors import ConfigError, ShapeError
from ...spaces import Box
from ..batch import BatchVectorEnv, check_actions
from .mujoco_threads import SpinningThreads, chunk_functions

__all__ = [
    "MujocoBatch",
    "MujocoEnv",
    "PlanarWalkerBatch",
    "default_threads",
    "gymnasium_declarations",
    "gymnasium_spec",
    "load_mujoco",
    "mujoco_model",
    "vector_entry_point",
]


def load_mujoco(env: str = "Ant") -> Any:
    """The mujoco module, or a ConfigError saying how to install it."""
    try:
        import mujoco
    except ImportError:
        raise ConfigError(f"{env} needs the 'mujoco' package: pip install dispatchrl[mujoco]") from None
    return mujoco


def mujoco_model(xml_file: str, env: str = "Ant") -> Any:
    """gymnasium's ``assets/<xml_file>``, compiled (found on disk: importing gymnasium.envs.mujoco
    would pull in its renderer's dependencies)."""
    path = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets", xml_file)
    return load_mujoco(env).MjModel.from_xml_path(path)


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _positive_int(owner: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ConfigError(f"{owner}: '{name}' must be an int >= 1, got {value!r}")
    return int(value)


class MujocoBatch:
    """N envs of one gymnasium MuJoCo v5 task with the batch API of :mod:`dispatchrl.envs.batch`
    (same-step autoreset, ``final_obs``). Env i draws its resets from its own generator, seeded
    ``seed + i`` like gymnasium's vector envs, so each env replays gymnasium's reset with that seed.

    A subclass sets the class constants and :meth:`_sources`, :meth:`_observations`,
    :meth:`_forward_position` and :meth:`_outcome`."""

    NAME: ClassVar[str]  # in messages: "HalfCheetah"
    XML_FILE: ClassVar[str]  # in gymnasium's assets folder
    FRAME_SKIP: ClassVar[int]
    RESET_NOISE: ClassVar[float]  # qpos: U(±RESET_NOISE); qvel: as QVEL_NOISE says
    QVEL_NOISE: ClassVar[str] = "uniform"  # "uniform": U(±RESET_NOISE); "normal": RESET_NOISE · N(0, 1)
    #: mj_rnePostConstraint after each step: only it computes cfrc_ext (contact forces)
    CONTACT_FORCES: ClassVar[bool] = False
    qpos: np.ndarray  # (N, nq), copied after each step and reset, like the arrays of _sources
    qvel: np.ndarray  # (N, nv)

    def __init__(self, num_envs=1, num_threads=None, max_episode_steps=1000, obs_dtype=np.float32, autoreset=True):
        owner = type(self).__name__
        num_envs = _positive_int(owner, "num_envs", num_envs)
        max_episode_steps = _positive_int(owner, "max_episode_steps", max_episode_steps)
        num_threads = _positive_int(owner, "num_threads", default_threads() if num_threads is None else num_threads)
        mujoco = load_mujoco(self.NAME)
        self._mj = mujoco
        self.model = mujoco_model(self.XML_FILE, self.NAME)
        self.datas = [mujoco.MjData(self.model) for _ in range(num_envs)]
        m = self.model
        self.num_envs, self.max_episode_steps, self.obs_dtype = num_envs, max_episode_steps, obs_dtype
        self.num_threads = min(num_threads, self.num_envs)
        self.dt = m.opt.timestep * self.FRAME_SKIP
        self.init_qpos, self.init_qvel = self.datas[0].qpos.copy(), self.datas[0].qvel.copy()
        self.action_dim = m.nu
        self.action_low, self.action_high = m.actuator_ctrlrange.astype(np.float32).T.copy()
        self.action_space = Box(self.action_low, self.action_high)
        # MjData's arrays are views on its memory: take them once, not per step; each is copied
        # into the (N, ·) array of the same name after every step and reset
        sources = [{"qpos": d.qpos, "qvel": d.qvel, **self._sources(d)} for d in self.datas]
        for name, view in sources[0].items():
            setattr(self, name, np.zeros((num_envs, *np.shape(view))))
        self._copies = [[(getattr(self, name), view) for name, view in s.items()] for s in sources]
        self._ctrls = [d.ctrl for d in self.datas]
        self.observation_dim = self._observations(slice(0, 1)).shape[1]
        self.steps = np.zeros(num_envs, np.int64)
        self._rngs = [None] * num_envs
        self._chunks = [c for c in np.array_split(np.arange(num_envs), self.num_threads) if len(c)]
        native = self._native_stepper(mujoco, sources)
        # threads step all chunks but the first, which the caller steps
        self._threads = SpinningThreads(self, *native) if native is not None else None
        self._pool = (
            ThreadPoolExecutor(self.num_threads - 1) if self._threads is None and self.num_threads > 1 else None
        )
        self.autoreset = bool(autoreset)
        self.final_obs = None

    # --- what a task defines ---

    def _sources(self, data) -> dict[str, Any]:
        """The MjData arrays (views) the task reads besides qpos and qvel, by the name of the
        batch attribute they are copied into."""
        return {}

    def _observations(self, rows=slice(None)) -> np.ndarray:
        raise NotImplementedError

    def _forward_position(self) -> np.ndarray:
        """(N,) x or (N, 2) xy whose change over dt is the velocity the forward reward pays."""
        raise NotImplementedError

    def _outcome(self, actions, velocity) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """reward (N,), terminated (N,), info after a step, from the float32 actions and the
        velocity of :meth:`_forward_position`."""
        raise NotImplementedError

    def reset_info(self, i: int) -> dict[str, Any]:
        """gymnasium's ``reset`` info for env i."""
        return {}

    # --- per-env work, run by the stepping threads ---

    def _native_stepper(self, mujoco: Any, sources: list[dict[str, Any]]) -> tuple[Any, list, Callable] | None:
        """:func:`chunk_functions` with this batch's chunks and ``step_args(envs, flags)``, the first
        arguments of their ``step``: MjModel, MjData, the action array :meth:`step` fills, views on
        MjData's memory and the batch's arrays (None: the bindings' path, where the library is not
        found or a source is not float64)."""
        functions = chunk_functions(os.path.dirname(mujoco.__file__), self.FRAME_SKIP, self.CONTACT_FORCES)
        if functions is None or any(v.dtype != np.float64 for s in sources for v in s.values()):
            return None
        from numba.typed import List

        model, datas = self.model._address, np.array([d._address for d in self.datas], np.uint64)
        ctrls = List(d.ctrl for d in self.datas)
        flat = List(view.reshape(-1) for s in sources for view in s.values())  # views on MjData's memory
        targets = List(getattr(self, name).reshape(self.num_envs, -1) for name in sources[0])
        actions = self._actions = np.zeros((self.num_envs, self.action_dim), np.float32)
        return functions, self._chunks, lambda envs, flags: (model, datas, envs, actions, ctrls, flat, targets, flags)

    def _gather(self, i: int) -> None:
        for array, view in self._copies[i]:
            array[i] = view

    def _step_chunk(self, chunk: Any, actions: np.ndarray) -> None:
        """The bindings' path for the envs of ``chunk``."""
        mj, m, datas = self._mj, self.model, self.datas
        for i in chunk:
            self._ctrls[i][:] = actions[i]
            mj.mj_step(m, datas[i], nstep=self.FRAME_SKIP)  # releases the GIL
            if self.CONTACT_FORCES:
                mj.mj_rnePostConstraint(m, datas[i])
            self._gather(i)

    def _reset_env(self, i: int, np_random: np.random.Generator) -> None:
        """gymnasium's ``reset`` for env i with generator ``np_random``: mj_resetData, qpos0 +
        U(±noise), qvel0 + noise, mj_forward."""
        mj, m, d, s = self._mj, self.model, self.datas[i], self.RESET_NOISE
        mj.mj_resetData(m, d)
        qpos = self.init_qpos + np_random.uniform(low=-s, high=s, size=m.nq)
        if self.QVEL_NOISE == "normal":
            qvel = self.init_qvel + s * np_random.standard_normal(m.nv)
        else:
            qvel = self.init_qvel + np_random.uniform(low=-s, high=s, size=m.nv)
        d.qpos[:], d.qvel[:] = qpos, qvel
        mj.mj_forward(m, d)
        self._gather(i)
        self.steps[i] = 0

    # --- batch API ---

    def reset(self, seed=None, np_randoms=None) -> np.ndarray:
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

    def step(self, actions) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Step all envs (same-step autoreset, see :mod:`dispatchrl.envs.batch`, unless made with
        ``autoreset=False``); ``info`` holds gymnasium's step info terms, batched."""
        if self.final_obs is None:
            raise ConfigError("step: call reset() before the first step")
        actions = check_actions(actions, self.num_envs, self.action_dim)
        before = self._forward_position().copy()
        if self._threads is not None:
            self._actions[:] = actions
            self._threads.step()
        elif self._pool is not None:
            futures = [self._pool.submit(self._step_chunk, c, actions) for c in self._chunks[1:]]
            self._step_chunk(self._chunks[0], actions)
            for f in futures:
                f.result()
        else:
            self._step_chunk(self._chunks[0], actions)
        velocity = (self._forward_position() - before) / self.dt
        reward, terminated, info = self._outcome(actions, velocity)
        self.steps += 1
        truncated = self.steps >= self.max_episode_steps
        obs = self._observations()
        final = obs.copy()
        ended = np.flatnonzero(terminated | truncated) if self.autoreset else ()
        for i in ended:  # only envs that ended: rare
            self._reset_env(int(i), self._rngs[i])
            obs[i] = self._observations(slice(i, i + 1))[0]
        self.final_obs = final
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        if self._threads is not None:
            self._threads.close()
            self._threads = None
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class PlanarWalkerBatch(MujocoBatch):
    """Hopper-v5 and Walker2d-v5: a body walking in the x–z plane (qpos = [x, z, angle, joints]);
    obs = [qpos[1:], clip(qvel, ±VELOCITY_CLIP)], reward = forward velocity + HEALTHY_REWARD
    while healthy − CTRL_COST_WEIGHT Σ a², terminated when not healthy: z in HEALTHY_Z and the
    angle in HEALTHY_ANGLE (strict), and whatever a subclass's ``healthy`` adds."""

    FORWARD_REWARD_WEIGHT = 1.0
    CTRL_COST_WEIGHT = 1e-3
    HEALTHY_REWARD = 1.0
    VELOCITY_CLIP = 10.0
    HEALTHY_Z: tuple[float, float] = (0.0, float("inf"))
    HEALTHY_ANGLE: tuple[float, float] = (-float("inf"), float("inf"))

    def _observations(self, rows: Any = slice(None)) -> np.ndarray:
        velocity = np.clip(self.qvel[rows], -self.VELOCITY_CLIP, self.VELOCITY_CLIP)
        return np.concatenate([self.qpos[rows, 1:], velocity], axis=1).astype(self.obs_dtype)

    def _forward_position(self) -> np.ndarray:
        return self.qpos[:, 0]

    def healthy(self) -> np.ndarray:
        (z_low, z_high), (low, high) = self.HEALTHY_Z, self.HEALTHY_ANGLE
        z, angle = self.qpos[:, 1], self.qpos[:, 2]
        return (z_low < z) & (z < z_high) & (low < angle) & (angle < high)

    def _outcome(self, actions: np.ndarray, x_velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        forward = self.FORWARD_REWARD_WEIGHT * x_velocity
        healthy = self.healthy()
        healthy_reward = healthy * self.HEALTHY_REWARD
        ctrl_cost = self.CTRL_COST_WEIGHT * np.sum(np.square(actions), axis=1)
        info = {
            "x_position": self.qpos[:, 0].copy(),
            "z_distance_from_origin": self.qpos[:, 1] - self.init_qpos[1],
            "x_velocity": x_velocity,
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_survive": healthy_reward,
        }
        return (forward + healthy_reward) - ctrl_cost, ~healthy, info

    def reset_info(self, i: int) -> dict[str, Any]:
        return {"x_position": self.qpos[i, 0], "z_distance_from_origin": self.qpos[i, 1] - self.init_qpos[1]}


class MujocoEnv(gymnasium.Env):
    """One env of a :class:`MujocoBatch` as gymnasium's env of the task with default arguments;
    resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64.
    ``render_mode="rgb_array"``: MuJoCo's offscreen renderer, a camera tracking ``TRACK_BODY``."""

    BATCH: ClassVar[type[MujocoBatch]]
    #: frame size (a multiple of 16: video encoders keep it) and the camera following the robot
    FRAME_SIZE = (480, 480)
    TRACK_BODY: ClassVar[int] = 1
    CAMERA_DISTANCE: ClassVar[float] = 4.0

    def __init__(self, render_mode=None):
        if render_mode not in (None, "rgb_array"):
            raise ConfigError(f"{type(self).__name__}: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self._renderer = None
        self._batch = self.BATCH(1, num_threads=1, max_episode_steps=2**62, obs_dtype=np.float64, autoreset=False)
        b = self._batch
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": int(np.round(1.0 / b.dt))}
        self.action_space = spaces.Box(b.action_low, b.action_high, dtype=np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, (b.observation_dim,), np.float64)

    @property
    def dt(self) -> float:
        """Seconds per step: the model's timestep × the frame skip, as gymnasium's ``dt``."""
        return self._batch.dt

    def reset(self, *, seed=None, options=None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        obs = self._batch.reset(np_randoms=[self.np_random])[0]
        return obs, self._batch.reset_info(0)

    def step(self, action) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = np.asarray(action, dtype=np.float32)
        if a.shape != self.action_space.shape:
            raise ShapeError(f"step: argument 'action' has shape {a.shape}, expected {self.action_space.shape}")
        obs, reward, terminated, _, info = self._batch.step(a[None])
        return obs[0], float(reward[0]), bool(terminated[0]), False, {k: v[0] for k, v in info.items()}

    def render(self) -> np.ndarray | None:
        """With ``render_mode="rgb_array"``: the current frame. Headless machines need
        ``MUJOCO_GL=egl`` (or ``osmesa``) set before mujoco is imported."""
        if self.render_mode != "rgb_array":
            return None
        mujoco = load_mujoco(self._batch.NAME)
        if self._renderer is None:
            try:
                self._renderer = mujoco.Renderer(self._batch.model, *self.FRAME_SIZE)
            except Exception as e:  # no OpenGL context: say what is needed
                raise ConfigError(
                    f"{type(self).__name__}: MuJoCo's offscreen renderer failed ({e}); set MUJOCO_GL=egl "
                    "(libEGL) or MUJOCO_GL=osmesa before importing mujoco"
                ) from None
            self._camera = mujoco.MjvCamera()
            self._camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
            self._camera.trackbodyid = self.TRACK_BODY
            self._camera.distance = self.CAMERA_DISTANCE
            self._camera.elevation = -20.0
        self._renderer.update_scene(self._batch.datas[0], camera=self._camera)
        return self._renderer.render().copy()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self._batch.close()


def vector_entry_point(batch: type[MujocoBatch]) -> Callable[..., BatchVectorEnv]:
    """The ``gymnasium.make_vec`` entry point of ``batch``'s id: N envs of it stepped by threads."""

    def make(
        num_envs: int = 1, max_episode_steps: int = 1000, num_threads: int | None = None, render_mode: str | None = None
    ) -> BatchVectorEnv:
        return BatchVectorEnv(batch(num_envs, num_threads=num_threads, max_episode_steps=max_episode_steps))

    make.__doc__ = f'``gymnasium.make_vec("dispatchrl/{batch.NAME}-v5", num_envs, num_threads=...)`` entry point.'
    return make


def gymnasium_spec(env: type[MujocoEnv], reward_threshold: float | None = None) -> dict[str, Any]:
    """``gymnasium.register`` arguments of ``env`` (a :class:`MujocoEnv`; mujoco is imported only
    when one is made): ``dispatchrl/<Name>-v5``, its vector entry point, 1000-step episodes."""
    spec: dict[str, Any] = dict(
        id=f"dispatchrl/{env.BATCH.NAME}-v5",
        entry_point=env,
        vector_entry_point=vector_entry_point(env.BATCH),
        max_episode_steps=1000,
    )
    if reward_threshold is not None:
        spec["reward_threshold"] = reward_threshold
    return spec


def gymnasium_declarations(
    batch: type[MujocoBatch], track_body: int, camera_distance: float = 4.0, reward_threshold: float | None = None
) -> tuple[type[MujocoEnv], Callable[..., BatchVectorEnv], dict[str, Any]]:
    """What an env folder declares for gymnasium, from its ``batch``: the one-env class
    ``<Name>Env`` (gymnasium's <Name>-v5 with default arguments on a ``batch`` of one env; its
    frames tracked on body ``track_body`` from ``camera_distance``), its vector entry point and
    its spec. The class is named as bound in the folder's package, so it pickles."""
    package = batch.__module__.rpartition(".")[0]
    name = f"{batch.NAME}Env"
    doc = (
        f"``dispatchrl/{batch.NAME}-v5``: gymnasium {batch.NAME}-v5 (default arguments) on a "
        f":class:`{batch.__name__}` of one env; resets draw from ``self.np_random`` exactly like "
        "gymnasium's, observations are float64."
    )

    class Env(MujocoEnv):
        BATCH = batch
        TRACK_BODY = track_body
        CAMERA_DISTANCE = camera_distance

    Env.__name__ = Env.__qualname__ = name
    Env.__module__, Env.__doc__ = package, doc
    spec = gymnasium_spec(Env, reward_threshold)
    return Env, spec["vector_entry_point"], spec
