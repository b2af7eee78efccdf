"""Threaded MuJoCo Ant-v5 against gymnasium's Ant-v5 (needs mujoco, and imageio for gymnasium's
own Ant)."""

import warnings

import gymnasium as gym
import numpy as np
import pytest

import dispatchrl.envs as E
from dispatchrl.errors import ConfigError, DTypeError, ShapeError

pytest.importorskip("mujoco")
pytest.importorskip("imageio")  # gymnasium's mujoco envs import it


def test_ant_matches_gymnasium_full_episodes():
    ref, ours = gym.make("Ant-v5"), gym.make("dispatchrl/Ant-v5")
    endings = []
    for seed in range(4):
        o_ref, i_ref = ref.reset(seed=seed)
        o, i = ours.reset(seed=seed)
        np.testing.assert_array_equal(o, o_ref)
        assert o.dtype == np.float64 and i == pytest.approx(i_ref)
        rs = np.random.default_rng(seed)
        for t in range(1000):
            a = rs.uniform(-1, 1, size=8).astype(np.float32)
            o_ref, r_ref, te_ref, tr_ref, i_ref = ref.step(a)
            o, r, te, tr, i = ours.step(a)
            np.testing.assert_allclose(o, o_ref, rtol=1e-6, atol=1e-6, err_msg=f"seed {seed} step {t}")
            assert r == pytest.approx(r_ref, rel=1e-6, abs=1e-6) and (te, tr) == (te_ref, tr_ref)
            assert i.keys() == i_ref.keys()
            if te or tr:
                break
        endings.append((te, tr))
    assert (True, False) in endings  # random actions topple the ant within an episode


def test_ant_batch_matches_gymnasium_envs_with_autoreset():
    """N envs on 2 threads = N gymnasium Ant-v5 seeded seed+i, including same-step autoresets."""
    n, seed = 4, 3
    batch = E.AntBatch(n, num_threads=2, max_episode_steps=60)
    refs = [gym.make("Ant-v5", max_episode_steps=60) for _ in range(n)]
    obs = batch.reset(seed=seed)
    ref_obs = np.stack([g.reset(seed=seed + i)[0] for i, g in enumerate(refs)])
    np.testing.assert_allclose(obs, ref_obs, rtol=1e-6, atol=1e-6)
    rs, ended = np.random.default_rng(0), 0
    for _t in range(130):
        a = rs.uniform(-1, 1, size=(n, 8)).astype(np.float32)
        obs, reward, terminated, truncated, _ = batch.step(a)
        for i, g in enumerate(refs):
            o, r, te, tr, _ = g.step(a[i])
            np.testing.assert_allclose(batch.final_obs[i], o, rtol=1e-5, atol=1e-5)
            assert reward[i] == pytest.approx(r, rel=1e-5, abs=1e-5)
            assert (terminated[i], truncated[i]) == (te, tr)
            if te or tr:  # gymnasium's vector envs reset without a seed: the env's own generator
                ended += 1
                np.testing.assert_allclose(obs[i], g.reset()[0], rtol=1e-6, atol=1e-6)
    assert ended >= n  # every env truncated at least once
    batch.close()


def test_thread_count_does_not_change_results():
    results = []
    for threads in (1, 2):
        batch = E.AntBatch(3, num_threads=threads)
        out = [batch.reset(seed=0)]
        for k in range(5):
            out += list(batch.step(np.full((3, 8), 0.3 * (-1) ** k, np.float32))[:4])
        results.append(out)
        batch.close()
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_ant_vector_env_and_check_env():
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # rendering needs an OpenGL context (MUJOCO_GL=egl before mujoco is imported):
        # test_video.py checks it in a fresh process
        check_env(gym.make("dispatchrl/Ant-v5").unwrapped, skip_render_check=True)
    env = gym.make_vec("dispatchrl/Ant-v5", num_envs=2, num_threads=2)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 105) and env.unwrapped.batch.num_threads == 2
    obs, reward, *_ = env.step(env.action_space.sample())
    assert reward.shape == (2,)
    env.close()


def test_ant_bad_input():
    for kwargs in (dict(num_envs=0), dict(num_envs=2, num_threads=0)):
        with pytest.raises(ConfigError):
            E.AntBatch(**kwargs)
    batch = E.AntBatch(2, num_threads=1)
    with pytest.raises(ConfigError, match="reset"):
        batch.step(np.zeros((2, 8), np.float32))
    batch.reset(seed=0)
    with pytest.raises(ShapeError, match="\\(2, 8\\)"):
        batch.step(np.zeros((2, 7), np.float32))
    with pytest.raises(ConfigError, match="finite"):
        batch.step(np.full((2, 8), np.nan, np.float32))
    with pytest.raises(DTypeError):
        batch.step(np.full((2, 8), "x"))
