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


CHEAP = {**SPEC, "steps": 400, "objective": "auc", "prune": False, "workers": 1}


def test_resumed_study_draws_no_configuration_twice(tmp_path, capfd):
    space = {"actor_lr": {"log_uniform": [1e-4, 3e-3]}, "gamma": {"choice": [0.95, 0.99]}}
    spec_path, out = tmp_path / "spec.json", tmp_path / "out"
    spec_path.write_text(json.dumps({**CHEAP, "trials": 4, "space": space}))
    assert main(["sweep", str(spec_path), "--out", str(out)]) == 0
    spec_path.write_text(json.dumps({**CHEAP, "trials": 6, "space": space}))
    assert main(["sweep", str(spec_path), "--out", str(out), "--resume"]) == 0
    drawn = [(r["param_actor_lr"], r["param_gamma"]) for r in rows(out)]
    assert len(drawn) == 6 and len(set(drawn)) == 6, drawn
    # each trial's line shows a choice as the SPEC's value, not the JSON text Optuna stores
    err = capfd.readouterr().err
    assert "'gamma': '" not in err
    assert err.count("dispatchrl sweep: trial ") == 6 and err.count("'gamma': 0.9") == 6


def test_report_effects_are_spearman_with_tied_ranks(tmp_path):
    stats = pytest.importorskip("scipy.stats")
    spec = sweeps.parse_spec(
        {**SPEC, "space": {"batch_size": {"choice": [64, 100]}, "gamma": {"uniform": [0.95, 0.995]}}}
    )
    study = optuna.create_study(study_name="dispatchrl", storage=f"sqlite:///{tmp_path / 'study.db'}")
    study.set_user_attr("spec", spec.to_json())
    distributions = sweeps._distributions(spec)
    batch = [64, 64, 100, 64, 100, 100, 64, 100]
    gamma = [0.96, 0.97, 0.96, 0.99, 0.98, 0.97, 0.95, 0.99]  # ties in a float parameter too
    value = [-150.0, -120.0, -160.0, -130.0, -110.0, -170.0, -140.0, -125.0]
    for b, g, v in zip(batch, gamma, value, strict=True):
        params = {"batch_size": json.dumps(b), "gamma": g}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=v))
    effects = sweeps.report(tmp_path, stream=open(tmp_path / "printed.txt", "w"))["effects"]
    assert effects["batch_size"] == pytest.approx(stats.spearmanr(batch, value).statistic)
    assert effects["gamma"] == pytest.approx(stats.spearmanr(gamma, value).statistic)
    pytest.importorskip("matplotlib")
    figure = sweeps._report_figure(spec, study.trials)
    figure.canvas.draw()
    trial_axis, batch_axis = figure.axes[0], figure.axes[1]
    assert [t.get_text() for t in batch_axis.get_xticklabels()] == ["64", "100"]
    assert all(float(t).is_integer() for t in trial_axis.get_xticks())


def test_sweep_whose_every_trial_fails_exits_nonzero(tmp_path, capsys):
    spec_path, out = tmp_path / "spec.json", tmp_path / "out"
    bad = {**CHEAP, "trials": 2, "space": {"network": {"choice": ["no_such_module_19:make"]}}}
    spec_path.write_text(json.dumps(bad))
    assert main(["sweep", str(spec_path), "--out", str(out)]) == 2
    assert "every trial failed (2 of 2)" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and "no_such_module_19" in summary["error"]


def test_ray_engine_keeps_rays_notices_out_of_the_log(tmp_path, capfd):
    pytest.importorskip("ray.tune")
    import ray

    bad = {**CHEAP, "trials": 1, "space": {"network": {"choice": ["no_such_module_19:make"]}}}
    try:
        sweeps.sweep(sweeps.parse_spec(bad), tmp_path, engine="ray", workers=1)
    finally:
        ray.shutdown()
    err = capfd.readouterr().err
    assert "Token authentication" not in err and "Started a local Ray instance" not in err
