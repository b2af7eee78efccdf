"""PPO: its kernels vs float64 references on Generic/CPU/CUDA (sim), the algorithm on every
device, checkpoints and CLI, bad input, and Pendulum learning on one seed."""

import dataclasses
import json
import math

import gymnasium
import numpy as np
import pytest
from testkit import numeric_gradient

import dispatchrl as drl
from dispatchrl import cli
from dispatchrl.algorithms import ALGORITHMS, ppo
from dispatchrl.data import minibatch, obs_stats, rollout
from dispatchrl.kernels.onpolicy import (
    adaptive_learning_rate,
    gather_minibatch,
    gaussian_log_prob,
    gaussian_sample,
    normalize_observations,
    ppo_policy_gradient,
    random_permutation,
    rollout_store,
    running_stats_update,
    scale_by_running_std,
)
from dispatchrl.spaces import Box
from dispatchrl.training import EVAL_SEEDS, evaluate, load_run

LOG_2PI = math.log(2 * math.pi)


def host(x):
    return drl.to_numpy(x)


# ---------------------------------------------------------------- observation statistics


def test_running_stats_match_the_whole_sample(device):
    g = np.random.default_rng(0)
    batches = [g.normal(3.0, 2.0, size=(5, 4)).astype(np.float32) for _ in range(3)]
    stats = obs_stats(device, 4)
    for b in batches:
        running_stats_update(device, stats, drl.asarray(device, b))
    # reference: gymnasium's RunningMeanStd prior (count 1e-4, mean 0, var 1) plus all samples
    every = np.concatenate(batches).astype(np.float64)
    count = 1e-4 + len(every)
    mean = every.sum(axis=0) / count
    var = (1e-4 * (1 + mean**2) + ((every - mean) ** 2).sum(axis=0)) / count
    np.testing.assert_allclose(host(stats.mean), mean, rtol=1e-5)
    np.testing.assert_allclose(host(stats.var), var, rtol=1e-4)
    assert host(stats.count)[0] == pytest.approx(count)
    x = drl.asarray(device, batches[0])
    out = drl.zeros(device, (5, 4))
    normalize_observations(device, stats, x, out)
    np.testing.assert_allclose(host(out), (batches[0] - mean) / np.sqrt(var + 1e-8), rtol=1e-4, atol=1e-5)


def test_nonfinite_observations_are_refused_and_counted(device):
    stats = obs_stats(device, 3)
    x = np.ones((4, 3), np.float32)
    x[2, 1] = np.nan
    running_stats_update(device, stats, drl.asarray(device, x))
    assert host(stats.nonfinite)[0] == 1
    assert np.isfinite(host(stats.mean)).all() and np.isfinite(host(stats.var)).all()
    assert host(stats.mean)[1] == 0.0 and host(stats.var)[1] == 1.0  # the bad column is untouched


# ---------------------------------------------------------------- Gaussian head


def test_gaussian_sample_agrees_across_devices_and_with_its_density(device):
    g = np.random.default_rng(1)
    mean = g.normal(size=(6, 3)).astype(np.float32)
    log_std = np.array([-0.5, 0.0, 0.7], np.float32)
    stream = drl.rng(device, 42)
    action, log_prob = drl.zeros(device, (6, 3)), drl.zeros(device, 6)
    gaussian_sample(device, stream, drl.asarray(device, mean), drl.asarray(device, log_std), action, log_prob)
    ref_action, ref_log_prob = drl.zeros(drl.Generic(), (6, 3)), drl.zeros(drl.Generic(), 6)
    gaussian_sample(
        drl.Generic(),
        drl.rng(drl.Generic(), 42),
        drl.asarray(drl.Generic(), mean),
        drl.asarray(drl.Generic(), log_std),
        ref_action,
        ref_log_prob,
    )
    np.testing.assert_allclose(host(action), host(ref_action), rtol=1e-5, atol=1e-6)
    a = host(action).astype(np.float64)
    z = (a - mean) / np.exp(log_std.astype(np.float64))
    density = np.sum(-0.5 * z * z - log_std - 0.5 * LOG_2PI, axis=1)
    np.testing.assert_allclose(host(log_prob), density, rtol=1e-4, atol=1e-4)
    recomputed = drl.zeros(device, 6)
    gaussian_log_prob(device, drl.asarray(device, mean), drl.asarray(device, log_std), action, recomputed)
    np.testing.assert_allclose(host(recomputed), density, rtol=1e-4, atol=1e-4)
    assert host(stream)[1] == 2 * mean.size


def reference_actor_loss(mean, log_std, action, old_log_prob, advantage, clip, entropy_coef, normalize):
    adv = (advantage - advantage.mean()) / (advantage.std() + 1e-8) if normalize else advantage
    z = (action - mean) / np.exp(log_std)
    log_prob = np.sum(-0.5 * z * z - log_std - 0.5 * LOG_2PI, axis=1)
    ratio = np.exp(log_prob - old_log_prob)
    surrogate = np.minimum(ratio * adv, np.clip(ratio, 1 - clip, 1 + clip) * adv)
    entropy = np.sum(log_std + 0.5 * (LOG_2PI + 1))
    return -surrogate.mean() - entropy_coef * entropy


@pytest.mark.parametrize("normalize", [False, True])
def test_policy_gradient_matches_finite_differences(device, normalize):
    g = np.random.default_rng(2)
    b, a = 16, 2
    mean = g.normal(size=(b, a))
    log_std = np.array([-0.3, 0.2])
    old_mean = mean + 0.1 * g.normal(size=(b, a))
    old_log_std = log_std + np.array([0.05, -0.1])
    action = old_mean + np.exp(old_log_std) * g.normal(size=(b, a))
    old_z = (action - old_mean) / np.exp(old_log_std)
    old_log_prob = np.sum(-0.5 * old_z**2 - old_log_std - 0.5 * LOG_2PI, axis=1)
    advantage = g.normal(size=b)
    clip, entropy_coef = 0.2, 0.05
    f32 = lambda x: drl.asarray(device, np.asarray(x, np.float32))  # noqa: E731
    d_mean, d_log_std, info = drl.zeros(device, (b, a)), drl.zeros(device, a), drl.zeros(device, 4, np.float64)
    inputs = map(f32, (mean, log_std, action, old_log_prob, advantage, old_mean, old_log_std))
    ppo_policy_gradient(device, *inputs, clip, entropy_coef, normalize, d_mean, d_log_std, info)
    args = (action, old_log_prob, advantage, clip, entropy_coef, normalize)
    num_mean = numeric_gradient(lambda m: reference_actor_loss(m, log_std, *args), mean)
    num_log_std = numeric_gradient(lambda s: reference_actor_loss(mean, s, *args), log_std)
    np.testing.assert_allclose(host(d_mean), num_mean, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(host(d_log_std), num_log_std, rtol=1e-3, atol=1e-5)
    kl = (
        np.log(np.exp(log_std) / np.exp(old_log_std))
        + (np.exp(2 * old_log_std) + (mean - old_mean) ** 2) / (2 * np.exp(2 * log_std))
        - 0.5
    )
    info_host = host(info)
    assert info_host[0] == pytest.approx(np.mean(np.sum(kl, axis=1)), rel=1e-4)
    assert info_host[2] == pytest.approx(np.sum(log_std + 0.5 * (LOG_2PI + 1)), rel=1e-5)


# ---------------------------------------------------------------- learning rate and Adam


@pytest.mark.parametrize("kl, expected", [(0.001, 1.5e-3), (0.01, 1e-3), (0.02, 1e-3 / 1.5)])
def test_adaptive_learning_rate_rule(device, kl, expected):
    lr = drl.asarray(device, np.array([1e-3]))
    adaptive_learning_rate(device, drl.asarray(device, np.array([kl, 0, 0, 0])), lr, 0.008, 1.5, 1e-6, 1e-2)
    assert host(lr)[0] == pytest.approx(expected)


def test_adaptive_learning_rate_stays_in_bounds(device):
    lr = drl.asarray(device, np.array([9e-3]))
    small = drl.asarray(device, np.zeros(4))
    for _ in range(3):
        adaptive_learning_rate(device, small, lr, 0.008, 1.5, 1e-6, 1e-2)
    assert host(lr)[0] == pytest.approx(1e-2)
    big = drl.asarray(device, np.array([1.0, 0, 0, 0]))
    for _ in range(60):
        adaptive_learning_rate(device, big, lr, 0.008, 1.5, 1e-6, 1e-2)
    assert host(lr)[0] == pytest.approx(1e-6)


@pytest.mark.parametrize("divide", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scale_by_running_std_against_float64(device, divide, dtype):
    g = np.random.default_rng(int(divide) + 2 * (dtype == np.float64))
    x0, var = g.normal(size=(5, 3)).astype(dtype) * 40, float(g.uniform(0, 900))
    x = drl.asarray(device, x0)
    scale_by_running_std(device, drl.asarray(device, np.array([var])), x, divide)
    std = math.sqrt(var + 1e-8)
    expected = (x0.astype(np.float64) / std if divide else x0.astype(np.float64) * std).astype(dtype)
    np.testing.assert_array_equal(host(x), expected)  # one float64 operation, rounded once
    with pytest.raises(drl.ShapeError, match="'var'"):
        scale_by_running_std(device, drl.asarray(device, np.ones(2)), x, divide)


def test_adam_step_with_lr_array_equals_adam_step(device):
    g = np.random.default_rng(3)
    p0, grad = g.normal(size=(3, 4)).astype(np.float32), g.normal(size=(3, 4)).astype(np.float32)
    params = {}
    for name in ("fixed", "array"):
        p, m, v, t = (
            drl.asarray(device, p0),
            drl.zeros(device, (3, 4)),
            drl.zeros(device, (3, 4)),
            drl.zeros(device, 1, np.int64),
        )
        for _ in range(3):
            if name == "fixed":
                drl.adam_step(device, p, drl.asarray(device, grad), m, v, t, 2e-3)
            else:
                drl.adam_step(device, p, drl.asarray(device, grad), m, v, t, drl.asarray(device, np.array([2e-3])))
        params[name] = host(p)
        assert host(t)[0] == 3
    np.testing.assert_allclose(params["array"], params["fixed"], rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- rollout storage and minibatches


def test_permutation_store_and_gather_round_trip(device):
    steps, envs, obs_dim, action_dim, rows = 3, 4, 2, 1, 6
    r = rollout(device, steps, envs, obs_dim, action_dim)
    g = np.random.default_rng(4)
    step = drl.zeros(device, 1, np.int64)
    written = []
    for _t in range(steps):
        obs = g.normal(size=(envs, obs_dim)).astype(np.float32)
        act, mean = g.normal(size=(envs, 1)).astype(np.float32), g.normal(size=(envs, 1)).astype(np.float32)
        lp, rew = g.normal(size=envs).astype(np.float32), g.normal(size=envs).astype(np.float32)
        val, nval = g.normal(size=(envs, 1)).astype(np.float32), g.normal(size=(envs, 1)).astype(np.float32)
        term, trunc = g.random(envs) < 0.5, g.random(envs) < 0.5
        rollout_store(
            device, r, step, *[drl.asarray(device, x) for x in (obs, act, mean, lp, val, nval, rew, term, trunc)]
        )
        drl.increment(device, step)
        written.append((obs, act, lp, rew, term))
    np.testing.assert_array_equal(host(r.obs), np.concatenate([w[0] for w in written]))
    np.testing.assert_array_equal(host(r.reward), np.stack([w[3] for w in written]))
    np.testing.assert_array_equal(host(r.terminated), np.stack([w[4] for w in written]))
    drl.assign(r.advantage, np.arange(12, dtype=np.float32).reshape(3, 4))
    perm = drl.zeros(device, steps * envs, np.int64)
    stream = drl.rng(device, 9)
    random_permutation(device, stream, perm)
    p = host(perm)
    assert sorted(p) == list(range(12))
    reference = drl.zeros(drl.Generic(), 12, np.int64)
    random_permutation(drl.Generic(), drl.rng(drl.Generic(), 9), reference)
    np.testing.assert_array_equal(p, host(reference))  # same shuffle on every device
    batch = minibatch(device, rows, obs_dim, action_dim)
    counter = drl.zeros(device, 1, np.int64)
    for k in range(2):
        gather_minibatch(device, r, perm, counter, batch)
        idx = p[k * rows : (k + 1) * rows]
        np.testing.assert_array_equal(host(batch.obs), host(r.obs)[idx])
        np.testing.assert_array_equal(host(batch.advantage), idx.astype(np.float32))
        np.testing.assert_array_equal(host(batch.log_prob), host(r.log_prob).reshape(-1)[idx])
        drl.increment(device, counter)


# ---------------------------------------------------------------- the algorithm

TINY = ppo.Config(
    total_steps=2 * 2 * 4, num_envs=2, steps_per_env=4, batch_size=4, epochs=2, hidden=(4,), adaptive_lr=True
)


def test_same_ppo_code_on_every_device_agrees():
    """Two iterations of the same PPO code, fused per device: parameters agree across devices."""
    results = {}
    for device in (drl.Generic(), drl.CPU(), drl.CUDA()):
        results[type(device).__name__] = ppo.train(device, "pendulum", TINY, seed=3, progress=False)
    reference = results.pop("Generic")
    for name, result in results.items():
        for field in ("weights", "biases"):
            for ours, ref in zip(getattr(result.policy, field), getattr(reference.policy, field)):
                np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-5, err_msg=f"{name} {field}")
        np.testing.assert_allclose(host(result.state.learning_rate), host(reference.state.learning_rate), rtol=1e-6)
        np.testing.assert_allclose(result.policy.obs_mean, reference.policy.obs_mean, rtol=1e-5)
    assert host(reference.state.updates)[0] == 2 * TINY.epochs * TINY.minibatches


def test_tianshou_options_agree_on_every_device_take_effect_and_resume(tmp_path):
    """Tianshou's lr_decay, max_grad_norm and rew_norm: iteration i of I trains at lr·(1 - i/I),
    the fused PPO agrees across devices, clipping the joint gradient norm changes the weights,
    the returns' statistics fold in every rollout's returns, and a resumed run is the same run."""
    config = dataclasses.replace(
        TINY, adaptive_lr=False, lr_schedule="linear", max_grad_norm=0.05, normalize_returns=True
    )
    devices = (drl.Generic(), drl.CPU(), drl.C(), drl.CUDA())
    results = {type(d).__name__: ppo.train(d, "pendulum", config, seed=3, progress=False) for d in devices}
    reference = results.pop("Generic")
    assert host(reference.state.learning_rate)[0] == pytest.approx(config.lr / 2, rel=1e-15)  # i = 1 of 2
    for name, result in results.items():
        for ours, ref in zip(result.policy.weights, reference.policy.weights):
            np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-5, err_msg=name)
        np.testing.assert_allclose(host(result.state.learning_rate), host(reference.state.learning_rate), rtol=1e-15)
    unclipped = ppo.train(drl.Generic(), "pendulum", dataclasses.replace(config, max_grad_norm=0.0), seed=3)
    assert not np.allclose(unclipped.policy.weights[0], reference.policy.weights[0], rtol=1e-3, atol=1e-4)
    # rew_norm: after one rollout (divided by the initial std, 1) the statistics hold its returns
    half = dataclasses.replace(config, total_steps=config.total_steps // 2)
    first = ppo.train(drl.CPU(), "pendulum", half, seed=3, progress=False)
    returns, stats = host(first.state.rollout.returns).astype(np.float64), first.state.return_stats
    total = 1e-4 + returns.size  # folded into (mean 0, variance 1, count 1e-4), gymnasium's start
    assert host(stats.count)[0] == pytest.approx(total)
    np.testing.assert_allclose(host(stats.mean), [returns.sum() / total], rtol=1e-6)
    m2 = np.sum((returns - returns.mean()) ** 2) + returns.mean() ** 2 * 1e-4 * returns.size / total
    np.testing.assert_allclose(host(stats.var), [(1e-4 + m2) / total], rtol=1e-5)
    resumed = ppo.train(drl.CPU(), "pendulum", config, seed=3, progress=False, resume=first.save(tmp_path / "r")[0])
    for ours, straight in zip(resumed.policy.weights, results["CPU"].policy.weights):
        np.testing.assert_array_equal(ours, straight)
    np.testing.assert_array_equal(host(resumed.state.return_stats.var), host(results["CPU"].state.return_stats.var))


def _critic_values(state, x: np.ndarray) -> np.ndarray:
    """The critic's output on rows ``x`` in float64 from its host weights (tanh hidden, identity out)."""
    h = x.astype(np.float64)
    layers = len(state.critic.weights)
    for i, (w, b) in enumerate(zip(state.critic.weights, state.critic.biases)):
        h = h @ host(w.value).astype(np.float64) + host(b.value).astype(np.float64)
        h = np.tanh(h) if i < layers - 1 else h
    return h[:, 0]


def test_recompute_advantage_takes_the_current_critic_on_every_device():
    """Tianshou's recompute_adv: the fused PPO agrees across devices and differs from the run
    without it; recomputing sets V(s_t), V(s_t+1) and GAE from the critic as it is."""
    config = dataclasses.replace(TINY, adaptive_lr=False, recompute_advantage=True)
    devices = (drl.Generic(), drl.CPU(), drl.C(), drl.CUDA())
    results = {type(d).__name__: ppo.train(d, "pendulum", config, seed=3, progress=False) for d in devices}
    reference = results.pop("Generic")
    for name, result in results.items():
        for ours, ref in zip(result.policy.weights, reference.policy.weights):
            np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-5, err_msg=name)
    plain = ppo.train(drl.Generic(), "pendulum", dataclasses.replace(config, recompute_advantage=False), seed=3)
    assert not np.array_equal(plain.policy.weights[0], reference.policy.weights[0])  # deterministic: it acted
    state, cpu = results["CPU"].state, drl.CPU()
    stored = state.rollout
    t, n = stored.value.shape
    ppo.recompute_advantages(cpu, config, state)
    value = _critic_values(state, host(stored.obs)).reshape(t, n)
    next_value = _critic_values(state, host(state.next_obs_rows)).reshape(t, n)
    np.testing.assert_allclose(host(stored.value), value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(host(stored.next_value), next_value, rtol=1e-5, atol=1e-6)
    reward, terminated, truncated = (host(getattr(stored, f)) for f in ("reward", "terminated", "truncated"))
    advantage, running = np.zeros((t, n)), np.zeros(n)
    for k in range(t - 1, -1, -1):  # GAE, float64, from the recomputed values
        delta = reward[k] + config.gamma * np.where(terminated[k], 0.0, next_value[k]) - value[k]
        running = (
            delta + np.where(terminated[k] | truncated[k] | (k == t - 1), 0.0, config.gamma * config.lam) * running
        )
        advantage[k] = running
    np.testing.assert_allclose(host(stored.advantage), advantage, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(host(stored.returns), advantage + value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["generic", "cpu"])
def test_orthogonal_init_is_torch_orthogonal_with_tianshou_gains(name):
    device = drl.devices.device_from_name(name)
    config = dataclasses.replace(TINY, hidden=(64, 5), orthogonal_init=True)  # 3 → 64 → 5 → 1: both shapes
    state = ppo.build(device, config, 3, Box(-np.ones(1), np.ones(1)), seed=4)
    for net, last_gain in ((state.actor, 0.01 * math.sqrt(2)), (state.critic, math.sqrt(2))):
        for i, (w, b) in enumerate(zip(net.weights, net.biases)):
            w = host(w.value).astype(np.float64)
            gain = last_gain if i == len(net.weights) - 1 else math.sqrt(2)
            small = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T  # orthonormal columns or rows
            np.testing.assert_allclose(small, gain**2 * np.eye(min(w.shape)), atol=1e-5)
            np.testing.assert_array_equal(host(b.value), 0)
    again = ppo.build(device, config, 3, Box(-np.ones(1), np.ones(1)), seed=4)
    np.testing.assert_array_equal(host(again.actor.weights[0].value), host(state.actor.weights[0].value))


def test_python_stepped_env_checkpoint_and_resume(tmp_path):
    config = dataclasses.replace(TINY, total_steps=16)
    result = ppo.train(drl.CPU(), "Pendulum-v1", config, seed=1, progress=False)
    assert result.steps == 16 and result.spec.eval_id == "Pendulum-v1"
    path = result.save(tmp_path / "run")[0]
    algo, name, spec, loaded_config, state = load_run(path, ALGORITHMS)
    assert name == "ppo" and loaded_config == config
    np.testing.assert_allclose(
        algo.policy(state, spec.action_low, spec.action_high)(np.ones(3)), result.policy(np.ones(3)), rtol=1e-6
    )
    longer = dataclasses.replace(config, total_steps=32)
    resumed = ppo.train(drl.CPU(), "Pendulum-v1", longer, seed=1, progress=False, resume=path)
    assert host(resumed.state.step)[0] == longer.total_steps // config.num_envs
    with pytest.raises(drl.CheckpointError):
        ppo.train(
            drl.CPU(),
            "pendulum",
            dataclasses.replace(longer, num_envs=4, batch_size=8),
            seed=1,
            progress=False,
            resume=path,
        )


def test_cli_train_ppo_json(capsys):
    code = cli.main(
        [
            "train",
            "ppo",
            "--env",
            "pendulum",
            "--steps",
            "16",
            "--num-envs",
            "2",
            "--set",
            "steps_per_env=4",
            "--set",
            "batch_size=4",
            "--set",
            "hidden=[4]",
            "--no-eval",
            "--json",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {
        "algo",
        "env",
        "device",
        "seed",
        "steps",
        "train_seconds",
        "compile_seconds",
        "episodes",
        "recent_return",
        "eval_return",
        "eval_returns",
        "saved",
    } <= set(summary)
    assert summary["algo"] == "ppo" and summary["steps"] == 16


def test_per_env_configs():
    assert ppo.config_for("pendulum") == ppo.Config()
    ant = ppo.config_for("ant")
    assert (ant.num_envs, ant.steps_per_env, ant.batch_size, ant.epochs, ant.hidden) == (64, 64, 2048, 4, (256, 256))
    assert ant.adaptive_lr and ant.normalize_observations and ant.gamma == 0.99 and ant.lam == 0.95
    assert (ant.kl_target, ant.lr_factor, ant.lr_min, ant.lr_max) == (0.008, 1.5, 1e-6, 1e-2)
    pendulum = ppo.Config()
    assert (pendulum.num_envs, pendulum.steps_per_env, pendulum.batch_size, pendulum.epochs) == (64, 128, 1024, 1)
    assert (pendulum.gamma, pendulum.entropy_coef, pendulum.initial_std, pendulum.hidden) == (0.9, 0.1, 2.0, (32, 32))


# ---------------------------------------------------------------- bad input


def test_batch_not_dividing_the_rollout_is_refused():
    with pytest.raises(drl.ConfigError, match="batch_size"):
        ppo.train(drl.CPU(), "pendulum", dataclasses.replace(TINY, batch_size=3), progress=False)
    dev = drl.CPU()
    with pytest.raises(drl.ShapeError, match="does not divide"):
        gather_minibatch(
            dev,
            rollout(dev, 3, 2, 1, 1),
            drl.zeros(dev, 6, np.int64),
            drl.zeros(dev, 1, np.int64),
            minibatch(dev, 4, 1, 1),
        )


@pytest.mark.parametrize(
    "field, value",
    [
        ("gamma", 1.5),
        ("clip", 0.0),
        ("lr_factor", 0.5),
        ("epochs", 0),
        ("normalize_observations", "yes"),
        ("hidden", ()),
        ("lr_schedule", "cosine"),
        ("max_grad_norm", -0.5),
        ("lr_schedule", "linear"),  # TINY adapts its rate: one of the two
    ],
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(drl.ConfigError, match=field):
        dataclasses.replace(TINY, **{field: value}).validate()


def test_kernel_bad_input_names_the_argument():
    dev = drl.CPU()
    stats = obs_stats(dev, 3)
    with pytest.raises(drl.ShapeError, match="'stats.mean'"):
        running_stats_update(dev, stats, drl.zeros(dev, (2, 4)))
    with pytest.raises(drl.DTypeError, match="'lr'"):
        drl.adam_step(
            dev,
            drl.zeros(dev, 2),
            drl.zeros(dev, 2),
            drl.zeros(dev, 2),
            drl.zeros(dev, 2),
            drl.zeros(dev, 1, np.int64),
            drl.zeros(dev, 1, np.float32),
        )
    with pytest.raises(drl.ConfigError, match="'clip'"):
        ppo_policy_gradient(
            dev,
            *[drl.zeros(dev, s) for s in ((2, 1), 1, (2, 1), 2, 2, (2, 1), 1)],
            -0.1,
            0.0,
            True,
            drl.zeros(dev, (2, 1)),
            drl.zeros(dev, 1),
            drl.zeros(dev, 4, np.float64),
        )


class _NaNObservationEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gymnasium.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.full(2, np.nan if self.t == 3 else 0.0, np.float32)
        return obs, 0.0, False, False, {}


def test_nan_observations_give_a_clear_error():
    gymnasium.register("dispatchrl-test/NaNObservation-v0", entry_point=_NaNObservationEnv, max_episode_steps=50)
    with pytest.raises(drl.ConfigError, match="NaN or inf"):
        ppo.train(drl.CPU(), "dispatchrl-test/NaNObservation-v0", TINY, progress=False)
    # inside a fused step values cannot raise: the statistics refuse the update and the driver raises
    state = ppo.build(drl.CPU(), TINY, 2, 1, 0)
    running_stats_update(drl.CPU(), state.obs_stats, drl.asarray(drl.CPU(), np.full((2, 2), np.inf, np.float32)))
    with pytest.raises(drl.ConfigError, match="observation normalization"):
        ppo.check_iteration(state)


# ---------------------------------------------------------------- learning


def test_ppo_pendulum_learns():
    """The zoo config with a shorter budget (higher lr, no entropy bonus) to stay within CI time."""
    try:
        from threadpoolctl import threadpool_limits

        limit = threadpool_limits(1)
    except ImportError:  # pragma: no cover
        limit = None
    try:
        config = dataclasses.replace(ppo.Config(), total_steps=2_097_152, lr=3e-3, entropy_coef=0.0)
        result = ppo.train(drl.CPU(), "pendulum", config, seed=0, progress=False)
    finally:
        if limit is not None:
            limit.restore_original_limits()
    mean, _ = evaluate(result.policy, result.spec.eval_id, seeds=EVAL_SEEDS[:5])
    assert mean > -400, f"PPO Pendulum evaluation return {mean:.1f}"
