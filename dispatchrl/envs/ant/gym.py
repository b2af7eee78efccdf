"""Ant as gymnasium ids: ``dispatchrl/Ant-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from ...errors import ConfigError, ShapeError
from ..batch import BatchVectorEnv
from .batch import MAIN_BODY, AntBatch, load_mujoco

__all__ = ["GYMNASIUM_SPEC", "AntEnv", "make_ant_vector"]


class AntEnv(gymnasium.Env):
    """``dispatchrl/Ant-v5``: gymnasium Ant-v5 (default arguments) on an :class:`AntBatch` of one
    env; resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}  # dt = 5 × 0.01 s
    #: frame size (a multiple of 16: video encoders keep it) and the camera following the torso
    FRAME_SIZE = (480, 480)
    CAMERA_DISTANCE = 4.0

    def __init__(self, render_mode=None):
        if render_mode not in (None, "rgb_array"):
            raise ConfigError(f"AntEnv: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self._renderer = None
        self._batch = AntBatch(1, num_threads=1, max_episode_steps=2**62, obs_dtype=np.float64, autoreset=False)
        b = self._batch
        self.action_space = spaces.Box(b.action_low, b.action_high, dtype=np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, (b.observation_dim,), np.float64)

    def _position_info(self):
        q = self._batch.qpos[0]
        return {"x_position": q[0], "y_position": q[1], "distance_from_origin": np.linalg.norm(q[0:2], ord=2)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        obs = self._batch.reset(np_randoms=[self.np_random])[0]
        return obs, self._position_info()

    def step(self, action):
        a = np.asarray(action, dtype=np.float32)
        if a.shape != self.action_space.shape:
            raise ShapeError(f"step: argument 'action' has shape {a.shape}, expected {self.action_space.shape}")
        obs, reward, terminated, _, info = self._batch.step(a[None])
        info = dict(
            self._position_info(), **{k: v[0] for k, v in info.items() if k not in ("x_position", "y_position")}
        )
        return obs[0], float(reward[0]), bool(terminated[0]), False, info

    def render(self):
        """With ``render_mode="rgb_array"``: the current frame from MuJoCo's offscreen renderer,
        a camera tracking the torso. Headless machines need ``MUJOCO_GL=egl`` (or ``osmesa``)
        set before mujoco is imported."""
        if self.render_mode != "rgb_array":
            return None
        mujoco = load_mujoco()
        if self._renderer is None:
            try:
                self._renderer = mujoco.Renderer(self._batch.model, *self.FRAME_SIZE)
            except Exception as e:  # no OpenGL context: say what is needed
                raise ConfigError(
                    f"AntEnv: MuJoCo's offscreen renderer failed ({e}); set MUJOCO_GL=egl (libEGL) or "
                    "MUJOCO_GL=osmesa before importing mujoco"
                ) from None
            self._camera = mujoco.MjvCamera()
            self._camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
            self._camera.trackbodyid = MAIN_BODY
            self._camera.distance = self.CAMERA_DISTANCE
            self._camera.elevation = -20.0
        self._renderer.update_scene(self._batch.datas[0], camera=self._camera)
        return self._renderer.render().copy()

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self._batch.close()


def make_ant_vector(num_envs=1, max_episode_steps=1000, num_threads=None, render_mode=None):
    """``gymnasium.make_vec("dispatchrl/Ant-v5", num_envs, num_threads=...)`` entry point."""
    return BatchVectorEnv(AntBatch(num_envs, num_threads=num_threads, max_episode_steps=max_episode_steps))


#: ``gymnasium.register`` arguments (AntEnv imports mujoco only when an env is made)
GYMNASIUM_SPEC: dict[str, Any] = dict(
    id="dispatchrl/Ant-v5",
    entry_point=AntEnv,
    vector_entry_point=make_ant_vector,
    max_episode_steps=1000,
    reward_threshold=6000.0,
)
