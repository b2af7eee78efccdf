"""The exported trainer (export-trainer): a whole TD3/SAC run as static, libm-free C99 that gives
the same weights as ``train --device c`` and the same checksum on every target."""

import ctypes
import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pytest
import scipy.special

import dispatchrl as drl
from dispatchrl.algorithms import ppo, sac, td3
from dispatchrl.backends.c.compiler import host_compiler, zig_command
from dispatchrl.backends.c.render import HEADER
from dispatchrl.errors import ConfigError
from dispatchrl.export.elf import undefined_symbols
from dispatchrl.export.trainer import state_weights, trainer_source, weights_checksum, write_trainer
from dispatchrl.export.trainer_targets import build_trainer, elf_size, run_trainer

SHORT = 300
#: emulated runs: past the 100 warm-up steps into learning (50 updates, both policy-delay phases)
EMULATED = 150


@pytest.fixture(scope="module")
def td3_short(tmp_path_factory):
    out = tmp_path_factory.mktemp("td3")
    write_trainer(out, trainer_source("td3", "pendulum", SHORT, 0))
    host = run_trainer(build_trainer(out, "host"), "host", steps=SHORT, seed=0)
    return out, host


def test_math_accuracy(tmp_path):
    # the C device's own float math against float64 numpy: correctly rounded float32 in these samples
    names = ("sin", "cos", "exp", "log", "tanh", "erf")
    src = HEADER + "".join(
        f"void t_{n}(const float *x, float *y, int n) {{ for (int i = 0; i < n; i++) y[i] = {n}f(x[i]); }}\n"
        for n in names
    )
    (tmp_path / "m.c").write_text(src)
    subprocess.run(
        [
            *host_compiler(),
            "-O2",
            "-std=c99",
            "-ffp-contract=off",
            "-fno-math-errno",
            "-shared",
            "-fPIC",
            str(tmp_path / "m.c"),
            "-o",
            str(tmp_path / "m.so"),
        ],
        check=True,
    )
    lib = ctypes.CDLL(str(tmp_path / "m.so"))
    ref = {"sin": np.sin, "cos": np.cos, "exp": np.exp, "log": np.log, "tanh": np.tanh, "erf": scipy.special.erf}
    domain = {
        "sin": (-50, 50),
        "cos": (-50, 50),
        "exp": (-80, 80),
        "log": (1e-30, 1e6),
        "tanh": (-12, 12),
        "erf": (-7, 7),
    }
    rng = np.random.default_rng(0)
    for n in names:
        lo, hi = domain[n]
        x = np.concatenate([rng.uniform(lo, hi, 50_000), rng.uniform(1e-4, 2, 5000)]).astype(np.float32)
        y = np.empty_like(x)
        getattr(lib, "t_" + n)(x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p), len(x))
        exact = ref[n](x.astype(np.float64))
        ulp = np.abs(y - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        assert np.max(ulp) <= 0.51, (n, float(np.max(ulp)))


def test_branch_free_tanh_gives_the_branchy_bits(tmp_path):
    # SIMD targets compile tanh branch-free (so activation loops vectorise), others with branches:
    # the same bits, float and double, across both forms' ranges and the special values
    src = HEADER + (
        "void t_f(const float *x, float *y, int n) { for (int i = 0; i < n; i++) y[i] = tanhf(x[i]); }\n"
        "void t_d(const double *x, double *y, int n) { for (int i = 0; i < n; i++) y[i] = tanh(x[i]); }\n"
    )
    (tmp_path / "t.c").write_text(src)
    flags = ["-O3", "-std=c99", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC"]
    libs = {}
    for form, extra in (("lanes", []), ("scalar", ["-DDISPATCHRL_SCALAR_TANH"])):
        out = tmp_path / f"{form}.so"
        subprocess.run([*host_compiler(), *flags, *extra, str(tmp_path / "t.c"), "-o", str(out)], check=True)
        libs[form] = ctypes.CDLL(str(out))
    rng = np.random.default_rng(2)
    special = [0.0, -0.0, 0.625, -0.625, 22.0, -22.0, 9.01, np.inf, -np.inf, np.nan, 1e-300, 5e-324, 1e300]
    x = np.concatenate([rng.uniform(-30, 30, 200_000), rng.uniform(0.6, 0.65, 10_000), special])
    for dtype, name in ((np.float32, "t_f"), (np.float64, "t_d")):
        xs = np.concatenate([x.astype(dtype), np.nextafter(x, np.inf).astype(dtype)])
        ys = {}
        for form, lib in libs.items():
            ys[form] = np.empty_like(xs)
            getattr(lib, name)(xs.ctypes.data_as(ctypes.c_void_p), ys[form].ctypes.data_as(ctypes.c_void_p), len(xs))
        assert ys["lanes"].tobytes() == ys["scalar"].tobytes(), dtype


def test_double_erf_accuracy(tmp_path):
    # GELU on float64 needs 1 + erf(x) accurate at negative x: a Taylor series past |x| ≈ 1.5 lost
    # hundreds of ulp there (764 near |x| = 3); now ≤ 8 ulp of erf and of 1 − |erf| against scipy
    src = HEADER + "void t_erf(const double *x, double *y, int n) { for (int i = 0; i < n; i++) y[i] = erf(x[i]); }\n"
    (tmp_path / "e.c").write_text(src)
    flags = ["-O2", "-std=c99", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC"]
    subprocess.run([*host_compiler(), *flags, str(tmp_path / "e.c"), "-o", str(tmp_path / "e.so")], check=True)
    lib = ctypes.CDLL(str(tmp_path / "e.so"))
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-7, 7, 50_000), rng.uniform(1.3, 3.2, 10_000)])
    y = np.empty_like(x)
    lib.t_erf(x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p), len(x))
    assert np.max(np.abs(y - scipy.special.erf(x)) / np.spacing(np.abs(scipy.special.erf(x)))) <= 8
    assert np.max(np.abs((1 - np.abs(y)) - scipy.special.erfc(np.abs(x)))) <= 8 * 2.0**-53


def test_no_libm_or_malloc(td3_short, tmp_path):
    out, _ = td3_short
    obj = tmp_path / "trainer.o"
    subprocess.run(
        [
            *host_compiler(),
            "-O3",
            "-std=c99",
            "-ffp-contract=off",
            "-fno-math-errno",
            "-c",
            str(out / "trainer.c"),
            "-o",
            str(obj),
        ],
        check=True,
    )
    needed = set(undefined_symbols(obj))
    forbidden = {"malloc", "calloc", "realloc", "free", "printf", "puts", "fwrite"}
    forbidden |= {
        f + s
        for f in (
            "sin",
            "cos",
            "tan",
            "exp",
            "log",
            "tanh",
            "erf",
            "sqrt",
            "pow",
            "fmod",
            "fmin",
            "fmax",
            "floor",
            "copysign",
        )
        for s in ("", "f")
    }
    assert not needed & forbidden, needed & forbidden
    assert needed <= {"memset", "memcpy"}, needed  # what a compiler may turn loops into


def test_parity_with_train_device_c(td3_short):
    _, host = td3_short
    result = td3.train(drl.C(), "pendulum", replace(td3.config_for("pendulum"), total_steps=SHORT), seed=0)
    assert host["checksum"] == weights_checksum(state_weights(result.state))
    assert host["steps"] == SHORT


def test_sac_short_run_and_parity(tmp_path):
    write_trainer(tmp_path, trainer_source("sac", "pendulum", SHORT, 0))
    host = run_trainer(build_trainer(tmp_path, "host"), "host", steps=SHORT, seed=0)
    result = sac.train(drl.C(), "pendulum", sac.Config(total_steps=SHORT), seed=0)
    assert host["checksum"] == weights_checksum(state_weights(result.state))
    assert np.isfinite(host["eval_return"])


def test_td3_10k_learns(tmp_path):
    # the paper's config, one seed (seed 0's native evaluation is -440.6 while gymnasium's on the
    # same weights is -114; seeds 1 and 2 evaluate at -144 and -141: docs/guides/microcontrollers-wasm.md)
    write_trainer(tmp_path, trainer_source("td3", "pendulum", 10_000, 1))
    host = run_trainer(build_trainer(tmp_path, "host"), "host", steps=10_000, seed=1)
    assert host["eval_return"] >= -400, host


def test_seed_changes_the_run(td3_short):
    out, host = td3_short
    other = run_trainer(out / "trainer", "host", steps=SHORT, seed=1)
    assert other["checksum"] != host["checksum"]
    assert run_trainer(out / "trainer", "host", steps=SHORT, seed=0)["checksum"] == host["checksum"]


def test_ppo_parity_with_train_device_c(tmp_path):
    # three rollouts of 4 envs x 32 steps, two epochs of two minibatches each, the adaptive rate
    config = dict(num_envs=4, steps_per_env=32, batch_size=64, epochs=2, hidden=(16, 16), adaptive_lr=True)
    steps = 3 * 4 * 32
    write_trainer(tmp_path, trainer_source("ppo", "pendulum", steps, 0, config))
    host = run_trainer(build_trainer(tmp_path, "host"), "host", steps=steps, seed=2)
    result = ppo.train(drl.C(), "pendulum", ppo.Config(total_steps=steps, **config), seed=2)
    assert host["checksum"] == weights_checksum(state_weights(result.state))
    assert host["steps"] == steps and np.isfinite(host["eval_return"])
    # a partial rollout runs its env steps and no update: the weights are the two rollouts' ones
    partial = run_trainer(tmp_path / "trainer", "host", steps=steps - 4, seed=2)
    result = ppo.train(drl.C(), "pendulum", ppo.Config(total_steps=steps - 128, **config), seed=2)
    assert partial["checksum"] == weights_checksum(state_weights(result.state))


def test_scratch_liveness_and_placement():
    from dispatchrl.backends.c import CKernel
    from dispatchrl.export.scratch import plan_scratch, scratch_intervals
    from dispatchrl.staging import Below, Branch

    def kernel(overwrites=("out",)):
        return CKernel("k", "", ("x", "out"), ("out",), {}, np.float32, overwrites=overwrites)

    counter = drl.zeros(drl.C(), 1, np.int64)
    a, b, c, d, e, f = (np.zeros(16, np.float32) for _ in range(6))
    branch = Branch(Below(counter, 5))
    branch.then = [(kernel(), [a, d])]  # d written only on one side of the branch
    steps = [
        (kernel(), [a, b]),  # b written whole, then read: scratch
        (kernel(), [b, c]),
        branch,
        (kernel(), [d, e]),  # d read after the branch: it may hold the last step's value
        (kernel(()), [c, e[:8]]),  # an output not marked overwritten is read-modify-write: e
        (kernel(()), [c, f]),  # was written whole before, f was not
    ]
    root = lambda x: id(x if x.base is None else x.base)  # noqa: E731
    intervals, live_in = scratch_intervals({"step": steps, "act": [(kernel(), [a, b])]}, root)
    assert id(c) not in live_in and id(e) not in live_in
    assert id(d) in live_in and id(f) in live_in
    assert id(a) in live_in and id(b) in live_in  # a is never written; b is used by two programs
    assert intervals[id(c)] == ("step", 2, 7) and intervals[id(e)] == ("step", 5, 6)
    offsets, arena = plan_scratch({1: 256, 2: 64, 3: 100}, {1: ("p", 1, 2), 2: ("p", 2, 3), 3: ("p", 3, 4)})
    assert offsets == {1: 0, 2: 256, 3: 0} and arena == 320  # 1 and 3 never live together


def test_scratch_sharing_changes_no_bits(tmp_path):
    shared, separate = (trainer_source("sac", "pendulum", SHORT, 0, share_scratch=s) for s in (True, False))
    assert shared.state_bytes < 0.6 * separate.state_bytes
    runs = []
    for name, trainer in (("shared", shared), ("separate", separate)):
        write_trainer(tmp_path / name, trainer)
        runs.append(run_trainer(build_trainer(tmp_path / name, "host"), "host", steps=SHORT, seed=0))
    assert runs[0]["checksum"] == runs[1]["checksum"] and runs[0]["eval_return"] == runs[1]["eval_return"]


@pytest.mark.skipif(zig_command() is None, reason="the Cortex-M7 build needs zig cc (pip install ziglang)")
def test_td3_paper_config_fits_one_mib(tmp_path):
    # replay of 10k transitions, batch 100, 64-unit networks: text + data + bss within the
    # Teensy 4.1's 1 MiB of on-chip RAM
    write_trainer(tmp_path, trainer_source("td3", "pendulum", 10_000, 0))
    assert elf_size(build_trainer(tmp_path, "cortex-m7", steps=300, seed=0))["total"] <= 1 << 20


def test_python_envs_are_refused():
    with pytest.raises(ConfigError, match="native env"):
        trainer_source("td3", "MountainCarContinuous-v0", 1000, 0)


def _needs(tool):
    return pytest.mark.skipif(
        shutil.which(tool) is None,
        reason=f"{tool} is not installed (apt-get install "
        f"{'nodejs' if tool == 'node' else 'qemu-user qemu-system-arm'})",
    )


@_needs("qemu-aarch64")
def test_aarch64_checksum_equals_host(td3_short):
    out, _ = td3_short
    host = run_trainer(out / "trainer", "host", steps=EMULATED, seed=0)
    cross = run_trainer(build_trainer(out, "aarch64-linux"), "aarch64-linux", steps=EMULATED, seed=0)
    assert cross["checksum"] == host["checksum"] and cross["eval_return"] == host["eval_return"]


@_needs("qemu-system-arm")
def test_cortex_m7_checksum_equals_host(td3_short):
    out, _ = td3_short
    host = run_trainer(out / "trainer", "host", steps=EMULATED, seed=0)
    elf = build_trainer(out, "cortex-m7", steps=EMULATED, seed=0, eval_episodes=10)
    run = run_trainer(elf, "cortex-m7")
    assert run["checksum"] == host["checksum"] and run["steps"] == EMULATED
    assert run["eval_return"] == host["eval_return"]
    assert elf_size(elf)["total"] < 4 << 20


@_needs("node")
def test_wasm32_wasi_checksum_equals_host(td3_short):
    out, host = td3_short
    run = run_trainer(build_trainer(out, "wasm32-wasi"), "wasm32-wasi", steps=SHORT, seed=0)
    assert run["checksum"] == host["checksum"] and run["eval_return"] == host["eval_return"]


def test_cli_export_trainer(tmp_path, capsys):
    from dispatchrl.cli import main

    assert main(["export-trainer", "td3", "--out", str(tmp_path), "--steps", "500", "--set", "hidden=[16, 16]"]) == 0
    assert (tmp_path / "trainer.h").exists() and "16" in (tmp_path / "trainer.c").read_text()[:2000]
    assert main(["export-trainer", "td3", "--out", str(tmp_path), "--set", "nope=1"]) == 2


def assert_targets_match_host(folder, host, steps):
    """The trainer in ``folder`` built for wasm32-wasi and the Cortex-M7 (where their tools are
    installed) gives the host build's checksum and evaluation, ``host``, of ``steps`` steps from
    seed 1."""
    if shutil.which("node"):
        wasm = run_trainer(build_trainer(folder, "wasm32-wasi"), "wasm32-wasi", steps=steps, seed=1)
        assert wasm["checksum"] == host["checksum"] and wasm["eval_return"] == host["eval_return"]
    if shutil.which("qemu-system-arm"):
        elf = build_trainer(folder, "cortex-m7", steps=steps, seed=1, eval_episodes=10)
        run = run_trainer(elf, "cortex-m7")
        assert run["checksum"] == host["checksum"] and run["eval_return"] == host["eval_return"]


def test_ppo_cartpole_parity_across_targets(tmp_path):
    """A Discrete space (issue 36): categorical PPO on the native CartPole exports; the host build
    gives ``train --device c``'s weights, and wasm32-wasi and the Cortex-M7 (where their tools are
    installed) the host's checksum and evaluation."""
    config = dict(num_envs=4, steps_per_env=16, batch_size=32, epochs=2, hidden=(8,), normalize_observations=False)
    steps = 2 * 4 * 16
    write_trainer(tmp_path, trainer_source("ppo", "cartpole", steps, 0, config))
    assert "#define TRAINER_ACTION_COUNT 2" in (tmp_path / "trainer.h").read_text()
    host = run_trainer(build_trainer(tmp_path, "host"), "host", steps=steps, seed=1)
    result = ppo.train(drl.C(), "cartpole", replace(ppo.config_for("cartpole"), total_steps=steps, **config), seed=1)
    assert host["checksum"] == weights_checksum(state_weights(result.state))
    assert 8 <= host["eval_return"] <= 500  # CartPole: one reward per step until the pole falls
    assert_targets_match_host(tmp_path, host, steps)


def test_dqn_prioritized_exports_with_train_device_c_weights(tmp_path):
    """Prioritized DQN's fused step (sum and min trees, importance weights) exports as TD3's does:
    the host build gives ``train --device c``'s weights."""
    config = dict(hidden=(16,), batch_size=16, buffer_size=1000, learning_starts=100, train_freq=64, gradient_steps=8)
    config["prioritized"] = True
    steps = 512
    write_trainer(tmp_path, trainer_source("dqn", "cartpole", steps, 0, config))
    host = run_trainer(build_trainer(tmp_path, "host"), "host", steps=steps, seed=1)
    result = drl.dqn.train(
        drl.C(), "cartpole", replace(drl.dqn.config_for("cartpole"), total_steps=steps, **config), seed=1
    )
    assert result.state.priorities is not None
    assert host["checksum"] == weights_checksum(state_weights(result.state))


@pytest.mark.parametrize("dueling", [False, True])
def test_dqn_cartpole_parity_across_targets(tmp_path, dueling):
    """DQN (issue 36) exports too, with the dueling head as well (its combine a C kernel of the
    act program): the host build gives ``train --device c``'s weights, and wasm32-wasi and the
    Cortex-M7 (where their tools are installed) the host's checksum."""
    config = dict(
        hidden=(16,), batch_size=16, buffer_size=1000, learning_starts=100, train_freq=64, gradient_steps=8
    ) | dict(dueling=dueling)
    steps = 512
    write_trainer(tmp_path, trainer_source("dqn", "cartpole", steps, 0, config))
    host = run_trainer(build_trainer(tmp_path, "host"), "host", steps=steps, seed=1)
    result = drl.dqn.train(
        drl.C(), "cartpole", replace(drl.dqn.config_for("cartpole"), total_steps=steps, **config), seed=1
    )
    assert host["checksum"] == weights_checksum(state_weights(result.state))
    assert 8 <= host["eval_return"] <= 500
    # trainer_act after the same run is the host policy's greedy action (a dueling network's
    # argmax of V + A - mean A, not of its raw [V, A] outputs)
    subprocess.run(
        [*host_compiler(), "-O2", "-std=c99", "-ffp-contract=off", "-shared", "-fPIC"]
        + [str(tmp_path / "trainer.c"), "-o", str(tmp_path / "trainer.so"), "-lm"],
        check=True,
    )
    lib = ctypes.CDLL(str(tmp_path / "trainer.so"))
    lib.trainer_init(ctypes.c_uint64(1))
    lib.trainer_run(ctypes.c_int64(steps))
    obs = (10 * np.random.default_rng(0).normal(size=(256, 4))).astype(np.float32)  # wide: both actions
    action = np.zeros(1, np.float32)
    acted = []
    for row in obs:
        lib.trainer_act(row.ctypes.data_as(ctypes.c_void_p), action.ctypes.data_as(ctypes.c_void_p))
        acted.append(int(action[0]))
    expected = result.policy(obs)
    assert len(set(expected.tolist())) > 1  # the test sees both actions
    np.testing.assert_array_equal(acted, expected)
    if dueling:  # its combine is one more portable C kernel: the targets' parity is the plain run's
        return
    assert_targets_match_host(tmp_path, host, steps)
