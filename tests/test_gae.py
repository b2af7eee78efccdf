"""GAE and discounted returns vs float64 references, for every timestep type of Tianshou's
table (ordinary, terminated, truncated, rollout cut mid-episode), on Generic, CPU and CUDA (sim)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dispatchrl as drl
from dispatchrl.kernels.onpolicy import discounted_returns, gae

GAMMA, LAM = 0.9, 0.8


def reference_gae(reward, value, next_value, terminated, truncated, gamma, lam):
    """Per env, per episode segment, in float64: the definition, not the recursion's shortcuts."""
    steps, envs = reward.shape
    advantage = np.zeros((steps, envs))
    for n in range(envs):
        for t in range(steps):
            total, weight = 0.0, 1.0
            for k in range(t, steps):
                bootstrap = 0.0 if terminated[k, n] else gamma * float(next_value[k, n])
                total += weight * (float(reward[k, n]) + bootstrap - float(value[k, n]))
                if terminated[k, n] or truncated[k, n]:
                    break
                weight *= gamma * lam
            advantage[t, n] = total
    return advantage, advantage + value.astype(np.float64)


def reference_returns(reward, next_value, terminated, truncated, gamma, n=None):
    steps, envs = reward.shape
    n = steps if n is None else n
    out = np.zeros((steps, envs))
    for e in range(envs):
        for t in range(steps):
            total = 0.0
            for k in range(n):
                i = t + k
                total += gamma**k * float(reward[i, e])
                if terminated[i, e]:
                    break
                if truncated[i, e] or k == n - 1 or i == steps - 1:
                    total += gamma ** (k + 1) * float(next_value[i, e])
                    break
            out[t, e] = total
    return out


def run_gae(device, reward, value, next_value, terminated, truncated, gamma=GAMMA, lam=LAM):
    args = [drl.asarray(device, x) for x in (reward, value, next_value, terminated, truncated)]
    advantage, returns = drl.zeros(device, reward.shape), drl.zeros(device, reward.shape)
    gae(device, *args, gamma, lam, advantage, returns)
    return drl.to_numpy(advantage), drl.to_numpy(returns)


def rollout_arrays(steps, envs, seed, p_term=0.15, p_trunc=0.15):
    g = np.random.default_rng(seed)
    f = lambda: g.normal(size=(steps, envs)).astype(np.float32)  # noqa: E731
    return f(), f(), f(), g.random((steps, envs)) < p_term, g.random((steps, envs)) < p_trunc


def test_each_timestep_type_by_hand(device):
    """One env per type, T = 3, the done flag at t = 1; written out term by term."""
    r = np.array([[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]], np.float32)
    v = np.array([[0.5, 0.5, 0.5, 0.5], [0.25, 0.25, 0.25, 0.25], [0.75, 0.75, 0.75, 0.75]], np.float32)
    nv = np.array([[0.25, 0.25, 0.25, 0.25], [9, 9, 9, 0.75], [4, 4, 4, 4]], np.float32)
    term = np.zeros((3, 4), bool)
    trunc = np.zeros((3, 4), bool)
    term[1, 0] = True  # env 0: episode terminated at t = 1 (no bootstrap)
    trunc[1, 1] = True  # env 1: truncated at t = 1 (bootstrap V(final obs) = 9)
    term[1, 2] = trunc[1, 2] = True  # env 2: both flags: termination wins
    # env 3: ordinary all along; the rollout is cut after t = 2 and bootstraps from nv[2] = 4
    adv, ret = run_gae(device, r, v, nv, term, trunc)
    g, gl = GAMMA, GAMMA * LAM
    d2 = 3 + g * 4 - 0.75  # every env's last row: a cut rollout, bootstrap nv = 4
    expected = {
        0: [1 + g * 0.25 - 0.5 + gl * (2 - 0.25), 2 - 0.25, d2],
        1: [1 + g * 0.25 - 0.5 + gl * (2 + g * 9 - 0.25), 2 + g * 9 - 0.25, d2],
        2: [1 + g * 0.25 - 0.5 + gl * (2 - 0.25), 2 - 0.25, d2],
        3: [None, 2 + g * 0.75 - 0.25 + gl * d2, d2],
    }
    expected[3][0] = 1 + g * 0.25 - 0.5 + gl * expected[3][1]
    for env, column in expected.items():
        np.testing.assert_allclose(adv[:, env], column, rtol=1e-6, err_msg=f"env {env}")
    np.testing.assert_allclose(ret, adv + v, rtol=1e-6)


@pytest.mark.parametrize("p_term, p_trunc", [(0.0, 0.0), (0.2, 0.0), (0.0, 0.2), (0.15, 0.15), (1.0, 1.0)])
def test_gae_matches_float64_reference(device, p_term, p_trunc):
    arrays = rollout_arrays(9, 6, seed=int(p_term * 10 + p_trunc * 100), p_term=p_term, p_trunc=p_trunc)
    adv, ret = run_gae(device, *arrays)
    ref_adv, ref_ret = reference_gae(*arrays, GAMMA, LAM)
    np.testing.assert_allclose(adv, ref_adv, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("fused", [False, True])
def test_advantages_only(device, fused):
    """returns=None computes the same advantages and writes no returns."""
    arrays = rollout_arrays(7, 5, seed=3)
    args = [drl.asarray(device, x) for x in arrays]
    advantage = drl.zeros(device, arrays[0].shape)
    if fused:
        drl.fuse(device, lambda d: gae(d, *args, GAMMA, LAM, advantage))()
    else:
        gae(device, *args, GAMMA, LAM, advantage)
    np.testing.assert_allclose(drl.to_numpy(advantage), reference_gae(*arrays, GAMMA, LAM)[0], rtol=2e-5, atol=2e-5)


@settings(max_examples=25, deadline=None)
@given(
    steps=st.integers(1, 12),
    envs=st.integers(1, 5),
    seed=st.integers(0, 2**16),
    gamma=st.floats(0, 1),
    lam=st.floats(0, 1),
)
def test_gae_cpu_property(steps, envs, seed, gamma, lam):
    arrays = rollout_arrays(steps, envs, seed)
    adv, ret = run_gae(drl.CPU(), *arrays, gamma=gamma, lam=lam)
    ref_adv, ref_ret = reference_gae(*arrays, gamma, lam)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-4, atol=1e-4)


def test_lambda_one_with_zero_values_is_the_discounted_return(device):
    r, _, nv, term, trunc = rollout_arrays(10, 4, seed=3)
    zero = np.zeros_like(r)
    # with V ≡ 0, next values only matter where they are bootstrapped: ends of truncated segments
    # and the rollout's last row
    boundary = trunc.copy()
    boundary[-1] = True
    nv = np.where(boundary, nv, 0).astype(np.float32)
    adv, _ = run_gae(device, r, zero, nv, term, trunc, gamma=GAMMA, lam=1.0)
    np.testing.assert_allclose(adv, reference_returns(r, nv, term, trunc, GAMMA), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("n", [1, 2, 5, None])
def test_discounted_returns_match_reference(device, n):
    r, _, nv, term, trunc = rollout_arrays(8, 5, seed=7)
    out = drl.zeros(device, r.shape)
    discounted_returns(device, *[drl.asarray(device, x) for x in (r, nv, term, trunc)], GAMMA, out, n=n)
    np.testing.assert_allclose(drl.to_numpy(out), reference_returns(r, nv, term, trunc, GAMMA, n), rtol=2e-5, atol=2e-5)


def test_bad_input_names_the_argument():
    dev = drl.CPU()
    r, v, nv, term, trunc = (drl.asarray(dev, x) for x in rollout_arrays(4, 3, seed=0))
    out, out2 = drl.zeros(dev, (4, 3)), drl.zeros(dev, (4, 3))
    with pytest.raises(drl.ShapeError, match="'next_value'"):
        gae(dev, r, v, drl.zeros(dev, (3, 3)), term, trunc, 0.9, 0.9, out, out2)
    with pytest.raises(drl.DTypeError, match="'terminated'"):
        gae(dev, r, v, nv, drl.zeros(dev, (4, 3)), trunc, 0.9, 0.9, out, out2)
    with pytest.raises(drl.ConfigError, match="'gamma'"):
        gae(dev, r, v, nv, term, trunc, 1.5, 0.9, out, out2)
    with pytest.raises(drl.ConfigError, match="'lam'"):
        gae(dev, r, v, nv, term, trunc, 0.9, float("nan"), out, out2)
    with pytest.raises(drl.DeviceError, match="'value'"):
        foreign = drl.CUDA() if dev.memory == "host" else drl.CPU()  # the other memory space
        gae(dev, r, drl.asarray(foreign, np.zeros((4, 3), np.float32)), nv, term, trunc, 0.9, 0.9, out, out2)
    with pytest.raises(drl.ShapeError, match="'n'"):
        discounted_returns(dev, r, nv, term, trunc, 0.9, out, n=0)
