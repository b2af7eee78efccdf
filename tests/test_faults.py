"""Faults lose nothing and leave nothing sticky (issue 40, items 6-12): a full disk at save time
and under the compile cache, a damaged compile cache, the temporaries of killed writers, two runs
on one --save path, Ctrl-C's resume hint, a damaged newest checkpoint.

A full disk is a small tmpfs (mounting one needs root: those tests are skipped elsewhere), filled
up where a test needs the disk to fill during a run."""

import dataclasses
import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import checkpoint
from dispatchrl.cli import main
from dispatchrl.training import driver

HERE = Path(__file__).resolve().parent
WORKER = HERE / "kill_resume_worker.py"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), *sys.path])}


@pytest.fixture()
def small_disk(tmp_path):
    """``small_disk(size)``: a fresh folder with a tmpfs of ``size`` ("1m") mounted on it."""
    mounted = []

    def mount(size: str) -> Path:
        folder = tmp_path / f"disk{len(mounted)}"
        folder.mkdir()
        command = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]
        if shutil.which("mount") is None or subprocess.run(command, capture_output=True).returncode != 0:
            pytest.skip("cannot mount a tmpfs here (needs root): the full-disk cases need a small disk")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path, leave: int = 0) -> None:
    """Fill the disk holding ``folder``, then free ``leave`` bytes again."""
    filler = folder / "filler"
    with open(filler, "ab", buffering=0) as f:
        try:
            while True:
                f.write(bytes(1 << 16))
        except OSError as e:
            assert e.errno == errno.ENOSPC
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tmp"))


@dataclasses.dataclass
class Weights:
    w: drl.Array


def weights(nbytes: int, value: float = 1.0) -> Weights:
    return Weights(drl.asarray(drl.Generic(), np.full(nbytes // 4, value, np.float32)))


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def worker(*args: str) -> subprocess.Popen:
    """`dispatchrl train td3 ARGS` reporting ``STEP n`` at each periodic-checkpoint boundary."""
    return subprocess.Popen(
        [sys.executable, str(WORKER), "td3", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )


def wait_for(process: subprocess.Popen, prefix: str) -> str:
    for line in process.stdout:
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"no {prefix!r} line: {process.communicate()[1][-2000:]}")


# ---------------------------------------------------------------- 6. a full disk at save time


def test_a_full_disk_at_the_final_save_keeps_the_result_and_names_the_last_good_checkpoint(
    small_disk, monkeypatch, capsys
):
    disk = small_disk("16m")
    path = disk / "run"
    assert main(["train", "td3", "--steps", "200", "--no-eval", "--json", "--save", str(path)]) == 0
    before = checkpoint.load(path)
    capsys.readouterr()
    started = driver.Progress.started

    def disk_fills_as_training_starts(self, run):  # another program fills the disk during the run
        started(self, run)
        fill(disk)

    monkeypatch.setattr(driver.Progress, "started", disk_fills_as_training_starts)
    code = main(["train", "td3", "--resume", str(path), "--steps", "400", "--no-eval", "--json", "--save", str(path)])
    out, err = capsys.readouterr()
    assert code == 2
    summary = last_json(out)
    assert summary["status"] == "save_failed" and summary["steps"] == 400 and summary["saved"] is None
    assert summary["episodes"] == 2 and summary["recent_return"] is not None  # the run's result
    assert "No space left on device" in summary["error"]
    assert summary["last_good_checkpoint"] == str(path) + ".npz"
    assert "Traceback" not in err and "dispatchrl: error: CheckpointWriteError" in err
    after = checkpoint.load(path)  # the good checkpoint is whole and unchanged
    assert after[0] == before[0] and all(np.array_equal(after[1][k], before[1][k]) for k in before[1])
    assert not temporaries(disk)


def test_a_disk_without_room_for_the_checkpoints_is_refused_before_anything_compiles(small_disk, monkeypatch, capsys):
    disk = small_disk("1m")
    monkeypatch.setattr(driver, "_NativeLoop", lambda *a: pytest.fail("compiled before checking the disk"))
    for extra in (["--save-every", "100", "--keep", "3"], []):
        code = main(["train", "td3", "--steps", "200", "--no-eval", "--json", "--save", str(disk / "run"), *extra])
        out, err = capsys.readouterr()
        assert code == 2
        summary = last_json(out)
        assert summary["status"] == "error" and "ConfigError" in summary["error"]
        assert f"checkpoint path {disk / 'run'}: its checkpoints need" in summary["error"]
        assert "MiB are free on its disk" in summary["error"]
        assert ("--keep 3 plus the one being written" in summary["error"]) == bool(extra)
    fill(disk)  # no room at all: refused all the same, no traceback
    code = main(["train", "td3", "--steps", "200", "--no-eval", "--json", "--save", str(disk / "full")])
    out, err = capsys.readouterr()
    assert code == 2 and "ConfigError" in last_json(out)["error"] and "Traceback" not in err


def test_a_periodic_save_on_a_full_disk_stops_the_run_and_reports_the_last_good_checkpoint(
    small_disk, monkeypatch, capsys
):
    disk = small_disk("16m")
    path = disk / "run"
    save = driver.PeriodicCheckpoint.save

    def disk_fills_after_the_first_save(self, run):
        written = save(self, run)
        fill(disk)
        return written

    monkeypatch.setattr(driver.PeriodicCheckpoint, "save", disk_fills_after_the_first_save)
    args = ["--steps", "400", "--save-every", "100", "--keep", "2", "--save", str(path)]
    code = main(["train", "td3", *args, "--no-eval", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    summary = last_json(out)
    assert summary["status"] == "save_failed" and summary["steps"] == 200  # stopped where the save failed
    assert summary["last_good_checkpoint"] == str(path / "step-000000000100.npz")
    assert "No space left on device" in summary["error"]
    assert checkpoint.load(path)[0]["steps"] == 100
    assert not temporaries(disk)


def test_rotation_on_a_full_disk_makes_room_from_the_oldest(small_disk):
    disk = small_disk("1m")  # two checkpoints of 400 kB fit, a third does not
    for step in (1, 2, 3):
        checkpoint.save(disk / "run", weights(400_000, step), {"steps": step}, keep=2)
    assert sorted(p.name for p in (disk / "run").glob("step-*.npz")) == [
        "step-000000000002.npz",
        "step-000000000003.npz",
    ]
    meta, arrays = checkpoint.load(disk / "run")
    assert meta["steps"] == 3 and np.all(arrays["w"] == 3)
    assert not temporaries(disk)


def test_a_failed_save_names_the_last_good_checkpoint_and_leaves_no_partial_file(small_disk):
    disk = small_disk("1m")
    checkpoint.save(disk / "run", weights(400_000, 1), {"steps": 1}, keep=1)
    fill(disk)
    with pytest.raises(OSError) as failure:
        checkpoint.save(disk / "run", weights(400_000, 2), {"steps": 2}, keep=1)
    error = failure.value
    assert error.errno == errno.ENOSPC and isinstance(error, drl.DispatchRLError)
    assert error.last_good == str(disk / "run" / "step-000000000001.npz")
    assert "No space left on device" in str(error) and f"resume from {error.last_good}" in str(error)
    assert checkpoint.load(disk / "run")[0]["steps"] == 1
    assert not temporaries(disk)


# ---------------------------------------------------------------- 7, 8. the compile cache

#: a fused step on the device named by argv[1]: on cpu a generated module and Numba's cache of it
#: and of its kernel, on c a generated C library
FUSED = textwrap.dedent("""
    import sys
    import numpy as np
    import dispatchrl as drl
    cpu = drl.devices.device_from_name(sys.argv[1])
    a, out = drl.asarray(cpu, np.arange(6.0).reshape(2, 3) - 2), drl.zeros(cpu, (2, 3), np.float64)
    drl.fuse(cpu, lambda d: drl.relu(d, a, out))(3)
    print("RESULT", drl.to_numpy(out).tolist())
""")
EXPECTED = "RESULT [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]"


def fused_run(cache: Path, device: str = "cpu") -> tuple[int, str, str]:
    env = {**ENV, "DISPATCHRL_CACHE_DIR": str(cache)}
    env.pop("NUMBA_CACHE_DIR", None)
    run = subprocess.run([sys.executable, "-c", FUSED, device], env=env, capture_output=True, text=True, timeout=600)
    return run.returncode, run.stdout, run.stderr


@pytest.mark.parametrize("device", ["cpu", "c"])
@pytest.mark.parametrize("leave", [0, 8192], ids=["full", "nearly full"])
def test_a_full_disk_under_the_compile_cache_costs_no_run(small_disk, leave, device):
    disk = small_disk("1m")
    fill(disk, leave)
    code, out, err = fused_run(disk / "cache", device)
    assert code == 0, err[-3000:]
    assert EXPECTED in out and "Traceback" not in err
    assert "No space left on device" in err  # said once, as a warning
    assert ("is not writable" in err) == (leave == 0)


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache") / "cache"
    for device in ("cpu", "c"):
        code, out, err = fused_run(cache, device)
        assert code == 0 and EXPECTED in out, err[-3000:]
    return cache


@pytest.mark.parametrize("damaged, device", [("fused_*.py", "cpu"), ("*.nbi", "cpu"), ("*.nbc", "cpu"), ("*.so", "c")])
def test_a_damaged_compile_cache_is_discarded_and_recompiled_once(filled_cache, tmp_path, damaged, device):
    cache = tmp_path / "cache"
    shutil.copytree(filled_cache, cache)
    files = list(cache.rglob(damaged))
    assert files
    for file in files:  # truncated, as a crash or a full disk leaves a file
        os.truncate(file, file.stat().st_size // 2)
    code, out, err = fused_run(cache, device)
    assert code == 0, err[-3000:]
    assert EXPECTED in out and "Traceback" not in err
    assert err.count("RuntimeWarning") == 1 and "damaged" in err
    code, out, err = fused_run(cache, device)  # repaired: nothing sticky
    assert code == 0 and EXPECTED in out and "damaged" not in err, err[-3000:]


# ---------------------------------------------------------------- 9. temporaries of killed writers

#: saves a checkpoint and is killed while its temporary is written
KILLED_WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    import dispatchrl as drl
    from dispatchrl import checkpoint

    savez = np.savez

    def slow(f, **arrays):
        savez(f, **arrays)
        f.flush()
        print("WRITING", flush=True)
        time.sleep(300)

    checkpoint.np.savez = slow
    keep = None if sys.argv[2] == "None" else int(sys.argv[2])
    state = {"w": drl.asarray(drl.Generic(), np.ones(100_000, np.float32))}
    checkpoint.save(sys.argv[1], [state["w"]], {"steps": 200}, keep=keep)
""")


@pytest.mark.parametrize("keep", [None, 2])
def test_the_next_save_removes_the_temporaries_of_a_killed_writer(tmp_path, keep):
    path = tmp_path / "run"
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(path), str(keep)], stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert writer.stdout.readline().strip() == "WRITING"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert temporaries(tmp_path)  # a checkpoint-sized leftover
    checkpoint.save(path, [drl.asarray(drl.Generic(), np.ones(10, np.float32))], {"steps": 100}, keep=keep)
    assert not temporaries(tmp_path)
    assert checkpoint.load(path)[0]["steps"] == 100


# ---------------------------------------------------------------- 10. one run per --save path


def test_a_second_run_on_the_same_save_path_is_refused_naming_the_first(tmp_path, capsys):
    path = tmp_path / "run"
    first = worker("--steps", "100000", "--save-every", "1000", "--keep", "2", "--save", str(path), "--no-eval")
    try:
        wait_for(first, "STEP")  # training, its first checkpoint written
        code = main(
            ["train", "td3", "--steps", "200", "--save-every", "100", "--save", str(path), "--no-eval", "--json"]
        )
        out, err = capsys.readouterr()
        assert code == 2
        summary = last_json(out)
        assert summary["status"] == "error" and "another run is saving there" in summary["error"]
        assert f"pid {first.pid} on " in summary["error"] and "kill_resume_worker.py" in summary["error"]
    finally:
        first.kill()
        first.wait()
    assert first.returncode == -signal.SIGKILL  # it was not stopped by the second run
    # its lock died with it: the next run takes it over
    assert main(["train", "td3", "--steps", "200", "--save-every", "100", "--save", str(path), "--no-eval"]) == 0


# ---------------------------------------------------------------- 11. Ctrl-C's resume hint


def test_the_interrupt_hint_resumes_with_the_runs_checkpointing(tmp_path):
    path = tmp_path / "run"
    process = worker(
        "--steps", "6000", "--save-every", "1000", "--keep", "2", "--save", str(path), "--no-eval", "--json"
    )
    wait_for(process, "STEP")
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 130, err[-2000:]
    summary = last_json(out)
    command = summary["resume_command"]
    assert f"continue with: {command}" in err
    words = shlex.split(command)
    assert words[:5] == ["dispatchrl", "train", "td3", "--resume", str(path)]
    assert " ".join(words[5:]).startswith(f"--save {path} --save-every 1000 --keep 2")
    resumed = worker(*words[3:])  # the hinted command, as typed
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err[-2000:]
    assert last_json(out)["saved"] == str(path)
    assert checkpoint.load(path)[0]["steps"] == 6000  # it kept checkpointing to the end


# ---------------------------------------------------------------- 12. a damaged newest checkpoint


def test_a_damaged_newest_checkpoint_warns_naming_both(tmp_path):
    for step in (100, 200):
        checkpoint.save(tmp_path / "run", weights(4000, step), {"steps": step}, keep=3)
    newest = tmp_path / "run" / "step-000000000200.npz"
    os.truncate(newest, newest.stat().st_size // 2)
    with pytest.warns(RuntimeWarning, match=r"step-000000000200\.npz is damaged.*step-000000000100\.npz"):
        meta, _ = checkpoint.load(tmp_path / "run")
    assert meta["steps"] == 100


def test_resuming_without_save_warns_that_the_run_is_not_checkpointed(tmp_path, capsys):
    path = tmp_path / "run"
    assert main(["train", "td3", "--steps", "200", "--save-every", "100", "--save", str(path), "--no-eval"]) == 0
    capsys.readouterr()
    assert main(["train", "td3", "--resume", str(path), "--no-eval"]) == 0
    assert f"--resume without --save: the resumed run is not checkpointed; add --save {path} --save-every N" in (
        capsys.readouterr().err
    )
