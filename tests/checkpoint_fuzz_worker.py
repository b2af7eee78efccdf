"""Subprocess side of the checkpoint fuzz test (tests/test_checkpoint.py): resume from mutated
checkpoints, one JSON line per case, so that a crash (a segfault included) is seen by the parent
as a missing line and can never take the test process down with it.

    python checkpoint_fuzz_worker.py CASES.json RESULTS.jsonl FIRST_CASE
"""

import hashlib
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

import dispatchrl as drl
from dispatchrl import checkpoint

__all__ = ["RUNS", "mutate", "run_case", "state_hash", "train"]

#: algo → (config of the saved run, config of the resumed run); small, replay buffer wrapped
RUNS = {
    "td3": (
        dict(total_steps=300, warmup_steps=100, batch_size=16, hidden=(8,), replay_capacity=200),
        dict(total_steps=400, warmup_steps=100, batch_size=16, hidden=(8,), replay_capacity=200),
    ),
    "ppo": (
        dict(total_steps=128, num_envs=8, steps_per_env=16, batch_size=32, hidden=(8,)),
        dict(total_steps=256, num_envs=8, steps_per_env=16, batch_size=32, hidden=(8,)),
    ),
}


def train(algo, which, resume=None):
    module = getattr(drl, algo)
    config = module.Config(**RUNS[algo][("saved", "resumed").index(which)])
    return module.train(drl.CPU(), "pendulum", config, seed=3, progress=False, resume=resume)


def state_hash(result):
    h = hashlib.sha256()
    for name, arr in checkpoint.named_arrays(result.state):
        h.update(name.encode())
        h.update(drl.to_numpy(arr).tobytes())
    return h.hexdigest()[:24]


def _decode(value):
    return float(value) if isinstance(value, str) else value  # "nan", "inf" travel as strings


_bases = {}


def mutate(source, target, case):
    """Write checkpoint ``target`` from ``source`` with one field changed: ``raw`` keeps the old
    digest (an edit or corruption), ``signed`` recomputes it (a crafted checkpoint)."""
    if source not in _bases:
        _bases[source] = checkpoint.load(source)
    meta, arrays = json.loads(json.dumps(_bases[source][0])), dict(_bases[source][1])
    value = _decode(case["value"])
    if case["kind"] == "none":
        pass
    elif case["kind"] == "array":
        arr = arrays[case["field"]].copy()
        with np.errstate(all="ignore"):
            if arr.dtype.kind == "b":
                value = bool(value)
            elif arr.dtype.kind in "iu":
                info = np.iinfo(arr.dtype)
                value = int(min(max(int(value), info.min), info.max)) if math.isfinite(value) else 0
            arr.reshape(-1)[case["index"] % arr.size] = value
        arrays[case["field"]] = arr
    else:
        node = meta
        *parents, leaf = case["field"].split(".")
        for key in parents:
            node = node[key]
        node[leaf] = value
    if case["mode"] == "signed":
        checkpoint.write(target, arrays, meta)
        return
    digest = meta["digest"]
    meta.pop("digest")
    document = {**meta, "digest": digest}
    entry = np.frombuffer(json.dumps(document, allow_nan=True).encode(), np.uint8)
    np.savez(checkpoint.paths(target)[0], **arrays, **{checkpoint.METADATA_ENTRY: entry})


def run_case(case, directory):
    target = Path(directory) / f"case{case['id']}"
    mutate(case["base"], target, case)
    try:
        result = train(case["algo"], "resumed", resume=target)
    except drl.CheckpointError as e:
        return {"outcome": "refused", "message": str(e)}
    except drl.ConfigError as e:  # e.g. metadata that names another env's dimensions
        return {"outcome": "config", "message": str(e)}
    except drl.TrainingDiverged as e:  # crafted weights or Adam moments (v < 0) that train into NaN
        return {"outcome": "diverged", "message": str(e)}
    return {"outcome": "resumed", "hash": state_hash(result)}


def main(cases_path, results_path, first):
    cases = json.loads(Path(cases_path).read_text())
    with open(results_path, "a") as out, tempfile.TemporaryDirectory() as directory:
        for case in cases[first:]:
            out.write(json.dumps({"id": case["id"], "started": True}) + "\n")
            out.flush()
            record = run_case(case, directory)
            out.write(json.dumps({"id": case["id"], **record}) + "\n")
            out.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
