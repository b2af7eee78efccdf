"""DQN: its kernels (ε-greedy acting, Double-DQN targets, the Huber gradient) on every device
against float64 numpy references, and the algorithm's training, checkpoints and entry points."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dispatchrl as drl
from dispatchrl.errors import ConfigError, ShapeError
from dispatchrl.kernels.offpolicy import api as rl
from dispatchrl.kernels.random.generic import uniform01

# the device fixture is made per test, not per example: the same device serves every example
fixture_ok = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def put(device, x, dtype=np.float32):
    return drl.asarray(device, np.asarray(x, dtype=dtype))


def host(x):
    return drl.to_numpy(x)


def q_values(g, rows, k, ties):
    """Random Q rows; with ``ties`` small integers, so rows often hold equal maxima."""
    q = g.integers(-2, 3, size=(rows, k)) if ties else g.normal(size=(rows, k))
    return q.astype(np.float32)


def first_argmax(q):
    """Reference argmax: the first column holding the row's maximum."""
    return np.array([next(j for j in range(q.shape[1]) if q[i, j] == q[i].max()) for i in range(q.shape[0])])


@fixture_ok
@given(
    rows=st.integers(1, 6),
    k=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
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
    rows=st.integers(1, 6),
    k=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
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
@given(rows=st.integers(1, 6), k=st.integers(1, 5), seed=st.integers(0, 2**32 - 1), scale=st.floats(0.1, 4))
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
    h = 1e-6
    for i in range(rows):
        if abs(abs(error[i]) - 1.0) > 1e-3:  # away from the kink
            bump = np.zeros(rows)
            bump[i] = h
            numeric = (loss(error + bump) - loss(error - bump)) / (2 * h)
            assert abs(numeric - expected[i, taken[i]]) < 1e-6
    stats = put(device, np.zeros(3), np.float64)
    rl.accumulate_q_stats(device, put(device, q), put(device, action), put(device, target), stats)
    q_taken = q[np.arange(rows), taken].astype(np.float64)
    np.testing.assert_allclose(host(stats), [1.0, loss(error), q_taken.mean()], rtol=1e-9, atol=1e-12)


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
        results.append([host(a) for a in (action, target, d_q)])
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
