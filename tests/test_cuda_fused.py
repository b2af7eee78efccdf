"""The fused CUDA step: one single-block kernel launch per ``step(n)`` (in the simulator here; on a
GPU with NUMBA_ENABLE_CUDASIM=0). Simulated threads are Python threads, so shapes and step counts
stay small; the single-block program itself does not depend on the block size."""

import numpy as np
import pytest
from testkit import branching_step

import dispatchrl as drl
from dispatchrl import nn
from dispatchrl.errors import ConfigError
from dispatchrl.staging import compile_step, python_program, trace

cuda_backend = pytest.importorskip("dispatchrl.backends.cuda")


def regression(device, sizes, batch):
    """The ``dispatchrl demo`` step (MLP regression, MSE + Adam) on ``device``."""
    net = nn.mlp(device, sizes, activation="relu", seed=0)
    buffers = nn.mlp_buffers(device, net, batch)
    loss = drl.zeros(device, 1)
    g = np.random.default_rng(0)
    x = g.uniform(-2, 2, size=(batch, sizes[0]))
    y = np.sin(x).sum(axis=1, keepdims=True) * np.arange(1, sizes[-1] + 1)
    args = (net, buffers, drl.asarray(device, x, np.float32), drl.asarray(device, y, np.float32), loss)
    return net, loss, args


def state(net, loss) -> list:
    return [drl.to_numpy(p.value) for p in net.parameters()] + [drl.to_numpy(loss)]


def assert_close(got: list, want: list, rtol: float) -> None:
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * 1e-2)


def test_demo_step_is_one_launch_and_matches_cpu(cuda_device):
    sizes, batch, steps = (4, 64, 64, 1), 100, 2  # the demo's shapes; ~7 s per simulated step
    net, loss, args = regression(cuda_device, sizes, batch)
    step = drl.fuse(cuda_device, nn.mlp_train_step, *args)
    program = step._run
    assert program.kernels == 1 and not hasattr(program, "unfused")
    assert program.block_size == cuda_backend.FUSED_BLOCK
    assert "for _ in range(n):" in program.source and "cuda.syncthreads()" in program.source
    step(steps)
    assert program.launches == 1  # all steps inside one launch

    cpu = drl.CPU()
    cpu_net, cpu_loss, cpu_args = regression(cpu, sizes, batch)
    drl.fuse(cpu, nn.mlp_train_step, *cpu_args)(steps)
    assert_close(state(net, loss), state(cpu_net, cpu_loss), rtol=2e-5)


@pytest.mark.parametrize("block_size", [32, 64])
def test_fused_matches_launch_loop_and_cpu(cuda_device, block_size):
    sizes, batch, steps = (3, 8, 8, 2), 10, 4
    runs = {}
    for path in ("fused", "launches"):
        net, loss, args = regression(cuda_device, sizes, batch)
        with trace([]) as calls:
            nn.mlp_train_step(cuda_device, *args)
        if path == "fused":
            program = cuda_backend.block_program(calls, block_size)
            program(steps - 1)
            program(1)
            assert program.launches == 2
        else:
            python_program(calls)(steps)
        runs[path] = state(net, loss)
    cpu = drl.CPU()
    cpu_net, cpu_loss, cpu_args = regression(cpu, sizes, batch)
    drl.fuse(cpu, nn.mlp_train_step, *cpu_args)(steps)
    # the same per-element bodies in both CUDA paths (the loss reduction may sum in another order)
    assert_close(runs["fused"], runs["launches"], rtol=1e-6)
    assert_close(runs["fused"], state(cpu_net, cpu_loss), rtol=2e-5)


def test_branches_run_on_the_device_in_one_launch(cuda_device):
    counter, evens, below = (drl.zeros(cuda_device, 1, np.int64) for _ in range(3))
    x = drl.asarray(cuda_device, np.full(5, 8.0), np.float32)
    step = drl.fuse(cuda_device, branching_step, counter, x, evens, below)
    step(7)
    assert step._run.kernels == 1 and step._run.launches == 1
    assert [int(drl.to_numpy(a)[0]) for a in (counter, evens, below)] == [7, 4, 3]
    np.testing.assert_array_equal(drl.to_numpy(x), np.full(5, 8.0, np.float32))  # polyak of x with itself


def test_profiled_step_counts_each_call_and_its_clock(cuda_device, monkeypatch):
    """benchmarks/cuda_profile.py's hook: thread 0 counts every executed call (branches included)
    and adds the clock between barriers; the step's results are unchanged."""
    monkeypatch.setattr(cuda_backend, "PROFILE", True)
    monkeypatch.setattr(cuda_backend, "PROFILED", [])
    counter, evens, below = (drl.zeros(cuda_device, 1, np.int64) for _ in range(3))
    x = drl.asarray(cuda_device, np.full(5, 8.0), np.float32)
    step = drl.fuse(cuda_device, branching_step, counter, x, evens, below)
    step(7)
    assert cuda_backend.PROFILED == [step._run]
    assert [int(drl.to_numpy(a)[0]) for a in (counter, evens, below)] == [7, 4, 3]
    cycles, counts = step._run.read_profile()
    labels = step._run.profile_labels
    assert [label.split("[")[0] for label in labels] == ["increment_kernel"] * 2 + [
        "polyak_update_kernel",
        "increment_kernel",
    ]
    assert counts.tolist() == [4, 3, 4, 7]  # evens (Every 2), below (Below 3), else polyak, counter
    assert (cycles > 0).all()


def doubled(device, x):
    drl.staging.launch(device, lambda data: data.copy_to_device(data.copy_to_host() * 2), x)
    drl.increment(device, x)


def test_step_without_block_form_falls_back_to_launches_and_names_it(cuda_device):
    x = drl.zeros(cuda_device, 1, np.int64)
    step = drl.fuse(cuda_device, doubled, x)
    assert step._run.unfused == ["<lambda>"] and "no block-level form for <lambda>" in step._run.fallback
    step(3)
    np.testing.assert_array_equal(drl.to_numpy(x), [7])  # ((0*2+1)*2+1)*2+1
    with trace([]) as calls:
        doubled(cuda_device, x)
    assert cuda_backend.unfused_kernels(calls) == ["<lambda>"]
    with pytest.raises(ConfigError, match="no block-level form for <lambda>"):
        cuda_backend.block_program(calls)


@pytest.mark.parametrize("block_size", [0, 48, 2048])
def test_block_size_must_be_a_power_of_two_within_limits(cuda_device, block_size):
    counter = drl.zeros(cuda_device, 1, np.int64)
    with trace([]) as calls:
        drl.increment(cuda_device, counter)
    with pytest.raises(ConfigError, match="block_size"):
        cuda_backend.block_program(calls, block_size)


def test_compile_step_is_the_block_program(cuda_device):
    counter = drl.zeros(cuda_device, 1, np.int64)
    with trace([]) as calls:
        drl.increment(cuda_device, counter, 3)
    program = compile_step(cuda_device, calls)
    program(4)
    assert program.kernels == 1 and program.launches == 1
    assert int(drl.to_numpy(counter)[0]) == 12


@pytest.fixture
def recorded_programs(monkeypatch):
    """Every program compile_step(CUDA) builds; a launch-loop fallback fails the test."""
    programs: list = []
    block_program = cuda_backend.block_program

    def recording(calls, block_size=None):
        programs.append(block_program(calls, block_size))
        return programs[-1]

    def refused(calls):
        raise AssertionError(f"fell back to launches for {cuda_backend.unfused_kernels(calls)}")

    monkeypatch.setattr(cuda_backend, "FUSED_BLOCK", 16)  # simulated threads are Python threads
    monkeypatch.setattr(cuda_backend, "block_program", recording)
    monkeypatch.setattr(cuda_backend, "python_program", refused)
    return programs


SMALL_RUNS = {
    "td3": dict(total_steps=10, warmup_steps=4, batch_size=4, hidden=(4, 4)),
    # 2 updates (the second sampling by the priorities the first wrote): the simulator runs each CUDA
    # thread in Python (~15 s a run, ~30 s for 6 updates)
    "sac": dict(total_steps=6, warmup_steps=4, batch_size=4, hidden=(4, 4)),
    # two iterations of 4 envs x 8 steps, with GAE, observation normalisation and adaptive lr
    "ppo": dict(total_steps=64, num_envs=4, steps_per_env=8, batch_size=16, hidden=(4, 4), adaptive_lr=True),
}


@pytest.mark.parametrize(
    ("algorithm", "env", "extra"),
    [
        ("td3", "pendulum", {}),
        ("sac", "pendulum", {}),
        ("td3", "acrobot", {}),
        pytest.param("sac", "pendulum", {"prioritized": True}, id="sac-pendulum-prioritized"),
        ("ppo", "pendulum", {}),
    ],
)
def test_training_fuses_to_one_kernel_per_step_and_matches_cpu(cuda_device, recorded_programs, algorithm, env, extra):
    module = getattr(drl, algorithm)
    config = module.Config(**SMALL_RUNS[algorithm], **extra)
    on_cuda = module.train(cuda_device, env, config, seed=0)
    assert recorded_programs and all(p.kernels == 1 for p in recorded_programs)
    on_cpu = module.train(drl.CPU(), env, config, seed=0)
    obs = np.random.default_rng(0).standard_normal((5, on_cpu.spec.obs_dim)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(on_cuda.policy(obs)), np.asarray(on_cpu.policy(obs)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(on_cuda.history["returns"], on_cpu.history["returns"], rtol=1e-5)


def test_large_shapes_keep_the_launch_loop(cuda_device, monkeypatch):
    sizes, batch = (3, 8, 8, 2), 10  # largest call: 10 x 8 x 8 multiply-adds
    net, loss, args = regression(cuda_device, sizes, batch)
    with trace([]) as calls:
        nn.mlp_train_step(cuda_device, *args)
    assert cuda_backend.block_work(calls) == 10 * 8 * 8
    monkeypatch.setattr(cuda_backend, "SINGLE_BLOCK_MAX_WORK", 10 * 8 * 8 - 1)
    step = drl.fuse(cuda_device, nn.mlp_train_step, *args)
    assert step._run.unfused == [] and "SINGLE_BLOCK_MAX_WORK" in step._run.fallback
    step(1)
    assert np.isfinite(drl.to_numpy(loss)).all()


def test_every_cuda_kernel_has_a_block_level_form(cuda_device):
    """A new kernel without a form would silently send its whole step back to the launch loop."""
    import importlib

    kernels = {
        f"{module}.{name}": value
        for module in drl.CUDA.method_modules
        for name, value in vars(importlib.import_module(module)).items()
        if name.endswith("_kernel") and callable(value)
    }
    assert len(kernels) > 40
    missing = sorted(name for name, kernel in kernels.items() if kernel not in cuda_backend.BLOCK_FORMS)
    assert not missing


def test_weight_decay_step_runs_inside_the_fused_kernel(cuda_device):
    x = drl.asarray(cuda_device, np.arange(1, 6, dtype=np.float32))
    step = drl.fuse(cuda_device, lambda d: drl.weight_decay_step(d, x, 0.25))
    assert step._run.kernels == 1 and not getattr(step._run, "unfused", None)
    step(2)
    np.testing.assert_allclose(drl.to_numpy(x), np.arange(1, 6) * 0.75**2, rtol=1e-6)


def test_too_many_arrays_for_one_kernel_keep_the_launch_loop(cuda_device, monkeypatch):
    net, loss, args = regression(cuda_device, (3, 8, 8, 2), 10)
    step = drl.fuse(cuda_device, nn.mlp_train_step, *args)
    assert 0 < step._run.parameter_bytes <= cuda_backend.MAX_PARAMETER_BYTES
    monkeypatch.setattr(cuda_backend, "MAX_PARAMETER_BYTES", step._run.parameter_bytes - 1)
    step = drl.fuse(cuda_device, nn.mlp_train_step, *args)
    assert step._run.unfused == [] and "MAX_PARAMETER_BYTES" in step._run.fallback


@pytest.mark.parametrize("width", [5, 12, 300])  # 300: over BIAS_LANES_WIDTH, one thread per column
def test_fused_bias_gradient_sums_by_lanes_with_the_same_bits_at_any_block(cuda_device, width):
    from dispatchrl.kernels.core import api as core

    g = np.random.default_rng(width)
    batch, n_in = 37, 3  # rows not a multiple of the lanes
    host = {
        "x": g.normal(size=(batch, n_in)),
        "W": g.normal(size=(n_in, width)),
        "pre": g.normal(size=(batch, width)),
        "out": g.normal(size=(batch, width)),
        "d_out": g.normal(size=(batch, width)),
    }
    sums = []
    for block_size in (16, 64):
        a = {k: drl.asarray(cuda_device, v, np.float32) for k, v in host.items()}
        d_pre, dW, db = (
            drl.zeros(cuda_device, (batch, width)),
            drl.zeros(cuda_device, (n_in, width)),
            drl.zeros(cuda_device, width),
        )
        with trace([]) as calls:
            core.dense_backward(cuda_device, a["x"], a["W"], a["pre"], a["out"], a["d_out"], d_pre, dW, db)
        cuda_backend.block_program(calls, block_size)(1)
        sums.append(drl.to_numpy(db))
    np.testing.assert_array_equal(sums[0], sums[1])
    d_pre64 = host["d_out"].astype(np.float32).astype(np.float64)  # identity activation: d_pre = d_out
    np.testing.assert_allclose(sums[0], d_pre64.sum(axis=0), rtol=1e-5, atol=1e-5)
