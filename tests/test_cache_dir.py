"""The compiled-kernel cache (DISPATCHRL_CACHE_DIR): an unusable directory falls back to a
temporary one with a warning; processes sharing one directory neither crash nor corrupt it."""

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import cache

#: trains TD3 on the C device (shared libraries in the cache) and runs a fused CPU step
#: (generated module and Numba cache), printing a hash of the results
TRAIN = textwrap.dedent("""
    import hashlib
    import numpy as np
    import dispatchrl as drl
    from dispatchrl import checkpoint
    r = drl.td3.train(drl.C(), "pendulum", drl.td3.Config(total_steps=300, warmup_steps=100, batch_size=16,
                                                           hidden=(8,)), seed=0, progress=False)
    h = hashlib.sha256(b"".join(drl.to_numpy(a).tobytes() for _, a in checkpoint.named_arrays(r.state)))
    cpu = drl.CPU()
    a, out = drl.asarray(cpu, np.arange(6.0).reshape(2, 3) - 2), drl.zeros(cpu, (2, 3), np.float64)
    drl.fuse(cpu, lambda d: drl.relu(d, a, out))(3)
    h.update(drl.to_numpy(out).tobytes())
    print("RESULT", h.hexdigest())
""")


def run_training(cache, **popen):
    env = {**os.environ, "DISPATCHRL_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("NUMBA_CACHE_DIR", None)  # the Numba cache too lives in DISPATCHRL_CACHE_DIR
    return subprocess.Popen(
        [sys.executable, "-c", TRAIN], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )


def test_two_processes_share_a_fresh_cache_dir(tmp_path):
    cache = tmp_path / "cache"
    runs = [run_training(cache) for _ in range(2)]
    outputs = [run.communicate(timeout=600) for run in runs]
    for run, (_, err) in zip(runs, outputs):
        assert run.returncode == 0, err[-3000:]
    results = [next(line for line in out.splitlines() if line.startswith("RESULT")) for out, _ in outputs]
    assert results[0] == results[1]
    leftovers = [p for p in cache.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".write-test")]
    assert not leftovers
    assert list((cache / "c").glob("*.so")) and list((cache / "fused").glob("*.py"))
    # and a third process reuses what they left
    third = run_training(cache)
    out, err = third.communicate(timeout=600)
    assert third.returncode == 0 and results[0] in out, err[-3000:]


def test_unwritable_cache_dir_falls_back_with_a_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file, so no directory can be made below it")
    monkeypatch.setenv("DISPATCHRL_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(RuntimeWarning, match="is not writable.*cached in .* for this process only"):
        fallback = cache.cache_dir()
    assert fallback.is_dir() and os.access(fallback, os.W_OK) and fallback != blocker / "cache"
    assert cache.cache_dir() == fallback  # decided once per process
    cpu = drl.CPU()
    x, out = drl.asarray(cpu, np.array([-1.0, 2.0])), drl.zeros(cpu, 2, np.float64)
    drl.fuse(cpu, lambda d: drl.relu(d, x, out))()
    np.testing.assert_array_equal(drl.to_numpy(out), [0.0, 2.0])
    assert list((fallback / "fused").glob("*.py"))


@pytest.fixture()
def read_only(tmp_path):
    """A directory this process cannot write: mode 0o555, or for root (which ignores modes) the
    immutable attribute (chattr +i, where the filesystem and capabilities allow it)."""
    directory = tmp_path / "ro"
    directory.mkdir()
    directory.chmod(0o555)
    immutable = False
    if os.geteuid() == 0:
        chattr = shutil.which("chattr")
        immutable = (
            chattr is not None and subprocess.run([chattr, "+i", str(directory)], capture_output=True).returncode == 0
        )
        if not immutable:
            pytest.skip("root writes a 0o555 directory, and chattr +i is not available here")
    yield directory
    if immutable:
        subprocess.run([str(chattr), "-i", str(directory)], check=True)


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_read_only_cache_dir_falls_back(read_only, monkeypatch):
    monkeypatch.setenv("DISPATCHRL_CACHE_DIR", str(read_only))
    with pytest.warns(RuntimeWarning, match="is not writable"):
        fallback = cache.cache_dir()
    assert fallback != read_only and os.access(fallback, os.W_OK) and not os.listdir(read_only)


def test_read_only_cache_dir_in_a_fresh_process(tmp_path):
    """End to end, as a user would meet it: a warning on stderr, the run completes."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = run_training(blocker / "cache")
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err[-3000:]
    assert "RESULT" in out and "is not writable" in err and "Traceback" not in err


SCRIPT = textwrap.dedent("""
    import itertools, os
    import numpy as np
    from numba import njit
    from numba.core import bytecode
    import dispatchrl as drl

    if os.environ.get("RENAME_KERNELS"):  # as if another process had compiled them: other symbols
        bytecode.FunctionIdentity._unique_ids = itertools.count(10**6)

    @njit(cache=True)
    def halve(x, out):
        for i in range(x.size):
            out[i] = 0.5 * x[i]

    @drl.generic
    def halved(device, x, out):
        return device, x, out

    @halved.dispatch
    def _(device: drl.CPU, x, out):
        drl.launch(device, halve, x, out)

    cpu = drl.CPU()
    x, out = drl.asarray(cpu, np.arange(4.0)), drl.zeros(cpu, 4, np.float64)
    step = drl.fuse(cpu, lambda d: halved(d, x, out))
    step(1)
    print("RESULT", drl.to_numpy(out).tolist(), step._run.program.stats.cache_hits != {})
""")


def test_a_scripts_fused_step_is_cached_across_runs(tmp_path):
    """A script's kernels live in ``__main__``: the fused step imports them through an alias named
    by the script's path, so the script run again loads its step from the disk cache."""
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "DISPATCHRL_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("NUMBA_CACHE_DIR", None)
    runs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True) for _ in range(2)]
    results = [next(line for line in r.stdout.splitlines() if line.startswith("RESULT")) for r in runs]
    assert results == ["RESULT [0.0, 0.5, 1.0, 1.5] False", "RESULT [0.0, 0.5, 1.0, 1.5] True"], runs[1].stderr


def test_a_cached_step_whose_kernel_was_recompiled_compiles_again(tmp_path):
    """A fused step calls its kernels' compiled code by symbol, and Numba's symbols carry a
    per-process counter: when a kernel's cache entry was replaced by another process's compile,
    the cached step is a miss (compiled again, no warning), not a crash; the run after loads the
    replacement."""
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "DISPATCHRL_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("NUMBA_CACHE_DIR", None)

    def run(**more):
        done = subprocess.run([sys.executable, str(script)], env={**env, **more}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        return next(line for line in done.stdout.splitlines() if line.startswith("RESULT")), done.stderr

    assert run()[0] == "RESULT [0.0, 0.5, 1.0, 1.5] False"
    indexes = list((tmp_path / "cache").rglob("*halve*.nbi"))
    assert indexes
    for index in indexes:  # the kernel's entry goes; the step's stays
        index.unlink()
    result, err = run(RENAME_KERNELS="1")
    assert result == "RESULT [0.0, 0.5, 1.0, 1.5] False" and "Warning" not in err, err[-3000:]
    assert run()[0] == "RESULT [0.0, 0.5, 1.0, 1.5] True"


def test_a_fused_step_holds_no_copy_of_its_kernels():
    """The step's module declares its kernels and calls their compiled code (a copy linked in
    would be optimised and compiled to machine code again, 1.3 s of TD3's cold compile)."""
    cpu = drl.CPU()
    a, out = drl.asarray(cpu, np.arange(6.0).reshape(2, 3) - 2), drl.zeros(cpu, (2, 3), np.float64)
    step = drl.fuse(cpu, lambda d: drl.relu(d, a, out))
    step(1)
    assert drl.to_numpy(out).tolist() == [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]
    library = next(iter(step._run.program.overloads.values())).library
    module = library._shared_module or library._final_module
    defined = {f.name for f in module.functions if not f.is_declaration}
    symbols = {c.fndesc.mangled_name for kernel, _ in step.kernel_calls for c in kernel.overloads.values()}
    assert symbols and not symbols & defined
