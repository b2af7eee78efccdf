"""Learner statistics summed on the device inside the fused step (TD3/SAC critic and actor loss,
mean Q, SAC entropy; PPO explained variance): the kernels on every device and the values a
training step accumulates, against float64 numpy recomputations; the rows the logger writes; the
format-3 checkpoint migration; and predict(deterministic=False)."""

import itertools
import math

import numpy as np
import pytest
from testkit import write_as_version

import dispatchrl as drl
from dispatchrl import checkpoint
from dispatchrl.algorithms import ppo, sac, td3
from dispatchrl.kernels.offpolicy import api as rl
from dispatchrl.kernels.onpolicy import api as onpolicy
from dispatchrl.loggers import CSVLogger, learner_scalars, read_progress
from dispatchrl.staging import fuse
from dispatchrl.training.envspec import resolve_env
from dispatchrl.training.runs import build_state

G = np.random.default_rng(0)
SMALL = dict(total_steps=400, warmup_steps=100, batch_size=16, hidden=(8,))


def put(device, x, dtype=np.float32):
    return drl.asarray(device, np.asarray(x, dtype=dtype))


def host(x):
    return drl.to_numpy(x).astype(np.float64)


# ---------------------------------------------------------------- kernels on every device


@pytest.mark.parametrize("n", [37, 300])  # on CUDA, 128 lanes: fewer rows than lanes, and several rows a lane
def test_accumulate_kernels_against_float64(device, n):
    q1, q2, target, log_prob = (G.normal(size=(n, 1)).astype(np.float32) for _ in range(4))
    log_alpha = np.float32(-1.3)
    stats3, stats2, sac3 = (
        drl.asarray(device, np.array(v, np.float64)) for v in ([2.0, 5.0, -1.0], [1.0, 0.5], [3.0, 1.0, 2.0])
    )
    for _ in range(2):  # sums: the second call adds the same again
        rl.accumulate_critic_stats(device, put(device, q1), put(device, q2), put(device, target), stats3)
        rl.accumulate_actor_stats(device, put(device, q1), stats2)
        rl.accumulate_sac_actor_stats(
            device, put(device, q1), put(device, q2), put(device, log_prob), put(device, [log_alpha]), sac3
        )
    q1, q2, target, log_prob = (a[:, 0].astype(np.float64) for a in (q1, q2, target, log_prob))
    loss = np.mean((q1 - target) ** 2) + np.mean((q2 - target) ** 2)
    np.testing.assert_allclose(host(stats3), [4, 5 + 2 * loss, -1 + np.mean(q1 + q2)], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(host(stats2), [3, 0.5 - 2 * np.mean(q1)], rtol=1e-12, atol=1e-12)
    actor_loss = np.mean(math.exp(float(log_alpha)) * log_prob - np.minimum(q1, q2))
    np.testing.assert_allclose(host(sac3), [5, 1 + 2 * actor_loss, 2 - 2 * np.mean(log_prob)], rtol=1e-12, atol=1e-12)


def test_fused_stats_on_a_block_wider_than_their_lanes(cuda_device):
    # a fused step's block (512 threads on a GPU) has more threads than the 128 lanes: those take no rows
    from dispatchrl.backends.cuda import block_program
    from dispatchrl.staging import trace

    q, stats = put(cuda_device, G.normal(size=(150, 1))), drl.zeros(cuda_device, 2, np.float64)
    with trace([]) as calls:
        rl.accumulate_actor_stats(cuda_device, q, stats)
    block_program(calls, 256)(1)
    np.testing.assert_allclose(host(stats), [1, -np.mean(host(q))], rtol=1e-12)


def test_explained_variance_kernel_against_float64(device):
    returns = G.normal(size=(6, 5)).astype(np.float32)
    value = (returns + 0.4 * G.normal(size=(6, 5))).astype(np.float32)
    out = drl.zeros(device, 1, np.float64)
    onpolicy.explained_variance(device, put(device, value), put(device, returns), out)
    y, v = returns.astype(np.float64).ravel(), value.astype(np.float64).ravel()
    np.testing.assert_allclose(host(out)[0], 1 - np.var(y - v) / np.var(y), rtol=1e-12)
    onpolicy.explained_variance(device, put(device, value), put(device, np.ones((6, 5))), out)
    assert host(out)[0] == 0.0  # constant returns: nothing to explain, and a finite value


def test_stats_arguments_are_checked():
    cpu = drl.CPU()
    with pytest.raises(drl.DTypeError, match="stats.*float64"):
        rl.accumulate_critic_stats(cpu, *(drl.zeros(cpu, (4, 1)) for _ in range(3)), drl.zeros(cpu, 3))
    with pytest.raises(drl.ShapeError, match="out"):
        onpolicy.explained_variance(cpu, drl.zeros(cpu, (4, 2)), drl.zeros(cpu, (4, 2)), drl.zeros(cpu, 2, np.float64))


# ---------------------------------------------------------------- what a training step accumulates (Generic)


def forward64(net, x):
    """The MLP in float64 from its current weights (a reference independent of the kernels)."""
    x = np.asarray(x, np.float64)
    last = len(net.weights) - 1
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        x = x @ host(w.value) + host(b.value)
        act = net.output_activation if i == last else net.activation
        x = {"relu": lambda z: np.maximum(z, 0), "tanh": np.tanh, "identity": lambda z: z}[act](x)
    return x


class _Value:
    def __init__(self, array):
        self.value = drl.asarray(drl.Generic(), array)


class Frozen:
    """An MLP's weights at one moment (host copies), for ``forward64`` after the step moved on."""

    def __init__(self, net):
        self.activation, self.output_activation = net.activation, net.output_activation
        self.weights = [_Value(host(w.value)) for w in net.weights]
        self.biases = [_Value(host(b.value)) for b in net.biases]


def stepper(algo, config, seed=0):
    device = drl.Generic()
    spec = resolve_env("pendulum", config.num_envs)
    state = build_state(algo, device, spec, config, seed)
    return state, fuse(device, algo.native_step, config, spec.native, state)


def test_td3_step_accumulates_its_losses_and_q():
    config = td3.Config(**SMALL)
    state, step = stepper(td3, config)
    step(config.warmup_steps + 2)
    seen = set()
    for _ in range(2):  # one step with the delayed actor update, one without
        critics = [Frozen(state.critic1), Frozen(state.critic2)]
        actor = Frozen(state.actor)
        before_critic, before_actor = host(state.critic_stats), host(state.actor_stats)
        step(1)
        critic, actor_stats = host(state.critic_stats) - before_critic, host(state.actor_stats) - before_actor
        batch = state.batch
        x = np.concatenate([host(batch.obs), host(batch.action)], axis=1)
        y = host(state.q_target)[:, 0]
        q1, q2 = (forward64(c, x)[:, 0] for c in critics)
        assert critic[0] == 1
        np.testing.assert_allclose(critic[1], np.mean((q1 - y) ** 2) + np.mean((q2 - y) ** 2), rtol=1e-5)
        np.testing.assert_allclose(critic[2], np.mean(q1 + q2) / 2, rtol=1e-5, atol=1e-6)
        if actor_stats[0]:
            obs = host(batch.obs)
            q_pi = forward64(state.critic1, np.concatenate([obs, forward64(actor, obs)], axis=1))
            np.testing.assert_allclose(actor_stats[1], -np.mean(q_pi), rtol=1e-5, atol=1e-6)
        seen.add(int(actor_stats[0]))
    assert seen == {0, 1}  # policy_delay 2: the actor's count moved on exactly one of the two


def test_sac_step_accumulates_losses_q_and_entropy():
    config = sac.Config(**SMALL)
    state, step = stepper(sac, config)
    step(config.warmup_steps + 2)
    seen = set()
    for _ in range(2):
        critics = [Frozen(state.critic1), Frozen(state.critic2)]
        before_critic, before_actor = host(state.critic_stats), host(state.actor_stats)
        step(1)
        critic, actor = host(state.critic_stats) - before_critic, host(state.actor_stats) - before_actor
        obs, action = host(state.batch.obs), host(state.batch.action)
        y = host(state.q_target)[:, 0]
        q1, q2 = (forward64(c, np.concatenate([obs, action], axis=1))[:, 0] for c in critics)
        assert critic[0] == 1
        np.testing.assert_allclose(critic[1], np.mean((q1 - y) ** 2) + np.mean((q2 - y) ** 2), rtol=1e-5)
        np.testing.assert_allclose(critic[2], np.mean(q1 + q2) / 2, rtol=1e-5, atol=1e-6)
        if actor[0]:  # the actor's loss through the critics as updated in this step, α after its update
            x = np.concatenate([obs, host(state.pi_action)], axis=1)
            q = np.minimum(forward64(state.critic1, x), forward64(state.critic2, x))[:, 0]
            log_prob = host(state.pi_log_prob)[:, 0]
            alpha = math.exp(host(state.log_alpha.value)[0])
            np.testing.assert_allclose(actor[1], np.mean(alpha * log_prob - q), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(actor[2], -np.mean(log_prob), rtol=1e-12)
        seen.add(int(actor[0]))
    assert seen == ({1} if config.policy_delay == 1 else {0, 1})  # SAC's default: every step


def test_ppo_iteration_computes_explained_variance():
    config = ppo.Config(total_steps=256, num_envs=8, steps_per_env=16, batch_size=32, hidden=(8,))
    state, step = stepper(ppo, config)
    update = fuse(drl.Generic(), ppo.update, config, state)
    step(config.steps_per_env)
    update(1)  # the first minibatch runs GAE and the explained variance
    y, v = host(state.rollout.returns).ravel(), host(state.rollout.value).ravel()
    expected = 1 - np.var(y - v) / np.var(y)
    np.testing.assert_allclose(host(state.explained_variance)[0], expected, rtol=1e-9)
    assert learner_scalars(state)["explained_variance"] == host(state.explained_variance)[0]


# ---------------------------------------------------------------- logged rows


def test_logged_rows_are_means_over_each_chunk(tmp_path):
    """Each chunk row holds the mean over that chunk's updates: the rows' update-weighted sum is
    the state's running sum."""
    logger = CSVLogger(tmp_path)
    result = sac.train(drl.CPU(), "pendulum", sac.Config(**SMALL), seed=1, progress=False, logger=logger)
    logger.close()
    rows = [r for r in read_progress(tmp_path) if "steps_per_second" in r]
    assert {"critic_loss", "q_mean", "actor_loss", "entropy", "alpha"} <= rows[-1].keys()
    assert "critic_loss" not in rows[0]  # the first chunk is warm-up: no update to average
    critic, actor = host(result.state.critic_stats), host(result.state.actor_stats)
    steps = [0] + [int(r["step"]) for r in rows]
    updates = [max(0, min(b, 400) - max(a, 100)) for a, b in itertools.pairwise(steps)]  # critic: every step
    np.testing.assert_allclose(sum(u * r.get("critic_loss", 0) for u, r in zip(updates, rows)), critic[1], rtol=1e-9)
    np.testing.assert_allclose(sum(u * r.get("q_mean", 0) for u, r in zip(updates, rows)), critic[2], rtol=1e-9)
    assert critic[0] == actor[0] == 300  # SAC updates its actor every step by default


def test_ppo_logs_a_row_per_iteration(tmp_path):
    logger = CSVLogger(tmp_path)
    config = ppo.Config(total_steps=1024, num_envs=8, steps_per_env=16, batch_size=32, hidden=(8,))
    result = ppo.train(drl.CPU(), "pendulum", config, seed=0, progress=False, logger=logger)
    logger.close()
    rows = [r for r in read_progress(tmp_path) if "steps_per_second" in r]
    assert [int(r["step"]) for r in rows] == list(range(128, 1025, 128))
    assert rows[-1]["explained_variance"] == host(result.state.explained_variance)[0]
    assert {"kl", "clip_fraction", "learning_rate", "entropy"} <= rows[-1].keys()


# ---------------------------------------------------------------- checkpoints of format 3


def as_version_3(path, target):
    """``path`` rewritten as the format-3 checkpoint the previous release wrote: without the
    learner statistics fields, version 3, digest of that content."""
    meta, arrays = checkpoint.load(path)
    for name in ("critic_stats", "actor_stats", "explained_variance"):
        arrays.pop(name, None)
    write_as_version(target, arrays, meta, 3)


@pytest.mark.parametrize("algo", ["td3", "ppo"])
def test_format_3_checkpoint_resumes_bit_for_bit(algo, tmp_path):
    module = {"td3": td3, "ppo": ppo}[algo]
    if algo == "td3":
        first, total = dict(SMALL, total_steps=300), dict(SMALL, total_steps=400)
    else:
        base = dict(num_envs=8, steps_per_env=16, batch_size=32, hidden=(8,))
        first, total = dict(base, total_steps=256), dict(base, total_steps=512)
    saved = module.train(drl.CPU(), "pendulum", module.Config(**first), seed=2, progress=False)
    saved.save(tmp_path / "new")
    as_version_3(tmp_path / "new", tmp_path / "old")
    meta, arrays = checkpoint.load(tmp_path / "old")
    assert meta["version"] == checkpoint.VERSION
    resumed = module.train(
        drl.CPU(), "pendulum", module.Config(**total), seed=2, progress=False, resume=tmp_path / "old"
    )
    straight = module.train(drl.CPU(), "pendulum", module.Config(**total), seed=2, progress=False)
    logging_only = {"critic_stats", "actor_stats", "explained_variance"}
    a = {n: drl.to_numpy(x) for n, x in checkpoint.named_arrays(resumed.state)}
    b = {n: drl.to_numpy(x) for n, x in checkpoint.named_arrays(straight.state)}
    assert a.keys() == b.keys()
    assert [n for n in a if n.rstrip(".") not in logging_only and not np.array_equal(a[n], b[n])] == []
    np.testing.assert_array_equal(resumed.history["returns"], straight.history["returns"])
    if algo == "td3":  # the sums restart at zero: they hold the updates since the resume
        assert host(resumed.state.critic_stats)[0] == 100 and host(resumed.state.actor_stats)[0] == 50
    else:  # recomputed by the first iteration after the resume
        np.testing.assert_array_equal(a["explained_variance."], b["explained_variance."])


# ---------------------------------------------------------------- predict(deterministic=False)


@pytest.mark.parametrize("cls", [drl.TD3, drl.SAC, drl.PPO])
def test_stochastic_predict_samples_around_the_deterministic_action(cls):
    config = SMALL if cls is not drl.PPO else dict(num_envs=8, steps_per_env=16, batch_size=32, hidden=(8,))
    config = {k: v for k, v in config.items() if k != "total_steps"}
    model = cls("pendulum", seed=4, **config)
    obs = np.random.default_rng(1).uniform(-1, 1, (2000, 3)).astype(np.float32)
    greedy, _ = model.predict(obs)
    sampled, hidden = model.predict(obs, deterministic=False)
    again, _ = model.predict(obs, deterministic=False)
    assert hidden is None and sampled.shape == greedy.shape == (2000, 1) and sampled.dtype == np.float32
    assert np.all(np.abs(sampled) <= 2.0)  # Pendulum's torque bound
    assert not np.array_equal(sampled, again)  # fresh noise every call
    np.testing.assert_array_equal(model.predict(obs)[0], greedy)  # deterministic stays deterministic
    # reproducible from the model's seed
    np.testing.assert_array_equal(cls("pendulum", seed=4, **config).predict(obs, deterministic=False)[0], sampled)
    unit = lambda a: a / 2.0  # noqa: E731  (Pendulum: [-2, 2] → [-1, 1])
    noise = unit(sampled.astype(np.float64)) - unit(greedy.astype(np.float64))
    if cls is drl.TD3:  # clip(π(s) + N(0, 0.1²), −1, 1): away from the bounds, the noise itself
        inside = np.abs(unit(greedy[:, 0])) < 0.5
        assert abs(np.std(noise[inside, 0]) - 0.1) < 0.01 and abs(np.mean(noise[inside, 0])) < 0.01
    elif cls is drl.PPO:  # clip(mean + 2ε, −1, 1) with the initial std 2 and a mean near 0
        at_bounds = np.mean(np.abs(unit(sampled[:, 0])) == 1.0)
        assert 0.5 < at_bounds < 0.75  # P(|2ε| > 1) = 0.617
    else:  # tanh(mean + std·ε): spread around the deterministic tanh(mean)
        assert np.std(noise) > 0.05


# ---------------------------------------------------------------- evaluations in the logs, the facade's logger


def test_eval_callback_rows_reach_the_facades_logger(tmp_path):
    logger = CSVLogger(tmp_path)
    evaluation = drl.EvalCallback(every=100, episodes=1)
    model = drl.TD3("pendulum", seed=0, logger=logger, **{k: v for k, v in SMALL.items() if k != "total_steps"})
    model.learn(200, callback=evaluation)
    model.learn(100, callback=evaluation)  # the second learn logs into the same files
    rows = read_progress(tmp_path)  # flushed at the end of each learn, before close
    logged = [(int(r["step"]), r["eval_return"]) for r in rows if "eval_return" in r]
    assert logged == [(row["steps"], row["eval_return"]) for row in evaluation.rows]
    assert [s for s, _ in logged] == [100, 200, 300]
    assert any("critic_loss" in r and int(r["step"]) > 200 for r in rows)
    logger.close()


def test_cli_eval_every_logs_eval_returns(tmp_path, capsys):
    from dispatchrl.cli import main

    argv = ["train", "td3", "--no-eval", "--json", "--steps", "400", "--set", "warmup_steps=100"]
    assert main([*argv, "--eval-every", "200", "--eval-episodes", "1", "--log-dir", str(tmp_path)]) == 0
    assert [int(r["step"]) for r in read_progress(tmp_path) if "eval_return" in r] == [200, 400]
    capsys.readouterr()
    assert main([*argv, "--eval-every", "0"]) == 2
    assert "--eval-every must be a positive int" in capsys.readouterr().err
