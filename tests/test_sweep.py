"""dispatchrl sweep: SPEC validation, an Optuna study (outputs, failed trials, resume) and the
same SPEC on a local Ray instance."""

import csv
import json

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import ConfigError
from dispatchrl.cli import main

optuna = pytest.importorskip("optuna")
sweeps = pytest.importorskip("dispatchrl.sweep")

SPEC = {
    "algo": "td3",
    "env": "pendulum",
    "steps": 2000,
    "trials": 2,
    "seeds": [0],
    "workers": 2,
    "config": {"hidden": [32, 32]},
    "space": {"actor_lr": {"log_uniform": [1e-4, 3e-3]}, "gamma": {"uniform": [0.95, 0.995]}},
}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"space": {"actor_lrr": {"uniform": [0.1, 0.2]}}}, "actor_lrr"),
        ({"space": {"gamma": {"uniform": [0.9, 1.5]}}}, "gamma"),
        ({"space": {}}, "space is empty"),
        ({"space": {"batch_size": {"choice": []}}}, "batch_size"),
        ({"space": {"actor_lr": {"uniform": [0.2, 0.1]}}}, "actor_lr"),
        ({"space": {"actor_lr": {"normal": [0.1, 0.2]}}}, "normal"),
        ({"objective": "loss"}, "objective"),
        ({"budget": 3}, "budget"),
        ({"config": {"batch_size": 0}}, "batch_size"),
    ],
)
def test_bad_specs_name_the_field(change, named):
    with pytest.raises(ConfigError, match=named):
        sweeps.parse_spec({**SPEC, **change})


def rows(out):
    with open(out / "trials.csv") as f:
        return list(csv.DictReader(f))


def test_optuna_sweep_writes_study_csv_best_config_and_resumes(tmp_path):
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(SPEC))
    out = tmp_path / "out"
    assert main(["sweep", str(spec_path), "--out", str(out)]) == 0
    first = rows(out)
    assert [r["state"] for r in first] == ["COMPLETE", "COMPLETE"]
    assert (out / "study.db").exists()
    # best_config.json: flat Config fields that train (what `train --config` reads)
    best = json.loads((out / "best_config.json").read_text())
    winner = max(first, key=lambda r: float(r["objective"]))
    assert best["actor_lr"] == float(winner["param_actor_lr"]) and best["total_steps"] == 2000
    config = drl.td3.Config(**{k: tuple(v) if isinstance(v, list) else v for k, v in best.items()})
    result = drl.td3.train(drl.CPU(), "pendulum", config, seed=0)
    assert result.history["returns"].size > 0
    # a killed study leaves a trial RUNNING; resume to 4 trials reruns it and keeps the others
    study = optuna.load_study(study_name="dispatchrl", storage=f"sqlite:///{out / 'study.db'}")
    killed = study.ask({"actor_lr": optuna.distributions.FloatDistribution(1e-4, 3e-3, log=True)})
    spec_path.write_text(json.dumps({**SPEC, "trials": 4, "workers": 1}))
    with pytest.raises(ConfigError, match="resume"):
        sweeps.sweep(sweeps.load_spec(spec_path), out)
    assert main(["sweep", str(spec_path), "--out", str(out), "--resume"]) == 0
    resumed = rows(out)
    assert resumed[:2] == first
    assert resumed[killed.number]["error"] == "interrupted"
    finished = [r for r in resumed if r["state"] in ("COMPLETE", "PRUNED")]
    assert len(finished) == 4
    assert float(finished[2]["param_actor_lr"]) == killed.params["actor_lr"]  # rerun first
    assert sweeps.report(out)["best"][0]["objective"] == max(float(r["objective"]) for r in resumed if r["objective"])


def test_failing_trial_is_recorded_and_the_study_goes_on(tmp_path):
    spec = sweeps.parse_spec(
        {**SPEC, "trials": 2, "workers": 1, "space": {"network": {"choice": ["no_such_module_19:make"]}}}
    )
    summary = sweeps.sweep(spec, tmp_path)
    assert summary["failed"] == 2
    assert all("no_such_module_19" in r["error"] for r in rows(tmp_path))


def test_ray_engine_gives_the_same_trial_records(tmp_path):
    pytest.importorskip("ray.tune")
    import ray

    spec = sweeps.parse_spec(SPEC)
    optuna_out, ray_out = tmp_path / "optuna", tmp_path / "ray"
    sweeps.sweep(spec, optuna_out, workers=1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        sweeps.sweep(spec, ray_out, engine="ray", workers=2)
    finally:
        ray.shutdown()
    local, remote = rows(optuna_out), rows(ray_out)
    assert len(remote) == 2 and list(remote[0]) == list(local[0])
    assert [r["state"] for r in remote] == ["COMPLETE", "COMPLETE"]
    # a trial's record does not depend on the engine: rerun a Ray trial's parameters here
    params = {"actor_lr": float(remote[0]["param_actor_lr"]), "gamma": float(remote[0]["param_gamma"])}
    again = sweeps.run_trial(spec, params)
    assert np.float64(remote[0]["objective"]) == again["objective"]
