"""Separate actor and critic constructors (Config.actor_network / critic_network), the divergence
check over nn.parameter_groups, and user networks refused by the devices and exporters that have
no method for them (issue 16)."""

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import checkpoint, nn
from dispatchrl.algorithms import ALGORITHMS, ppo, sac, td3
from dispatchrl.backends.cpu import is_numba
from dispatchrl.cli import _run_config as run_config
from dispatchrl.cli import build_parser, main
from dispatchrl.training import load_run
from dispatchrl.training.driver import watched_quantities
from dispatchrl.training.envspec import resolve_env
from dispatchrl.training.runs import build_state

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RESIDUAL = "custom_network:residual_mlp"


@pytest.fixture(scope="module")
def custom_network():
    """examples/custom_network.py, importable as "custom_network:..." by the constructors."""
    sys.path.insert(0, str(EXAMPLES))
    import custom_network

    yield custom_network
    sys.path.remove(str(EXAMPLES))


def _residual_policy_reference(net, obs, low, high):
    """float64 numpy of TD3's deployed residual actor: h <- h + f(h) on equal-width hidden layers,
    tanh output mapped onto [low, high]."""
    acts = {"relu": lambda v: np.maximum(v, 0), "tanh": np.tanh, "identity": lambda v: v}
    h = np.asarray(obs, np.float64)
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        out = acts[net.activation_of(i)](h @ drl.to_numpy(w.value).astype(np.float64) + drl.to_numpy(b.value))
        h = out + h if net.residual(i) else out
    return low + (h + 1) * 0.5 * (high - low)


def _arrays(state):
    return {name: drl.to_numpy(array) for name, array in checkpoint.named_arrays(state)}


# ---------------------------------------------------------------- actor and critic constructors


def test_specific_constructors_win_over_network(custom_network):
    residual, mlp = custom_network.ResidualMLP, nn.MLP
    cases = [  # (fields, actor type, critic type)
        ({}, mlp, mlp),
        ({"network": RESIDUAL}, residual, residual),
        ({"actor_network": RESIDUAL}, residual, mlp),
        ({"critic_network": RESIDUAL}, mlp, residual),
        ({"network": RESIDUAL, "actor_network": "mlp"}, mlp, residual),
        ({"network": RESIDUAL, "critic_network": "mlp"}, residual, mlp),
    ]
    for fields, actor, critic in cases:
        for algo, critics in ((td3, ("critic1", "critic2")), (sac, ("critic1", "critic2")), (ppo, ("critic",))):
            config = algo.Config(**fields)
            config.validate()
            state = algo.build(drl.CPU(), config, 3, 1, 0)
            assert type(state.actor) is actor, (algo.NAME, fields)
            for name in critics:  # PPO's critic is its value network
                assert type(getattr(state, name)) is critic, (algo.NAME, fields, name)
            if algo is td3:
                assert type(state.actor_target) is actor and type(state.critic2_target) is critic


@pytest.mark.parametrize("algo", [td3, sac, ppo], ids=lambda a: a.NAME)
@pytest.mark.parametrize("field", ["network", "actor_network", "critic_network"])
def test_bad_constructor_names_refused_naming_the_field(algo, field):
    for bad in (3, "", "no_such_network", ("mlp",)):
        with pytest.raises(drl.ConfigError, match=rf"^Config\.{field} must be "):
            algo.Config(**{field: bad}).validate()
    if field != "network":
        algo.Config(**{field: None}).validate()  # None: network's constructor
    config = algo.Config(**{field: "no_such_module_16:make"})
    config.validate()  # the form is right; the import is tried when the networks are built
    with pytest.raises(drl.ConfigError, match=rf"^Config\.{field} 'no_such_module_16:make': cannot import it"):
        algo.build(drl.CPU(), config, 3, 1, 0)


def test_default_networks_are_bit_identical_to_naming_the_mlp_constructor():
    # the same constructor named by each field trains the same bits as the default config
    runs = []
    for fields in ({}, {"actor_network": "dispatchrl.nn:mlp", "critic_network": "mlp"}):
        config = td3.Config(total_steps=600, warmup_steps=100, hidden=(16, 16), batch_size=32, **fields)
        runs.append(td3.train(drl.CPU(), "pendulum", config, seed=3, progress=False))
    default, named = (_arrays(run.state) for run in runs)
    assert default.keys() == named.keys()
    for name in default:
        np.testing.assert_array_equal(default[name], named[name], err_msg=name)
    np.testing.assert_array_equal(runs[0].history["returns"], runs[1].history["returns"])
    for algo in (sac, ppo):  # their networks too, as built
        default, named = (
            _arrays(algo.build(drl.CPU(), algo.Config(**fields), 3, 1, 5))
            for fields in ({}, {"actor_network": "mlp", "critic_network": "dispatchrl.nn:mlp"})
        )
        assert all(np.array_equal(default[name], named[name]) for name in default)


def test_td3_trains_a_user_actor_with_mlp_critics_fused(custom_network, tmp_path):
    config = td3.Config(total_steps=2000, actor_network=RESIDUAL)
    spec = resolve_env("pendulum", 1)
    state = build_state(td3, drl.CPU(), spec, config, 0)
    assert type(state.actor) is custom_network.ResidualMLP and type(state.critic1) is nn.MLP
    assert type(state.critic1_batch) is nn.MLPBuffers and type(state.actor_batch) is custom_network.ResidualBuffers
    # the critics are made as the default config makes them: same constructor, same seeds
    default = build_state(td3, drl.CPU(), spec, td3.Config(total_steps=2000), 0)
    for critic in ("critic1", "critic2", "critic1_target"):
        for ours, theirs in zip(
            nn.parameter_groups(getattr(state, critic)), nn.parameter_groups(getattr(default, critic))
        ):
            np.testing.assert_array_equal(drl.to_numpy(ours.value), drl.to_numpy(theirs.value))
    step = drl.fuse(drl.CPU(), td3.native_step, config, spec.native, state)
    kernels = [kernel for kernel, _ in step.kernel_calls]
    assert custom_network.add_into in kernels  # the actor's skips are in the step
    assert all(is_numba(kernel) for kernel in kernels)  # no Python kernel: one compiled loop
    assert not hasattr(step._run, "segments")

    result = td3.train(drl.CPU(), "pendulum", config, seed=0, progress=False)
    assert type(result.state.actor) is custom_network.ResidualMLP and type(result.state.critic2) is nn.MLP
    returns = result.history["returns"]
    assert len(returns) == 10 and np.all(np.isfinite(returns))
    # the deployed policy is the trained residual actor (skips included), not an MLP of its weights
    low, high = result.spec.action_low, result.spec.action_high
    obs = np.random.default_rng(4).normal(size=(7, 3)).astype(np.float32) * 2
    expected = _residual_policy_reference(result.state.actor, obs, low, high)
    np.testing.assert_allclose(result.policy(obs), expected, rtol=1e-5, atol=1e-5)
    plain = nn.Policy.from_mlp(result.state.actor, low, high)
    assert np.max(np.abs(plain(obs) - expected)) > 1e-3  # the skips matter

    # the checkpoint records the fields and loads the same networks back (trusted: it names a module)
    result.save(tmp_path / "run")
    with pytest.raises(drl.CheckpointError, match="actor_network='custom_network:residual_mlp'"):
        load_run(tmp_path / "run", ALGORITHMS, drl.CPU())
    _, _, _, loaded_config, loaded = load_run(tmp_path / "run", ALGORITHMS, drl.CPU(), trust_code=True)
    assert (loaded_config.network, loaded_config.actor_network, loaded_config.critic_network) == ("mlp", RESIDUAL, None)
    assert type(loaded.actor) is custom_network.ResidualMLP and type(loaded.critic1) is nn.MLP
    saved, restored = _arrays(result.state), _arrays(loaded)
    assert all(np.array_equal(saved[name], restored[name]) for name in saved)

    # the C policy exporter writes MLP policies only: refused, naming the network and the method
    out = tmp_path / "policy_c"
    with pytest.raises(drl.ConfigError, match=r"network of type ResidualMLP.*nn\.deployable method for ResidualMLP"):
        drl.export.write_policy(result.policy, out)
    assert not out.exists()
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--out", str(out), "--trust-code"]) == 2
    assert not out.exists()


def test_cli_flags_and_config_files_set_the_constructors(tmp_path):
    parser = build_parser()
    config = run_config(parser.parse_args(["train", "td3", "--actor-network", RESIDUAL, "--critic-network", "mlp"]))[2]
    assert (config.network, config.actor_network, config.critic_network) == ("mlp", RESIDUAL, "mlp")
    config = run_config(parser.parse_args(["train", "ppo", "--set", "critic_network=null", "--network", RESIDUAL]))[2]
    assert (config.network, config.actor_network, config.critic_network) == (RESIDUAL, None, None)
    path = tmp_path / "config.json"
    path.write_text('{"actor_network": "mlp"}')
    assert run_config(parser.parse_args(["train", "sac", "--config", str(path)]))[2].actor_network == "mlp"
    with pytest.raises(drl.ConfigError, match="critic_network"):
        run_config(parser.parse_args(["train", "sac", "--critic-network", "7"]))


# ---------------------------------------------------------------- the divergence check


@dataclass
class GainMLP(nn.MLP):
    """An MLP with one more trained parameter the MLP's methods never touch (as a layer norm's
    gain would be): Adam reaches it only through nn.parameter_groups."""

    gain: nn.Parameter | None = None


def nan_gain_mlp(device, sizes, activation="relu", output_activation="identity", seed=0, trainable=True):
    """A GainMLP whose gain's gradient is NaN: the first Adam step makes the gain NaN."""
    net = nn.mlp(device, sizes, activation, output_activation, seed=seed, trainable=trainable)
    gain = nn.parameter(device, (sizes[-1],), trainable=trainable)
    drl.fill(device, gain.value, 1.0)
    if trainable:
        drl.assign(gain.grad, np.full(sizes[-1], np.nan, np.float32))
    return GainMLP(**{f: getattr(net, f) for f in net.__dataclass_fields__}, gain=gain)


@nn.parameter_groups.dispatch
def _gain_groups(net: GainMLP) -> list:
    return [*net.groups, net.gain]


nn.NETWORKS["test_nan_gain_mlp"] = nan_gain_mlp


def test_divergence_check_watches_a_user_networks_own_parameters():
    config = td3.Config(
        total_steps=400, warmup_steps=100, batch_size=32, check_every=50, actor_network="test_nan_gain_mlp"
    )
    state = td3.build(drl.CPU(), config, 3, 1, 0)
    assert nn.is_network(state.actor) and not nn.is_network(state.actor_act)
    watched = [array for name, array in watched_quantities(td3, state) if name == "actor weights"]
    assert any(array is state.actor.gain.value for array in watched)
    with pytest.raises(
        drl.TrainingDiverged, match="actor weights became NaN or inf between step 100 and 150"
    ) as caught:
        td3.train(drl.CPU(), "pendulum", config, seed=0, progress=False)
    assert (caught.value.quantity, caught.value.first_step, caught.value.last_step) == ("actor weights", 100, 150)


# ---------------------------------------------------------------- devices without the network's methods


def test_a_device_without_the_user_networks_methods_is_refused(custom_network, cuda_device):
    residual = custom_network.residual_mlp(drl.CPU(), (3, 8, 8, 1))
    for device in (drl.CPU(), drl.Generic()):
        nn.check_device_methods(device, residual)  # its methods are for Generic and subclasses
    for device in (drl.C(), cuda_device):
        nn.check_device_methods(device, nn.mlp(drl.CPU(), (3, 8, 1)))  # the MLP's methods take any device
        name = type(device).__name__
        with pytest.raises(
            drl.ConfigError,
            match=rf"network type ResidualMLP has its own dispatchrl\.nn\.forward method for Generic but none "
            rf"for {name} \({name} would run MLP's method on it instead\): add @dispatchrl\.nn\.forward\.dispatch "
            rf"def forward\(device: {name}, net: ResidualMLP, \.\.\.\)",
        ):
            nn.check_device_methods(device, residual)


def test_export_trainer_refuses_a_user_network_without_c_methods(custom_network, tmp_path):
    from dispatchrl.export.trainer import trainer_source

    for fields in ({"network": RESIDUAL}, {"critic_network": RESIDUAL}):
        with pytest.raises(drl.ConfigError, match=r"ResidualMLP .* none for C .*def forward\(device: C"):
            trainer_source("td3", "pendulum", 1000, 0, fields)
    out = tmp_path / "trainer"
    assert (
        main(["export-trainer", "td3", "--out", str(out), "--steps", "1000", "--set", f"actor_network={RESIDUAL}"]) == 2
    )
    assert not out.exists()
    with pytest.raises(drl.ConfigError, match=r"Config\.actor_network='custom_network:residual_mlp' \(actor\)"):
        td3.train(drl.C(), "pendulum", td3.Config(total_steps=200, actor_network=RESIDUAL), progress=False)
