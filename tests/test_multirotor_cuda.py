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
        if ref.dtype == np.float64:  # physics: the RK4 state may differ in the last bits
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12, err_msg=f"output {k}")
        else:  # observations, rewards, flags, counters, the rng
            np.testing.assert_array_equal(got, ref, err_msg=f"output {k}")
