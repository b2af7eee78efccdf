"""The multirotor's CUDA kernels (generated from the CPU per-env bodies) against the CPU ones, in
numba's CUDA simulator unless a GPU is configured (see conftest.py): a few envs, a few steps."""

import numpy as np

import dispatchrl as drl
import dispatchrl.envs as E
from dispatchrl.envs.multirotor import Multirotor

# small box and short episodes so terminations, truncations and partial resets all happen within
# 20 steps; curriculum stages of 4 steps per env so the weights change along the way
ENV = Multirotor(
    3,
    max_episode_steps=7,
    action_history=2,
    termination_position=0.15,
    init_guidance=0.3,
    curriculum_steps=12,
)


def _run(dev, steps=20):
    state, rng = E.env_state(dev, ENV), drl.rng(dev, 11)
    E.env_reset(dev, ENV, state, rng)
    actions = np.random.default_rng(0).uniform(-1.2, 1.2, (steps, ENV.num_envs, 4)).astype(np.float32)
    out = [drl.to_numpy(state.obs), drl.to_numpy(state.physics)]
    for t in range(steps):
        E.env_step(dev, ENV, state, drl.asarray(dev, actions[t]))
        out += [drl.to_numpy(x) for x in (state.obs, state.reward, state.terminated, state.truncated, state.physics)]
        E.env_reset_done(dev, ENV, state, rng)
        out += [drl.to_numpy(x) for x in (state.obs, state.steps, state.physics, rng)]
    return out


def test_cuda_matches_cpu_with_resets(cuda_device):
    on_cpu = _run(drl.CPU())
    on_cuda = _run(cuda_device)
    terminated = sum(a.sum() for a in on_cpu[4::9])
    truncated = sum(a.sum() for a in on_cpu[5::9])
    assert terminated > 0 and truncated > 0, "the run should end episodes both ways"
    for k, (got, ref) in enumerate(zip(on_cuda, on_cpu)):
        assert got.dtype == ref.dtype and got.shape == ref.shape, k
        if ref.dtype == np.float64:  # physics: the RK4 state may differ in the last bits (a GPU's FMAs)
            np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-12, err_msg=f"output {k}")
        else:  # observations, rewards, flags, counters, the rng
            np.testing.assert_array_equal(got, ref, err_msg=f"output {k}")


def test_fused_cuda_step_matches_cpu(cuda_device):
    """env_step + env_reset_done fused into one CUDA launch (the block forms generated from the
    same bodies) equals the CPU calls made one by one."""

    def staged(device, state, action, rng):
        E.env_step(device, ENV, state, action)
        E.env_reset_done(device, ENV, state, rng)

    action = np.linspace(-1.0, 1.0, 4 * ENV.num_envs, dtype=np.float32).reshape(ENV.num_envs, 4)
    results = []
    for dev in (drl.CPU(), cuda_device):
        state, rng = E.env_state(dev, ENV), drl.rng(dev, 5)
        E.env_reset(dev, ENV, state, rng)
        if dev is cuda_device:
            step = drl.fuse(dev, staged, state, drl.asarray(dev, action), rng)
            assert "fused_step" in step._run.source  # one launch, not a fallback to launches
            step(12)
        else:
            for _ in range(12):
                staged(dev, state, drl.asarray(dev, action), rng)
        results.append([drl.to_numpy(x) for x in (state.physics, state.obs, state.steps, state.terminated, rng)])
    for got, ref in zip(results[1], results[0]):
        if ref.dtype == np.float64:  # physics: the GPU contracts to FMAs (1 ulp on an H100, Nov 27)
            np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-12)
        else:
            np.testing.assert_array_equal(got, ref)
