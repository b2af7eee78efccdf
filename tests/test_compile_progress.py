"""Compilation that talks (issue 34): while the fused steps compile, the progress display says
what is compiling (kernel i of n, then the fused step), the seconds elapsed and, after a first run,
the last compile time; off a terminal a plain line every ``interval`` seconds."""

import io
import json
import re
import time
from types import SimpleNamespace

import numpy as np
import pytest
from testkit import kernel_module

import dispatchrl as drl
from dispatchrl.algorithms import td3
from dispatchrl.backends import precompile
from dispatchrl.backends.cpu import njit_program
from dispatchrl.staging import compile_activity
from dispatchrl.training.progress import COMPILE_TIMES, Progress
from dispatchrl.training.runs import EpisodeHistory


def fake_run(steps, total):
    return SimpleNamespace(
        steps=steps,
        total_steps=total,
        finished=False,
        history=EpisodeHistory(),
        algo=td3,
        spec=SimpleNamespace(name="pendulum"),
    )


def wait_for(stream, text, timeout=20.0):
    """The output once ``text`` appears in it (the heartbeat is a thread)."""
    deadline = time.monotonic() + timeout
    while text not in stream.getvalue():
        assert time.monotonic() < deadline, f"{text!r} never printed: {stream.getvalue()!r}"
        time.sleep(0.01)
    return stream.getvalue()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DISPATCHRL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    return tmp_path / "cache"


def test_plain_heartbeat_says_the_kernel_the_elapsed_time_and_last_times_estimate(cache):
    kernels = [0]
    stream = io.StringIO()
    bar = Progress(stream=stream, interval=0.05)
    bar.compiling("compiling fused TD3 step (cpu)", key="td3/pendulum/cpu")
    out = wait_for(stream, "s elapsed")  # before any program: the elapsed time alone
    assert re.fullmatch(r"dispatchrl: compiling fused TD3 step \(cpu\): \d+ s elapsed", out.splitlines()[1])
    with compile_activity.kernels(lambda: (kernels[0], 23)):
        wait_for(stream, "kernel 1/23, ")
        kernels[0] = 6
        wait_for(stream, "kernel 7/23, ")
        kernels[0] = 23
        wait_for(stream, "the fused step, ")
    bar.started(fake_run(0, 1000))
    printed = len(stream.getvalue())
    time.sleep(0.2)
    assert len(stream.getvalue()) == printed  # the heartbeat stopped with the compile
    times = json.loads((cache / COMPILE_TIMES).read_text())
    assert set(times) == {"td3/pendulum/cpu"} and set(times["td3/pendulum/cpu"]) == {"cold"}

    # the next run of the same program: the estimate, once it is known to compile kernels again
    stream = io.StringIO()
    bar = Progress(stream=stream, interval=0.05)
    bar.compiling("compiling fused TD3 step (cpu)", key="td3/pendulum/cpu")
    last = times["td3/pendulum/cpu"]["cold"]
    with compile_activity.kernels(lambda: (0, 23)):
        out = wait_for(stream, f" s elapsed ({last:.0f} s last time)")
    assert re.search(r"compiling fused TD3 step \(cpu\): kernel 1/23, \d+ s elapsed \(\d+ s last time\)", out)
    bar.close()


def test_a_broken_compile_times_file_gives_no_estimate_and_no_failure(cache):
    cache.mkdir(parents=True)
    (cache / COMPILE_TIMES).write_text("{not json")
    stream = io.StringIO()
    bar = Progress(stream=stream, interval=0.05)
    bar.compiling("compiling fused TD3 step (cpu)", key="td3/pendulum/cpu")
    with compile_activity.kernels(lambda: (0, 2)):
        out = wait_for(stream, "kernel 1/2")
    bar.started(fake_run(0, 1000))
    assert "last time" not in out
    assert json.loads((cache / COMPILE_TIMES).read_text())["td3/pendulum/cpu"]["cold"] >= 0  # rewritten


def test_on_a_terminal_the_bar_shows_the_phase_and_elapsed_time_not_0_of_unknown(cache, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich treats the stream as a terminal
    stream = io.StringIO()
    bar = Progress(stream=stream)
    bar.compiling("compiling fused TD3 step (cpu)")
    assert bar.mode == "rich"
    with compile_activity.kernels(lambda: (2, 5)):
        out = wait_for(stream, " s elapsed")
    bar.close()
    assert re.search(r"compiling fused TD3 step \(cpu\)….*kernel 3/5, \d+ s elapsed", out)
    assert "0/?" not in stream.getvalue()


KERNELS = """
from numba import njit


@njit(cache=True)
def add_one(a):
    for i in range(a.size):
        a[i] += 1.0


@njit(cache=True)
def double(a):
    for i in range(a.size):
        a[i] *= 2.0
"""


def test_the_cpu_backend_reports_its_cold_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("DISPATCHRL_COMPILE_WORKERS", "0")
    with kernel_module(tmp_path, monkeypatch, "progress_probe", KERNELS) as module:
        a = drl.zeros(drl.CPU(), 3)
        calls = [(module.add_one, (a,)), (module.double, (a,)), (module.add_one, (a,))]
        probe = precompile.kernel_progress(precompile.cold_kernels(calls))
        assert probe() == (0, 2)  # two distinct kernels to compile
        cold = compile_activity.cold_kernels
        njit_program(calls)(1)
        assert probe() == (2, 2)
        assert compile_activity.cold_kernels == cold + 2
        assert compile_activity.probe is None  # reported only while compiling
        np.testing.assert_array_equal(a.data, np.full(3, 3.0, a.data.dtype))
