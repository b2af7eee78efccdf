"""A multirotor checkpoint's export carries the firmware entry point ``controller(observation, rpm)``:
the policy's action as the four rotors' RPM setpoints, as the env maps it. (Its Cortex-M4 size and
instruction count: benchmarks/cortex_m4_policy.py.)"""

import ctypes

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import export
from dispatchrl.algorithms import ALGORITHMS, td3
from dispatchrl.cli import main
from dispatchrl.envs.multirotor import Multirotor, MultirotorParameters
from dispatchrl.training import load_run
from dispatchrl.training.envspec import resolve_env
from dispatchrl.training.runs import build_state, save_run


@pytest.fixture(scope="module")
def multirotor_checkpoint(tmp_path_factory):
    """An untrained TD3 multirotor checkpoint (built on Generic: nothing compiles)."""
    path = tmp_path_factory.mktemp("multirotor") / "run"
    config = td3.Config(total_steps=200, hidden=(16, 16))
    spec = resolve_env("multirotor")
    save_run(path, "td3", spec, config, 0, 0, build_state(td3, drl.Generic(), spec, config, 0))
    return path.with_suffix(".npz")


def controller_rpm(lib, obs):
    controller = lib.controller
    controller.argtypes, controller.restype = (ctypes.POINTER(ctypes.c_float),) * 2, None
    out = np.zeros((len(obs), 4), np.float32)
    for row, rpm in zip(np.ascontiguousarray(obs, np.float32), out):
        controller(row.ctypes.data_as(controller.argtypes[0]), rpm.ctypes.data_as(controller.argtypes[1]))
    return out


def test_multirotor_export_has_a_controller_giving_the_policys_rpm(multirotor_checkpoint, tmp_path):
    main(["export", "--checkpoint", str(multirotor_checkpoint), "--out", str(tmp_path / "out")])
    header = (tmp_path / "out" / "policy.h").read_text()
    assert "void controller(const float observation[149], float rpm[4]);" in header
    parts = ("position error", "rotation matrix body -> world, row-major", "oldest first", "rad/s", "21702")
    for part in (*parts, "[146, 149)  the position-error integral", "I = clip(I + 0.5 * 0.01 * position error, -1, 1)"):
        assert part in header
    lib = export.host_library(tmp_path / "out" / "policy.c")
    assert lib.policy_selftest() == 0

    _, _, spec, _, state = load_run(multirotor_checkpoint, ALGORITHMS)
    policy = spec.deployed_policy(td3, state)
    rng = np.random.default_rng(7)
    # around hover, and far off (saturating actions at -1 and 1)
    obs = np.concatenate([0.1 * rng.normal(size=(3, 149)), 20 * rng.normal(size=(3, 149))]).astype(np.float32)
    p = MultirotorParameters()
    expected = (np.clip(policy(obs), -1, 1) + 1) / 2 * (p.rpm_max - p.rpm_min) + p.rpm_min
    rpm = controller_rpm(lib, obs)
    np.testing.assert_allclose(rpm, expected, rtol=1e-4)
    assert rpm.min() >= p.rpm_min and rpm.max() <= p.rpm_max and np.ptp(rpm) > 100


def test_controller_takes_the_envs_rotor_range_and_other_exports_have_none():
    policy = drl.nn.Policy(
        [np.zeros((18 + 4 * 2, 4), np.float32)], [np.full(4, 0.5, np.float32)], "tanh", "tanh", -1.0, 1.0, "tanh"
    )
    rotors = MultirotorParameters(rpm_min=1000.0, rpm_max=20000.0)
    env = Multirotor(action_history=2, parameters=rotors, position_integral=0.0)  # the paper's observation
    header, source = export.c_source(policy, "quad", env.exported_policy_c("quad"))
    assert "void quad_controller(const float observation[26], float rpm[4]);" in header
    assert "quad_forward(observation, action);" in source
    assert "(a + 1.0f) * 0.5f * (20000.0f - 1000.0f) + 1000.0f" in source
    assert "controller" not in export.c_source(policy, "quad")[0]
