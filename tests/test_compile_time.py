"""What keeps a cold CPU compile short: one kernel specialization per signature (not per int
value), and the helper process that compiles a step's kernels into the shared Numba cache."""

import subprocess

import numpy as np
import pytest
from numba import njit, types
from testkit import kernel_module

import dispatchrl as drl
from dispatchrl.backends import precompile
from dispatchrl.backends.cpu import JIT_EXACT, before_first_run, njit_program
from dispatchrl.errors import ConfigError
from dispatchrl.kernels.core import cpu as core_cpu


def _fresh(kernel):
    # a new dispatcher of the kernel's function: not importable by name, so the fused step is
    # compiled (not loaded from the disk cache) and types its calls in this process
    return njit(**JIT_EXACT)(kernel.py_func)


def _literal_signatures(kernel):
    return [sig for sig in kernel.signatures if any(isinstance(t, types.Literal) for t in sig)]


def test_int_arguments_do_not_specialize_kernels_per_value(monkeypatch):
    monkeypatch.setenv("DISPATCHRL_COMPILE_WORKERS", "0")
    increment_kernel, nonfinite_flag_kernel = _fresh(core_cpu.increment_kernel), _fresh(core_cpu.nonfinite_flag_kernel)
    cpu = drl.CPU()
    counter = drl.zeros(cpu, 1, np.int64)
    x = drl.asarray(cpu, np.array([1.0, np.inf], np.float32))
    flag = drl.zeros(cpu, 1, np.int64)
    run = njit_program(
        [(increment_kernel, (counter, 1)), (increment_kernel, (counter, 20)), (nonfinite_flag_kernel, (x, flag, 7))]
    )
    run(2)
    assert int(drl.to_numpy(counter)[0]) == 42
    assert int(drl.to_numpy(flag)[0]) == 7
    assert increment_kernel.signatures and nonfinite_flag_kernel.signatures  # typed here
    assert not _literal_signatures(increment_kernel)
    assert not _literal_signatures(nonfinite_flag_kernel)


def test_before_first_run_hooks_run_once_the_step_is_compiled(monkeypatch):
    # the tiled GEMM drivers are loaded this way: after the step's compile, before its first run
    monkeypatch.setenv("DISPATCHRL_COMPILE_WORKERS", "0")
    increment_kernel = _fresh(core_cpu.increment_kernel)
    counter = drl.zeros(drl.CPU(), 1, np.int64)
    seen = []
    before_first_run(lambda: seen.append(list(increment_kernel.signatures)))
    run = njit_program([(increment_kernel, (counter, 1))])
    assert len(seen) == 1 and seen[0]  # once, and the step's kernels were compiled by then
    assert int(drl.to_numpy(counter)[0]) == 0  # before the first run
    run(3)
    njit_program([(increment_kernel, (counter, 1))])
    assert len(seen) == 1 and int(drl.to_numpy(counter)[0]) == 3  # a hook runs for one step only


def test_predicted_signatures_are_the_ones_the_step_compiles(monkeypatch):
    # the helper is only useful if it compiles exactly what the fused step asks for
    monkeypatch.setenv("DISPATCHRL_COMPILE_WORKERS", "0")
    monkeypatch.setattr(precompile, "_disk_cached", lambda kernel, signature: False)
    increment_kernel, nonfinite_flag_kernel = _fresh(core_cpu.increment_kernel), _fresh(core_cpu.nonfinite_flag_kernel)
    add_rows = njit(**JIT_EXACT)(_add_rows)
    cpu = drl.CPU()
    counter = drl.zeros(cpu, 1, np.int64)
    x = drl.asarray(cpu, np.array([[1.0, 2.0]], np.float32))
    flag = drl.zeros(cpu, 1, np.int64)
    calls = [(increment_kernel, (counter, 3)), (nonfinite_flag_kernel, (x, flag, 2)), (add_rows, (x, x, x))]
    jobs = precompile.kernel_signatures(calls)
    assert [name for _, name, _ in jobs] == ["increment_kernel", "nonfinite_flag_kernel", "_add_rows"]
    njit_program(calls)(1)
    for (_, _, signature), kernel in zip(jobs, (increment_kernel, nonfinite_flag_kernel, add_rows), strict=True):
        assert kernel.signatures == [signature]
    # a *args kernel's tail is one tuple type, as Numba folds it when called
    assert len(jobs[2][2]) == 2 and isinstance(jobs[2][2][1], types.BaseTuple) and len(jobs[2][2][1]) == 2
    np.testing.assert_array_equal(drl.to_numpy(x), [[4.0, 8.0]])  # x += x, twice


def _add_rows(out, *rows):
    for row in rows[:2]:
        out[0, 0] += row[0, 0]
        out[0, 1] += row[0, 1]


KERNEL_MODULE = """
from numba import njit


@njit(cache=True)
def add_one(a):
    for i in range(a.size):
        a[i] += 1.0


def prepare():  # a before_first_run hook: the helper runs it first
    open(__file__ + ".prepared", "w").close()
"""


@pytest.mark.parametrize("fork", [True, False] if precompile.FORK else [False])
def test_helper_runs_the_prepares_then_fills_the_disk_cache(tmp_path, monkeypatch, fork):
    # forked (Linux) or a new Python process fed the job list (elsewhere)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("DISPATCHRL_COMPILE_WORKERS", "1")
    monkeypatch.setattr(precompile, "MIN_SIGNATURES", 1)
    monkeypatch.setattr(precompile, "FORK", fork)
    with kernel_module(tmp_path, monkeypatch, "precompile_probe", KERNEL_MODULE) as module:
        kernel = module.add_one
        a = drl.zeros(drl.CPU(), 3)
        helper = precompile.start_precompile([(kernel, (a,))], [module.prepare])
        assert isinstance(helper, precompile.ForkedHelper if fork else subprocess.Popen)
        assert helper.wait(timeout=300) == 0
        assert (tmp_path / f"{module.__name__}.py.prepared").exists()
        assert precompile.kernel_signatures([(kernel, (a,))]) == []  # in the disk cache now
        kernel(a.data)
        assert kernel.stats.cache_hits  # loaded, not compiled, in this process
        np.testing.assert_array_equal(a.data, np.ones(3, a.data.dtype))


MANY_KERNELS = "from numba import njit\n" + "".join(
    f"\n@njit(cache=True)\ndef add_{k}(a):\n    for i in range(a.size):\n        a[i] += {k}.0\n" for k in range(8)
)


@pytest.mark.skipif(not precompile.FORK, reason="the claims table is the forked helper's")
def test_the_forked_helper_and_this_process_share_the_jobs_without_overlap(tmp_path, monkeypatch):
    """This process claims kernels from the front, the helper from the back: each kernel is
    compiled once, and when compile_share returns the helper's are all in the disk cache."""
    monkeypatch.setenv("DISPATCHRL_COMPILE_WORKERS", "1")
    with kernel_module(tmp_path, monkeypatch, "precompile_share", MANY_KERNELS) as module:
        kernels = [getattr(module, f"add_{k}") for k in range(8)]
        a = drl.zeros(drl.CPU(), 3)
        helper = precompile.start_precompile([(kernel, (a,)) for kernel in kernels])
        assert isinstance(helper, precompile.ForkedHelper)
        precompile.compile_share(helper)
        claims = list(helper.claims)
        assert helper.wait(timeout=300) == 0
        assert set(claims) <= {precompile.PARENT, precompile.FINISHED} and precompile.PARENT in claims
        for kernel, claim in zip(kernels, claims, strict=True):
            kernel(a.data)
            # compiled here (a cache miss) or by the helper (a hit here), never both
            assert bool(kernel.stats.cache_misses) == (claim == precompile.PARENT)
            assert bool(kernel.stats.cache_hits) == (claim == precompile.FINISHED)
        np.testing.assert_array_equal(a.data, np.full(3, sum(range(8)), a.data.dtype))


def test_compile_workers_setting(monkeypatch):
    monkeypatch.setenv("DISPATCHRL_COMPILE_WORKERS", "0")
    assert precompile.compile_workers() == 0
    assert precompile.start_precompile([]) is None
    monkeypatch.setenv("DISPATCHRL_COMPILE_WORKERS", "two")
    with pytest.raises(ConfigError, match="DISPATCHRL_COMPILE_WORKERS"):
        precompile.compile_workers()


@pytest.mark.parametrize("level", [1, None])
def test_fused_steps_compile_at_the_step_opt_level_and_leave_numbas_own(monkeypatch, level):
    """A fused step and the kernels it compiles see Numba's OPT at STEP_OPT_LEVEL (None: the
    user's NUMBA_OPT stands); the process's setting is back afterwards."""
    import numba
    from numba.core import event

    from dispatchrl.backends import cpu as cpu_backend

    monkeypatch.setenv("DISPATCHRL_COMPILE_WORKERS", "0")
    monkeypatch.setattr(cpu_backend, "STEP_OPT_LEVEL", level)
    before = int(numba.config.OPT)
    seen = {}

    class Record(event.Listener):
        def on_start(self, ev):
            seen[ev.data["dispatcher"].py_func.__name__] = int(numba.config.OPT)

        def on_end(self, ev):
            pass

    counter = drl.zeros(drl.CPU(), 1, np.int64)
    with event.install_listener("numba:compile", Record()):
        njit_program([(_fresh(core_cpu.increment_kernel), (counter, 1))])(3)
    expected = before if level is None else level
    assert seen["fused_step"] == expected and set(seen.values()) == {expected}
    assert int(numba.config.OPT) == before and int(drl.to_numpy(counter)[0]) == 3


def test_steps_fused_together_share_one_helper(monkeypatch):
    """fuse_steps on CPU starts one precompile helper for all the steps' cold kernels (the later
    steps' compiled while this process compiles the first), and no helper per step; the steps run
    as fused one by one."""
    from dispatchrl.backends import cpu as cpu_backend
    from dispatchrl.staging import fuse_steps, kernel_calls

    started = []

    class Finished:  # a helper whose jobs are done
        def poll(self):
            return 0

    def start(calls, prepares=(), compiling=None):
        started.append([kernel for kernel, _ in kernel_calls(calls)])
        return Finished()

    monkeypatch.setattr(cpu_backend, "start_precompile", start)
    cpu = drl.CPU()
    counter, flag = drl.zeros(cpu, 1, np.int64), drl.zeros(cpu, 1, np.int64)
    x = drl.asarray(cpu, np.array([[1.0, np.nan]], np.float32))

    def count(device, counter):
        drl.increment(device, counter, 2)

    def check(device, x, flag):
        drl.nonfinite_flag(device, x, flag, 5)

    counting, checking = fuse_steps(cpu, (count, counter), (check, x, flag))
    assert len(started) == 1 and {k.py_func.__name__ for k in started[0]} >= {
        "increment_kernel",
        "nonfinite_flag_kernel",
    }
    counting(3)
    checking()
    assert int(drl.to_numpy(counter)[0]) == 6 and int(drl.to_numpy(flag)[0]) == 5
    assert checking.compile_seconds >= 0 and len(checking.kernel_calls) == 1
