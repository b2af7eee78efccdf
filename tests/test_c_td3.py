"""The C device runs TD3 and SAC: every RL and env C kernel against the Generic reference (RNG
streams and env physics exactly), staged branches inside one C function and in steps mixing C
and borrowed host kernels, first updates against CPU, and a short TD3 Pendulum run that learns.

After the first run every generated library comes from the disk cache."""

import numpy as np
import pytest
from testkit import borrowed_host_function

import dispatchrl as drl
import dispatchrl.envs as E
from dispatchrl import checkpoint
from dispatchrl.algorithms import sac, td3
from dispatchrl.data import episode_log, replay_buffer, transitions
from dispatchrl.kernels.offpolicy import api as rl
from dispatchrl.training import runs
from dispatchrl.training.envspec import resolve_env
from dispatchrl.training.evaluation import evaluate

C, REF = drl.C(), drl.Generic()
DTYPES = [np.float32, np.float64]


def host(seed, *shape, scale=1.0):
    return scale * np.random.default_rng(seed).normal(size=shape)


def both(fn, arrays, dtype):
    """Run ``fn(device, *arrays)`` on C and on Generic, each on its own copies (floats as
    ``dtype``); every array afterwards from both, inputs included (kernels must not write them)."""
    out = []
    for device in (C, REF):
        arrs = [drl.asarray(device, a, dtype if a.dtype.kind == "f" else None) for a in arrays]
        fn(device, *arrs)
        out.append([drl.to_numpy(a) for a in arrs])
    return out


def assert_close(results, dtype, exact=()):
    tol = 2e-6 if dtype == np.float32 else 1e-12
    for i, (got, want) in enumerate(zip(*results)):
        if i in exact or got.dtype.kind != "f":
            np.testing.assert_array_equal(got, want, err_msg=f"array {i}")
        else:
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"array {i}")


# ---------------------------------------------------------------- RL kernels vs Generic


@pytest.mark.parametrize("dtype", DTYPES)
def test_replay_add_wraps_and_replay_sample_draws_the_same_rows(dtype):
    obs_dim, action_dim, capacity, n = 3, 2, 7, 3
    results = []
    for device in (C, REF):
        buf = replay_buffer(device, capacity, obs_dim, action_dim, dtype)
        batch = transitions(device, 11, obs_dim, action_dim, dtype)
        stream = drl.rng(device, 5)
        rows = transitions(device, n, obs_dim, action_dim, dtype)
        sampled = []
        for k in range(4):  # 12 rows into 7: wraps around
            for name, shape, kind in (
                ("obs", (n, obs_dim), "f"),
                ("action", (n, action_dim), "f"),
                ("reward", (n,), "f"),
                ("next_obs", (n, obs_dim), "f"),
                ("terminated", (n,), "b"),
                ("truncated", (n,), "b"),
            ):
                values = host(10 * k + len(name), *shape)
                drl.assign(getattr(rows, name), values > 0 if kind == "b" else values)
            rl.replay_add(
                device, buf, rows.obs, rows.action, rows.reward, rows.next_obs, rows.terminated, rows.truncated
            )
            rl.replay_sample(device, stream, buf, batch)
            sampled.append([drl.to_numpy(getattr(batch, f)) for f in vars(batch)])
        results.append(
            [drl.to_numpy(getattr(buf, f)) for f in vars(buf)]
            + [drl.to_numpy(stream)]
            + [a for s in sampled for a in s]
        )
    for got, want in zip(*results):  # copies and the integer stream: exact
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_concat_and_slice_columns(dtype):
    assert_close(both(rl.concat_columns, [host(0, 5, 3), host(1, 5, 4), np.zeros((5, 7))], dtype), dtype)
    assert_close(both(lambda d, x, o: rl.slice_columns(d, x, 2, o), [host(2, 5, 7), np.zeros((5, 3))], dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("noise_clip", [None, 0.3])
def test_add_clipped_noise(dtype, noise_clip):
    def fn(device, stream, x):
        rl.add_clipped_noise(device, stream, x, 0.4, noise_clip, -1.0, 1.0)
        rl.add_clipped_noise(device, stream, x, 0.4, noise_clip, -1.0, 1.0)

    assert_close(both(fn, [drl.to_numpy(drl.rng(REF, 3)), host(3, 9, 2, scale=0.8)], dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_td_targets(dtype):
    n = 17
    terminated = np.random.default_rng(4).random(n) < 0.3
    q1, q2, log_prob, reward = host(5, n, 1), host(6, n, 1), host(7, n, 1), host(8, n)
    assert_close(
        both(
            lambda d, r, t, a, b, out: rl.td_target(d, r, t, a, b, 0.97, out),
            [reward, terminated, q1, q2, np.zeros((n, 1))],
            dtype,
        ),
        dtype,
    )
    assert_close(
        both(
            lambda d, r, t, a, b, lp, la, out: rl.soft_td_target(d, r, t, a, b, lp, la, 0.97, out),
            [reward, terminated, q1, q2, log_prob, np.array([-0.7]), np.zeros((n, 1))],
            dtype,
        ),
        dtype,
    )


def test_track_episodes_logs_ends_and_drops_past_capacity():
    n, capacity = 3, 4
    results = []
    for device in (C, REF):
        log, step = episode_log(device, n, capacity), drl.zeros(device, 1, np.int64)
        reward, terminated, truncated = (
            drl.zeros(device, n),
            drl.zeros(device, n, np.bool_),
            drl.zeros(device, n, np.bool_),
        )
        for k in range(12):
            drl.assign(reward, host(k, n))
            drl.assign(terminated, np.arange(n) == k % 4)
            drl.assign(truncated, np.arange(n) == (k + 1) % 5)
            drl.assign(step, [k])
            rl.track_episodes(device, log, reward, terminated, truncated, step)
        results.append([drl.to_numpy(getattr(log, f)) for f in vars(log)])
    assert results[0][-1][0] > capacity  # some episodes were dropped
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_head_sample_backward_and_temperature(dtype):
    b, a = 6, 2
    actor_out = host(9, b, 2 * a)
    actor_out[0, a:] = [-25.0, 3.0]  # log_std outside the clamp: no gradient there
    stream = drl.to_numpy(drl.rng(REF, 11))
    zeros = [np.zeros((b, a)), np.zeros((b, a)), np.zeros((b, 1))]
    sample = both(rl.gaussian_tanh_sample, [stream, actor_out, *zeros], dtype)
    assert_close(sample, dtype)
    _, _, noise, action, log_prob = sample[1]
    log_alpha = np.array([-0.4])
    assert_close(
        both(
            rl.gaussian_tanh_backward,
            [actor_out, noise, action, host(12, b, a), log_alpha, np.zeros((b, 2 * a))],
            dtype,
        ),
        dtype,
    )
    assert_close(
        both(lambda d, lp, g: rl.entropy_temperature_gradient(d, lp, -2.0, g), [log_prob, np.zeros(1)], dtype), dtype
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_select_min_rows(dtype):
    m = 9
    a, b = host(13, m, 1), host(14, m, 1)
    b[2] = a[2]  # a tie takes x
    assert_close(both(rl.select_min_rows, [a, b, host(15, m, 4), host(16, m, 4), np.zeros((m, 4))], dtype), dtype)


def test_rl_kernels_refuse_bad_input_on_c():
    with pytest.raises(drl.ShapeError, match="'b'"):
        rl.concat_columns(C, drl.zeros(C, (4, 2)), drl.zeros(C, (3, 2)), drl.zeros(C, (4, 4)))
    with pytest.raises(drl.DeviceError):  # CUDA memory (a CPU array is host memory, accepted)
        rl.td_target(
            C,
            drl.zeros(C, 4),
            drl.zeros(C, 4, np.bool_),
            drl.zeros(drl.CUDA(), (4, 1)),
            drl.zeros(C, (4, 1)),
            0.9,
            drl.zeros(C, (4, 1)),
        )
    with pytest.raises(drl.ShapeError):
        rl.slice_columns(C, drl.zeros(C, (4, 3)), 2, drl.zeros(C, (4, 2)))


# ---------------------------------------------------------------- envs vs CPU


def _trajectory(device, env, steps=60):
    state, stream = E.env_state(device, env), drl.rng(device, 21)
    action = drl.zeros(device, (env.num_envs, env.action_dim))
    E.env_reset(device, env, state, stream)
    fields = ("physics", "steps", "obs", "reward", "terminated", "truncated")
    out = [drl.to_numpy(getattr(state, f)) for f in fields]

    def step(device):  # fused: the env kernels inside one C function / njit loop
        drl.random_uniform(device, stream, action, -1.5, 1.5)
        E.env_step(device, env, state, action)
        E.env_reset_done(device, env, state, stream)

    fused = drl.fuse(device, step)
    for _ in range(steps):
        E.env_step(device, env, state, action)  # eager too: one call per kernel
        out += [drl.to_numpy(getattr(state, f)) for f in fields]
        fused(3)
        out += [drl.to_numpy(getattr(state, f)) for f in fields]
    return out + [drl.to_numpy(stream)]


@pytest.mark.parametrize(
    "env",
    [
        E.Pendulum(5, max_episode_steps=7),
        E.Pendulum(3, normalized_actions=True, max_episode_steps=9),
        E.AcrobotContinuous(5, max_episode_steps=11),
    ],
    ids=["pendulum", "pendulum-normalized", "acrobot"],
)
def test_env_trajectories_match_cpu_bit_for_bit(env):
    # the same float64 expressions as the CPU kernels, no FMA contraction; sin/cos/fmod are the C
    # device's own (backends/c/mathlib.py, within 1 ulp of libm), so floats agree to rounding
    # noise and counters and flags exactly
    for got, want in zip(_trajectory(C, env), _trajectory(drl.CPU(), env)):
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)


def test_acrobot_terminates_on_c_as_on_cpu():
    env = E.AcrobotContinuous(2, max_episode_steps=500)
    ends = []
    for device in (C, drl.CPU()):
        state, stream = E.env_state(device, env), drl.rng(device, 2)
        E.env_reset(device, env, state, stream)
        action, done = drl.zeros(device, (2, 1)), []
        for _t in range(500):
            obs = drl.to_numpy(state.obs)
            drl.assign(action, np.where(obs[:, 5:6] >= 0, 1.0, -1.0))  # torque along dθ2: reaches the goal
            E.env_step(device, env, state, action)
            done.append(drl.to_numpy(state.terminated).copy())
            E.env_reset_done(device, env, state, stream)
        ends.append(np.array(done))
    assert ends[0].any()
    np.testing.assert_array_equal(ends[0], ends[1])


# ---------------------------------------------------------------- staged branches


def _branchy(device, counter, x, y):
    drl.increment(device, counter)
    drl.when(
        device,
        drl.Every(counter, 3, 1),
        lambda d: drl.polyak_update(d, x, y, 0.5),
        lambda d: drl.when(d, drl.Below(counter, 5), lambda d: drl.fill(d, y, 2.0)),
    )
    drl.when(device, drl.Below(counter, 4), lambda d: drl.increment(d, counter, 2))
    drl.polyak_update(device, y, x, 0.75)


def _branchy_run(device, fn, borrowed=None):
    counter = drl.asarray(device, np.array([-3], np.int64))  # negative: Python's floored % in C too
    x, y = drl.asarray(device, host(0, 4).astype(np.float32)), drl.asarray(device, host(1, 4).astype(np.float32))
    step = drl.fuse(device, fn, counter, x, y)
    trace = []
    for _ in range(6):
        step(2)
        trace.append((drl.to_numpy(counter)[0], drl.to_numpy(x), drl.to_numpy(y)))
    return step, trace


def _assert_same_trace(got, want):
    for (c1, x1, y1), (c2, x2, y2) in zip(got, want):
        assert c1 == c2
        np.testing.assert_allclose(x1, x2, rtol=1e-6)
        np.testing.assert_allclose(y1, y2, rtol=1e-6)


def test_branches_render_as_c_ifs_in_one_function():
    step, got = _branchy_run(C, _branchy)
    source = step._run.source
    assert source.count("void dispatchrl_step(") == 1 and source.count("if (") >= 3
    _assert_same_trace(got, _branchy_run(REF, _branchy)[1])


def _negate_kernel(x):
    x *= -1.0


_negate = borrowed_host_function(_negate_kernel)


def _mixed(device, counter, x, y):
    # a borrowed host kernel inside a branch and between C kernels: conditions must still be
    # tested when the step reaches them, after the C segment before them moved the counter
    drl.increment(device, counter)
    drl.when(
        device,
        drl.Every(counter, 2),
        lambda d: _negate(d, x),
        lambda d: drl.when(d, drl.Below(counter, 2), lambda d: (drl.fill(d, y, 1.5), _negate(d, y))),
    )
    _negate(device, y)
    drl.when(device, drl.Below(counter, 3), lambda d: drl.increment(d, counter))
    drl.polyak_update(device, y, x, 0.5)


def test_branches_with_borrowed_host_kernels_evaluate_in_order():
    step, got = _branchy_run(C, _mixed)
    assert len(step._run.segments) >= 4  # C, branch, host, C with branch...
    _assert_same_trace(got, _branchy_run(REF, _mixed)[1])


# ---------------------------------------------------------------- TD3 / SAC on C vs CPU


def _weights(result):
    return {
        name: drl.to_numpy(a)
        for name, a in checkpoint.named_arrays(result.state)
        if ".value" in name and (".weights." in name or ".biases." in name)
    }


ALGOS = {"td3": td3, "sac": sac}


@pytest.mark.parametrize("name", ["td3", "sac"])
def test_one_fused_step_on_c_continues_a_cpu_run_like_cpu(name):
    """From the same mid-training state, C and CPU take the same steps (both policy-delay phases):
    every array of the run — networks, Adam moments, replay, env, RNG, log — within float32 noise."""
    algo = ALGOS[name]
    config = algo.Config(total_steps=300, warmup_steps=100)
    spec = resolve_env("pendulum", 1)
    states = [runs.build_state(algo, device, spec, config, 1) for device in (C, drl.CPU())]
    steps = [drl.fuse(st.rng.device, algo.native_step, config, spec.native, st) for st in states]
    steps[1](150)  # CPU trains into the learning phase; C takes over its state
    for (name_c, a), (name_cpu, b) in zip(*(checkpoint.named_arrays(st) for st in states)):
        assert name_c == name_cpu
        drl.assign(a, drl.to_numpy(b))
    for _ in range(2):
        for step in steps:
            step(1)
        for (key, a), (_, b) in zip(*(checkpoint.named_arrays(st) for st in states)):
            got, want = drl.to_numpy(a), drl.to_numpy(b)
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()), err_msg=key)
            else:
                np.testing.assert_array_equal(got, want, err_msg=key)
    assert int(drl.to_numpy(states[0].step)[0]) == 152


@pytest.mark.parametrize("name, total", [("td3", 200), ("sac", 150)])
def test_first_updates_on_c_agree_with_cpu(name, total):
    # Same seed, whole runs: the C loops sum in another order than BLAS, ReLU units near zero
    # flip and Adam amplifies float32 noise, so whole runs are compared over their first updates
    algo = ALGOS[name]
    config = algo.Config(total_steps=total, warmup_steps=100)
    results = [algo.train(device, "pendulum", config, seed=1, progress=False) for device in (C, drl.CPU())]
    got, want = (_weights(r) for r in results)
    assert got.keys() == want.keys() and len(got) >= 12
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-2, atol=2e-3, err_msg=key)
    assert int(drl.to_numpy(results[0].state.step)[0]) == total
    np.testing.assert_array_equal(drl.to_numpy(results[0].state.rng), drl.to_numpy(results[1].state.rng))


def test_td3_pendulum_learns_on_c():
    result = td3.train(C, "pendulum", td3.Config(total_steps=10_000), seed=0, progress=False)
    mean, returns = evaluate(result.policy, result.spec.eval_id)
    assert mean >= -400, (mean, returns)
    assert result.history["returns"].shape == (50,)
