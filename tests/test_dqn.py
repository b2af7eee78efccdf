"""DQN: its kernels (ε-greedy acting, Double-DQN targets, the Huber gradient) on every device
against float64 numpy references, and the algorithm's training, checkpoints and entry points."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit import numeric_gradient, state_bytes

import dispatchrl as drl
from dispatchrl.errors import ConfigError, DTypeError, ShapeError
from dispatchrl.kernels.offpolicy import api as rl
from dispatchrl.kernels.random.generic import uniform01

# the device fixture is made per test, not per example: the same device serves every example
fixture_ok = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def put(device, x, dtype=np.float32):
    return drl.asarray(device, np.asarray(x, dtype=dtype))


def host(x):
    return drl.to_numpy(x)


#: a batch of Q rows: its rows, its k actions, the numpy seed that fills it
Q_BATCH = dict(rows=st.integers(1, 6), k=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))


def q_values(g, rows, k, ties):
    """Random Q rows; with ``ties`` small integers, so rows often hold equal maxima."""
    q = g.integers(-2, 3, size=(rows, k)) if ties else g.normal(size=(rows, k))
    return q.astype(np.float32)


def first_argmax(q):
    """Reference argmax: the first column holding the row's maximum."""
    return np.array([next(j for j in range(q.shape[1]) if q[i, j] == q[i].max()) for i in range(q.shape[0])])


@fixture_ok
@given(
    **Q_BATCH,
    step=st.integers(0, 300),
    eps=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    ties=st.booleans(),
)
def test_epsilon_greedy_against_reference(device, rows, k, seed, step, eps, ties):
    g = np.random.default_rng(seed)
    q = q_values(g, rows, k, ties)
    initial, final, decay = eps[0], eps[1], 200.0
    stream = drl.rng(device, seed)
    start = host(stream).copy()
    action = drl.zeros(device, (rows, 1))
    rl.epsilon_greedy(device, stream, put(device, q), put(device, [step], np.int64), initial, final, decay, action)
    # reference: the same stream positions, ε in float64
    epsilon = initial + (final - initial) * min(1.0, step / decay)
    u = uniform01(start.copy(), 2 * rows)
    expected = np.where(u[0::2] < epsilon, np.minimum((u[1::2] * k).astype(np.int64), k - 1), first_argmax(q))
    np.testing.assert_array_equal(host(action)[:, 0], expected.astype(np.float32))
    assert host(stream)[1] == start[1] + 2 * rows  # the same advance whatever was chosen


def test_epsilon_greedy_schedule_ends_at_final_eps(device):
    """Past decay_steps ε is final_eps: 0 gives the greedy action, 1 a uniform one in every row."""
    g = np.random.default_rng(1)
    q = q_values(g, 64, 4, ties=False)
    action = drl.zeros(device, (64, 1))
    late = put(device, [500], np.int64)
    rl.epsilon_greedy(device, drl.rng(device, 2), put(device, q), late, 1.0, 0.0, 100.0, action)
    np.testing.assert_array_equal(host(action)[:, 0], first_argmax(q))
    rl.epsilon_greedy(device, drl.rng(device, 2), put(device, q), late, 0.0, 1.0, 100.0, action)
    chosen = host(action)[:, 0]
    assert set(np.unique(chosen)) == {0.0, 1.0, 2.0, 3.0}  # 64 uniform draws over 4 actions


@fixture_ok
@given(
    **Q_BATCH,
    gamma=st.floats(0, 1),
    double=st.booleans(),
    ties=st.booleans(),
)
def test_dqn_targets_against_reference(device, rows, k, seed, gamma, double, ties):
    g = np.random.default_rng(seed)
    online, target_q = q_values(g, rows, k, ties), q_values(g, rows, k, ties)
    reward = g.normal(size=rows).astype(np.float32)
    terminated = g.random(rows) < 0.4
    target = drl.zeros(device, (rows, 1))
    rl.dqn_targets(
        device,
        put(device, online),
        put(device, target_q),
        put(device, reward),
        put(device, terminated, np.bool_),
        gamma,
        target,
        double,
    )
    chosen = first_argmax(online if double else target_q)
    bootstrap = target_q[np.arange(rows), chosen].astype(np.float64)
    expected = reward.astype(np.float64) + gamma * (1.0 - terminated) * bootstrap
    np.testing.assert_allclose(host(target)[:, 0], expected, rtol=1e-6, atol=1e-6)


@fixture_ok
@given(**Q_BATCH, scale=st.floats(0.1, 4))
def test_q_huber_gradient_and_stats_against_reference(device, rows, k, seed, scale):
    g = np.random.default_rng(seed)
    q = (scale * g.normal(size=(rows, k))).astype(np.float32)
    action = g.integers(0, k, size=(rows, 1)).astype(np.float32)
    target = (scale * g.normal(size=(rows, 1))).astype(np.float32)
    d_q = put(device, np.full((rows, k), 7.0))  # every entry written, the stale 7s included
    rl.q_huber_gradient(device, put(device, q), put(device, action), put(device, target), d_q)
    taken = action[:, 0].astype(np.int64)
    error = q[np.arange(rows), taken].astype(np.float64) - target[:, 0]
    expected = np.zeros((rows, k))
    expected[np.arange(rows), taken] = np.clip(error, -1.0, 1.0) / rows
    np.testing.assert_allclose(host(d_q), expected, rtol=1e-6, atol=1e-7)
    # the gradient is the Huber loss's: a central difference of the float64 loss agrees
    loss = lambda e: np.mean(np.where(np.abs(e) <= 1.0, 0.5 * e * e, np.abs(e) - 0.5))  # noqa: E731
    numeric = numeric_gradient(loss, error)
    for i in range(rows):
        if abs(abs(error[i]) - 1.0) > 1e-3:  # away from the kink
            assert abs(numeric[i] - expected[i, taken[i]]) < 1e-6
    stats = put(device, np.zeros(3), np.float64)
    rl.accumulate_q_stats(device, put(device, q), put(device, action), put(device, target), stats)
    q_taken = q[np.arange(rows), taken].astype(np.float64)
    np.testing.assert_allclose(host(stats), [1.0, loss(error), q_taken.mean()], rtol=1e-9, atol=1e-12)


@fixture_ok
@given(**Q_BATCH)
def test_taken_q_against_reference(device, rows, k, seed):
    """taken_q: each row's Q of its taken action, as a (B, 1) column (prioritized replay's TD error)."""
    g = np.random.default_rng(seed)
    q = g.normal(size=(rows, k)).astype(np.float32)
    action = g.integers(0, k, size=(rows, 1)).astype(np.float32)
    out = put(device, np.full((rows, 1), 7.0))
    rl.taken_q(device, put(device, q), put(device, action), out)
    expected = q.astype(np.float64)[np.arange(rows), action[:, 0].astype(np.int64)]
    np.testing.assert_array_equal(host(out)[:, 0].astype(np.float64), expected)


@fixture_ok
@given(rows=st.integers(1, 6), n=st.integers(1, 5), seed=st.integers(0, 2**32 - 1), scale=st.floats(0.1, 100))
def test_dueling_q_and_its_backward_against_reference(device, rows, n, seed, scale):
    """Q = V + A - mean(A) from [V, A_1..A_n], and its vector-Jacobian product, as float64 numpy
    computes them; the backward is the forward's gradient (a central difference agrees)."""
    g = np.random.default_rng(seed)
    raw = (scale * g.normal(size=(rows, n + 1))).astype(np.float32)
    d_q = g.normal(size=(rows, n)).astype(np.float32)
    q, d_raw = put(device, np.full((rows, n), 7.0)), put(device, np.full((rows, n + 1), 7.0))
    rl.dueling_q(device, put(device, raw), q)
    rl.dueling_q_backward(device, put(device, d_q), d_raw)
    r = raw.astype(np.float64)
    expected_q = r[:, :1] + r[:, 1:] - r[:, 1:].mean(axis=1, keepdims=True)
    np.testing.assert_allclose(host(q), expected_q, rtol=1e-6, atol=1e-6 * scale)
    d = d_q.astype(np.float64)
    expected_d_raw = np.concatenate([d.sum(axis=1, keepdims=True), d - d.mean(axis=1, keepdims=True)], axis=1)
    np.testing.assert_allclose(host(d_raw), expected_d_raw, rtol=1e-6, atol=1e-6)
    # the backward is the forward's: ∂(Σ d_q · Q)/∂raw by central differences of the float64 map
    combine = lambda x: x[:, :1] + x[:, 1:] - x[:, 1:].mean(axis=1, keepdims=True)  # noqa: E731
    numeric = np.zeros_like(r)
    for index in np.ndindex(*r.shape):
        bump = np.zeros_like(r)
        bump[index] = 1e-3
        numeric[index] = (np.sum(d * combine(r + bump)) - np.sum(d * combine(r - bump))) / 2e-3
    np.testing.assert_allclose(expected_d_raw, numeric, rtol=1e-6, atol=1e-6)


def test_kernels_give_the_same_bits_as_generic(device):
    """Actions, targets and gradients are bit for bit Generic's (same draws, same float64 math)."""
    g = np.random.default_rng(5)
    q, q_next, q_target = (g.normal(size=(9, 3)).astype(np.float32) for _ in range(3))
    reward, terminated = g.normal(size=9).astype(np.float32), g.random(9) < 0.3
    results = []
    for dev in (drl.Generic(), device):
        action, target, d_q = drl.zeros(dev, (9, 1)), drl.zeros(dev, (9, 1)), drl.zeros(dev, (9, 3))
        rl.epsilon_greedy(dev, drl.rng(dev, 3), put(dev, q), put(dev, [40], np.int64), 1.0, 0.05, 100.0, action)
        rl.dqn_targets(
            dev, put(dev, q_next), put(dev, q_target), put(dev, reward), put(dev, terminated, np.bool_), 0.99, target
        )
        rl.q_huber_gradient(dev, put(dev, q), action, target, d_q)
        dueling, d_raw = drl.zeros(dev, (9, 2)), drl.zeros(dev, (9, 3))
        rl.dueling_q(dev, put(dev, q), dueling)
        rl.dueling_q_backward(dev, dueling, d_raw)
        results.append([host(a) for a in (action, target, d_q, dueling, d_raw)])
    for expected, got in zip(*results):
        np.testing.assert_array_equal(got, expected)


def test_kernels_refuse_bad_arguments_by_name():
    dev = drl.Generic()
    q = drl.zeros(dev, (4, 3))
    with pytest.raises(ShapeError, match="'action'"):
        rl.epsilon_greedy(dev, drl.rng(dev, 0), q, drl.zeros(dev, 1, np.int64), 1.0, 0.1, 10, drl.zeros(dev, (4, 3)))
    with pytest.raises(ConfigError, match="'decay_steps'"):
        rl.epsilon_greedy(dev, drl.rng(dev, 0), q, drl.zeros(dev, 1, np.int64), 1.0, 0.1, 0, drl.zeros(dev, (4, 1)))
    with pytest.raises(ConfigError, match="'final_eps'"):
        rl.epsilon_greedy(dev, drl.rng(dev, 0), q, drl.zeros(dev, 1, np.int64), 1.0, 1.5, 10, drl.zeros(dev, (4, 1)))
    with pytest.raises(ShapeError, match="'q_next_online'"):
        rl.dqn_targets(
            dev,
            drl.zeros(dev, (4, 2)),
            q,
            drl.zeros(dev, 4),
            drl.zeros(dev, 4, np.bool_),
            0.99,
            drl.zeros(dev, (4, 1)),
        )
    with pytest.raises(ShapeError, match="'d_q'"):
        rl.q_huber_gradient(dev, q, drl.zeros(dev, (4, 1)), drl.zeros(dev, (4, 1)), drl.zeros(dev, (4, 1)))
    with pytest.raises(ShapeError, match="'out'"):
        rl.taken_q(dev, q, drl.zeros(dev, (4, 1)), drl.zeros(dev, 4))
    with pytest.raises(ShapeError, match=r"'q' has shape \(4, 3\).*\(4, 2\)"):
        rl.dueling_q(dev, q, drl.zeros(dev, (4, 3)))  # n + 1 = 3 raw columns: n = 2 Q-values
    with pytest.raises(ShapeError, match=r"'raw' needs n \+ 1 >= 2 columns"):
        rl.dueling_q(dev, drl.zeros(dev, (4, 1)), drl.zeros(dev, (4, 1)))
    with pytest.raises(ShapeError, match="'d_q'"):
        rl.dueling_q_backward(dev, drl.zeros(dev, (3, 2)), q)  # 3 rows, d_raw has 4
    with pytest.raises(DTypeError, match="'d_q' has dtype float64, expected float32"):
        rl.dueling_q_backward(dev, drl.zeros(dev, (4, 2), np.float64), q)  # the dtype differs


# ---------------------------------------------------------------- the algorithm

from dispatchrl import checkpoint  # noqa: E402
from dispatchrl.algorithms import dqn  # noqa: E402
from dispatchrl.algorithms.dueling import DuelingQNetwork  # noqa: E402

#: a few hundred steps of a tiny Q network: 3 training phases of 8 gradient steps
MODEL = dict(hidden=(8,), batch_size=16, learning_starts=100, train_freq=100, gradient_steps=8, buffer_size=500)
TINY = dict(MODEL, total_steps=400)


def arrays(result):
    return {name.rstrip("."): drl.to_numpy(a) for name, a in checkpoint.named_arrays(result.state)}


@pytest.mark.parametrize(("prioritized", "dueling"), [(False, False), (True, False), (False, True)])
def test_trains_on_cartpole_alike_on_generic_cpu_and_c(prioritized, dueling):
    """CartPole-v1: Generic, CPU and C take the same actions (so see the same transitions) and
    reach the same weights (up to their matrix products' rounding); prioritized, they sample the
    same rows and hold the same priorities; with the dueling head too (its network then has
    n + 1 = 3 outputs)."""
    results = [
        dqn.train(
            device, "CartPole-v1", dqn.Config(**TINY, prioritized=prioritized, dueling=dueling), seed=3, progress=False
        )
        for device in (drl.Generic(), drl.CPU(), drl.C())
    ]
    generic, cpu, c = (arrays(r) for r in results)
    exact = ("replay.action", "replay.obs", "replay.reward", "replay.terminated", "step", "updates", "rng")
    for other in (cpu, c):
        assert generic.keys() == other.keys()
        for name in exact + (("priorities.index", "priorities.beta") if prioritized else ()):
            np.testing.assert_array_equal(other[name], generic[name], err_msg=name)
        trained = (n for n in generic if ".weights." in n or ".biases." in n or n.startswith("priorities."))
        for name in trained:
            np.testing.assert_allclose(other[name], generic[name], rtol=1e-4, atol=1e-4, err_msg=name)
    result = results[1]
    last_bias = "q_net.body.biases.1.value" if dueling else "q_net.biases.1.value"
    assert cpu[last_bias].shape == ((3,) if dueling else (2,))
    assert result.steps == 400 and int(cpu["step"][0]) == 400
    assert int(cpu["updates"][0]) == 3 * 8  # phases ending at steps 200, 300, 400 (> learning_starts)
    assert set(np.unique(cpu["replay.action"])) == {0.0, 1.0}
    assert int(cpu["critic_stats"][0]) == 24 and np.isfinite(cpu["critic_stats"]).all()
    assert any(n.startswith("priorities.") for n in cpu) == prioritized
    action = result.policy(np.zeros((3, 4), np.float32))
    assert action.dtype == np.int64 and action.shape == (3,) and set(action) <= {0, 1}


def test_prioritized_fused_step_agrees_on_cuda(cuda_device):
    """The fused prioritized step on CUDA (the simulator unless a GPU is configured): Generic's
    sampled rows and β bit for bit, its priorities and weights up to rounding (a short run: the
    simulator runs every thread in Python)."""
    config = dqn.Config(
        hidden=(4,), batch_size=4, learning_starts=5, train_freq=5, gradient_steps=2, buffer_size=10, total_steps=10
    )
    config = replace(config, prioritized=True)
    generic, cuda = (
        arrays(dqn.train(device, "cartpole", config, seed=3, progress=False)) for device in (drl.Generic(), cuda_device)
    )
    assert generic.keys() == cuda.keys() and int(cuda["updates"][0]) == 2
    for name in ("replay.action", "rng", "priorities.index", "priorities.beta"):
        np.testing.assert_array_equal(cuda[name], generic[name], err_msg=name)
    for name in (n for n in generic if n.startswith("priorities.") or ".weights." in n):
        np.testing.assert_allclose(cuda[name], generic[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_target_network_is_the_online_one_of_the_last_sync():
    """tau = 1, SB3's schedule: the target is copied from the online net every 10 env steps while
    collecting, so after a 400-step run it is the online net as the phase ending at step 300 left
    it (a 300-step run's, ε's schedule made independent of the budget); with an interval longer
    than the run it is still the initial net."""
    config = dict(TINY, exploration_fraction=0.0)
    longer = dqn.train(drl.CPU(), "CartPole-v1", dqn.Config(**config), seed=0, progress=False)
    shorter = dqn.train(drl.CPU(), "CartPole-v1", dqn.Config(**{**config, "total_steps": 300}), seed=0, progress=False)
    never = dqn.train(
        drl.CPU(), "CartPole-v1", dqn.Config(**config, target_update_interval=10**6), seed=0, progress=False
    )
    initial = {
        name.rstrip("."): drl.to_numpy(a)
        for name, a in checkpoint.named_arrays(dqn.build(drl.CPU(), dqn.Config(**config), 4, 2, seed=0).q_net)
    }
    longer_state, shorter_state, never_state = arrays(longer), arrays(shorter), arrays(never)
    names = [n for n in initial if n.endswith(".value")]
    assert len(names) == 4
    for name in names:
        target = "q_target_net." + name
        np.testing.assert_array_equal(longer_state[target], shorter_state["q_net." + name])
        assert not np.array_equal(longer_state[target], longer_state["q_net." + name])  # 8 steps since
        np.testing.assert_array_equal(never_state[target], initial[name])


class Alternate:
    """A tiny Discrete gymnasium env whose resets ignore the seed: episodes of 10 steps (then
    truncated), reward 1 for the action matching the step's parity. A run saved at an episode
    boundary resumes exactly where an uninterrupted one would be."""

    def __new__(cls):
        import gymnasium

        class _Alternate(gymnasium.Env):
            observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
            action_space = gymnasium.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                self.t = 0
                return self._obs(), {}

            def _obs(self):
                return np.array([self.t / 10, (-1.0) ** self.t], np.float32)

            def step(self, action):
                reward = float(int(action) == self.t % 2)
                self.t += 1
                return self._obs(), reward, False, self.t == 10, {}

        return _Alternate()


# prioritized: β's schedule fixed, not the run's length (which the resume raises)
@pytest.mark.parametrize("extra", [{}, dict(prioritized=True, priority_beta_steps=400), dict(dueling=True)])
def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, extra):
    import gymnasium

    if "DqnAlternate-v0" not in gymnasium.registry:
        gymnasium.register("DqnAlternate-v0", entry_point=Alternate)
    # ε's decay spans a fraction of the budget, which the resume raises: ε at its final value from
    # the start keeps the two runs' schedules the same
    config = dict(TINY, learning_starts=50, exploration_fraction=0.0, **extra)
    half = dqn.train(drl.CPU(), "DqnAlternate-v0", dqn.Config(**{**config, "total_steps": 200}), seed=4, progress=False)
    half.save(tmp_path / "half")
    resumed = dqn.train(
        drl.CPU(), "DqnAlternate-v0", dqn.Config(**config), seed=4, progress=False, resume=tmp_path / "half"
    )
    straight = dqn.train(drl.CPU(), "DqnAlternate-v0", dqn.Config(**config), seed=4, progress=False)
    a, b = arrays(resumed), arrays(straight)
    assert a.keys() == b.keys() and int(a["updates"][0]) == 4 * 8
    assert ("priorities.sum_tree" in a) == bool(extra.get("prioritized"))
    assert [n for n in a if not np.array_equal(a[n], b[n])] == []


def test_dueling_policy_is_the_combined_q_and_reloads_and_exports(tmp_path):
    """A dueling DQN deploys as a plain n-output MLP policy: its outputs are the device's Q-values
    (V + A - mean A: the combine folded into the last layer), its actions their argmax; a
    checkpoint reloads it (load_run, as ``eval`` and ``export`` do), ``dispatchrl export``'s C
    policy acts as it does, and a checkpoint whose config was edited to dueling=False is refused."""
    from dispatchrl import export
    from dispatchrl.nn import Policy, forward, make_buffers, raw_output
    from dispatchrl.training import load_run

    result = dqn.train(drl.CPU(), "CartPole-v1", dqn.Config(**TINY, dueling=True), seed=2, progress=False)
    net = result.state.q_net
    obs = (10 * np.random.default_rng(0).normal(size=(256, 4))).astype(np.float32)  # wide: both actions
    buffers = make_buffers(drl.CPU(), net, len(obs))
    forward(drl.CPU(), net, buffers, drl.asarray(drl.CPU(), obs))
    q = host(buffers.output)
    assert q.shape == (256, 2) and host(buffers.body.output).shape == (256, 3)
    np.testing.assert_allclose(raw_output(net)(obs), q, rtol=1e-5, atol=1e-4)
    policy = result.policy
    assert isinstance(policy, Policy) and policy.action_dim == 2
    actions = policy(obs)
    clear = np.abs(q[:, 0] - q[:, 1]) > 1e-3  # rows whose argmax rounding cannot flip
    np.testing.assert_array_equal(actions[clear], q[clear].argmax(axis=1))
    assert len(set(actions.tolist())) == 2
    result.save(tmp_path / "run")
    algo, _, spec, _, state = load_run(tmp_path / "run", {"dqn": dqn})
    assert isinstance(state.q_net, DuelingQNetwork)
    deployed = spec.deployed_policy(algo, state)
    np.testing.assert_array_equal(deployed(obs), actions)
    paths = export.write_policy(deployed, tmp_path / "c", target="host")
    assert "#define POLICY_ACTION_COUNT 2" in paths["header"].read_text()
    np.testing.assert_array_equal(export.run_executable(paths["binary"], "host", obs)[:, 0], actions)
    meta, saved = checkpoint.load(tmp_path / "run")
    checkpoint.write(tmp_path / "edited", saved, {**meta, "config": {**meta["config"], "dueling": False}})
    with pytest.raises(drl.CheckpointError, match="q_net"):
        load_run(tmp_path / "edited", {"dqn": dqn})


def test_dueling_body_may_be_a_user_network(monkeypatch):
    """Any network with n + 1 outputs is a dueling body (here examples/custom_network.py's residual
    MLP, on Generic): it trains, and its host policy, which cannot fold the combine into an MLP's
    last layer, combines the body's outputs on the host: the argmax of the device's Q-values."""
    from pathlib import Path

    from dispatchrl.nn import forward, make_buffers

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples"))
    config = dqn.Config(**{**TINY, "hidden": (8, 8)}, network="custom_network:residual_mlp", dueling=True)
    result = dqn.train(drl.Generic(), "CartPole-v1", config, seed=0, progress=False)
    net = result.state.q_net
    assert type(net.body).__name__ == "ResidualMLP" and int(arrays(result)["updates"][0]) == 24
    obs = (10 * np.random.default_rng(1).normal(size=(64, 4))).astype(np.float32)
    buffers = make_buffers(drl.Generic(), net, len(obs))
    forward(drl.Generic(), net, buffers, drl.asarray(drl.Generic(), obs))
    q = host(buffers.output)
    clear = np.abs(q[:, 0] - q[:, 1]) > 1e-4
    np.testing.assert_array_equal(result.policy(obs)[clear], q[clear].argmax(axis=1))


def test_n_step_and_plain_dqn_targets_train():
    """n-step windows (offpolicy's, as TD3's) and plain max-of-target targets run through the
    same step: the gradient steps happen, the logged loss stays finite, and the targets (so the
    losses) differ from the default 1-step Double-DQN run's."""
    # a large rate moves the online net away from the target within a phase, so their argmaxes differ
    config = dqn.Config(**TINY, learning_rate=0.05)
    default = arrays(dqn.train(drl.Generic(), "CartPole-v1", config, seed=1, progress=False))
    for extra in (dict(n_step=3), dict(double_q=False)):
        result = dqn.train(drl.Generic(), "CartPole-v1", replace(config, **extra), seed=1, progress=False)
        stats = arrays(result)["critic_stats"]
        assert stats[0] == 24 and np.isfinite(stats).all() and stats[1] > 0, extra
        assert stats[1] != default["critic_stats"][1], extra


def test_prioritized_priorities_are_the_taken_actions_td_errors():
    """Prioritized replay: the last sampled rows' priorities are |Q(s, a) − target| of the taken
    action a (Q before that gradient step), stored in the sum tree as (priority + eps) ** alpha;
    the sum and min trees hold their leaves' sum and minimum."""
    from dispatchrl.kernels.replay.api import tree_leaves

    config = dqn.Config(**TINY, prioritized=True, priority_alpha=0.7)
    state = dqn.train(drl.Generic(), "CartPole-v1", config, seed=2, progress=False).state
    p = state.priorities
    q, action = host(state.q_batch.output), host(state.batch.action)[:, 0].astype(np.int64)
    expected = np.abs(q[np.arange(16), action] - host(state.q_target)[:, 0])
    np.testing.assert_array_equal(host(p.priority), expected)
    leaves = tree_leaves(config.buffer_size)
    sum_tree, min_tree = host(p.sum_tree), host(p.min_tree)
    stored = sum_tree[leaves : leaves + config.buffer_size][:400]  # 400 rows written
    latest = dict(zip(host(p.index).tolist(), host(p.priority).tolist()))  # a row drawn twice: its last
    for row, priority in latest.items():
        assert stored[row] == pytest.approx((priority + config.priority_eps) ** 0.7, rel=1e-12)
    assert sum_tree[1] == pytest.approx(stored.sum(), rel=1e-9) and min_tree[1] == stored.min()
    # β annealed from 0.4 to 1 over the 400-step run, weights normalised to at most 1
    assert host(p.beta)[0] == pytest.approx(1.0) and np.all(host(p.weight) <= 1.0 + 1e-6)


def test_checkpoint_refuses_more_gradient_steps_than_the_schedule_allows(tmp_path):
    """A crafted checkpoint (digest recomputed) claiming more gradient steps than train_freq and
    gradient_steps allow, or Adam steps that are not its gradient steps, is refused naming the field."""
    from dispatchrl.training import load_run

    result = dqn.train(drl.CPU(), "CartPole-v1", dqn.Config(**TINY), seed=0, progress=False)
    result.save(tmp_path / "run")
    meta, saved = checkpoint.load(tmp_path / "run")
    assert int(saved["updates"][0]) == 24
    load_run(tmp_path / "run", {"dqn": dqn})  # the untouched one loads
    for name, field, value in (("more", "updates", 25), ("adam", "q_net.weights.0.t", 23)):
        checkpoint.write(tmp_path / name, {**saved, field: np.array([value], np.int64)}, meta)
        with pytest.raises(drl.CheckpointError, match=f"'{field}'"):
            load_run(tmp_path / name, {"dqn": dqn})


@pytest.mark.parametrize("dueling", [False, True])
def test_memory_estimate_matches_what_the_state_allocates(dueling):
    """The driver's memory check knows DQN's state: a Q network of n outputs (n + 1, dueling) and
    its target, one action column in the replay ring (tests/test_bad_input.py's sizes for TD3)."""
    from dispatchrl.algorithms import memory
    from dispatchrl.training import driver
    from dispatchrl.training.envspec import resolve_env
    from dispatchrl.training.runs import build_state

    config = dqn.Config(hidden=(96, 80), batch_size=128, buffer_size=20_000, num_envs=2, n_step=3, dueling=dueling)
    spec = resolve_env("CartPole-v1", config.num_envs)
    state = build_state(dqn, drl.CPU(), spec, config, 0)
    built = state_bytes(state, set())
    episodes = driver.episode_ring_capacity(config.num_envs, dqn.schedule(config).env_steps)
    estimated = memory.total_bytes(memory.estimate(dqn, config, spec.obs_dim, spec.action_outputs, episodes))
    assert spec.action_outputs == 2 and abs(estimated - built) <= 0.02 * built, (estimated, built)
    # prioritized: the sum and min trees (2 × 2 × 32768 float64 for 20000 rows) and the batch's arrays
    prioritized = replace(config, prioritized=True)
    grown = state_bytes(build_state(dqn, drl.CPU(), spec, prioritized, 0), set()) - built
    more = memory.total_bytes(memory.estimate(dqn, prioritized, spec.obs_dim, 2, episodes)) - estimated
    assert grown > 4 * 32768 * 8 and abs(more - grown) <= 0.02 * grown, (more, grown)


def test_a_box_env_is_refused_naming_the_algorithms_taking_box():
    with pytest.raises(ConfigError, match=r"dqn takes Discrete.*algorithms taking Box: ppo, sac, td3"):
        drl.DQN("pendulum", device="cpu", **MODEL)
    with pytest.raises(ConfigError, match=r"'pendulum' has a Box\(1\) action space; dqn takes Discrete"):
        dqn.train(drl.CPU(), "pendulum", dqn.Config(**TINY), seed=0, progress=False)


def test_config_is_validated_by_field():
    with pytest.raises(ConfigError, match="exploration_final_eps"):
        dqn.Config(exploration_final_eps=1.5).validate()
    with pytest.raises(ConfigError, match=r"Config.priority_beta must be in \[0, 1\], got 1.5"):
        dqn.Config(prioritized=True, priority_beta=1.5).validate()
    with pytest.raises(ConfigError, match="Config.prioritized must be true or false"):
        dqn.Config(prioritized=1).validate()
    with pytest.raises(ConfigError, match="train_freq"):
        dqn.Config(total_steps=100, train_freq=256).validate()
    with pytest.raises(ConfigError, match="dueling"):
        dqn.Config(dueling=1).validate()
    dqn.Config().validate()


def test_facade_and_stochastic_policy():
    model = drl.DQN("CartPole-v1", device="cpu", seed=0, **MODEL)
    model.learn(400)
    obs = np.zeros((64, 4), np.float32)
    greedy, _ = model.predict(obs)
    assert greedy.shape == (64,) and len(set(greedy)) == 1  # the same obs: the same argmax
    explored, _ = model.predict(obs, deterministic=False)  # ε = exploration_final_eps = 0.04
    assert explored.shape == (64,) and set(explored) <= {0, 1}


def test_cli_trains_dqn_on_cartpole(tmp_path):
    import json
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "dispatchrl", "train", "dqn", "--env", "CartPole-v1", "--total-steps", "2000", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["algo"] == "dqn" and summary["steps"] == 1792  # 7 whole phases of 256 steps


def test_cli_trains_and_resumes_prioritized_dqn(tmp_path, capsys):
    """``--set prioritized=true``: the checkpoint holds the trees and the resume carries them on."""
    import json

    from dispatchrl.cli import main

    flags = ["--env", "cartpole", "--device", "generic", "--json", "--no-eval"]
    model = [f"--set={k}={json.dumps(v)}" for k, v in MODEL.items()]
    first = ["train", "dqn", *flags, "--steps", "300", "--set", "prioritized=true", *model]
    assert main([*first, "--save", str(tmp_path / "half")]) == 0
    _, saved = checkpoint.load(tmp_path / "half")
    assert saved["priorities.sum_tree"].sum() > 0 and int(saved["updates"][0]) == 2 * 8
    again = ["train", "dqn", *flags, "--steps", "400", "--resume", str(tmp_path / "half")]
    assert main([*again, "--save", str(tmp_path / "resumed")]) == 0
    _, resumed = checkpoint.load(tmp_path / "resumed")
    assert int(resumed["updates"][0]) == 3 * 8
    assert not np.array_equal(resumed["priorities.sum_tree"], saved["priorities.sum_tree"])
    capsys.readouterr()


def test_per_env_configs_are_the_rl_zoo_ones():
    cartpole, acrobot, mountaincar = (dqn.config_for(e) for e in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0"))
    assert cartpole == dqn.Config() and (cartpole.train_freq, cartpole.gradient_steps) == (256, 128)
    assert (acrobot.total_steps, acrobot.train_freq, acrobot.gradient_steps, acrobot.target_update_interval) == (
        100_000,
        4,
        4,
        250,
    )
    assert (mountaincar.total_steps, mountaincar.gamma, mountaincar.buffer_size) == (120_000, 0.98, 10_000)
    for config in (cartpole, acrobot, mountaincar):
        config.validate()
