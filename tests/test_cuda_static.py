"""The fused CUDA kernels as a real GPU would take them, checked without one (benchmarks/cuda_static.py):
TD3's step and the demo step compiled for sm_90 by real numba-cuda and ptxas must not spill and must
launch at their block size, and no kernel launch may receive an argument real CUDA refuses (the
simulator runs ``None``; an H100 refused GAE's ``returns=None`` in Nov 2026).

The compile needs real numba-cuda (``DISPATCHRL_CUDA_PYTHON``: a Python with ``dispatchrl[cuda-static]``,
default this one) and ptxas (see ``find_tool``); without them those tests skip and say why."""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import dispatchrl as drl

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cuda_static.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("cuda_static", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tool():
    return load_tool()


def test_a_none_argument_is_refused_before_the_simulator_runs_it(cuda_device):
    # the H100 failure: GAE's kernel launched with returns=None, which only the simulator runs
    from dispatchrl.backends.cuda import launch_1d
    from dispatchrl.kernels.onpolicy.cuda import gae_kernel

    arrays = [drl.zeros(cuda_device, (3, 2)) for _ in range(3)]
    flags = [drl.zeros(cuda_device, (3, 2), np.bool_) for _ in range(2)]
    advantage = drl.zeros(cuda_device, (3, 2))
    with pytest.raises(drl.DeviceError, match=r"gae_kernel: argument 'returns' is None"):
        launch_1d(cuda_device, gae_kernel, 2, *arrays, *flags, 0.9, 0.95, advantage, None, False)


def test_refused_arguments_are_named(cuda_device):
    from dispatchrl.backends.cuda import refused_argument

    assert refused_argument(None) == "None"
    assert refused_argument((1.0, None)) == "a tuple holding None"
    # the wrapper (launch unwraps it), not its device buffer
    assert refused_argument(drl.zeros(cuda_device, 2)).startswith("an object of type Array")
    for taken in (1, 2.5, True, np.float32(1), np.uint64(3), np.zeros(2), drl.zeros(cuda_device, 2).data):
        assert refused_argument(taken) is None


SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0020*/                   LDS.64 R6, [R3] ;
        /*0030*/                   FFMA R8, R2, R6, R8 ;
        /*0040*/                   FFMA R9, R2, R7, R9 ;
        /*0050*/               @P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0060*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0070*/                   FMUL R3, R2, R2 ;
        /*0080*/                   F2F.F64.F32 R4, R3 ;
        /*0090*/                   DADD R6, R6, R4 ;
        /*00a0*/                   IADD3 R5, R5, 0x1, RZ ;
        /*00b0*/               @P1 BRA `(.L_x_2) ;
.L_x_3:
        /*00c0*/                   FFMA R2, R2, R3, R4 ;
        /*00d0*/                   STG.E desc[UR4][R4.64], R2 ;
        /*00e0*/               @P2 BRA `(.L_x_3) ;
.L_x_4:
        /*00e8*/                   DFMA R2, R2, R3, R4 ;
        /*00ec*/               @P3 BRA `(.L_x_5) ;
        /*00ed*/                   DFMA R2, R2, R3, R4 ;
.L_x_5:
        /*00ee*/               @P2 BRA `(.L_x_4) ;
.L_x_6:
.L_x_7:
        /*0100*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0110*/                   STS [R3], R2 ;
        /*0120*/               @P1 BRA `(.L_x_7) ;
        /*0130*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0140*/                   LDS R6, [R3] ;
        /*0150*/                   FFMA R8, R2, R6, R8 ;
        /*0160*/                   FFMA R9, R2, R6, R9 ;
        /*0170*/                   FFMA R10, R2, R6, R10 ;
        /*0180*/               @P0 BRA `(.L_x_6) ;
        /*0190*/                   LDS R9, [R3] ;
        /*01a0*/                   EXIT ;
"""


def test_sass_per_mac_counts_the_dense_loops_only(tool):
    # loop 1: 5 instructions, 2 FFMA; loop 2: 6 instructions, FMUL + DADD = 1 multiply-add; loop 3
    # stores every pass (an elementwise loop) and loop 4 is float64 polynomial math: not dense loops;
    # loop 6, a tiled pass: 9 instructions with its nested staging loop, 3 FFMA of its own
    stats = tool.sass_stats(SASS)
    assert stats["mac_loops"] == 3
    assert stats["sass_per_mac"] == round((5 + 6 + 9) / 6, 2)
    assert stats["lds"] == 3
    assert stats["lds_bytes_per_mac"] == round((8 + 4) / 6, 3)


def test_launch_limits(tool):
    assert tool.max_block(64) == 1024 and tool.max_block(72) == 896 and tool.max_block(146) == 416
    kernel = tool.FusedKernel("k", "", {}, [], 512, 0, [], 0.0, 1)
    resources = {"registers": 146, "shared_bytes": 0}
    assert tool.launch_problems(kernel, resources) == ["146 registers × 512 threads > 65536 (largest block 416)"]
    assert tool.launch_problems(kernel, {"registers": 64, "shared_bytes": 50_000})


def test_the_model_by_call_adds_up_to_its_prediction(tool):
    # a dense call on 256 of 512 threads, run twice a step, and an elementwise call on thread 0 only
    dense = tool.Call("dense_forward_block", (64, 64, 100, 32), 2.0, 409_600, 4096, 0, None, 1600, 256)
    other = tool.Call("increment_block", (), 1.0, 0, 1, 0, 3)
    kernel = tool.FusedKernel("k", "", {}, [], 512, 0, [dense, other], 0.0, 10**9)
    rows = tool.call_rows(kernel, 3.5)
    assert [r["form"] for r in rows] == ["dense_forward_block", "increment_block"]
    assert rows[0]["threads"] == 256 and rows[0]["runs_per_step"] == 2.0 and rows[1]["sizes"] is None
    # the dense call: 1600 multiply-adds x 3.5 instructions at 5.4 cycles each (8 warps: latency-bound)
    assert rows[0]["issue_us"] == round(2 * 1600 * 3.5 * tool.LATENCY_CPI / (tool.CLOCK_GHZ * 1000), 2)
    predicted = tool.predict(kernel, 3.5)["predicted_us"]
    assert abs(sum(r["us"] for r in rows) - predicted) < 0.02


def compile_python() -> str:
    return os.environ.get("DISPATCHRL_CUDA_PYTHON", sys.executable)


@pytest.fixture(scope="module")
def compiled(tool, tmp_path_factory):
    """TD3's fused step and the demo step, built in the simulator and compiled for sm_90."""
    python = compile_python()
    why = tool.real_compiler(python)
    if why:
        pytest.skip(f"{why} (set DISPATCHRL_CUDA_PYTHON to a Python with dispatchrl[cuda-static])")
    if tool.find_tool("ptxas", python) is None:
        pytest.skip("ptxas not found (DISPATCHRL_PTXAS, DISPATCHRL_CUDA_BIN, the nvidia-cuda-nvcc wheel or PATH)")
    launches = []
    kernels = tool.build("td3", replay_steps=200, launches=launches) + tool.build("demo", 1, launches=launches)
    results = tool.compile_kernels(
        kernels, (90,), python, tmp_path_factory.mktemp("cuda_static"), log=lambda m: None, disassemble=False
    )
    return kernels, results, launches


def test_fused_kernels_compile_without_spills(compiled):
    kernels, results, _ = compiled
    assert [k.program for k in kernels] == ["td3", "demo"]
    for index, kernel in enumerate(kernels):
        r = results[(index, 90)]
        assert r["registers"] > 0
        assert (r["spill_stores"], r["spill_loads"]) == (0, 0), f"{kernel.program} spills at sm_90: {r}"


def test_fused_kernels_launch_at_their_block_size(tool, compiled):
    kernels, results, _ = compiled
    for index, kernel in enumerate(kernels):
        assert tool.launch_problems(kernel, results[(index, 90)]) == [], kernel.program
    for row in tool.rows(kernels, results, (90,)):
        assert set(tool.KEYS) <= set(row) and row["launchable"] and row["predicted_us"] > 0
        assert row["macs_per_step"] > 0 and row["barriers_per_step"] >= 1


def test_no_refused_argument_reaches_a_kernel(compiled):
    from dispatchrl.backends.cuda import refused_argument

    _, _, launches = compiled
    assert any(record.name == "fused_step" for record in launches)
    refused = [
        (record.name, index, why)
        for record in launches
        for index, value in enumerate(record.args)
        if (why := refused_argument(value))
    ]
    assert refused == []
