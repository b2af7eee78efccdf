"""Checkpoint files: atomic writes, rotation, migrations, and hostile or broken content refused
(the fuzz test resumes every mutation in a subprocess, so a crash is caught, not suffered)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import checkpoint
from dispatchrl.algorithms import td3

sys.path.insert(0, str(Path(__file__).parent))
import checkpoint_fuzz_worker as worker

WORKER = Path(worker.__file__)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved TD3 and PPO run (small; TD3's replay buffer has wrapped) and the hash of each
    resumed without changes."""
    directory = tmp_path_factory.mktemp("fuzz")
    bases = {}
    for algo in worker.RUNS:
        path = directory / algo
        worker.train(algo, "saved").save(path)
        bases[algo] = (path, worker.state_hash(worker.train(algo, "resumed", resume=path)))
    return bases


def run_cases(cases, tmp_path, timeout=900):
    """Run ``cases`` in worker subprocesses; a case whose worker dies gets outcome "crash"
    (exit status recorded) and the next worker starts after it."""
    cases_path, results_path = tmp_path / "cases.json", tmp_path / "results.jsonl"
    cases_path.write_text(json.dumps(cases))
    results, first = {}, 0
    while first < len(cases):
        done = subprocess.run(
            [sys.executable, str(WORKER), str(cases_path), str(results_path), str(first)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=os.environ.copy(),
        )
        records = [json.loads(line) for line in results_path.read_text().splitlines()]
        for record in records:
            if "outcome" in record:
                results[record["id"]] = record
        if done.returncode == 0:
            break
        started = [r["id"] for r in records if r.get("started") and r["id"] not in results]
        assert started, f"worker failed before any case: {done.stderr[-2000:]}"
        results[started[-1]] = {"outcome": "crash", "returncode": done.returncode, "stderr": done.stderr[-500:]}
        first = started[-1] + 1
    return [results.get(case["id"], {"outcome": "missing"}) for case in cases]


def numeric_fields(document, prefix=""):
    for key, value in document.items():
        if isinstance(value, dict):
            yield from numeric_fields(value, f"{prefix}{key}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield prefix + key


#: integer leaves whose huge values must be refused (their owners bound them); negative values of
#: every integer leaf must be
BOUNDED = (
    "step",
    "updates",
    "permutation",
    ".t",
    "replay.position",
    "replay.size",
    "episodes.count",
    "episodes.end_steps",
    "episodes.running_length",
    "env_state.steps",
)


def fuzz_cases(bases, seed=0):
    """Every field of every checkpoint in both modes: crafted ("signed") cases try every kind of
    bad integer; float fields and metadata numbers rotate through NaN, inf, huge and random
    values (a resume per case costs ~0.1 s: this keeps the test near a minute)."""
    g = np.random.default_rng(seed)
    cases = []
    for algo, (path, _) in bases.items():
        meta, arrays = checkpoint.load(path)

        def add(**case):
            cases.append({"id": len(cases), "algo": algo, "base": str(path), **case})

        add(kind="none", mode="signed", field="", index=0, value=0)
        for j, (name, value) in enumerate(sorted(arrays.items())):
            if value.size == 0:  # e.g. the history of a run that finished no episode yet
                continue
            index = int(g.integers(value.size))
            kind = value.dtype.kind
            if kind == "i":
                values = [-1, -1_000_000, 1_000_000_000, 2**62, int(g.integers(0, 50))]
            elif kind == "u":
                values = [0, 2**64 - 1, int(g.integers(0, 2**63))]
            elif kind == "f":
                values = ["nan", "inf", -1e30, float(g.normal())]
            else:
                values = [int(not value.reshape(-1)[index])]
            signed = values if kind in "iub" else [values[j % len(values)]]
            for mode, chosen in (("signed", signed), ("raw", [values[(j + 1) % len(values)]])):
                for v in chosen:
                    add(kind="array", mode=mode, field=name, index=index, value=v)
        for j, name in enumerate(numeric_fields({k: v for k, v in meta.items() if k not in ("version", "digest")})):
            values = (-5, 1_000_000_000, "nan", int(g.integers(0, 10)))
            for mode, v in (("signed", values[j % 4]), ("raw", values[(j + 1) % 4])):
                add(kind="meta", mode=mode, field=name, index=0, value=v)
    return cases


def test_untouched_checkpoint_resumes_like_an_uninterrupted_run(saved):
    straight = td3.train(drl.CPU(), "pendulum", td3.Config(**worker.RUNS["td3"][1]), seed=3, progress=False)
    assert worker.state_hash(straight) == saved["td3"][1]


def test_issue_crashes_refused_naming_the_field(saved, tmp_path):
    """The issue's reproductions (replay.position = 1e9 segfaulted, -1e6 wrote before the buffer,
    step = -5 trained 5 steps too many): refused before any kernel runs."""
    path = saved["td3"][0]
    cases = [
        dict(id=i, algo="td3", base=str(path), kind="array", mode="signed", field=field, index=0, value=value)
        for i, (field, value) in enumerate(
            (
                ("replay.position", 10**9),
                ("replay.position", -(10**6)),
                ("step", -5),
                ("replay.size", 10**9),
                ("step", 10**9),
            )
        )
    ]
    for case, result in zip(cases, run_cases(cases, tmp_path)):
        assert result["outcome"] == "refused", (case, result)
        assert f"'{case['field']}' = {case['value']}" in result["message"] and "allowed range" in result["message"]


def test_fuzz_every_field(saved, tmp_path):
    """Every integer, float and flag of a TD3 and a PPO checkpoint, and every number of their
    metadata, set to random, negative, huge and NaN values. Edited files (digest not updated)
    are refused or resume exactly like the untouched one. Crafted files (digest recomputed) never
    crash; negative integers, non-finite floats and out-of-range counters are refused naming
    the field; weights that train into NaN stop with TrainingDiverged (outcome "diverged")."""
    cases = fuzz_cases(saved)
    results = run_cases(cases, tmp_path)
    problems = []
    for case, result in zip(cases, results):
        outcome = result["outcome"]
        expected = saved[case["algo"]][1]
        if outcome in ("crash", "missing"):
            problems.append((case, result))
        elif case["kind"] == "none":
            if result.get("hash") != expected:
                problems.append((case, result))
        elif case["mode"] == "raw":
            if not (outcome == "refused" or (outcome == "resumed" and result["hash"] == expected)):
                problems.append((case, result))
        elif case["kind"] == "array":
            value = case["value"]
            must_refuse = (
                value in ("nan", "inf")
                or (isinstance(value, int) and value < 0)
                or (case["field"].endswith(BOUNDED) and isinstance(value, int) and value >= 10**9)
            )
            if must_refuse and not (outcome == "refused" and f"'{case['field']}'" in result["message"]):
                problems.append((case, result))
    assert not problems, f"{len(problems)} of {len(cases)} cases: {problems[:5]}"
    outcomes = {o: sum(r["outcome"] == o for r in results) for o in ("refused", "resumed", "config", "diverged")}
    assert outcomes["refused"] > 0 and outcomes["resumed"] > 0, outcomes


# ---------------------------------------------------------------- format: atomic, rotated, migrated


@pytest.fixture()
def small_state():
    from dispatchrl.data import replay_buffer

    return replay_buffer(drl.CPU(), 4, 2, 1)


def test_save_is_one_file_and_reads_back(small_state, tmp_path):
    drl.assign(small_state.obs, np.arange(8.0).reshape(4, 2))
    paths = checkpoint.save(tmp_path / "run", small_state, {"steps": 3})
    assert paths == (tmp_path / "run.npz", tmp_path / "run.json") and sorted(os.listdir(tmp_path)) == [
        "run.json",
        "run.npz",
    ]
    meta, arrays = checkpoint.load(tmp_path / "run")
    assert meta["steps"] == 3 and meta["version"] == checkpoint.VERSION
    assert json.loads((tmp_path / "run.json").read_text()) == meta  # the readable copy
    np.testing.assert_array_equal(arrays["obs"], np.arange(8.0).reshape(4, 2))


def test_a_failed_save_leaves_the_previous_checkpoint_whole(small_state, tmp_path, monkeypatch):
    checkpoint.save(tmp_path / "run", small_state, {"steps": 1})
    before = (tmp_path / "run.npz").read_bytes()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # e.g. Ctrl-C or a kill while the arrays are written

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(tmp_path / "run", small_state, {"steps": 2})
    assert (tmp_path / "run.npz").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["run.json", "run.npz"]  # no temporary left behind
    assert checkpoint.load(tmp_path / "run")[0]["steps"] == 1


def test_rotation_keeps_the_newest_and_latest_finds_it(small_state, tmp_path):
    directory = tmp_path / "ckpts"
    for step in (100, 200, 300, 400):
        checkpoint.save(directory, small_state, {"steps": step}, keep=2)
    assert sorted(os.listdir(directory)) == [
        "step-000000000300.json",
        "step-000000000300.npz",
        "step-000000000400.json",
        "step-000000000400.npz",
    ]
    assert checkpoint.latest(directory) == directory / "step-000000000400.npz"
    assert checkpoint.load(directory)[0]["steps"] == 400
    # a damaged newest file (e.g. a disk fault) falls back to the one before
    (directory / "step-000000000400.npz").write_bytes(b"not a zip")
    assert checkpoint.latest(directory) == directory / "step-000000000300.npz"
    with pytest.raises(drl.CheckpointError, match="no checkpoint"):
        checkpoint.latest(tmp_path)
    with pytest.raises(drl.CheckpointError, match="'keep' must be a positive int"):
        checkpoint.save(directory, small_state, {"steps": 500}, keep=0)


def test_resume_from_a_rotated_directory(tmp_path):
    """``--resume DIR`` continues from the newest checkpoint in it."""
    config = dict(total_steps=300, warmup_steps=100, batch_size=16, hidden=(8,))
    first = td3.train(drl.CPU(), "pendulum", td3.Config(**config), seed=0, progress=False)
    first.save(tmp_path / "single")
    checkpoint.save(tmp_path / "dir", first.state, checkpoint.load(tmp_path / "single")[0], keep=3)
    # the same 400-step run, resumed from the single checkpoint and from the rotated directory
    longer = {**config, "total_steps": 400}
    a, b = (
        td3.train(drl.CPU(), "pendulum", td3.Config(**longer), seed=0, progress=False, resume=tmp_path / at)
        for at in ("single", "dir")
    )
    assert worker.state_hash(a) == worker.state_hash(b)


def test_version_1_checkpoint_loads_through_its_migration(small_state, tmp_path):
    """Version 1 kept the metadata in PATH.json beside the arrays."""
    arrays = {name.rstrip("."): drl.to_numpy(a) for name, a in checkpoint.named_arrays(small_state)}
    arrays["obs"][1, 1] = 5.0
    np.savez(tmp_path / "old.npz", **arrays)
    (tmp_path / "old.json").write_text(json.dumps({"format": checkpoint.FORMAT, "version": 1, "steps": 7}))
    meta, loaded = checkpoint.load(tmp_path / "old")
    assert meta["version"] == checkpoint.VERSION and meta["steps"] == 7
    checkpoint.restore(small_state, loaded)
    assert drl.to_numpy(small_state.obs)[1, 1] == 5.0


def test_registered_migration_runs(small_state, tmp_path, monkeypatch):
    """A future format (here one version past today's, renaming a field) reads today's files via a
    migration registered for today's version."""
    current = checkpoint.VERSION
    checkpoint.save(tmp_path / "now", small_state, {"steps": 1, "old_name": 9})
    monkeypatch.setattr(checkpoint, "VERSION", current + 1)
    monkeypatch.setitem(checkpoint.MIGRATIONS, current, None)

    @checkpoint.migration(from_version=current)
    def rename(document, arrays):
        document["new_name"] = document.pop("old_name")
        document["version"] = current + 1
        return document, arrays

    meta, _ = checkpoint.load(tmp_path / "now")
    assert meta["version"] == current + 1 and meta["new_name"] == 9 and "old_name" not in meta
    # and a file newer than this reader is refused
    monkeypatch.setattr(checkpoint, "VERSION", current - 1)
    with pytest.raises(drl.CheckpointError, match=f"checkpoint version {current}"):
        checkpoint.load(tmp_path / "now")
