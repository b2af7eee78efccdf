"""The multirotor's rgb_array frames: the pose they show, the gymnasium env rendering, videos."""

import math

import gymnasium as gym
import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.envs.multirotor import CRAZYFLIE, multirotor_frame
from dispatchrl.envs.multirotor.layout import HISTORY, POS, QUAT, RPM
from dispatchrl.envs.render import FRAME_SIZE


def row(position=(0.0, 0.0, 0.0), quaternion=(1.0, 0.0, 0.0, 0.0), rpm=(0.0,) * 4):
    physics = np.zeros(HISTORY)
    physics[POS : POS + 3], physics[QUAT : QUAT + 4], physics[RPM : RPM + 4] = position, quaternion, rpm
    return physics


def body_centre(panel):
    """The mean (row, col) of the vehicle's black centre disc in a panel."""
    rows, cols = np.nonzero((panel == 0).all(axis=2))
    assert rows.size > 0
    return rows.mean(), cols.mean()


def drawn_rows(panel):
    """The first and last rows holding anything but white, the grey box and the green target."""
    ink = (panel != 255).any(axis=2) & ~(panel == (170, 170, 170)).all(axis=2) & ~(panel == (0, 160, 0)).all(axis=2)
    rows = np.nonzero(ink.any(axis=1))[0]
    return rows.min(), rows.max()


def top(frame):
    return frame[:, :FRAME_SIZE]


def side(frame):
    return frame[:, FRAME_SIZE:]


def test_multirotor_frames_show_the_position_attitude_and_rotor_speed():
    level = multirotor_frame(row())
    assert level.shape == (FRAME_SIZE, 2 * FRAME_SIZE, 3) and level.dtype == np.uint8
    # position to scale: +x right in both views, +y up in the top view, +z up in the side view
    right, left = multirotor_frame(row((0.3, 0.0, 0.0))), multirotor_frame(row((-0.3, 0.0, 0.0)))
    scale = FRAME_SIZE / 2 / (1.25 * 0.6)  # pixels per m: the 0.6 m box in 5/6 of the panel
    for view in (top, side):
        assert body_centre(view(right))[1] - body_centre(view(left))[1] == pytest.approx(0.6 * scale, abs=1)
    assert body_centre(top(multirotor_frame(row((0.0, 0.2, 0.0)))))[0] < body_centre(top(level))[0] - 50
    assert body_centre(side(multirotor_frame(row((0.0, 0.0, 0.2)))))[0] < body_centre(side(level))[0] - 50
    assert body_centre(top(multirotor_frame(row((0.0, 0.0, 0.2)))))[0] == body_centre(top(level))[0]
    # attitude: rolled 0.5 rad about x, the level vehicle's flat side view (rotors edge on, the
    # thrust axis up) reaches lower (its rotors at -y sink) and the top view narrows in y
    rolled = multirotor_frame(row(quaternion=(math.cos(0.25), math.sin(0.25), 0.0, 0.0)))
    assert drawn_rows(side(level))[1] < FRAME_SIZE // 2 + 5 < FRAME_SIZE // 2 + 15 < drawn_rows(side(rolled))[1]
    (level_top, level_bottom), (rolled_top, rolled_bottom) = drawn_rows(top(level)), drawn_rows(top(rolled))
    assert rolled_bottom - rolled_top < level_bottom - level_top - 10
    yawed = multirotor_frame(row(quaternion=(math.cos(0.25), 0.0, 0.0, math.sin(0.25))))
    assert not np.array_equal(top(yawed), top(level))
    # the target (origin) is marked even under the vehicle, the box outlined
    centre = FRAME_SIZE // 2
    assert tuple(top(level)[centre, centre]) == tuple(side(level)[centre, centre]) == (0, 160, 0)
    assert tuple(top(level)[centre, centre - round(0.6 * scale)]) == (170, 170, 170)
    # rotors from light (rpm_min) to dark (rpm_max) blue
    idle, full = multirotor_frame(row(rpm=(0.0,) * 4)), multirotor_frame(row(rpm=(CRAZYFLIE.rpm_max,) * 4))
    assert full.sum() < idle.sum() - 1000 * 100


def test_multirotor_frame_refuses_what_is_not_a_physics_row():
    with pytest.raises(drl.ShapeError, match="physics_row"):
        multirotor_frame(np.zeros(10))
    with pytest.raises(drl.ShapeError, match="physics_row"):
        multirotor_frame(np.zeros((1, HISTORY)))


def test_multirotor_env_renders_its_state():
    env = gym.make("dispatchrl/Multirotor-v0", render_mode="rgb_array")
    assert env.metadata["render_fps"] == 100  # one frame per 10 ms step: real time
    env.reset(seed=0)
    first = env.render()
    np.testing.assert_array_equal(first, multirotor_frame(env.unwrapped.state, CRAZYFLIE, 0.6))
    for _ in range(5):
        env.step(np.ones(4, np.float32))
    np.testing.assert_array_equal(env.render(), multirotor_frame(env.unwrapped.state))
    assert not np.array_equal(env.render(), first)
    with pytest.raises(drl.ConfigError, match="render_mode"):
        drl.envs.multirotor.MultirotorEnv(render_mode="human")
    assert drl.envs.multirotor.MultirotorEnv(dt=0.02).metadata["render_fps"] == 50


def test_multirotor_episode_records_to_a_video(tmp_path):
    iio = pytest.importorskip("imageio.v3")
    pytest.importorskip("imageio_ffmpeg")
    from dispatchrl.video import RecordEpisodes

    env = RecordEpisodes(gym.make("dispatchrl/Multirotor-v0", render_mode="rgb_array", max_episode_steps=8), tmp_path)
    env.reset(seed=1)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(np.zeros(4, np.float32))
        done = terminated or truncated
    env.close()
    frames = np.stack(list(iio.imiter(env.paths[0])))
    assert frames.shape[1:] == (FRAME_SIZE, 2 * FRAME_SIZE, 3) and 2 <= len(frames) <= 9
    assert iio.immeta(env.paths[0])["fps"] == 100
