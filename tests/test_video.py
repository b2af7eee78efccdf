"""rgb_array frames of the native envs, RecordEpisodes and ``dispatchrl eval --video``."""

import json
import math
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import cli
from dispatchrl.envs.acrobot import acrobot_frame
from dispatchrl.envs.pendulum import pendulum_frame
from dispatchrl.envs.render import FRAME_SIZE

iio = pytest.importorskip("imageio.v3")
pytest.importorskip("imageio_ffmpeg")

WHITE = (255, 255, 255)


def pixel(frame, x, y, scale=FRAME_SIZE / 4.4):
    """The frame's pixel at world point (x, y) (y up, origin at the centre)."""
    return tuple(frame[int(FRAME_SIZE / 2 - scale * y), int(FRAME_SIZE / 2 + scale * x)])


def test_pendulum_frames_follow_gymnasium_geometry():
    upright, left = pendulum_frame(0.0), pendulum_frame(math.pi / 2)  # theta > 0: counterclockwise
    assert upright.shape == (FRAME_SIZE, FRAME_SIZE, 3) and upright.dtype == np.uint8
    assert pixel(upright, 0, 0.7) == (204, 77, 77) and pixel(upright, 0, -0.7) == WHITE
    assert pixel(left, -0.7, 0) == (204, 77, 77) and pixel(left, 0.7, 0) == WHITE and pixel(left, 0, 0.7) == WHITE
    assert pixel(upright, 0, 0) == (0, 0, 0)  # the axle


def test_acrobot_frames_follow_gymnasium_geometry():
    hanging, raised = acrobot_frame(0.0, 0.0), acrobot_frame(math.pi, 0.0)
    assert pixel(hanging, 0, -1.5) == (0, 204, 204) and pixel(hanging, 0, 1.5) == WHITE
    assert pixel(raised, 0, 1.5) == (0, 204, 204) and pixel(raised, 0, -1.5) == WHITE
    assert pixel(hanging, 0, -1.0) == (204, 204, 0)  # the second joint
    assert pixel(hanging, 1.5, 1.0) == (0, 0, 0)  # the goal line


def test_native_envs_render_their_state():
    env = gym.make("dispatchrl/AcrobotContinuous-v1", render_mode="rgb_array")
    env.reset(seed=0)
    for _ in range(20):
        env.step(np.ones(1, np.float32))
    physics = env.unwrapped.state
    np.testing.assert_array_equal(env.render(), acrobot_frame(physics[0], physics[1]))
    with pytest.raises(drl.ConfigError, match="render_mode"):
        drl.envs.PendulumEnv(render_mode="human")


def test_eval_video_writes_one_playable_mp4_per_episode(tmp_path, capsys):
    config = drl.td3.Config(total_steps=150, warmup_steps=50, batch_size=16, hidden=(8,))
    drl.td3.train(drl.CPU(), "pendulum", config, seed=0).save(tmp_path / "ckpt")
    args = ["eval", "--checkpoint", str(tmp_path / "ckpt"), "--episodes", "1", "--json"]
    assert cli.main([*args, "--video", str(tmp_path / "videos")]) == 0
    with_video = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert cli.main(args) == 0
    without = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # the dispatchrl twin that draws the frames plays the same episode as Pendulum-v1
    assert with_video["eval_returns"] == without["eval_returns"]
    (path,) = with_video["videos"]
    frames = np.stack(list(iio.imiter(path)))
    assert frames.shape == (201, FRAME_SIZE, FRAME_SIZE, 3)  # the reset and 200 steps
    meta = iio.immeta(path)  # what a player reads from the container
    assert meta["fps"] == 30 and meta["duration"] == pytest.approx(201 / 30, abs=0.05)
    # decoded frames show the rod (encoding is lossy: compare loosely)
    assert (frames.reshape(201, -1, 3).min(axis=2) < 128).any(axis=1).all()
    assert not np.array_equal(frames[0], frames[-1])


def test_ant_renders_through_mujoco_offscreen(tmp_path):
    pytest.importorskip("mujoco")
    script = textwrap.dedent(
        f"""
        import gymnasium as gym, dispatchrl
        from dispatchrl.video import RecordEpisodes
        env = RecordEpisodes(gym.make("dispatchrl/Ant-v5", render_mode="rgb_array", max_episode_steps=12), {str(tmp_path)!r})
        env.reset(seed=0)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample() * 0)
            done = terminated or truncated
        env.close()
        print(env.paths[0])
        """
    )
    environment = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=300)
    if done.returncode and "offscreen renderer failed" in done.stderr:
        pytest.skip(f"no OpenGL for MuJoCo here (MUJOCO_GL={environment['MUJOCO_GL']}): {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr
    frames = np.stack(list(iio.imiter(done.stdout.strip())))
    assert frames.shape == (13, 480, 480, 3)
    assert frames.std() > 10  # a scene, not a blank frame
