"""The composable ReplayBuffer: storages, samplers (chi-square for prioritized), n-step by hand,
memmap reopen in a fresh process, state_dict round trips."""

import os
import subprocess
import sys

import numpy as np
import pytest

from dispatchrl.data import (
    DeviceStorage,
    MemmapStorage,
    NStep,
    PrioritizedSampler,
    ReplayBuffer,
    TensorDict,
    UniformSampler,
    WithoutReplacementSampler,
)
from dispatchrl.errors import ConfigError, EmptyBufferError, MissingKeyError, ShapeError


def rows(n, start=0):
    """The RFC benchmark's shapes: 3x4 obs, 3x4 action, bool done; obs encode the row id."""
    ids = np.arange(start, start + n)
    return TensorDict(
        {
            "obs": np.broadcast_to(ids[:, None, None], (n, 3, 4)).astype(np.float32),
            "action": np.ones((n, 3, 4), np.float32),
            "done": ids % 2 == 0,
        },
        [n],
    )


def test_uniform_ring_wraps_and_samples_stored_rows():
    rb = ReplayBuffer(DeviceStorage(10), UniformSampler(seed=0), batch_size=4)
    assert list(rb.extend(rows(6))) == [0, 1, 2, 3, 4, 5]
    assert list(rb.extend(rows(6, 6))) == [6, 7, 8, 9, 0, 1]
    assert len(rb) == 10 and rb.storage.cursor == 2
    sample = rb.sample()
    assert sample.batch_size == (4,)
    np.testing.assert_array_equal(sample["obs"][:, 0, 0], rb.storage.data["obs"][sample["index"], 0, 0])
    stored = rb.storage.data["obs"][:, 0, 0]
    assert sorted(stored) == list(range(2, 12))
    big = rb.sample(5000)
    assert set(big["index"]) == set(range(10))


def test_bad_use_gets_dispatchrl_errors():
    rb = ReplayBuffer(DeviceStorage(8), batch_size=2)
    with pytest.raises(EmptyBufferError):
        rb.sample()
    rb.extend(rows(3))
    with pytest.raises(MissingKeyError, match="'done'"):
        rb.extend(TensorDict({"obs": np.zeros((2, 3, 4), np.float32), "action": np.zeros((2, 3, 4), np.float32)}, [2]))
    with pytest.raises(ShapeError, match="'obs'"):
        rb.extend(TensorDict({"obs": np.zeros((2, 4)), "action": np.zeros((2, 3, 4)), "done": np.zeros(2, bool)}, [2]))
    with pytest.raises(ShapeError, match="max_size"):
        rb.extend(rows(9))
    wr = ReplayBuffer(DeviceStorage(8), WithoutReplacementSampler(seed=0))
    wr.extend(rows(3))
    with pytest.raises(ShapeError, match="exceeds"):
        wr.sample(4)
    with pytest.raises(ConfigError, match="alpha"):
        PrioritizedSampler(8, alpha=-0.1, beta=0.5)
    with pytest.raises(ConfigError, match="beta"):
        PrioritizedSampler(8, alpha=0.5, beta=1.5)
    with pytest.raises(ConfigError, match="PrioritizedSampler"):
        rb.update_priority([0], [1.0])
    with pytest.raises(ConfigError, match="max_size"):
        DeviceStorage(0)
    assert len(rb) == 3  # refused writes wrote nothing


def test_without_replacement_visits_each_once_per_pass():
    rb = ReplayBuffer(DeviceStorage(20), WithoutReplacementSampler(seed=3), batch_size=4)
    rb.extend(rows(10))
    orders = []
    for _ in range(3):
        seen = []
        while len(seen) < 10:
            seen.extend(rb.sample()["index"].tolist())
        assert sorted(seen) == list(range(10))
        orders.append(seen)
    assert orders[0] != orders[1]  # reshuffled per pass
    again = ReplayBuffer(DeviceStorage(20), WithoutReplacementSampler(seed=3), batch_size=4)
    again.extend(rows(10))
    assert [i for _ in range(3) for i in again.sample()["index"]] == orders[0]  # seeded


def test_prioritized_frequencies_chi_square_and_weights():
    n, alpha, beta, eps = 16, 0.7, 0.4, 1e-8
    sampler = PrioritizedSampler(n, alpha=alpha, beta=beta, eps=eps, seed=11)
    rb = ReplayBuffer(DeviceStorage(n), sampler, batch_size=1000)
    rb.extend(rows(n - 3))  # 13 stored, 3 empty rows that must never be drawn
    priority = np.random.default_rng(0).uniform(0.05, 3.0, n - 3)
    rb.update_priority(np.arange(n - 3), priority)
    stored = (priority + eps) ** alpha
    np.testing.assert_allclose(sampler.sum_tree[sampler.leaves : sampler.leaves + n - 3], stored)
    counts = np.zeros(n, np.int64)
    weights = {}
    for _ in range(60):
        s = rb.sample()
        np.add.at(counts, s["index"], 1)
        weights.update(zip(s["index"].tolist(), s["weight"].tolist()))
    assert counts[n - 3 :].sum() == 0
    draws = counts.sum()
    expected = draws * stored / stored.sum()
    chi2 = float(((counts[: n - 3] - expected) ** 2 / expected).sum())
    # 12 degrees of freedom: the 99.9% quantile is 32.9
    assert chi2 < 32.9, (chi2, counts, expected)
    prob = stored / stored.sum()
    expected_w = (len(rb) * prob) ** -beta / ((len(rb) * prob.min()) ** -beta)
    for i, w in weights.items():
        assert w == pytest.approx(expected_w[i], rel=1e-5)


def test_prioritized_new_rows_get_max_priority_and_overwrites_reset():
    sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0, seed=0)
    rb = ReplayBuffer(DeviceStorage(4), sampler)
    rb.extend(rows(2))
    assert sampler.sum_tree[1] == pytest.approx(2.0)  # 1.0 each at first
    rb.update_priority([0, 1], [5.0, 0.5])
    rb.extend(rows(1))
    assert sampler.sum_tree[sampler.leaves + 2] == pytest.approx(5.0)
    rb.extend(rows(2))  # wraps onto row 0
    assert sampler.sum_tree[sampler.leaves + 0] == pytest.approx(5.0)
    assert sampler.sum_tree[1] == pytest.approx(5 + 0.5 + 5 + 5)
    assert sampler.min_tree[1] == pytest.approx(0.5)
    sampler.beta = 0.5
    with pytest.raises(ConfigError):
        sampler.beta = -0.1
    with pytest.raises(ShapeError):
        rb.update_priority([7], [1.0])
    with pytest.raises(ConfigError):
        rb.update_priority([0], [np.nan])


def step(obs, reward, term, trunc):
    """One step of N envs: obs -> next_obs = obs + 1."""
    obs = np.asarray(obs, np.float32)
    return TensorDict(
        {
            "obs": obs[:, None],
            "action": np.zeros((len(obs), 1), np.float32),
            "reward": np.asarray(reward, np.float32),
            "next_obs": obs[:, None] + 1,
            "terminated": np.asarray(term, bool),
            "truncated": np.asarray(trunc, bool),
        },
        [len(obs)],
    )


def test_n_step_by_hand_across_terminated_and_truncated_ends():
    g = 0.5
    rb = ReplayBuffer(DeviceStorage(64), transform=NStep(3, g))
    # env 0: steps 0..4, terminates at obs 4 (rewards 1, 2, 4, 8, 16)
    # env 1: steps 10..13, truncated at obs 13 (rewards 1, 1, 1, 1), then a new episode at 20
    env0 = [(0, 1, 0, 0), (1, 2, 0, 0), (2, 4, 0, 0), (3, 8, 0, 0), (4, 16, 1, 0)]
    env1 = [(10, 1, 0, 0), (11, 1, 0, 0), (12, 1, 0, 0), (13, 1, 0, 1), (20, 3, 0, 0)]
    for a, b in zip(env0, env1):
        rb.extend(step([a[0], b[0]], [a[1], b[1]], [a[2], b[2]], [a[3], b[3]]))
    data = rb.storage.data[np.arange(len(rb))]
    got = {
        int(o): (float(r), float(n), bool(t), bool(u), int(k))
        for o, r, n, t, u, k in zip(
            data["obs"][:, 0],
            data["reward"],
            data["next_obs"][:, 0],
            data["terminated"],
            data["truncated"],
            data["steps"],
        )
    }
    expected = {
        0: (1 + g * 2 + g * g * 4, 3, False, False, 3),
        1: (2 + g * 4 + g * g * 8, 4, False, False, 3),
        2: (4 + g * 8 + g * g * 16, 5, True, False, 3),
        3: (8 + g * 16, 5, True, False, 2),
        4: (16, 5, True, False, 1),
        10: (1 + g + g * g, 13, False, False, 3),
        11: (1 + g + g * g, 14, False, True, 3),
        12: (1 + g, 14, False, True, 2),
        13: (1, 14, False, True, 1),
    }
    assert got.keys() == expected.keys()  # 20 is still waiting in env 1's window
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key
    # the pending window survives a state_dict round trip
    state = rb.state_dict()
    other = ReplayBuffer(DeviceStorage(64), transform=NStep(3, g))
    other.load_state_dict(state)
    for buf in (rb, other):
        buf.extend(step([5, 21], [0, 1], [0, 0], [0, 1]))
    np.testing.assert_array_equal(rb.storage.data["reward"], other.storage.data["reward"])
    assert len(rb) == len(other) == 11


def test_state_dict_round_trip_npz_without_pickle(tmp_path):
    sampler = PrioritizedSampler(32, alpha=0.6, beta=0.4, seed=5)
    rb = ReplayBuffer(DeviceStorage(32), sampler, batch_size=8)
    rb.extend(rows(20))
    rb.update_priority(np.arange(20), np.linspace(0.1, 2, 20))
    rb.sample()
    rb.save(tmp_path / "rb.npz")
    other = ReplayBuffer(DeviceStorage(32), PrioritizedSampler(32, alpha=0.6, beta=0.4, seed=99), batch_size=8)
    other.load(tmp_path / "rb.npz")
    a, b = rb.sample(), other.sample()
    np.testing.assert_array_equal(a["index"], b["index"])
    np.testing.assert_array_equal(a["weight"], b["weight"])
    np.testing.assert_array_equal(a["obs"], b["obs"])
    assert len(other) == 20 and other.storage.cursor == 20


def test_memmap_storage_reopens_in_a_fresh_process(tmp_path):
    path = tmp_path / "rb"
    rb = ReplayBuffer(MemmapStorage(50, path), batch_size=4)
    assert not os.path.exists(path / "tensordict.json")  # lazy: created at the first write
    rb.extend(rows(30))
    rb.extend(rows(30, 30))  # wraps: length 50, cursor 10
    rb.storage.flush()
    total = int(rb.storage.data["obs"][:, 0, 0].sum())
    code = (
        "import numpy as np, sys\n"
        "from dispatchrl.data import MemmapStorage, ReplayBuffer\n"
        f"rb = ReplayBuffer(MemmapStorage(50, {str(path)!r}))\n"
        "print(len(rb), rb.storage.cursor, int(rb.storage.data['obs'][:, 0, 0].sum()),"
        " rb.storage.data['done'].dtype)\n"
        "rb.extend({'obs': np.full((3, 3, 4), -1, np.float32), 'action': np.zeros((3, 3, 4), np.float32),"
        " 'done': np.ones(3, bool)})\n"
    )
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["50", "10", str(total), "bool"]
    np.testing.assert_array_equal(rb.storage.data["obs"][10:13, 0, 0], [-1, -1, -1])  # shared pages
    again = MemmapStorage(50, path)  # the other process's writes are visible
    assert len(again) == 50 and again.cursor == 13
    np.testing.assert_array_equal(again.data["obs"][10:13, 0, 0], [-1, -1, -1])


@pytest.mark.parametrize("kind", ["uniform", "prioritized", "memmap"])
def test_prepared_sample_draws_what_sample_draws(kind, tmp_path):
    def buffer(name):
        sampler = PrioritizedSampler(64, 0.6, 0.5, seed=4) if kind == "prioritized" else UniformSampler(seed=4)
        storage = MemmapStorage(64, tmp_path / name) if kind == "memmap" else DeviceStorage(64)
        nested = rows(40)
        nested.set(("next", "obs"), nested["obs"] + 1)
        nested.set("odd", np.arange(40 * 3, dtype=np.float32).reshape(40, 3))  # 12-byte rows: no whole words
        rb = ReplayBuffer(storage, sampler, batch_size=16)
        rb.extend(nested)
        return rb

    plain, fast = buffer("a"), buffer("b")
    prepared = fast.prepare()
    priority = np.linspace(0.1, 3.0, 16)
    for step in range(4):
        if step == 2:  # writes after prepare() are seen (length and rows)
            for rb in (plain, fast):
                extra = rows(30, 100)
                extra.set(("next", "obs"), extra["obs"] + 1)
                extra.set("odd", -np.arange(30 * 3, dtype=np.float32).reshape(30, 3))
                rb.extend(extra)
                if kind == "prioritized":  # a β set after prepare() is seen
                    rb.sampler.beta = 0.9
        a, b = plain.sample(), prepared()
        assert b is prepared.out and b.batch_size == (16,)
        assert set(a.keys(include_nested=True, leaves_only=True)) == set(b.keys(include_nested=True, leaves_only=True))
        for key in a.keys(include_nested=True, leaves_only=True):
            np.testing.assert_array_equal(np.asarray(b[key]), np.asarray(a[key]), err_msg=str(key))
            assert np.asarray(b[key]).dtype == np.asarray(a[key]).dtype
        np.testing.assert_array_equal(b["obs"][:, 0, 0], fast.storage.data["obs"][b["index"], 0, 0])
        if kind == "prioritized":
            plain.update_priority(a["index"], priority)
            (fast.update_priority(b["index"], priority) if step % 2 else prepared.update_priority(priority))
            np.testing.assert_array_equal(fast.sampler.sum_tree, plain.sampler.sum_tree)
    assert len(set(b["index"].tolist())) > 1
    if kind == "prioritized":
        before = fast.sampler.sum_tree.copy()
        for bad in (np.full(16, np.nan), np.full(16, -1.0), np.full(16, np.inf)):
            with pytest.raises(ConfigError, match="finite and >= 0"):
                prepared.update_priority(bad)
        with pytest.raises(ShapeError, match="priority has shape"):
            prepared.update_priority(np.ones(3))
        np.testing.assert_array_equal(fast.sampler.sum_tree, before)  # refused before any write


def test_prepared_sample_refuses_what_it_cannot_bind():
    with pytest.raises(EmptyBufferError):
        ReplayBuffer(DeviceStorage(8), batch_size=2).prepare()
    rb = ReplayBuffer(DeviceStorage(8), WithoutReplacementSampler(seed=0), batch_size=2)
    rb.extend(rows(4))
    with pytest.raises(ConfigError, match="UniformSampler or PrioritizedSampler"):
        rb.prepare()
    with pytest.raises(ConfigError, match="batch_size"):
        ReplayBuffer(DeviceStorage(8)).prepare()
    import dispatchrl as drl

    on_cpu = ReplayBuffer(DeviceStorage(8, drl.CPU()), batch_size=2)
    on_cpu.extend(rows(4))
    with pytest.raises(ConfigError, match="host rows"):
        on_cpu.prepare()


def test_prepared_sample_follows_a_loaded_state(tmp_path):
    rb = ReplayBuffer(DeviceStorage(16), UniformSampler(seed=1), batch_size=4)
    rb.extend(rows(10))
    prepared = rb.prepare()
    rb.save(tmp_path / "rb.npz")
    first = prepared()["index"].copy()
    rb.load(tmp_path / "rb.npz")  # the stream goes back: the same rows again
    np.testing.assert_array_equal(prepared()["index"], first)
    state = rb.state_dict()
    state["storage/counters"] = np.zeros(2, np.int64)
    rb.load_state_dict(state)  # an emptied buffer: refused, nothing drawn
    with pytest.raises(EmptyBufferError, match="empty"):
        prepared()


RING_KEYS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")


def test_ring_storage_is_the_fused_steps_ring_in_place():
    import dispatchrl as drl

    model = drl.TD3(
        "pendulum", seed=0, progress=False, replay_capacity=300, warmup_steps=50, batch_size=16, hidden=(16, 16)
    )
    model.learn(200)
    ring, rb = model.state.replay, model.replay_buffer
    assert rb is model.replay_buffer  # one sampler stream per state
    assert len(rb) == 200 and rb.storage.cursor == 200
    stored = {key: drl.to_numpy(getattr(ring, key)) for key in RING_KEYS}
    out = rb.sample(32)
    assert out["index"].max() < 200
    for key in RING_KEYS:
        np.testing.assert_array_equal(out[key], stored[key][out["index"]])
    with pytest.raises(ConfigError, match="this ring is read-only"):  # its counters follow the run's steps
        rb.extend({key: stored[key][:2] for key in RING_KEYS})
    assert len(rb) == 200
    model.learn(110)  # the ring wraps; the model's buffer is the new state's
    assert len(model.replay_buffer) == 300 and model.replay_buffer.storage.cursor == 10


def test_ring_storage_writes_the_ring_the_kernels_read():
    import dispatchrl as drl
    from dispatchrl.data import RingStorage, replay_buffer
    from dispatchrl.kernels.offpolicy.api import replay_sample

    cpu = drl.CPU()
    ring = replay_buffer(cpu, 6, 2, 1)
    rb = ReplayBuffer(RingStorage(ring), UniformSampler(seed=4))
    obs = np.arange(16, dtype=np.float32).reshape(8, 2)
    batch = {"obs": obs, "action": obs[:, :1], "reward": obs[:, 0], "next_obs": obs + 1}
    batch |= {"terminated": np.zeros(8, bool), "truncated": np.ones(8, bool)}
    first, then = ({key: value[part] for key, value in batch.items()} for part in (slice(0, 4), slice(4, 8)))
    np.testing.assert_array_equal(rb.extend(first), [0, 1, 2, 3])
    np.testing.assert_array_equal(rb.extend(then), [4, 5, 0, 1])  # wraps as replay_add does
    assert drl.to_numpy(ring.size)[0] == 6 and drl.to_numpy(ring.position)[0] == 2
    np.testing.assert_array_equal(drl.to_numpy(ring.obs), np.concatenate([obs[6:], obs[2:6]]))
    # the kernels' uniform draw from the same stream reads the same rows as the sampler's
    out = drl.data.transitions(cpu, 5, 2, 1)
    replay_sample(cpu, drl.asarray(cpu, drl.to_numpy(rb.sampler.rng)), ring, out)
    np.testing.assert_array_equal(drl.to_numpy(out["obs"]), rb.sample(5)["obs"])


def test_ring_storage_refuses_what_it_cannot_open():
    import dataclasses

    import dispatchrl as drl
    from dispatchrl.data import RingStorage, replay_buffer

    with pytest.raises(ConfigError, match="'ring' must be a dispatchrl.data.ReplayRing"):
        RingStorage(rows(4))
    ring = replay_buffer(drl.CPU(), 8, 3, 1)
    apart = dataclasses.replace(ring, size=drl.zeros(drl.CPU(), 1, np.int64))
    with pytest.raises(ConfigError, match="one \\[size, position\\] pair"):
        RingStorage(apart)
    rb = ReplayBuffer(RingStorage(ring))
    with pytest.raises(MissingKeyError, match="the batch lacks key 'truncated'"):
        rb.extend({key: np.zeros((2,) + getattr(ring, key).shape[1:]) for key in RING_KEYS[:-1]})
    assert len(rb) == 0 and drl.to_numpy(ring.position)[0] == 0  # nothing written
    with pytest.raises(ConfigError, match="PPO keeps no replay buffer"):
        _ = drl.PPO("pendulum", progress=False).replay_buffer
