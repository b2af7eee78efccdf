"""Categorical PPO (issue 36 item 3): its kernels against float64 numpy references on every
device, and PPO on a Discrete action space (gymnasium CartPole-v1) through the driver,
checkpoints, the deployed argmax policy and the CLI."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit import numeric_gradient

import dispatchrl as drl
from dispatchrl import cli
from dispatchrl.algorithms import ALGORITHMS, ppo
from dispatchrl.kernels.onpolicy import categorical_sample, ppo_categorical_gradient
from dispatchrl.training import load_run

# the device fixture holds no state between examples (each builds its own arrays)
EXAMPLES = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def host(x):
    return drl.to_numpy(x)


def log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def uniforms(seed, count):
    """The counter stream's first ``count`` uniforms (the Generic device's, the reference)."""
    stream = drl.rng(drl.Generic(), seed)
    out = drl.zeros(drl.Generic(), count, np.float64)
    drl.random_uniform(drl.Generic(), stream, out, 0.0, 1.0)
    return host(out)


@settings(max_examples=8, **EXAMPLES)
@given(
    rows=st.integers(1, 9),
    k=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(0.1, 8.0),
)
def test_categorical_sample_inverts_the_softmax_cdf(device, rows, k, seed, scale):
    logits = (scale * np.random.default_rng(seed).normal(size=(rows, k))).astype(np.float32)
    stream = drl.rng(device, seed)
    action, log_prob = drl.zeros(device, (rows, 1)), drl.zeros(device, rows)
    categorical_sample(device, stream, drl.asarray(device, logits), action, log_prob)
    log_p = log_softmax(logits)
    cdf = np.cumsum(np.exp(log_p), axis=1)
    u = uniforms(seed, rows)
    expected = np.minimum((cdf <= u[:, None]).sum(axis=1), k - 1)
    near = np.any(np.abs(cdf - u[:, None]) < 1e-9, axis=1)  # a draw on a CDF step: rounding decides
    chosen = host(action)[:, 0]
    assert np.all((chosen == expected) | near)
    assert np.all(chosen == np.round(chosen)) and chosen.min() >= 0 and chosen.max() < k
    np.testing.assert_allclose(host(log_prob), log_p[np.arange(rows), chosen.astype(int)], rtol=1e-5, atol=1e-6)
    assert host(stream)[1] == rows


def test_categorical_sample_frequencies_follow_the_softmax():
    device = drl.CPU()
    logits = np.tile(np.array([[0.0, 1.0, -1.0]], np.float32), (20000, 1))
    action, log_prob = drl.zeros(device, (20000, 1)), drl.zeros(device, 20000)
    categorical_sample(device, drl.rng(device, 3), drl.asarray(device, logits), action, log_prob)
    counts = np.bincount(host(action)[:, 0].astype(int), minlength=3) / 20000
    np.testing.assert_allclose(counts, np.exp(log_softmax(logits[:1]))[0], atol=0.015)


def reference_loss(logits, action, old_log_prob, advantage, clip, entropy_coef, normalize):
    adv = (advantage - advantage.mean()) / (advantage.std() + 1e-8) if normalize else advantage
    log_p = log_softmax(logits)
    ratio = np.exp(log_p[np.arange(len(action)), action] - old_log_prob)
    surrogate = np.minimum(ratio * adv, np.clip(ratio, 1 - clip, 1 + clip) * adv)
    entropy = -np.sum(np.exp(log_p) * log_p, axis=1)
    return -surrogate.mean() - entropy_coef * entropy.mean()


@settings(max_examples=6, **EXAMPLES)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(2, 4), normalize=st.booleans())
def test_categorical_gradient_matches_finite_differences(device, seed, k, normalize):
    g = np.random.default_rng(seed)
    b = 12
    logits = g.normal(size=(b, k))
    old_logits = logits + 0.3 * g.normal(size=(b, k))
    old_log_p = log_softmax(old_logits)
    action = np.array([g.choice(k, p=np.exp(row)) for row in old_log_p])
    old_log_prob = old_log_p[np.arange(b), action]
    advantage = g.normal(size=b)
    clip, entropy_coef = 0.2, 0.05
    # the loss is evaluated at the float32 inputs the kernel sees
    logits, old_logits = logits.astype(np.float32).astype(np.float64), old_logits.astype(np.float32)
    old_log_prob, advantage = old_log_prob.astype(np.float32), advantage.astype(np.float32)
    f32 = lambda x: drl.asarray(device, np.asarray(x, np.float32))  # noqa: E731
    d_logits, info = drl.zeros(device, (b, k)), drl.zeros(device, 4, np.float64)
    ppo_categorical_gradient(
        device,
        f32(logits),
        f32(action[:, None]),
        f32(old_log_prob),
        f32(advantage),
        f32(old_logits),
        clip,
        entropy_coef,
        normalize,
        d_logits,
        info,
    )
    args = (action, old_log_prob.astype(np.float64), advantage.astype(np.float64), clip, entropy_coef, normalize)
    numeric = numeric_gradient(lambda x: reference_loss(x, *args), logits)
    np.testing.assert_allclose(host(d_logits), numeric, rtol=1e-3, atol=1e-5)
    log_p, old = log_softmax(logits), log_softmax(old_logits)
    ratio = np.exp(log_p[np.arange(b), action] - old_log_prob)
    kl = np.mean(np.sum(np.exp(old) * (old - log_p), axis=1))
    entropy = np.mean(-np.sum(np.exp(log_p) * log_p, axis=1))
    got = host(info)
    np.testing.assert_allclose(got[[0, 2]], [kl, entropy], rtol=1e-4, atol=1e-6)
    assert got[1] == pytest.approx(-reference_loss(logits, *args[:-2], 0.0, normalize), rel=1e-4, abs=1e-6)
    assert got[3] == pytest.approx(np.mean(np.abs(ratio - 1) > clip))


# ---------------------------------------------------------------- PPO on a Discrete action space

TINY = ppo.Config(
    total_steps=2 * 2 * 4, num_envs=2, steps_per_env=4, batch_size=4, epochs=2, hidden=(4,), entropy_coef=0.01
)


def test_same_categorical_ppo_on_every_device_agrees():
    """Two iterations on the native CartPole, fused per device: the same actions were sampled and
    the parameters agree across devices."""
    results = {}
    for device in (drl.Generic(), drl.CPU(), drl.C(), drl.CUDA()):
        results[type(device).__name__] = ppo.train(device, "cartpole", TINY, seed=3, progress=False)
    reference = results.pop("Generic")
    assert reference.state.log_std is None and reference.policy.squash == "argmax"
    for name, result in results.items():
        for field in ("weights", "biases"):
            for ours, ref in zip(getattr(result.policy, field), getattr(reference.policy, field)):
                np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-5, err_msg=f"{name} {field}")
        np.testing.assert_array_equal(host(result.state.rollout.action), host(reference.state.rollout.action))
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    actions = reference.policy(obs)
    assert actions.dtype == np.int64 and set(actions.tolist()) <= {0, 1}
    assert isinstance(reference.policy(obs[0]), np.integer)


def test_discrete_checkpoint_resume_and_facade(tmp_path):
    config = dataclasses.replace(TINY, total_steps=16)
    result = ppo.train(drl.CPU(), "CartPole-v1", config, seed=1, progress=False)  # the native CartPole
    assert result.spec.native is not None and result.spec.eval_id == "CartPole-v1"
    path = result.save(tmp_path / "run")[0]
    algo, name, spec, loaded_config, state = load_run(path, ALGORITHMS)
    assert name == "ppo" and spec.action_space == drl.spaces.Discrete(2) and loaded_config == config
    obs = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(spec.deployed_policy(algo, state)(obs), result.policy(obs))
    # resume continues bit for bit: 16 + 16 steps equal 32 in one run
    longer = dataclasses.replace(config, total_steps=32)
    resumed = ppo.train(drl.CPU(), "CartPole-v1", longer, seed=1, progress=False, resume=path)
    whole = ppo.train(drl.CPU(), "CartPole-v1", longer, seed=1, progress=False)
    for ours, ref in zip(resumed.policy.weights, whole.policy.weights):
        np.testing.assert_array_equal(ours, ref)
    model = drl.PPO("CartPole-v1", seed=2, num_envs=2, steps_per_env=4, batch_size=4, hidden=(4,))
    model.learn(16)
    action, _ = model.predict(np.zeros(4, np.float32))
    assert int(action) in (0, 1)
    sampled, _ = model.predict(np.zeros((6, 4), np.float32), deterministic=False)
    assert sampled.shape == (6,) and set(sampled.tolist()) <= {0, 1}
    loaded = drl.PPO.load(model.save(tmp_path / "facade"))
    np.testing.assert_array_equal(loaded.predict(obs)[0], model.predict(obs)[0])


def test_python_stepped_discrete_env_trains():
    """A gymnasium env instance (stepped from Python) acts with int indices the driver maps from
    the fused step's float rows."""
    import gymnasium

    result = ppo.train(drl.CPU(), gymnasium.make("CartPole-v1"), dataclasses.replace(TINY, num_envs=1, batch_size=2))
    assert result.spec.native is None and result.steps == 16
    assert set(host(result.state.rollout.action)[:, 0].tolist()) <= {0.0, 1.0}


def test_discrete_env_refused_by_box_algorithms():
    for algo in (drl.td3, drl.sac):
        with pytest.raises(drl.ConfigError, match=r"Discrete\(2\).*algorithms taking Discrete: .*ppo"):
            getattr(drl, algo.NAME.upper())("CartPole-v1")


def test_cli_trains_ppo_on_cartpole(capsys):
    code = cli.main(
        ["train", "ppo", "--env", "CartPole-v1", "--steps", "16", "--num-envs", "2"]
        + ["--set", "steps_per_env=4", "--set", "batch_size=4", "--set", "hidden=[4]", "--json"]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["algo"] == "ppo" and summary["env"] == "cartpole" and summary["steps"] == 16
    assert 8 <= summary["eval_return"] <= 500  # CartPole's returns: every step until the pole falls
