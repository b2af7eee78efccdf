"""Staged dispatch: a step written once, traced once, compiled per device; disk cache; plum cache."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import plum
import pytest
from testkit import branching_step

import dispatchrl as drl
from dispatchrl import cache, nn
from dispatchrl.backends import cpu as cpu_backend

ROOT = Path(__file__).resolve().parents[1]


def make_problem(device, seed=0, sizes=(5, 8, 8, 1), batch=6, dtype=np.float32):
    g = np.random.default_rng(seed)
    x = g.normal(size=(batch, sizes[0]))
    y = np.sin(x.sum(axis=1, keepdims=True))
    net = nn.mlp(device, sizes, activation="relu", dtype=dtype, seed=seed)
    buffers = nn.mlp_buffers(device, net, batch)
    return net, buffers, drl.asarray(device, x, dtype), drl.asarray(device, y, dtype), drl.zeros(device, 1, dtype)


def weights(net):
    return [drl.to_numpy(p.value) for p in net.parameters()]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_step_equals_unfused_generic(device, dtype):
    steps = 3
    reference = make_problem(drl.Generic(), dtype=dtype)
    for _ in range(steps):
        nn.mlp_train_step(drl.Generic(), *reference)
    problem = make_problem(device, dtype=dtype)
    step = drl.fuse(device, nn.mlp_train_step, *problem)
    step(steps)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, want in zip(weights(problem[0]), weights(reference[0])):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(drl.to_numpy(problem[4]), drl.to_numpy(reference[4]), rtol=10 * tol)
    assert drl.to_numpy(problem[0].weights[0].t)[0] == steps


def test_fused_step_learns_on_cpu():
    problem = make_problem(drl.CPU(), sizes=(5, 32, 32, 1), batch=64)
    step = drl.fuse(drl.CPU(), nn.mlp_train_step, *problem)
    step(1)
    first = drl.to_numpy(problem[4])[0]
    step(500)
    assert drl.to_numpy(problem[4])[0] < 0.1 * first


def test_mlp_tensors_share_flat_storage_and_update_bit_identically(device):
    """Tensors of a multiple of 64 elements are views of one flat Parameter, updated by one Adam
    kernel; the result equals Adam run on each tensor alone, bit for bit on CPU."""
    from dispatchrl.checkpoint import named_arrays

    net = nn.mlp(device, (3, 64, 64, 1), seed=3)
    flat = net.groups[0]
    members = [p for p in net.parameters() if p.t is flat.t]
    assert [p.value.shape for p in members] == [(3, 64), (64,), (64, 64), (64,), (64, 1)]
    assert [p.value.shape for p in net.groups[1:]] == [(1,)]  # the output bias keeps its own storage
    g = np.random.default_rng(0)
    alone = []
    for p in net.parameters():
        drl.assign(p.grad, g.normal(size=p.value.shape))
        copies = [drl.asarray(device, drl.to_numpy(a)) for a in (p.value, p.grad, p.m, p.v)]
        alone.append((*copies, drl.zeros(device, 1, np.int64)))
    for _ in range(3):
        nn.adam_update(device, net, 1e-2)
        for arrays in alone:
            drl.adam_step(device, *arrays, 1e-2, 0.9, 0.999, 1e-8)
    for p, arrays in zip(net.parameters(), alone):
        got, want = drl.to_numpy(p.value), drl.to_numpy(arrays[0])
        if isinstance(device, drl.CPU):
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert int(drl.to_numpy(flat.t)[0]) == 3
    # checkpoints see the per-layer tensors only, never the flat storage twice
    assert all(name.startswith(("weights.", "biases.")) for name, _ in named_arrays(net))


def test_trace_records_resolved_kernels_only():
    problem = make_problem(drl.CPU())
    step = drl.fuse(drl.CPU(), nn.mlp_train_step, *problem)
    # 3 dense_forward + mse_loss + mse_gradient + 3 dense_backward + 6 adam_step (of these widths
    # only the 8×8 weight joins the flat storage, which then holds it alone)
    assert len(step.kernel_calls) == 14
    assert all(cpu_backend.is_numba(kernel) for kernel, _ in step.kernel_calls)


def test_cpu_fused_source_is_cached_on_disk_and_reused(tmp_path):
    env = dict(os.environ, DISPATCHRL_CACHE_DIR=str(tmp_path))
    env.pop("NUMBA_CACHE_DIR", None)  # Numba's cache then lives under DISPATCHRL_CACHE_DIR too
    script = (
        "import numpy as np, dispatchrl as drl\n"
        "from dispatchrl import nn\n"
        "d = drl.CPU(); net = nn.mlp(d, (3, 4, 1)); b = nn.mlp_buffers(d, net, 2)\n"
        "x, y, l = drl.zeros(d, (2, 3)), drl.zeros(d, (2, 1)), drl.zeros(d, 1)\n"
        "drl.fuse(d, nn.mlp_train_step, net, b, x, y, l)(2)\n"
    )
    for _ in range(2):
        subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=ROOT)
        generated = sorted((tmp_path / "fused").glob("fused_*.py"))
        assert len(generated) == 1  # the second process found the same source by its hash
        assert list((tmp_path / "numba").rglob("fused_*.nbi"))  # Numba's cache index for the step


def test_numba_cache_folder_is_keyed_on_package_source():
    import numba

    assert numba.config.CACHE_DIR.endswith(f"dispatchrl-{cache.package_fingerprint()[:16]}")


def test_fused_cache_key_covers_kernel_sources(tmp_path, monkeypatch):
    """A changed kernel source (here: a changed package fingerprint) yields a new cache entry."""
    monkeypatch.setenv("DISPATCHRL_CACHE_DIR", str(tmp_path))
    problem = make_problem(drl.CPU())
    drl.fuse(drl.CPU(), nn.mlp_train_step, *problem)
    monkeypatch.setitem(cache._fingerprints, "<package>", "edited kernel source")
    drl.fuse(drl.CPU(), nn.mlp_train_step, *problem)
    assert len(list((tmp_path / "fused").glob("fused_*.py"))) == 2


def sample_arguments(device):
    """Valid arguments for every public generic function."""
    a, b, out = drl.zeros(device, (3, 4)), drl.zeros(device, (4, 2)), drl.zeros(device, (3, 2))
    v = drl.zeros(device, 2)
    t = drl.zeros(device, 1, np.int64)
    return {
        "matmul": (device, a, b, out),
        "identity": (device, a, drl.zeros(device, (3, 4))),
        "relu": (device, a, drl.zeros(device, (3, 4))),
        "tanh": (device, a, drl.zeros(device, (3, 4))),
        "gelu": (device, a, drl.zeros(device, (3, 4))),
        "dense_forward": (device, a, b, v, out, drl.zeros(device, (3, 2)), "relu"),
        "dense_backward": (
            device,
            a,
            b,
            out,
            out,
            out,
            drl.zeros(device, (3, 2)),
            drl.zeros(device, (4, 2)),
            drl.zeros(device, 2),
            drl.zeros(device, (3, 4)),
            "tanh",
        ),
        "dense_input_gradient": (
            device,
            b,
            out,
            out,
            out,
            drl.zeros(device, (3, 2)),
            drl.zeros(device, (3, 4)),
            "gelu",
        ),
        "mse_loss": (device, out, out, drl.zeros(device, 1)),
        "mse_gradient": (device, out, out, drl.zeros(device, (3, 2))),
        "adam_step": (
            device,
            v,
            drl.zeros(device, 2),
            drl.zeros(device, 2),
            drl.zeros(device, 2),
            t,
            1e-3,
            0.9,
            0.999,
            1e-8,
        ),
        "polyak_update": (device, v, drl.zeros(device, 2), 0.5),
        "weight_decay_step": (device, drl.zeros(device, 2), 0.25),
        "accumulate_squared_norm": (device, drl.zeros(device, 2), drl.zeros(device, 1, np.float64)),
        "clip_by_norm": (device, drl.zeros(device, 2), drl.zeros(device, 1, np.float64), 0.5),
        "linear_schedule": (device, drl.zeros(device, 1, np.int64), 10, 1e-3, 0.0, drl.zeros(device, 1, np.float64)),
        "fill": (device, v, 0.0),
        "copy": (device, v, drl.zeros(device, 2)),
        "clip": (device, a, -1.0, 1.0, drl.zeros(device, (3, 4))),
        "argmax": (device, a, drl.zeros(device, (3, 1))),
        "random_uniform": (device, drl.rng(device, 0), v, 0.0, 1.0),
        "random_normal": (device, drl.rng(device, 0), v, 0.0, 1.0),
        "increment": (device, t, 1),
        "nonfinite_flag": (device, v, drl.zeros(device, 1, np.int64), 1),
    }


def test_every_generic_function_keeps_plum_cache_on(device):
    """Parametric Array types are __faithful__, so plum caches dispatch on argument types."""
    samples = sample_arguments(device)
    core = [
        fn
        for fn in drl.GENERIC_FUNCTIONS
        if fn.__module__ in ("dispatchrl.kernels.core.api", "dispatchrl.kernels.random.api")
    ]
    assert {fn.__name__ for fn in core} == set(samples)
    # plum caches a function's dispatch on argument types only while every method signature is
    # faithful (plum's public Signature.is_faithful; no private plum attribute is read)
    for fn in drl.GENERIC_FUNCTIONS:
        assert all(m.signature.is_faithful for m in fn.function.methods), fn
    for fn in core:
        args = samples[fn.__name__]
        fn(*args)
        # plum sees the declaration's normalised arguments (an activation name becomes an Activation),
        # whose types must be faithful too, and resolves them to this device's method
        normalised = fn.declaration(*args)
        assert all(plum.is_faithful(type(a)) for a in normalised), fn
        implementation, _ = fn.function.resolve_method(normalised)
        own = [m.implementation for m in fn.function.methods if m.signature.types[0] in type(device).__mro__]
        assert implementation in own, fn


def test_generic_fallback_for_new_device():
    class Reference(drl.Generic):
        pass

    dev = drl.Generic()
    a, b, out = (
        drl.asarray(dev, np.eye(2)),
        drl.asarray(dev, [[1.0, 2.0], [3.0, 4.0]]),
        drl.zeros(dev, (2, 2), np.float64),
    )
    drl.matmul(dev, a, b, out)
    ref = Reference()
    a2, b2, out2 = (
        drl.asarray(ref, np.eye(2)),
        drl.asarray(ref, [[1.0, 2.0], [3.0, 4.0]]),
        drl.zeros(ref, (2, 2), np.float64),
    )
    drl.matmul(ref, a2, b2, out2)
    assert drl.matmul.resolve(ref, a2, b2, out2) is drl.matmul.resolve(dev, a, b, out)
    np.testing.assert_array_equal(drl.to_numpy(out2), drl.to_numpy(out))


def test_custom_backend_example_runs():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "custom_backend.py")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "60 dense_forward calls" in result.stdout
    assert "same weights on both devices" in result.stdout


def test_staged_branches_match_eager(device):
    results = []
    for fused in (False, True):
        arrays = [drl.zeros(device, 1, np.int64) for _ in range(3)]
        counter, evens, below = arrays
        x = drl.zeros(device, 1)
        if fused:
            drl.fuse(device, branching_step, counter, x, evens, below)(7)
        else:
            for _ in range(7):
                branching_step(device, counter, x, evens, below)
        results.append([int(drl.to_numpy(a)[0]) for a in arrays])
    assert results[0] == results[1] == [7, 4, 3]


def test_staged_branch_is_generated_as_if(tmp_path, monkeypatch):
    monkeypatch.setenv("DISPATCHRL_CACHE_DIR", str(tmp_path))
    dev = drl.CPU()
    counter, evens, below = (drl.zeros(dev, 1, np.int64) for _ in range(3))
    drl.fuse(dev, branching_step, counter, drl.zeros(dev, 1), evens, below)(1)
    source = next((tmp_path / "fused").glob("fused_*.py")).read_text()
    assert "if a0[0] % 2 == 0:" in source and "else:" in source


def test_fused_step_drops_numba_runtime_only_for_pinned_kernels(tmp_path, monkeypatch):
    """dispatchrl's kernels pin Numba's runtime on, so a fused step of them runs without it (no
    refcounting per call); a user's kernel that allocates and pins nothing keeps it."""
    from numba import njit

    monkeypatch.setenv("DISPATCHRL_CACHE_DIR", str(tmp_path))
    dev = drl.CPU()
    counter, evens, below = (drl.zeros(dev, 1, np.int64) for _ in range(3))
    drl.fuse(dev, branching_step, counter, drl.zeros(dev, 1), evens, below)(1)
    assert "_nrt=False" in next((tmp_path / "fused").glob("fused_*.py")).read_text()

    @njit
    def doubled_via_temporary(x, out):
        tmp = np.empty_like(x)  # needs the runtime
        tmp[:] = 2 * x
        out[:] = tmp

    x, out = drl.asarray(dev, np.arange(4.0)), drl.zeros(dev, 4, np.float64)
    drl.fuse(dev, lambda d: drl.launch(d, doubled_via_temporary, x, out))(3)
    np.testing.assert_array_equal(drl.to_numpy(out), 2 * np.arange(4.0))


def test_blas_runs_single_threaded_by_default():
    """Small RL matrices: BLAS threads only add synchronisation (DISPATCHRL_BLAS_THREADS=0 opts out)."""
    from threadpoolctl import threadpool_info

    blas = [info for info in threadpool_info() if info["user_api"] == "blas"]
    assert blas and all(info["num_threads"] == 1 for info in blas)
