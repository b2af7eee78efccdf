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
from dispatchrl.algorithms import common, td3

sys.path.insert(0, str(Path(__file__).parent))
import checkpoint_fuzz_worker as worker  # noqa: E402

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
        done = subprocess.run([sys.executable, str(WORKER), str(cases_path), str(results_path), str(first)],
                              capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
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
BOUNDED = ("step", "updates", "perm", ".t", "replay.position", "replay.size", "log.count", "log.end_steps",
           "log.running_length", "env_state.steps")


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
    cases = [dict(id=i, algo="td3", base=str(path), kind="array", mode="signed", field=field, index=0, value=value)
             for i, (field, value) in enumerate((("replay.position", 10**9), ("replay.position", -10**6),
                                                 ("step", -5), ("replay.size", 10**9), ("step", 10**9)))]
    for case, result in zip(cases, run_cases(cases, tmp_path)):
        assert result["outcome"] == "refused", (case, result)
        assert f"'{case['field']}' = {case['value']}" in result["message"] and "allowed range" in result["message"]


def test_fuzz_every_field(saved, tmp_path):
    """Every integer, float and flag of a TD3 and a PPO checkpoint, and every number of their
    metadata, set to random, negative, huge and NaN values. Edited files (digest not updated)
    are refused or resume exactly like the untouched one. Crafted files (digest recomputed) never
    crash; negative integers, non-finite floats and out-of-range counters are refused naming
    the field."""
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
            must_refuse = (value in ("nan", "inf") or (isinstance(value, int) and value < 0)
                           or (case["field"].endswith(BOUNDED) and isinstance(value, int) and value >= 10**9))
            if must_refuse and not (outcome == "refused" and f"'{case['field']}'" in result["message"]):
                problems.append((case, result))
    assert not problems, f"{len(problems)} of {len(cases)} cases: {problems[:5]}"
    outcomes = {o: sum(r["outcome"] == o for r in results) for o in ("refused", "resumed", "config")}
    assert outcomes["refused"] > 0 and outcomes["resumed"] > 0, outcomes
