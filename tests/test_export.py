"""Policy export: C sources round-trip against the Python policy on the host, cross builds run
under qemu-user, the Cortex-M4 object needs nothing but libm, and bad input is refused clearly."""

import itertools
import shutil
import subprocess

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import export
from dispatchrl.backends.c.compiler import host_compiler, zig_command
from dispatchrl.export import targets
from dispatchrl.nn import Policy, mlp

TOLERANCE = 1e-5


def make_policy(
    sizes=(13, 64, 64, 4), activation="relu", output_activation="tanh", squash="tanh", normalise=False, seed=0
):
    rs = np.random.default_rng(seed)
    weights = [(rs.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32) for a, b in itertools.pairwise(sizes)]
    biases = [(0.1 * rs.normal(size=b)).astype(np.float32) for b in sizes[1:]]
    n_act = sizes[-1]
    low, high = -np.linspace(1, 2, n_act).astype(np.float32), np.linspace(0.5, 3, n_act).astype(np.float32)
    mean = rs.normal(size=sizes[0]).astype(np.float32) if normalise else None
    std = rs.uniform(0.5, 2, size=sizes[0]).astype(np.float32) if normalise else None
    return Policy(weights, biases, activation, output_activation, low, high, squash, mean, std)


POLICIES = {
    "relu-tanh-squash": dict(),
    "tanh-clip-normalised": dict(
        sizes=(3, 16, 2), activation="tanh", output_activation="identity", squash="clip", normalise=True, seed=1
    ),
    "gelu-tanh-normalised": dict(sizes=(5, 8, 8, 1), activation="gelu", normalise=True, seed=2),
}


def observations(policy, count=7, seed=3):
    return (3 * np.random.default_rng(seed).normal(size=(count, policy.observation_dim))).astype(np.float32)


def host_forward(lib, obs, action_dim):
    out = np.zeros((len(obs), action_dim), np.float32)
    for row, action in zip(obs, out):
        lib.policy_forward(
            np.ascontiguousarray(row).ctypes.data_as(lib.policy_forward.argtypes[0]),
            action.ctypes.data_as(lib.policy_forward.argtypes[1]),
        )
    return out


def cross_toolchain_missing(name):
    """Why a cross target cannot be built and run here, or None."""
    target = export.TARGETS[name]
    if not (shutil.which(target.cross) or zig_command()):
        return f"no compiler for {name}: pip install 'dispatchrl[cross]' or apt-get install {target.apt}"
    if target.qemu and not shutil.which(target.qemu):
        return f"{target.qemu} not installed: apt-get install qemu-user"
    return None


@pytest.mark.parametrize("case", sorted(POLICIES))
def test_round_trip_on_host(case, tmp_path):
    policy = make_policy(**POLICIES[case])
    paths = export.write_policy(policy, tmp_path)
    lib = export.host_library(paths["source"])
    assert lib.policy_selftest() == 0
    obs = observations(policy)
    np.testing.assert_allclose(host_forward(lib, obs, policy.action_dim), policy(obs), rtol=TOLERANCE, atol=TOLERANCE)


def test_c_source_is_strict_c99_float_only_and_heap_free(tmp_path):
    header, source = export.c_source(make_policy(**POLICIES["gelu-tanh-normalised"]))
    assert "void policy_forward(const float *obs, float *action);" in header
    assert "int policy_selftest(void);" in header
    assert "static const float policy_weight0[40] = {" in source
    for banned in ("malloc", "calloc", "free(", "stdio", "double"):
        assert banned not in source
    (tmp_path / "policy.h").write_text(header)
    (tmp_path / "policy.c").write_text(source)
    # -Wdouble-promotion: float math stays float (a Cortex-M4 FPU has no double)
    flags = ["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-Wdouble-promotion", "-fsyntax-only"]
    done = subprocess.run([*host_compiler(), *flags, str(tmp_path / "policy.c")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_c_source_of_a_trained_style_policy():
    net = mlp(drl.CPU(), (3, 8, 1), "relu", "tanh", seed=5)
    header, source = export.c_source(Policy.from_mlp(net, -2.0, 2.0), name="pendulum")
    assert "#define PENDULUM_ACTION_DIM 1" in header and "void pendulum_forward(" in source
    assert "static const float pendulum_action_low[1] = {\n    -2.0f\n};" in source


def test_host_executable_prints_python_actions(tmp_path):
    policy = make_policy(**POLICIES["tanh-clip-normalised"])
    paths = export.write_policy(policy, tmp_path, target="host")
    obs = observations(policy)
    np.testing.assert_allclose(export.run_executable(paths["binary"], "host", obs), policy(obs), atol=TOLERANCE)
    selftest = export.run_executable(paths["binary"], "host")  # no observations: the embedded ones
    np.testing.assert_allclose(selftest, policy(export.selftest_observations(policy)), atol=TOLERANCE)


@pytest.mark.parametrize("name", ["aarch64-linux", "armhf-linux", "riscv64-linux"])
def test_cross_target_under_qemu(name, tmp_path):
    reason = cross_toolchain_missing(name)
    if reason:
        pytest.skip(reason)
    policy = make_policy(**POLICIES["relu-tanh-squash"])
    paths = export.write_policy(policy, tmp_path, target=name)
    obs = observations(policy, count=3)
    np.testing.assert_allclose(export.run_executable(paths["binary"], name, obs), policy(obs), atol=TOLERANCE)


def test_cortex_m4_object_needs_only_libm(tmp_path):
    reason = cross_toolchain_missing("cortex-m4")
    if reason:
        pytest.skip(reason)
    policy = make_policy(**POLICIES["relu-tanh-squash"])
    paths = export.write_policy(policy, tmp_path, target="cortex-m4")
    assert export.undefined_symbols(paths["binary"]) == ["tanhf"]
    sizes = export.code_size(paths["binary"])
    assert sizes["text"] > 0 and sizes["rodata"] >= 4 * (13 * 64 + 64 * 64 + 64 * 4)


def test_mismatched_shapes_are_refused():
    policy = make_policy(sizes=(4, 8, 2))
    policy.weights[1] = np.zeros((7, 2), np.float32)
    with pytest.raises(drl.ShapeError, match=r"weights\[1\].*layer 0 outputs 8"):
        export.c_source(policy)
    policy = make_policy(sizes=(4, 8, 2))
    policy.biases[0] = np.zeros(3, np.float32)
    with pytest.raises(drl.ShapeError, match=r"biases\[0\]"):
        export.c_source(policy)
    policy = make_policy(sizes=(4, 8, 2))
    policy.action_low = np.zeros(3, np.float32)
    with pytest.raises(drl.ShapeError, match="action_low"):
        export.c_source(policy)
    policy = make_policy(sizes=(4, 8, 2), normalise=True)
    policy.obs_std = np.ones(5, np.float32)
    with pytest.raises(drl.ShapeError, match="obs_std"):
        export.c_source(policy)
    policy = make_policy(sizes=(4, 8, 2), squash="softmax")
    with pytest.raises(drl.ConfigError, match="squash"):
        export.c_source(policy)


def test_unknown_target_is_refused(tmp_path):
    with pytest.raises(drl.ConfigError, match="unknown target 'esp32'.*cortex-m4"):
        export.write_policy(make_policy(), tmp_path / "out", target="esp32")
    assert not (tmp_path / "out").exists()


def test_missing_cross_compiler_names_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(targets, "zig_command", lambda: None)
    monkeypatch.setattr(targets.shutil, "which", lambda name: None)
    with pytest.raises(drl.DeviceError, match=r"pip install 'dispatchrl\[cross\]'.*gcc-aarch64-linux-gnu"):
        export.write_policy(make_policy(), tmp_path / "out", target="aarch64-linux")
    assert not (tmp_path / "out").exists()


def test_discrete_policy_exports_its_argmax(tmp_path):
    """A Discrete space's policy (DQN's Q-values, categorical PPO's logits): action[0] is the index
    of the first largest output, on the host and under qemu where a cross toolchain is present."""
    policy = make_policy(sizes=(4, 16, 3), activation="tanh", output_activation="identity", squash="argmax", seed=4)
    header, _ = export.c_source(policy)
    assert "#define POLICY_ACTION_DIM 1" in header and "#define POLICY_ACTION_COUNT 3" in header
    paths = export.write_policy(policy, tmp_path / "host", target="host")
    lib = export.host_library(paths["source"])
    assert lib.policy_selftest() == 0
    obs = observations(policy, count=50)
    expected = policy(obs)
    assert expected.dtype == np.int64 and len(set(expected.tolist())) > 1  # the test sees several actions
    np.testing.assert_array_equal(host_forward(lib, obs, 1)[:, 0], expected)
    np.testing.assert_array_equal(export.run_executable(paths["binary"], "host", obs)[:, 0], expected)
    if cross_toolchain_missing("aarch64-linux") is None:
        cross = export.write_policy(policy, tmp_path / "aarch64", target="aarch64-linux")
        np.testing.assert_array_equal(export.run_executable(cross["binary"], "aarch64-linux", obs)[:, 0], expected)
