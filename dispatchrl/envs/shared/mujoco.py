"""What the threaded MuJoCo batches share (``envs/ant/``, ``envs/halfcheetah/``, ``envs/hopper/``,
``envs/walker2d/``, ``envs/humanoid/``): :class:`MujocoBatch` loads gymnasium's model, steps N
MjData on threads (each thread's chunk is one Numba call of libmujoco's ``mj_step`` without the
GIL, see :mod:`.mujoco_threads`), copies each env's state arrays into shared (N, ·) arrays, and
finishes each env's step on the same thread: observation, reward, termination and same-step
autoreset, from the task's per-env Numba functions (:class:`TaskKernels`, computed as gymnasium's
env computes them for one, numpy's summation order included). Env i resets from its own generator
seeded ``seed + i``; its next reset state is drawn ahead, in the generator's order, so the threads
reset without Python.
:class:`MujocoEnv` is one env of a batch as a gymnasium Env.

mujoco is imported only when a batch is made, so it stays an optional dependency.
"""

import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, NamedTuple

import gymnasium
import numpy as np
from gymnasium import spaces
from numba import njit

from ...errors import ConfigError, ShapeError
from ...spaces import Box
from ..batch import BatchVectorEnv, check_actions
from .mujoco_threads import SpinningThreads, chunk_functions

__all__ = [
    "MujocoBatch",
    "MujocoEnv",
    "PlanarWalkerBatch",
    "StepOutputs",
    "TaskKernels",
    "clip",
    "default_threads",
    "gymnasium_declarations",
    "gymnasium_spec",
    "load_mujoco",
    "mujoco_model",
    "pairwise_sum",
    "planar_observation",
    "square",
    "square_float64",
    "vector_entry_point",
    "x_position",
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


# --- numpy's arithmetic, per env, for the task kernels ---


@njit(nogil=True, inline="always")
def square(x):  # pragma: no cover  (in x's dtype, as np.square)
    return x * x


@njit(nogil=True, inline="always")
def square_float64(x):  # pragma: no cover  (np.square of x.astype(np.float64))
    y = np.float64(x)
    return y * y


@njit(nogil=True, inline="always")
def clip(x, low, high):  # pragma: no cover  (np.clip: NaN stays NaN)
    return low if x < low else (high if x > high else x)


@njit(nogil=True)
def pairwise_sum(x, start, stop, term):  # pragma: no cover
    """``np.sum`` of ``term(x[k])`` for k in [start, stop), in numpy's order: up to 7 terms one
    after another; 8 to 128 in eight running sums, combined pairwise, then the rest; above 128
    (numpy's block size) the sum of two halves, the first a multiple of 8 terms long."""
    n = stop - start
    if n <= 128:
        return _pairwise_block(x, start, stop, term)
    half = n // 2
    half -= half % 8
    return pairwise_sum(x, start, start + half, term) + pairwise_sum(x, start + half, stop, term)


@njit(nogil=True, inline="always")
def _pairwise_block(x, start, stop, term):  # pragma: no cover  (numpy's order for 1 to 128 terms)
    n = stop - start
    res = term(x[start])
    if n < 8:
        for k in range(start + 1, stop):
            res += term(x[k])
        return res
    r0, r1, r2, r3 = res, term(x[start + 1]), term(x[start + 2]), term(x[start + 3])
    r4, r5, r6, r7 = term(x[start + 4]), term(x[start + 5]), term(x[start + 6]), term(x[start + 7])
    k, end = start + 8, stop - n % 8
    while k < end:
        r0 += term(x[k])
        r1 += term(x[k + 1])
        r2 += term(x[k + 2])
        r3 += term(x[k + 3])
        r4 += term(x[k + 4])
        r5 += term(x[k + 5])
        r6 += term(x[k + 6])
        r7 += term(x[k + 7])
        k += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while k < stop:
        res += term(x[k])
        k += 1
    return res


class TaskKernels(NamedTuple):
    """A task's per-env Numba functions (nogil), on ``state``: the batch's (N, ·) float64 arrays,
    qpos, qvel, then :meth:`MujocoBatch._sources` in order, row ``i`` the env's:

    - ``position(state, i, out)``: what the forward reward differentiates (x, or the xy pair);
    - ``outcome(state, i, action, velocity, info) -> (reward, terminated)``: ``velocity`` is
      the change of ``position`` over dt, ``info`` the env's row of :attr:`MujocoBatch.INFO`;
    - ``observe(state, i, obs)``: the observation."""

    position: Any
    outcome: Any
    observe: Any


class StepOutputs(NamedTuple):
    """What a step writes, each env's row by the thread that steps it; :meth:`MujocoBatch.step`
    copies them out."""

    obs: np.ndarray  # (N, D) float64 (the batch returns obs_dtype): after autoreset
    final: np.ndarray  # (N, D) float64: before autoreset
    reward: np.ndarray  # (N,) float64
    terminated: np.ndarray  # (N,) bool
    truncated: np.ndarray  # (N,) bool
    info: np.ndarray  # (N, width of INFO) float64
    position: np.ndarray  # (N, POSITION_SIZE) at the last step or reset
    velocity: np.ndarray  # (N, POSITION_SIZE)
    steps: np.ndarray  # (N,) int64 in the episode
    ended: np.ndarray  # (N,) bool: reset by autoreset this step
    next_qpos: np.ndarray  # (N, nq) env i's next reset state, drawn ahead from its generator
    next_qvel: np.ndarray  # (N, nv)
    settings: np.ndarray  # int64 [max_episode_steps, autoreset]


@functools.cache
def env_functions(kernels: TaskKernels, dt: float) -> tuple[Any, Any]:
    """``finish(i, state, actions, out) -> reset`` after env i's physics step: velocity, reward,
    termination, observations and step count into ``out`` (a :class:`StepOutputs`); True when
    env i must reset now (autoreset). ``restart(i, state, out)`` after its reset: step count,
    position and observation."""
    position, outcome, observe = kernels

    @njit(nogil=True, inline="always")
    def finish(i, state, actions, out):  # pragma: no cover
        p, v = out.position[i], out.velocity[i]
        position(state, i, v)
        for k in range(v.size):
            now = v[k]
            v[k] = (now - p[k]) / dt
            p[k] = now
        reward, terminated = outcome(state, i, actions[i], v, out.info[i])
        out.reward[i] = reward
        out.terminated[i] = terminated
        observe(state, i, out.final[i])
        out.steps[i] += 1
        truncated = out.steps[i] >= out.settings[0]
        out.truncated[i] = truncated
        if out.settings[1] != 0 and (terminated or truncated):
            return True
        for k in range(out.obs.shape[1]):  # a loop: a row assignment compiles its shape check's message (2 s)
            out.obs[i, k] = out.final[i, k]
        return False

    @njit(nogil=True, inline="always")
    def restart(i, state, out):  # pragma: no cover
        out.steps[i] = 0
        position(state, i, out.position[i])
        observe(state, i, out.obs[i])

    return finish, restart


class MujocoBatch:
    """N envs of one gymnasium MuJoCo v5 task with the batch API of :mod:`dispatchrl.envs.batch`
    (same-step autoreset, ``final_obs``). Env i draws its resets from its own generator, seeded
    ``seed + i`` like gymnasium's vector envs, so each env replays gymnasium's reset with that seed
    (with autoreset, each reset's state is drawn when the previous reset is done: the same draws).

    A subclass sets the class constants, :meth:`_sources`, :meth:`_observation_size` and
    :meth:`_kernels`."""

    NAME: ClassVar[str]  # in messages: "HalfCheetah"
    XML_FILE: ClassVar[str]  # in gymnasium's assets folder
    FRAME_SKIP: ClassVar[int]
    RESET_NOISE: ClassVar[float]  # qpos: U(±RESET_NOISE); qvel: as QVEL_NOISE says
    QVEL_NOISE: ClassVar[str] = "uniform"  # "uniform": U(±RESET_NOISE); "normal": RESET_NOISE · N(0, 1)
    #: mj_rnePostConstraint after each step: only it computes cfrc_ext (contact forces)
    CONTACT_FORCES: ClassVar[bool] = False
    #: gymnasium's step info: (name, width) per term, each an (N,) array (width 1) or (N, width)
    INFO: ClassVar[tuple[tuple[str, int], ...]]
    POSITION_SIZE: ClassVar[int] = 1  # the forward position: x, or the xy pair
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
        self.observation_dim = self._observation_size()
        # MjData's arrays are views on its memory: take them once, not per step; each is copied
        # into the (N, ·) array of the same name after every step and reset
        sources = [{"qpos": d.qpos, "qvel": d.qvel, **self._sources(d)} for d in self.datas]
        for name, view in sources[0].items():
            setattr(self, name, np.zeros((num_envs, *np.shape(view))))
        self._copies = [[(getattr(self, name), view) for name, view in s.items()] for s in sources]
        self._ctrls = [d.ctrl for d in self.datas]
        from numba.typed import List

        self._state = List(getattr(self, name).reshape(num_envs, -1) for name in sources[0])
        self._info_columns, column = [], 0
        for name, width in self.INFO:
            self._info_columns.append((name, column if width == 1 else slice(column, column + width)))
            column += width
        n, d = num_envs, self.observation_dim
        self._out = StepOutputs(
            obs=np.zeros((n, d)),
            final=np.zeros((n, d)),
            reward=np.zeros(n),
            terminated=np.zeros(n, bool),
            truncated=np.zeros(n, bool),
            info=np.zeros((n, column)),
            position=np.zeros((n, self.POSITION_SIZE)),
            velocity=np.zeros((n, self.POSITION_SIZE)),
            steps=np.zeros(n, np.int64),
            ended=np.zeros(n, bool),
            next_qpos=np.zeros((n, m.nq)),
            next_qvel=np.zeros((n, m.nv)),
            settings=np.array([max_episode_steps, int(bool(autoreset))], np.int64),
        )
        self.steps = self._out.steps
        self._finish, self._restart = env_functions(self._kernels(), self.dt)
        self._actions = np.zeros((num_envs, self.action_dim), np.float32)
        self._rngs = [None] * num_envs
        # one chunk per thread; the caller steps the first (the bindings' path: only it)
        self._chunks = [c for c in np.array_split(np.arange(num_envs), self.num_threads) if len(c)]
        native = self._native_stepper(mujoco, sources)
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

    def _observation_size(self) -> int:
        raise NotImplementedError

    def _kernels(self) -> TaskKernels:
        """The task's per-env functions (built once per class: they may read the model's constants)."""
        raise NotImplementedError

    def _state_index(self, name: str) -> int:
        """Where the batch array ``name`` is in the kernels' ``state``."""
        return ["qpos", "qvel", *self._sources(self.datas[0])].index(name)

    def reset_info(self, i: int) -> dict[str, Any]:
        """gymnasium's ``reset`` info for env i."""
        return {}

    # --- per-env work, run by the stepping threads ---

    def _native_stepper(self, mujoco: Any, sources: list[dict[str, Any]]) -> tuple[Any, int, Callable] | None:
        """:func:`chunk_functions`, the number of threads besides the caller and ``step_args(claim,
        flags)``, the first arguments of their ``step``: MjModel, MjData, the action array
        :meth:`step` fills, views on MjData's memory, the batch's arrays and outputs, the chunks'
        bounds (None: the bindings' path, where the library is not found or a source is not
        float64)."""
        functions = chunk_functions(
            os.path.dirname(mujoco.__file__), self.FRAME_SKIP, self.CONTACT_FORCES, self._finish, self._restart
        )
        if functions is None or any(v.dtype != np.float64 for s in sources for v in s.values()):
            return None
        from numba.typed import List

        model, datas = self.model._address, np.array([d._address for d in self.datas], np.uint64)
        ctrls = List(d.ctrl for d in self.datas)
        flat = List(view.reshape(-1) for s in sources for view in s.values())  # views on MjData's memory
        state, actions, out = self._state, self._actions, self._out
        bounds = np.cumsum([0] + [len(c) for c in self._chunks])
        return (
            functions,
            len(self._chunks) - 1,
            lambda claim, flags: (model, datas, actions, ctrls, flat, state, out, bounds, claim, flags),
        )

    def _gather(self, i: int) -> None:
        for array, view in self._copies[i]:
            array[i] = view

    def _step_chunk(self, chunk: Any) -> None:
        """The bindings' path for the envs of ``chunk``."""
        mj, m, datas, out = self._mj, self.model, self.datas, self._out
        for i in chunk:
            self._ctrls[i][:] = self._actions[i]
            mj.mj_step(m, datas[i], nstep=self.FRAME_SKIP)  # releases the GIL
            if self.CONTACT_FORCES:
                mj.mj_rnePostConstraint(m, datas[i])
            self._gather(i)
            if self._finish(i, self._state, self._actions, out):
                self._reset_env(i)
                out.ended[i] = True

    def _draw_reset(self, i: int) -> None:
        """Env i's next reset state from its generator, as gymnasium's ``reset`` draws it: qpos0 +
        U(±noise), then qvel0 + noise."""
        m, s, rng, out = self.model, self.RESET_NOISE, self._rngs[i], self._out
        out.next_qpos[i] = self.init_qpos + rng.uniform(low=-s, high=s, size=m.nq)
        if self.QVEL_NOISE == "normal":
            out.next_qvel[i] = self.init_qvel + s * rng.standard_normal(m.nv)
        else:
            out.next_qvel[i] = self.init_qvel + rng.uniform(low=-s, high=s, size=m.nv)

    def _reset_env(self, i: int) -> None:
        """gymnasium's ``reset`` for env i to its drawn state: mj_resetData, the state, mj_forward
        (the C calls the native stepper makes)."""
        mj, m, d = self._mj, self.model, self.datas[i]
        mj.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = self._out.next_qpos[i], self._out.next_qvel[i]
        mj.mj_forward(m, d)
        self._gather(i)
        self._restart(i, self._state, self._out)

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
            self._draw_reset(i)
            self._reset_env(i)
            if self.autoreset:
                self._draw_reset(i)
        obs = self._out.obs.astype(self.obs_dtype)
        self.final_obs = obs.copy()
        return obs

    def step(self, actions) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Step all envs (same-step autoreset, see :mod:`dispatchrl.envs.batch`, unless made with
        ``autoreset=False``); ``info`` holds gymnasium's step info terms, batched."""
        if self.final_obs is None:
            raise ConfigError("step: call reset() before the first step")
        self._actions[:] = check_actions(actions, self.num_envs, self.action_dim)
        if self._threads is not None:
            self._threads.step()
        elif self._pool is not None:
            futures = [self._pool.submit(self._step_chunk, c) for c in self._chunks[1:]]
            self._step_chunk(self._chunks[0])
            for f in futures:
                f.result()
        else:
            self._step_chunk(self._chunks[0])
        out = self._out
        info_rows = out.info.copy()
        info = {name: info_rows[:, column] for name, column in self._info_columns}
        if out.ended.any():  # envs that reset: rare
            for i in np.flatnonzero(out.ended):
                self._draw_reset(int(i))
            out.ended[:] = False
        self.final_obs = out.final.astype(self.obs_dtype)
        return out.obs.astype(self.obs_dtype), out.reward.copy(), out.terminated.copy(), out.truncated.copy(), info

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
    angle in HEALTHY_ANGLE (strict), and, where HEALTHY_STATE is set, every value of [qpos[2:],
    qvel] in it (strict)."""

    FORWARD_REWARD_WEIGHT = 1.0
    CTRL_COST_WEIGHT = 1e-3
    HEALTHY_REWARD = 1.0
    VELOCITY_CLIP = 10.0
    HEALTHY_Z: tuple[float, float] = (0.0, float("inf"))
    HEALTHY_ANGLE: tuple[float, float] = (-float("inf"), float("inf"))
    HEALTHY_STATE: tuple[float, float] | None = None
    INFO = (
        ("x_position", 1),
        ("z_distance_from_origin", 1),
        ("x_velocity", 1),
        ("reward_forward", 1),
        ("reward_ctrl", 1),
        ("reward_survive", 1),
    )

    def _observation_size(self) -> int:
        return self.model.nq - 1 + self.model.nv

    def _kernels(self) -> TaskKernels:
        return planar_walker_kernels(
            self.FORWARD_REWARD_WEIGHT, self.CTRL_COST_WEIGHT, self.HEALTHY_REWARD, self.VELOCITY_CLIP,
            self.HEALTHY_Z, self.HEALTHY_ANGLE, self.HEALTHY_STATE, float(self.init_qpos[1]),
        )  # fmt: skip

    def reset_info(self, i: int) -> dict[str, Any]:
        return {"x_position": self.qpos[i, 0], "z_distance_from_origin": self.qpos[i, 1] - self.init_qpos[1]}


@functools.cache
def planar_walker_kernels(
    forward_weight, ctrl_weight, healthy_reward, velocity_clip, healthy_z, healthy_angle, healthy_state, z0
) -> TaskKernels:
    (z_low, z_high), (angle_low, angle_high) = healthy_z, healthy_angle
    check_state = healthy_state is not None
    state_low, state_high = healthy_state if check_state else (0.0, 0.0)
    ctrl_weight32 = np.float32(ctrl_weight)  # gymnasium's ctrl cost is float32, like the action

    @njit(nogil=True)
    def outcome(state, i, action, velocity, info):  # pragma: no cover
        qpos, qvel = state[0][i], state[1][i]
        z, angle = qpos[1], qpos[2]
        healthy = z_low < z and z < z_high and angle_low < angle and angle < angle_high
        if check_state:
            for k in range(2, qpos.size):
                healthy = healthy and state_low < qpos[k] and qpos[k] < state_high
            for k in range(qvel.size):
                healthy = healthy and state_low < qvel[k] and qvel[k] < state_high
        forward = forward_weight * velocity[0]
        survive = healthy * healthy_reward
        ctrl = ctrl_weight32 * pairwise_sum(action, 0, action.size, square)
        info[0], info[1], info[2] = qpos[0], qpos[1] - z0, velocity[0]
        info[3], info[4], info[5] = forward, -ctrl, survive
        return (forward + survive) - ctrl, not healthy

    return TaskKernels(x_position, outcome, planar_observation(velocity_clip))


@njit(nogil=True)
def x_position(state, i, out):  # pragma: no cover
    """A planar body's forward position: qpos's x."""
    out[0] = state[0][i, 0]


@functools.cache
def planar_observation(velocity_clip: float) -> Any:
    """A planar body's observation, [qpos[1:], clip(qvel, ±velocity_clip)] (no clip: inf)."""

    @njit(nogil=True)
    def observe(state, i, obs):  # pragma: no cover
        qpos, qvel = state[0][i], state[1][i]
        for k in range(1, qpos.size):
            obs[k - 1] = qpos[k]
        for k in range(qvel.size):
            obs[qpos.size - 1 + k] = clip(qvel[k], -velocity_clip, velocity_clip)

    return observe


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
