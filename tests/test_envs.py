"""Native Pendulum / continuous Acrobot: parity with gymnasium, agreement across devices,
fused steps, gymnasium registration, from_gymnasium, bad input."""

import warnings

import gymnasium as gym
import numpy as np
import plum
import pytest
from gymnasium.utils.env_checker import check_env
from testkit import assert_same_trajectories, env_trajectory

import dispatchrl as drl
import dispatchrl.envs as E
from dispatchrl.errors import ConfigError, DTypeError, ShapeError

SEEDS = range(8)


def _pump(obs):
    """Energy-pumping Acrobot policy (torque along dθ1): reaches the goal, so episodes terminate."""
    return float(np.sign(obs[4])) if obs[4] != 0 else 1.0


def _run_pair(ref, ours, seed, actions_for):
    """Step gymnasium ``ref`` and dispatchrl ``ours`` with identical actions until the episode ends;
    returns the number of steps and the final (terminated, truncated)."""
    o_ref, _ = ref.reset(seed=seed)
    o, _ = ours.reset(seed=seed)
    np.testing.assert_array_equal(o, o_ref)
    rs = np.random.default_rng(1000 + seed)
    for t in range(10_000):
        a_ref, a = actions_for(rs, o_ref)
        o_ref, r_ref, te_ref, tr_ref, _ = ref.step(a_ref)
        o, r, te, tr, _ = ours.step(a)
        assert o.dtype == np.float32 and o.shape == o_ref.shape
        np.testing.assert_allclose(o, o_ref, rtol=0, atol=1e-6, err_msg=f"seed {seed} step {t}")
        np.testing.assert_allclose(r, r_ref, rtol=1e-6, atol=1e-6, err_msg=f"seed {seed} step {t}")
        assert (te, tr) == (te_ref, tr_ref), f"seed {seed} step {t}"
        if te or tr:
            return t + 1, te, tr


def test_pendulum_matches_gymnasium_full_episodes():
    ref, ours = gym.make("Pendulum-v1"), gym.make("dispatchrl/Pendulum-v1")
    for seed in SEEDS:

        def actions(rs, _):
            a = rs.uniform(-2.5, 2.5, size=1).astype(np.float32)  # beyond the bounds: both clip
            return a, a

        assert _run_pair(ref, ours, seed, actions) == (200, False, True)


def test_acrobot_matches_gymnasium_acrobot_v1():
    ref, ours = gym.make("Acrobot-v1"), gym.make("dispatchrl/AcrobotContinuous-v1")
    ends = []
    for seed in SEEDS:

        def actions(rs, obs, pump=seed % 2 == 1):
            a = int(_pump(obs) + 1) if pump else int(rs.integers(3))
            return a, np.array([a - 1.0], np.float32)

        ends.append(_run_pair(ref, ours, seed, actions))
    assert any(te for _, te, _ in ends) and any(tr for _, _, tr in ends)  # both endings covered


@pytest.mark.parametrize("env_id", E.ENV_IDS[:2])
def test_check_env(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(gym.make(env_id).unwrapped)


def _gym_start_states(env_id, n, seed):
    states = []
    for i in range(n):
        g = gym.make(env_id).unwrapped
        g.reset(seed=seed + i)
        states.append(np.asarray(g.state, np.float64))
    return np.stack(states)


@pytest.mark.parametrize("device_name", ["generic", "cpu"])
def test_native_batch_matches_gymnasium(device_name):
    """N envs in one batch, started from gymnasium's reset states, follow gymnasium's episodes."""
    dev = drl.devices.device_from_name(device_name)
    n, rs = 4, np.random.default_rng(0)
    for env, gym_id in ((E.Pendulum(n), "Pendulum-v1"), (E.AcrobotContinuous(n), "Acrobot-v1")):
        refs = [gym.make(gym_id) for _ in range(n)]
        for i, g in enumerate(refs):
            g.reset(seed=10 + i)
        state, action = E.env_state(dev, env), drl.zeros(dev, (n, 1))
        drl.assign(state.physics, np.stack([g.unwrapped.state for g in refs]).astype(np.float64))
        for t in range(env.max_episode_steps):  # noqa: B007  (read after the loop)
            if gym_id == "Pendulum-v1":
                a = rs.uniform(-2, 2, size=(n, 1)).astype(np.float32)
                steps = [g.step(a[i]) for i, g in enumerate(refs)]
            else:
                k = rs.integers(3, size=n)
                a = (k - 1.0).astype(np.float32)[:, None]
                steps = [g.step(int(k[i])) for i, g in enumerate(refs)]
            drl.assign(action, a)
            E.env_step(dev, env, state, action)
            np.testing.assert_array_equal(drl.to_numpy(state.obs), np.stack([s[0] for s in steps]))
            np.testing.assert_allclose(drl.to_numpy(state.reward), [s[1] for s in steps], rtol=1e-6)
            np.testing.assert_array_equal(drl.to_numpy(state.terminated), [s[2] for s in steps])
            np.testing.assert_array_equal(drl.to_numpy(state.truncated), [s[3] for s in steps])
            if any(s[2] for s in steps):
                break  # gymnasium envs would need resetting: enough
        assert t > 50


def _reference_pendulum(th, thdot, action, normalized):
    """An independent float64 statement of Pendulum-v1 (RLtools' normalised scale when asked);
    gymnasium (and dispatchrl) round the torque terms to float32, hence the tolerance below."""
    u = np.clip(action * (2.0 if normalized else 1.0), -2.0, 2.0)
    cost = ((th + np.pi) % (2 * np.pi) - np.pi) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
    thdot = np.clip(thdot + (3 * 10.0 / 2 * np.sin(th) + 3.0 * u) * 0.05, -8, 8)
    return th + thdot * 0.05, thdot, -cost


@pytest.mark.parametrize("normalized", [False, True])
def test_pendulum_against_float64_reference(normalized):
    dev, n = drl.CPU(), 64
    env = E.Pendulum(n, normalized_actions=normalized)
    state, rng = E.env_state(dev, env), drl.rng(dev, 1)
    E.env_reset(dev, env, state, rng)
    action, rs = drl.zeros(dev, (n, 1)), np.random.default_rng(1)
    for _ in range(50):  # each step checked from the state it started in
        th, thdot = drl.to_numpy(state.physics).T
        a = rs.uniform(-1.2, 1.2, size=n).astype(np.float32) * (1 if normalized else 2)
        drl.assign(action, a[:, None])
        E.env_step(dev, env, state, action)
        th, thdot, r = _reference_pendulum(th, thdot, a.astype(np.float64), normalized)
        np.testing.assert_allclose(drl.to_numpy(state.physics), np.stack([th, thdot], 1), rtol=0, atol=1e-7)
        np.testing.assert_allclose(drl.to_numpy(state.reward), r, rtol=1e-6)
        np.testing.assert_allclose(drl.to_numpy(state.obs), np.stack([np.cos(th), np.sin(th), thdot], 1), atol=1e-6)


@pytest.mark.parametrize(
    "env",
    [E.Pendulum(8, max_episode_steps=4), E.AcrobotContinuous(8, max_episode_steps=4)],
    ids=["pendulum", "acrobot"],
)
def test_devices_give_the_same_trajectories(env, cuda_device):
    # the same expressions everywhere; sin/cos may differ in the last bit between libm, numpy's
    # SIMD loops and CUDA's intrinsics, hence a tolerance on floats (flags and counters exact)
    actions = np.linspace(-1.5, 1.5, env.num_envs, dtype=np.float32)
    reference = env_trajectory(drl.Generic(), env, actions)
    for dev in (drl.CPU(), cuda_device):
        assert_same_trajectories(reference, env_trajectory(dev, env, actions), dev)


CLASSIC_KERNELS = {
    "pendulum": {"pendulum_step_kernel": "pendulum_step_at", "pendulum_reset_kernel": "pendulum_reset_at"},
    "acrobot": {
        "acrobot_step_kernel": "acrobot_step_at",
        "acrobot_discrete_step_kernel": "acrobot_discrete_step_at",
        "acrobot_reset_kernel": "acrobot_reset_at",
    },
    "cartpole": {"cartpole_step_kernel": "cartpole_step_at", "cartpole_reset_kernel": "cartpole_reset_at"},
    "mountaincar": {
        "mountaincar_step_kernel": "mountaincar_step_at",
        "mountaincar_reset_kernel": "mountaincar_reset_at",
    },
}


def test_classic_env_cuda_kernels_run_the_cpu_per_env_bodies(cuda_device):
    """One body per kernel: each CUDA kernel's per-thread function is compiled from the Python
    source of the body the CPU loop calls (for a reset, through the stream-reading wrapper), so
    the two cannot drift apart. Reads the generated functions; compiles nothing."""
    import importlib

    def source(function):
        return getattr(function, "py_func", function)

    for package, kernels in CLASSIC_KERNELS.items():
        cpu = importlib.import_module(f"dispatchrl.envs.{package}.cpu")
        cuda = importlib.import_module(f"dispatchrl.envs.{package}.cuda")
        for kernel_name, body_name in kernels.items():
            body = source(source(getattr(cuda, kernel_name)).__globals__["_body"])
            if "reset" in kernel_name:
                body = source(body.__globals__["env_reset_at"])
            assert body.__code__ is source(getattr(cpu, body_name)).__code__, kernel_name


def test_reset_distribution_and_reset_done():
    dev, n = drl.CPU(), 4096
    env = E.Pendulum(n)
    state, rng = E.env_state(dev, env), drl.rng(dev, 3)
    E.env_reset(dev, env, state, rng)
    th, thdot = drl.to_numpy(state.physics).T
    assert -np.pi <= th.min() and th.max() <= np.pi and -1 <= thdot.min() and thdot.max() <= 1
    assert abs(th.std() - np.pi / np.sqrt(3)) < 0.05 and abs(thdot.mean()) < 0.05
    np.testing.assert_array_equal(drl.to_numpy(rng), [drl.to_numpy(drl.rng(dev, 3))[0], 2 * n])

    acro = E.AcrobotContinuous(n)
    s2 = E.env_state(dev, acro)
    E.env_reset(dev, acro, s2, drl.rng(dev, 3))
    p = drl.to_numpy(s2.physics)
    assert np.abs(p).max() <= 0.1 and (p.astype(np.float32) == p).all()  # float32 draws, as gymnasium

    # only flagged envs reset; the others keep state and counters
    before, done = drl.to_numpy(state.physics), np.arange(n) % 2 == 0
    drl.assign(state.steps, np.full(n, 5))
    drl.assign(state.terminated, done)
    E.env_reset_done(dev, env, state, rng)
    after = drl.to_numpy(state.physics)
    np.testing.assert_array_equal(after[~done], before[~done])
    assert (after[done] != before[done]).all()
    np.testing.assert_array_equal(drl.to_numpy(state.steps), np.where(done, 0, 5))


def test_fused_training_loop_matches_eager():
    """env_step + env_reset_done staged into one compiled CPU step, run 450 times in one call,
    equals the same calls made eagerly one by one."""
    env, n = E.AcrobotContinuous(16, max_episode_steps=100), 16

    def staged(device, state, action, rng):
        E.env_step(device, env, state, action)
        E.env_reset_done(device, env, state, rng)

    results = []
    for dev, fused in ((drl.CPU(), True), (drl.CPU(), False)):
        state, rng = E.env_state(dev, env), drl.rng(dev, 11)
        action = drl.asarray(dev, np.linspace(-1, 1, n, dtype=np.float32)[:, None])
        E.env_reset(dev, env, state, rng)
        if fused:
            drl.fuse(dev, staged, state, action, rng)(450)
        else:
            for _ in range(450):
                staged(dev, state, action, rng)
        results.append([drl.to_numpy(state.physics), drl.to_numpy(state.steps), drl.to_numpy(rng)])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_vector_env_same_step_autoreset():
    env = gym.make_vec("dispatchrl/Pendulum-v1", num_envs=3)
    obs, _ = env.reset(seed=5)
    assert obs.shape == (3, 3) and obs.dtype == np.float32
    for _t in range(200):
        prev = obs
        obs, reward, terminated, truncated, info = env.step(np.zeros((3, 1), np.float32))
    assert truncated.all() and not terminated.any() and info["_final_obs"].all()
    final = np.stack(info["final_obs"])
    assert not np.allclose(final, obs)  # obs already starts the next episode
    assert np.abs(final[:, 2] - prev[:, 2]).max() < 2.0  # final obs continues the old one
    np.testing.assert_array_equal(final, env.unwrapped.batch.final_obs)

    batch = E.NativeBatch(E.AcrobotContinuous(4), drl.Generic())
    cpu_batch = E.NativeBatch(E.AcrobotContinuous(4), drl.CPU())
    np.testing.assert_array_equal(batch.reset(seed=1), cpu_batch.reset(seed=1))
    a = np.ones((4, 1), np.float32)
    for _ in range(3):
        for x, y in zip(batch.step(a)[:4], cpu_batch.step(a)[:4]):
            np.testing.assert_array_equal(x, y)


def test_from_gymnasium():
    batch = E.from_gymnasium("Pendulum-v1", num_envs=3)
    obs = batch.reset(seed=4)
    refs = [gym.make("Pendulum-v1") for _ in range(3)]
    np.testing.assert_array_equal(obs, np.stack([g.reset(seed=4 + i)[0] for i, g in enumerate(refs)]))
    a = np.full((3, 1), 0.5, np.float32)
    for _t in range(200):
        obs, reward, terminated, truncated, _ = batch.step(a)
        steps = [g.step(a[i]) for i, g in enumerate(refs)]
        np.testing.assert_array_equal(batch.final_obs, np.stack([s[0] for s in steps]))
    assert truncated.all() and not np.array_equal(obs, batch.final_obs)
    assert (batch.action_low, batch.action_high, batch.observation_dim) == (-2.0, 2.0, 3)
    # an env instance works too and is copied through its spec
    assert E.from_gymnasium(gym.make("MountainCarContinuous-v0"), 2).reset(seed=0).shape == (2, 2)


def test_bad_input():
    dev = drl.CPU()
    env = E.Pendulum(4)
    state = E.env_state(dev, env)
    with pytest.raises(ShapeError, match="'action'.*\\(4, 1\\)"):
        E.env_step(dev, env, state, drl.zeros(dev, (3, 1)))
    with pytest.raises(DTypeError, match="'action'.*float32"):
        E.env_step(dev, env, state, drl.zeros(dev, (4, 1), np.float64))
    # a Generic array is host memory too, so CPU's method accepts it (test_extending: CUDA is refused)
    E.env_step(dev, env, state, drl.zeros(drl.Generic(), (4, 1)))
    with pytest.raises(ShapeError, match="state.physics"):
        E.env_step(dev, E.Pendulum(5), state, drl.zeros(dev, (5, 1)))
    with pytest.raises(ShapeError, match="'rng'"):
        E.env_reset(dev, env, state, drl.zeros(dev, 3, np.uint64))
    with pytest.raises(ConfigError, match="'env'"):
        E.env_state(dev, "Pendulum-v1")
    for make in (
        lambda: E.Pendulum(0),
        lambda: E.AcrobotContinuous(-1),
        lambda: E.Pendulum(2.5),
        lambda: E.from_gymnasium("Pendulum-v1", 0),
    ):
        with pytest.raises(ConfigError, match="num_envs"):
            make()
    with pytest.raises(ConfigError, match="NoSuchEnv-v0"):
        E.from_gymnasium("NoSuchEnv-v0", 2)
    with pytest.raises(ConfigError, match="observation_space must be a gymnasium Box, got Tuple"):
        E.from_gymnasium("Blackjack-v1", 2)  # a Discrete action space is a batch (tests/test_spaces.py)

    nan = np.array([[0.0], [np.nan], [0.0], [0.0]], np.float32)
    with pytest.raises(ConfigError, match="finite.*nan.*\\(1, 0\\)"):
        E.check_action(env, drl.asarray(dev, nan))
    with pytest.raises(ShapeError):
        E.check_action(env, np.zeros((4, 2), np.float32))
    batch = E.NativeBatch(env)
    batch.reset(seed=0)
    with pytest.raises(ConfigError, match="finite"):
        batch.step(nan)
    with pytest.raises(ShapeError, match="\\(4, 1\\)"):
        batch.step(np.zeros(4, np.float32))
    with pytest.raises(DTypeError):
        batch.step(np.array([["a"]] * 4))
    single = gym.make("dispatchrl/Pendulum-v1").unwrapped
    single.reset(seed=0)
    with pytest.raises(ConfigError, match="finite"):
        single.step(np.array([np.nan], np.float32))
    with pytest.raises(ShapeError):
        single.step(np.zeros(2, np.float32))


def test_env_functions_stay_cache_friendly():
    """plum caches the dispatch on (device, env type, state, action): no slow path per call."""
    dev, env = drl.CPU(), E.AcrobotContinuous(2)
    state, action, rng = E.env_state(dev, env), drl.zeros(dev, (2, 1)), drl.rng(dev, 0)
    for fn, args in (
        (E.env_reset, (dev, env, state, rng)),
        (E.env_step, (dev, env, state, action)),
        (E.env_reset_done, (dev, env, state, rng)),
    ):
        assert all(m.signature.is_faithful for m in fn.function.methods)  # plum caches on types
        assert all(plum.is_faithful(type(a)) for a in args)
        fn(*args)


def test_every_registered_env_has_its_methods_on_every_device(cuda_device):
    """Importing dispatchrl registers each built-in env's Generic, CPU and C methods, making a CUDA
    device its CUDA ones: each env package is complete, and the registry lists them all."""
    from dispatchrl.envs.multirotor import Multirotor
    from dispatchrl.envs.registry import GYMNASIUM_SPECS, NAMED_ENVS

    envs = set(NAMED_ENVS.values())
    assert envs == {E.Pendulum, E.AcrobotContinuous, E.CartPole, E.Acrobot, E.MountainCar, Multirotor}
    for fn in (E.env_step, E.env_reset, E.env_reset_done):
        registered = {m.signature.types[:2] for m in fn.function.methods}
        missing = [(d, e) for d in (drl.Generic, drl.CPU, drl.C, drl.CUDA) for e in envs if (d, e) not in registered]
        assert not missing, f"{fn.__name__}: no method for {missing}"
    assert {spec["id"] for spec in GYMNASIUM_SPECS} == set(E.ENV_IDS) <= set(gym.registry)
