"""The browser page for the multirotor (``dispatchrl web --env multirotor``) without a browser:
the page's own worker.js driven under node trains the multirotor wasm to the host trainer's bits
and animates the evaluation flight in real time (5 env steps of 10 ms per 50 ms frame), and
multirotor.js draws render.py's views (its geometry against render.py's numbers)."""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dispatchrl.envs.multirotor import CRAZYFLIE, Multirotor
from dispatchrl.envs.multirotor.generic import rotation_matrices
from dispatchrl.envs.multirotor.render import ENLARGE
from dispatchrl.envs.render import FRAME_SIZE
from dispatchrl.export.web import page_env, page_steps

NODE = shutil.which("node")
PAGE = Path(__file__).resolve().parents[1] / "dispatchrl" / "export" / "web_page"
HARNESS = Path(__file__).resolve().parent / "web_worker_node.js"
needs_node = pytest.mark.skipif(NODE is None, reason="no node (the wasm and the page's scripts run under it)")
STEPS, SEED = 300, 1
TINY = {"warmup_steps": 100, "batch_size": 16, "hidden": (8, 8)}


def _node(script: str) -> dict:
    out = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_page_defaults_for_the_multirotor():
    """The page trains the recipe (10k steps would be all warm-up) and plays the 100 Hz flight
    5 steps a frame; the other envs' pages keep 10k steps and a step a frame."""
    assert page_steps("td3", "multirotor") == 300_000
    assert page_steps("td3", "pendulum") == 10_000 and page_steps("ppo", "cartpole") == 10_000
    described = page_env("multirotor")
    assert described["obs_dim"] == 149 and described["frame_steps"] == 5
    assert described["vehicle"] == {
        "rotor_positions": [list(r) for r in CRAZYFLIE.rotor_positions],
        "box": 0.6,
        "enlarge": ENLARGE,
        "action_history": 32,
    }
    assert page_env("pendulum") == {"obs_dim": 3, "frame_steps": 1}


@needs_node
def test_multirotor_js_draws_render_pys_geometry():
    """multirotorPose/multirotorPixel put the centre and the rotors where render.py's frame does
    (same panel size, box and enlargement), and the rotors' shade follows the last action."""
    rng = np.random.default_rng(5)
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    position = np.array([0.12, -0.3, 0.25])
    history = Multirotor().action_history
    last = np.array([-1.0, 0.0, 0.5, 1.0])
    obs = np.zeros(18 + 4 * history)
    obs[:3], obs[3:12] = position, rotation_matrices(q[None])[0]
    obs[18 + 4 * (history - 1) :] = last
    vehicle = page_env("multirotor")["vehicle"]
    got = _node(
        f"""
        const m = require({json.dumps(str(PAGE / "multirotor.js"))});
        const obs = {json.dumps(obs.tolist())}, vehicle = {json.dumps(vehicle)};
        const pose = m.multirotorPose(obs, vehicle);
        const px = (p) => m.MULTIROTOR_VIEWS.map((v) => m.multirotorPixel(p, v, {FRAME_SIZE}, vehicle.box));
        console.log(JSON.stringify({{centre: px(pose.position), rotors: pose.rotors.map(px), command: pose.command}}));
        """
    )
    # render.py: rotors at position + ENLARGE body @ R^T; pixel (row, col) = (half - s p[up], half + s p[right])
    rotation = rotation_matrices(q[None])[0].reshape(3, 3)
    rotors = position + ENLARGE * np.array(CRAZYFLIE.rotor_positions) @ rotation.T
    half = FRAME_SIZE / 2
    scale = half / (1.25 * 0.6)

    def pixels(p):  # canvas (x, y) = render.py's (col, row), top view then side view
        return [[half + scale * p[0], half - scale * p[up]] for up in (1, 2)]

    np.testing.assert_allclose(got["centre"], pixels(position), atol=1e-9)
    np.testing.assert_allclose(got["rotors"], [pixels(r) for r in rotors], atol=1e-9)
    np.testing.assert_allclose(got["command"], (last + 1) / 2)


@needs_node
def test_draw_multirotor_draws_both_panels():
    """drawMultirotor on a recording 2D context: per panel the box, 4 rotor discs, 4 arms, the
    body, the thrust axis and the target; with no observation yet, the boxes and targets only."""
    vehicle = page_env("multirotor")["vehicle"]
    obs = [0.1, 0.0, -0.1, 1, 0, 0, 0, 1, 0, 0, 0, 1, *[0.0] * 6, *[0.334] * 128]
    got = _node(
        f"""
        const m = require({json.dumps(str(PAGE / "multirotor.js"))});
        const calls = {{}};
        const g = new Proxy({{}}, {{
          get: (target, name) => (name in target ? target[name] : (...args) => {{ calls[name] = (calls[name] || 0) + 1; }}),
          set: (target, name, value) => {{ target[name] = value; return true; }},
        }});
        m.drawMultirotor(g, {json.dumps(obs)}, {json.dumps(vehicle)}, 280);
        const flying = Object.assign({{}}, calls);
        for (const k in calls) delete calls[k];
        m.drawMultirotor(g, null, {json.dumps(vehicle)}, 280);
        console.log(JSON.stringify({{flying, empty: calls}}));
        """
    )
    assert got["flying"]["ellipse"] == 8 and got["flying"]["strokeRect"] == 2 and got["flying"]["arc"] == 2
    assert "ellipse" not in got["empty"] and got["empty"]["strokeRect"] == 2


@pytest.fixture(scope="module")
def page_folder(tmp_path_factory):
    pytest.importorskip("ziglang", reason="the wasm build needs zig cc: pip install ziglang")
    from dispatchrl.export.web import build_web

    folder = tmp_path_factory.mktemp("web") / "multirotor"
    build_web(folder, "td3", "multirotor", STEPS, SEED, TINY)
    return folder


@needs_node
def test_page_worker_trains_the_multirotor_with_the_host_bits_and_animates_it(page_folder):
    from dispatchrl.export.trainer_targets import build_trainer, run_trainer

    meta = json.loads((page_folder / "trainer.json").read_text())
    assert meta["env"] == "multirotor" and meta["env_page"] == page_env("multirotor")
    assert (page_folder / "multirotor.js").read_bytes() == (PAGE / "multirotor.js").read_bytes()
    assert '<script src="multirotor.js"></script>' in (page_folder / "index.html").read_text()
    out = subprocess.run(
        [NODE, str(HARNESS), str(page_folder), str(STEPS), str(SEED)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    host = run_trainer(build_trainer(page_folder, "host"), "host", steps=STEPS, seed=SEED)
    done = got["done"]
    assert done["type"] == "done" and done["steps"] == STEPS and not done["stopped"]
    assert done["checksum"] == host["checksum"] and round(done["eval_return"], 3) == host["eval_return"]
    # the animation: whole observations, each frame 5 eval steps on from the last (by hand beside)
    assert len(got["ready_obs"]) == 149 and got["ready_obs"] == got["first"]
    assert len(got["idle"]) >= 3 and got["idle"] == got["byHand"]
    frames = np.array(got["idle"])
    rotation = frames[:, 3:12].reshape(-1, 3, 3)
    np.testing.assert_allclose(
        rotation @ rotation.transpose(0, 2, 1), np.broadcast_to(np.eye(3), rotation.shape), atol=0.02
    )
