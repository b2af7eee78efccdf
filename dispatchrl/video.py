"""Videos of evaluation episodes (``dispatchrl eval --checkpoint PATH --video DIR``).

:class:`RecordEpisodes` records as gymnasium's ``RecordVideo`` does (a frame after every reset
and every step, one file per episode, ``rl-video-episode-<i>.mp4``) but writes with imageio and
its bundled ffmpeg (``pip install dispatchrl[video]``) instead of moviepy. The evaluation env is
made with ``render_mode="rgb_array"``: the native Pendulum, CartPole, Acrobot, MountainCar and
``dispatchrl/Multirotor-v0`` draw their frames with numpy; ``dispatchrl/Ant-v5`` renders with
MuJoCo's offscreen renderer (headless: ``MUJOCO_GL=egl`` with libEGL, or ``osmesa``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from .errors import ConfigError

__all__ = ["VIDEO_IDS", "RecordEpisodes", "record_episodes"]

#: evaluation ids whose gymnasium renderer needs pygame → the dispatchrl twin (the same episodes
#: for the same seeds and actions) drawing with numpy
VIDEO_IDS = {
    "Pendulum-v1": "dispatchrl/Pendulum-v1",
    "CartPole-v1": "dispatchrl/CartPole-v1",
    "Acrobot-v1": "dispatchrl/Acrobot-v1",
    "MountainCar-v0": "dispatchrl/MountainCar-v0",
}


def _imageio() -> Any:
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401  (the mp4 writer)
    except ImportError:
        raise ConfigError("videos need imageio and imageio-ffmpeg: pip install 'dispatchrl[video]'") from None
    return imageio


class RecordEpisodes(gymnasium.Wrapper):
    """Writes every episode of ``env`` (made with ``render_mode="rgb_array"``) to
    ``folder/<name_prefix>-episode-<i>.mp4`` when it ends (or at ``close``); :attr:`paths` lists
    the files written. ``fps`` defaults to the env's ``metadata["render_fps"]``."""

    def __init__(self, env: gymnasium.Env, folder: str | Path, name_prefix: str = "rl-video", fps: int | None = None):
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ConfigError(f"RecordEpisodes: the env must have render_mode='rgb_array', got {env.render_mode!r}")
        self._imageio = _imageio()
        self.folder, self.name_prefix = Path(folder), name_prefix
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fps = int(fps if fps is not None else env.metadata.get("render_fps", 30))
        self.frames: list[np.ndarray] = []
        self.episode = 0
        self.paths: list[Path] = []

    def _capture(self) -> None:
        frame = self.env.render()
        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
            raise ConfigError(f"RecordEpisodes: render() must return an (H, W, 3) array, got {type(frame).__name__}")
        self.frames.append(frame)

    def _write(self) -> None:
        if not self.frames:
            return
        path = self.folder / f"{self.name_prefix}-episode-{self.episode}.mp4"
        # macro_block_size=1: frames keep their size (the native envs' are multiples of 16)
        self._imageio.mimwrite(path, self.frames, fps=self.fps, macro_block_size=1)
        self.paths.append(path)
        self.frames, self.episode = [], self.episode + 1

    def reset(self, **kwargs: Any) -> Any:
        self._write()  # an episode cut short by a reset is kept too
        out = self.env.reset(**kwargs)
        self._capture()
        return out

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self._capture()
        if out[2] or out[3]:
            self._write()
        return out

    def close(self) -> None:
        self._write()
        super().close()


def record_episodes(eval_id: str, folder: str | Path) -> RecordEpisodes:
    """The evaluation env of gymnasium id ``eval_id`` rendering into videos under ``folder``."""
    env_id = VIDEO_IDS.get(eval_id, eval_id)
    try:
        env = gymnasium.make(env_id, render_mode="rgb_array")
    except gymnasium.error.Error as e:
        raise ConfigError(f"--video: cannot make {env_id!r} with render_mode='rgb_array': {e}") from None
    return RecordEpisodes(env, folder)
