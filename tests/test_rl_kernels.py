"""The RL op family on every device against float64 numpy references on random inputs."""

import math

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.data import episode_log, replay_buffer, transitions
from dispatchrl.kernels.offpolicy import api as rl

G = np.random.default_rng(0)


def put(device, x, dtype=np.float32):
    return drl.asarray(device, np.asarray(x, dtype=dtype))


def host(x):
    return drl.to_numpy(x)


def random_rows(n, obs_dim=3, action_dim=2, seed=0):
    g = np.random.default_rng(seed)
    return (
        g.normal(size=(n, obs_dim)),
        g.uniform(-1, 1, size=(n, action_dim)),
        g.normal(size=n),
        g.normal(size=(n, obs_dim)),
        g.random(n) < 0.3,
        g.random(n) < 0.3,
    )


def test_replay_add_wraps_and_sample_draws_stored_rows(device):
    buffer = replay_buffer(device, 5, 3, 2)
    stored = []
    for k in range(3):  # 3 × 2 rows into capacity 5: wraps once
        rows = random_rows(2, seed=k)
        stored.append(rows)
        drl.kernels.offpolicy.api.replay_add(
            device, buffer, *(put(device, r, np.bool_ if r.dtype == bool else np.float32) for r in rows)
        )
    assert host(buffer.position)[0] == 1 and host(buffer.size)[0] == 5
    expected_obs = np.concatenate([r[0] for r in stored]).astype(np.float32)
    np.testing.assert_allclose(host(buffer.obs)[0], expected_obs[5])  # row 5 overwrote row 0
    np.testing.assert_allclose(host(buffer.obs)[1:5], expected_obs[1:5])
    batch = transitions(device, 8, 3, 2)
    stream = drl.rng(device, 4)
    rl.replay_sample(device, stream, buffer, batch)
    sampled = host(batch.obs)
    table = host(buffer.obs)
    rows = [int(np.flatnonzero((table == s).all(axis=1))[0]) for s in sampled]
    for field in ("action", "reward", "next_obs", "terminated", "truncated"):
        np.testing.assert_array_equal(host(getattr(batch, field)), host(getattr(buffer, field))[rows])
    assert host(stream)[1] == 8


def test_replay_sample_is_the_same_on_every_device(device):
    results = []
    for dev in (drl.Generic(), device):
        buffer = replay_buffer(dev, 16, 3, 2)
        rows = random_rows(16, seed=7)
        rl.replay_add(dev, buffer, *(put(dev, r, np.bool_ if r.dtype == bool else np.float32) for r in rows))
        batch = transitions(dev, 6, 3, 2)
        rl.replay_sample(dev, drl.rng(dev, 11), buffer, batch)
        results.append(host(batch.obs))
    np.testing.assert_array_equal(results[0], results[1])


def test_columns(device):
    a, b = G.normal(size=(4, 3)), G.normal(size=(4, 2))
    out = drl.zeros(device, (4, 5))
    rl.concat_columns(device, put(device, a), put(device, b), out)
    np.testing.assert_allclose(host(out), np.hstack([a, b]).astype(np.float32))
    part = drl.zeros(device, (4, 2))
    rl.slice_columns(device, out, 3, part)
    np.testing.assert_allclose(host(part), b.astype(np.float32))


def test_add_clipped_noise(device):
    x = G.uniform(-1, 1, size=(6, 2))
    outs = []
    for dev in (drl.Generic(), device):
        arr = put(dev, x)
        rl.add_clipped_noise(dev, drl.rng(dev, 3), arr, 0.8, 0.5, -1.0, 1.0)
        outs.append(host(arr))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-6)
    assert np.all(np.abs(outs[0] - x.astype(np.float32)) <= 0.5 + 1e-6) and np.all(np.abs(outs[0]) <= 1)
    assert np.any(np.abs(outs[0] - x) > 1e-3)


def test_td_targets(device):
    n = 7
    reward, q1, q2, logp = G.normal(size=n), G.normal(size=(n, 1)), G.normal(size=(n, 1)), G.normal(size=(n, 1))
    term = G.random(n) < 0.4
    target = drl.zeros(device, (n, 1))
    rl.td_target(
        device, put(device, reward), put(device, term, np.bool_), put(device, q1), put(device, q2), 0.9, target
    )
    expected = reward + 0.9 * (1 - term) * np.minimum(q1, q2)[:, 0]
    np.testing.assert_allclose(host(target)[:, 0], expected, rtol=1e-5, atol=1e-5)
    log_alpha = -0.7
    rl.soft_td_target(
        device,
        put(device, reward),
        put(device, term, np.bool_),
        put(device, q1),
        put(device, q2),
        put(device, logp),
        put(device, [log_alpha]),
        0.9,
        target,
    )
    expected = reward + 0.9 * (1 - term) * (np.minimum(q1, q2)[:, 0] - math.exp(log_alpha) * logp[:, 0])
    np.testing.assert_allclose(host(target)[:, 0], expected, rtol=1e-5, atol=1e-5)


def test_track_episodes_logs_finished_episodes(device):
    log = episode_log(device, 3, capacity=2)
    step = drl.zeros(device, 1, np.int64)
    rewards = [[1, 2, 3], [1, 1, 1], [5, 5, 5]]
    ends = [[False, True, False], [True, False, False], [True, True, True]]
    for r, e in zip(rewards, ends):
        rl.track_episodes(
            device, log, put(device, r), put(device, e, np.bool_), put(device, np.zeros(3), np.bool_), step
        )
        drl.increment(device, step)
    assert host(log.count)[0] == 5  # five episodes ended; the ring of two holds the last two
    # env 1 ends at step 0 (return 2), env 0 at step 1 (1 + 1); at step 2 env 0 (5, 1 step),
    # env 1 (1 + 5, 2 steps) and env 2 (3 + 1 + 5, 3 steps) end: episodes 2, 3, 4 in slots 0, 1, 0
    held = sorted(zip(host(log.returns).tolist(), host(log.lengths).tolist(), host(log.end_steps).tolist()))
    if isinstance(device, drl.CUDA):  # one step's episodes are counted in any thread order
        assert len(set(held)) == 2 and set(held) <= {(5.0, 1, 2), (6.0, 2, 2), (9.0, 3, 2)}
    else:
        assert held == [(6.0, 2, 2), (9.0, 3, 2)]
    np.testing.assert_allclose(host(log.running_return), 0)


def test_gaussian_tanh_head_against_reference_and_finite_differences(device):
    batch, a_dim = 5, 2
    actor_out = np.concatenate([G.normal(size=(batch, a_dim)), G.uniform(-2, 0.5, size=(batch, a_dim))], axis=1)
    arrays = {
        name: drl.zeros(device, shape)
        for name, shape in (("noise", (batch, a_dim)), ("action", (batch, a_dim)), ("logp", (batch, 1)))
    }
    out = put(device, actor_out)
    rl.gaussian_tanh_sample(device, drl.rng(device, 9), out, arrays["noise"], arrays["action"], arrays["logp"])
    eps = host(arrays["noise"]).astype(np.float64)

    def head(z):  # float64 reference with the same noise: action, log-prob
        mean, log_std = z[:, :a_dim], np.clip(z[:, a_dim:], rl.LOG_STD_MIN, rl.LOG_STD_MAX)
        a = np.tanh(mean + np.exp(log_std) * eps)
        logp = np.sum(-0.5 * eps**2 - log_std - 0.5 * math.log(2 * math.pi) - np.log(1 - a * a + 1e-6), axis=1)
        return a, logp

    a_ref, logp_ref = head(actor_out)
    np.testing.assert_allclose(host(arrays["action"]), a_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(host(arrays["logp"])[:, 0], logp_ref, rtol=1e-4, atol=1e-4)
    # gradient of mean_b(α logp − Σ w·a) for fixed weights w, by central differences in float64
    w, log_alpha = G.normal(size=(batch, a_dim)), -0.5
    d_action = -w / batch
    grad = drl.zeros(device, (batch, 2 * a_dim))
    rl.gaussian_tanh_backward(
        device, out, arrays["noise"], arrays["action"], put(device, d_action), put(device, [log_alpha]), grad
    )

    def loss(z):
        a, logp = head(z)
        return np.mean(math.exp(log_alpha) * logp - np.sum(w * a, axis=1))

    numeric = np.zeros_like(actor_out)
    for idx in np.ndindex(*actor_out.shape):
        step = np.zeros_like(actor_out)
        step[idx] = 1e-5
        numeric[idx] = (loss(actor_out + step) - loss(actor_out - step)) / 2e-5
    np.testing.assert_allclose(host(grad), numeric, rtol=2e-2, atol=2e-3)


def test_select_min_rows_and_temperature_gradient(device):
    a, b = G.normal(size=(6, 1)), G.normal(size=(6, 1))
    x, y = G.normal(size=(6, 3)), G.normal(size=(6, 3))
    out = drl.zeros(device, (6, 3))
    rl.select_min_rows(device, put(device, a), put(device, b), put(device, x), put(device, y), out)
    np.testing.assert_allclose(host(out), np.where(a <= b, x, y).astype(np.float32))
    grad = drl.zeros(device, 1)
    rl.entropy_temperature_gradient(device, put(device, a), -1.0, grad)
    np.testing.assert_allclose(host(grad)[0], -np.mean(a.astype(np.float32) - 1.0), rtol=1e-5)


def test_bad_input_names_the_argument():
    cpu = drl.CPU()
    buffer = replay_buffer(cpu, 4, 3, 2)
    with pytest.raises(drl.ShapeError, match="'obs' has shape"):
        rl.replay_add(
            cpu,
            buffer,
            *(
                drl.zeros(cpu, s, d)
                for s, d in (
                    ((1, 4), np.float32),
                    ((1, 2), np.float32),
                    (1, np.float32),
                    ((1, 3), np.float32),
                    (1, np.bool_),
                    (1, np.bool_),
                )
            ),
        )
    with pytest.raises(drl.ShapeError, match="do not fit"):
        rl.slice_columns(cpu, drl.zeros(cpu, (2, 3)), 2, drl.zeros(cpu, (2, 2)))
    with pytest.raises(drl.ShapeError, match="2·action_dim"):
        rl.gaussian_tanh_sample(
            cpu,
            drl.rng(cpu, 0),
            drl.zeros(cpu, (2, 3)),
            drl.zeros(cpu, (2, 1)),
            drl.zeros(cpu, (2, 1)),
            drl.zeros(cpu, (2, 1)),
        )
    with pytest.raises(drl.ConfigError, match="'gamma'"):
        rl.td_target(
            cpu,
            drl.zeros(cpu, 2),
            drl.zeros(cpu, 2, np.bool_),
            drl.zeros(cpu, (2, 1)),
            drl.zeros(cpu, (2, 1)),
            1.5,
            drl.zeros(cpu, (2, 1)),
        )
