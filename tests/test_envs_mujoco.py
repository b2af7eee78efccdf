"""Threaded MuJoCo HalfCheetah, Hopper, Walker2d and Humanoid v5 against gymnasium's own envs
(needs mujoco, and imageio for gymnasium's envs)."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dispatchrl.envs as E
from dispatchrl.algorithms import ppo, sac, td3
from dispatchrl.arrays import to_numpy
from dispatchrl.checkpoint import named_arrays
from dispatchrl.devices import CPU
from dispatchrl.errors import ConfigError, ShapeError

pytest.importorskip("mujoco")
pytest.importorskip("imageio")  # gymnasium's mujoco envs import it

NAMES = ["HalfCheetah", "Hopper", "Walker2d", "Humanoid"]
#: observation sizes of gymnasium v5 with default arguments
OBS_DIMS = {"HalfCheetah": 17, "Hopper": 11, "Walker2d": 17, "Humanoid": 348}


def batch_class(name):
    return getattr(E, f"{name}Batch")


def random_actions(rs, space, n=None):
    shape = space.shape if n is None else (n, *space.shape)
    return rs.uniform(space.low, space.high, size=shape).astype(np.float32)


def assert_infos_close(info, ref, where):
    assert info.keys() == ref.keys(), where
    for k in ref:
        np.testing.assert_allclose(info[k], ref[k], rtol=1e-6, atol=1e-6, err_msg=f"{where} info[{k!r}]")


@pytest.mark.parametrize("name", NAMES)
def test_matches_gymnasium_episodes(name):
    """Same seeds, same random actions: obs, reward, terminated, truncated and info of gymnasium's
    env, through resets; Hopper, Walker2d and Humanoid fall (terminate) within an episode."""
    ref = gym.make(f"{name}-v5", max_episode_steps=150)
    ours = gym.make(f"dispatchrl/{name}-v5", max_episode_steps=150)
    assert ours.observation_space.shape == ref.observation_space.shape == (OBS_DIMS[name],)
    assert ours.action_space == ref.action_space and ours.unwrapped.dt == pytest.approx(ref.unwrapped.dt)
    endings = []
    for seed in range(3):
        o_ref, i_ref = ref.reset(seed=seed)
        o, i = ours.reset(seed=seed)
        np.testing.assert_array_equal(o, o_ref)
        assert o.dtype == np.float64
        assert_infos_close(i, i_ref, f"seed {seed} reset")
        rs = np.random.default_rng(seed)
        for t in range(150):
            a = random_actions(rs, ref.action_space)
            o_ref, r_ref, te_ref, tr_ref, i_ref = ref.step(a)
            o, r, te, tr, i = ours.step(a)
            np.testing.assert_allclose(o, o_ref, rtol=1e-6, atol=1e-6, err_msg=f"seed {seed} step {t}")
            assert r == pytest.approx(r_ref, rel=1e-6, abs=1e-6) and (te, tr) == (te_ref, tr_ref)
            assert_infos_close(i, i_ref, f"seed {seed} step {t}")
            if te or tr:
                break
        endings.append((te, tr))
    if name == "HalfCheetah":  # never terminates: the time limit ends it
        assert endings == [(False, True)] * 3
    else:
        assert (True, False) in endings


@pytest.mark.parametrize("name", NAMES)
def test_batch_matches_gymnasium_envs_with_autoreset(name):
    """N envs on 2 threads = N gymnasium envs seeded seed+i, including same-step autoresets
    (final_obs holds the last observation, obs the reset one)."""
    n, seed, limit = 3, 5, 30
    batch = batch_class(name)(n, num_threads=2, max_episode_steps=limit)
    refs = [gym.make(f"{name}-v5", max_episode_steps=limit) for _ in range(n)]
    obs = batch.reset(seed=seed)
    assert obs.dtype == np.float32 and obs.shape == (n, OBS_DIMS[name])
    np.testing.assert_allclose(obs, np.stack([g.reset(seed=seed + i)[0] for i, g in enumerate(refs)]), rtol=1e-6)
    rs, ended = np.random.default_rng(0), 0
    for t in range(2 * limit + 5):
        a = random_actions(rs, refs[0].action_space, n)
        obs, reward, terminated, truncated, info = batch.step(a)
        for i, g in enumerate(refs):
            o, r, te, tr, i_ref = g.step(a[i])
            np.testing.assert_allclose(batch.final_obs[i], o, rtol=1e-5, atol=1e-5, err_msg=f"env {i} step {t}")
            assert reward[i] == pytest.approx(r, rel=1e-5, abs=1e-5)
            assert (terminated[i], truncated[i]) == (te, tr)
            assert_infos_close({k: v[i] for k, v in info.items()}, i_ref, f"env {i} step {t}")
            if te or tr:  # gymnasium's vector envs reset without a seed: the env's own generator
                ended += 1
                np.testing.assert_allclose(obs[i], g.reset()[0], rtol=1e-6, atol=1e-6)
                assert not np.allclose(obs[i], batch.final_obs[i])
    assert ended >= n  # every env ended at least once
    batch.close()


@pytest.mark.parametrize("name", NAMES)
def test_thread_count_does_not_change_results(name):
    results = []
    for threads in (1, 2):
        batch = batch_class(name)(3, num_threads=threads)
        out = [batch.reset(seed=0)]
        for k in range(5):
            out += list(batch.step(np.full((3, batch.action_dim), 0.3 * (-1) ** k, np.float32))[:4])
        results.append(out)
        batch.close()
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=20, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float64]), size=st.integers(1, 600), seed=st.integers(0, 2**32 - 1))
def test_pairwise_sum_is_numpy_sum_in_its_order(dtype, size, seed):  # above 128 terms numpy halves
    # the task kernels' costs must be numpy's bits: its pairwise order, in the array's dtype
    from dispatchrl.envs.shared.mujoco import pairwise_sum, square

    rs = np.random.default_rng(seed)
    x = (rs.standard_normal(size + 3) * 10 ** rs.uniform(-3, 3, size + 3)).astype(dtype)  # magnitudes vary: order shows
    for start in (0, 3):
        expected = np.sum(np.square(x[start:]))
        assert dtype(pairwise_sum(x, start, x.size, square)) == expected  # a float32 result comes back exact


def test_stepping_threads_park_when_idle_block_when_contended_and_stop_with_the_batch():
    import gc
    import time

    batch, reference = E.HalfCheetahBatch(4, num_threads=2), E.HalfCheetahBatch(4, num_threads=1)
    threads = batch._threads
    assert len(threads._threads) == 1 and threads._threads[0].is_alive()
    outs = [[b.reset(seed=3)] for b in (batch, reference)]
    rs = np.random.default_rng(0)
    for k in range(6):
        if k in (1, 3):  # idle past SERVE_SPIN_NS: the thread parks, and the next step must wake it
            deadline = time.monotonic() + 10
            while threads._cmd[2] == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            assert threads._cmd[2] == 1
        if k == 4:  # as under contention: hand off by blocking
            threads._blocking = 2
        actions = rs.uniform(-1, 1, (4, 6)).astype(np.float32)
        for b, out in zip((batch, reference), outs):
            out += [*b.step(actions)[:4], b.qpos.copy()]
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    assert threads._blocking == 0
    workers = threads._threads
    del batch, threads
    gc.collect()  # never closed: collecting the batch stops its thread
    assert not any(t.is_alive() for t in workers)
    reference.close()


@pytest.mark.parametrize("name", [*NAMES, "Ant"])
def test_nogil_chunk_stepper_matches_the_bindings(name, monkeypatch):
    # the chunk stepper calls libmujoco's mj_step itself; the bindings' path is the reference
    cls = batch_class(name)
    native = cls(4, num_threads=2)
    monkeypatch.setattr(cls, "_native_stepper", lambda self, mujoco, sources: None)
    batches = [native, cls(4, num_threads=2)]
    assert batches[0]._threads is not None and batches[1]._threads is None and batches[1]._pool is not None
    outs = [[b.reset(seed=5)] for b in batches]
    rs = np.random.default_rng(1)
    for _ in range(60):
        actions = rs.uniform(-1, 1, (4, batches[0].action_dim)).astype(np.float32)
        for b, out in zip(batches, outs):
            out += [*b.step(actions)[:4], b.qpos.copy(), b.qvel.copy()]
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    for b in batches:
        b.close()


@pytest.mark.parametrize("name", NAMES)
def test_vector_env_and_check_env(name):
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(gym.make(f"dispatchrl/{name}-v5").unwrapped, skip_render_check=True)
    env = gym.make_vec(f"dispatchrl/{name}-v5", num_envs=2, num_threads=2)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, OBS_DIMS[name]) and env.unwrapped.batch.num_threads == 2
    obs, reward, *_ = env.step(env.action_space.sample())
    assert reward.shape == (2,)
    env.close()


@pytest.mark.parametrize("name", NAMES)
def test_bad_input(name):
    cls = batch_class(name)
    for kwargs, arg in (
        (dict(num_envs=0), "num_envs"),
        (dict(num_envs=True), "num_envs"),
        (dict(num_envs=2, num_threads=0), "num_threads"),
        (dict(num_envs=2, max_episode_steps=0), "max_episode_steps"),
    ):
        with pytest.raises(ConfigError, match=arg):
            cls(**kwargs)
    batch = cls(2, num_threads=1)
    a = np.zeros((2, batch.action_dim), np.float32)
    with pytest.raises(ConfigError, match="reset"):
        batch.step(a)
    with pytest.raises(ConfigError, match="seed"):
        batch.reset(seed=-1)
    batch.reset(seed=0)
    with pytest.raises(ShapeError):
        batch.step(a[:, 1:])
    with pytest.raises(ConfigError, match="finite"):
        batch.step(np.full_like(a, np.nan))
    with pytest.raises(ConfigError, match="render_mode"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium warns first: the mode is not in the metadata
        gym.make(f"dispatchrl/{name}-v5", render_mode="human")


@pytest.mark.parametrize("name", NAMES)
def test_short_names_train_on_the_native_batch(name):
    from dispatchrl.training.envspec import resolve_env

    for env in (name.lower(), f"{name}-v5", f"dispatchrl/{name}-v5"):
        spec = resolve_env(env, num_envs=2)
        batch = spec.make_batch()
        assert type(batch) is batch_class(name) and batch.num_envs == 2
        assert spec.obs_dim == OBS_DIMS[name] and spec.eval_id == f"dispatchrl/{name}-v5"
        batch.close()


def test_tianshou_hyperparameters_on_these_envs():
    for name in ("halfcheetah", "Hopper-v5", "dispatchrl/Walker2d-v5", "humanoid"):
        t, s = td3.config_for(name), sac.config_for(name)
        assert (t.hidden, t.batch_size, t.total_steps, t.warmup_steps) == ((256, 256), 256, 1_000_000, 25_000)
        assert (t.actor_lr, t.critic_lr, t.polyak, t.gamma, t.exploration_noise) == (3e-4, 3e-4, 0.995, 0.99, 0.1)
        assert (t.target_noise, t.target_noise_clip, t.policy_delay) == (0.2, 0.5, 2)
        assert (s.hidden, s.batch_size, s.total_steps, s.warmup_steps) == ((256, 256), 256, 1_000_000, 10_000)
        assert (s.actor_lr, s.critic_lr, s.polyak, s.gamma, s.alpha_lr) == (1e-3, 1e-3, 0.995, 0.99, 3e-4)
        t.validate()
        s.validate()
    # other envs keep theirs
    assert td3.config_for("ant") == td3.Config() and sac.config_for("pendulum") == sac.Config()


def test_tianshou_ppo_hyperparameters_on_these_envs():
    for name in ("halfcheetah", "Hopper-v5", "dispatchrl/Walker2d-v5", "humanoid"):
        p = ppo.config_for(name)
        assert p == ppo.MUJOCO and p is not ppo.MUJOCO  # a copy: callers may edit theirs
        assert (p.total_steps, p.num_envs, p.steps_per_env, p.batch_size, p.epochs) == (3_000_000, 8, 256, 64, 10)
        assert (p.hidden, p.activation, p.lr, p.adam_eps, p.gamma, p.lam, p.clip) == (
            (64, 64),
            "tanh",
            3e-4,
            1e-8,
            0.99,
            0.95,
            0.2,
        )
        assert p.entropy_coef == 0.0 and p.initial_std == pytest.approx(np.exp(-0.5))
        assert p.normalize_observations and not p.normalize_advantage and not p.adaptive_lr
        # lr_decay, max_grad_norm 0.5, rew_norm and the orthogonal init
        assert p.lr_schedule == "linear" and p.max_grad_norm == 0.5 and p.normalize_returns and p.orthogonal_init
        p.validate()
    # Ant keeps RLtools' configuration, other envs the defaults
    assert ppo.config_for("ant") == ppo.ant_config() and ppo.config_for("pendulum") == ppo.Config()


def test_tianshou_ppo_config_trains_on_native_hopper():
    """Two rollouts of ppo.MUJOCO shrunk (4 envs × 32 steps, 2 passes of 2 minibatches) on the
    native Hopper: the run finishes with finite weights and returns."""
    import dataclasses

    config = dataclasses.replace(ppo.MUJOCO, total_steps=256, num_envs=4, steps_per_env=32, epochs=2)
    result = ppo.train(CPU(), "hopper", config, seed=0, progress=False)
    assert result.steps == 256 and result.spec.eval_id == "dispatchrl/Hopper-v5"
    assert to_numpy(result.state.updates)[0] == 2 * 2 * 2  # rollouts × epochs × minibatches of 64 rows
    trained = dict(named_arrays(result.state.actor, "actor."), **dict(named_arrays(result.state.critic, "critic.")))
    assert trained and all(np.isfinite(to_numpy(value)).all() for value in trained.values())
    assert len(result.history["returns"]) and np.isfinite(result.history["returns"]).all()
    assert np.isfinite(result.policy(np.zeros((1, OBS_DIMS["Hopper"]), np.float32))).all()
