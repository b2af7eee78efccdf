"""A native environment written outside dispatchrl, trained fused: no Python between steps.

``PointReacher`` is a batch of 2-D point masses that must reach a random goal: the action moves
the point by up to 0.1 per step along each axis, the reward is minus the distance to the goal,
episodes last 50 steps. It follows the :class:`dispatchrl.envs.NativeEnv` protocol: a frozen
dataclass with its dimensions and bounds, plus CPU methods of ``env_reset``, ``env_step`` and
``env_reset_done`` that launch ``@njit`` kernels, so TD3's whole step (env included) stays one
compiled loop. It is registered as a gymnasium id too, which evaluates the trained policy.

    python examples/custom_env.py [--steps 10000] [--seed 0]
    cd examples && python -m dispatchrl.cli train td3 --env custom_env:PointReacher --steps 10000
"""

import argparse
from dataclasses import dataclass

import numpy as np
from numba import njit

import dispatchrl as drl
from dispatchrl.kernels.random.cpu import uniform01

__all__ = ["ENV_ID", "PointReacher", "main"]

ENV_ID = "examples/PointReacher-v0"
STEP = 0.1  # largest move per step along each axis


@dataclass(frozen=True)
class PointReacher(drl.envs.NativeEnv):
    num_envs: int = 1
    max_episode_steps: int = 50

    observation_dim = 4  # x, y, goal x, goal y
    action_dim = 2
    physics_dim = 4  # the float64 state: x, y, goal x, goal y
    action_low = np.full(2, -1.0, np.float32)
    action_high = np.full(2, 1.0, np.float32)
    observation_high = np.full(4, 1.0, np.float32)
    eval_id = ENV_ID


@njit(cache=True)
def reacher_step(physics, steps, action, obs, reward, terminated, truncated, max_steps):
    for i in range(physics.shape[0]):
        for axis in range(2):
            move = min(max(np.float64(action[i, axis]), -1.0), 1.0) * STEP
            physics[i, axis] = min(max(physics[i, axis] + move, -1.0), 1.0)
        dx, dy = physics[i, 0] - physics[i, 2], physics[i, 1] - physics[i, 3]
        for j in range(4):
            obs[i, j] = physics[i, j]
        reward[i] = -np.sqrt(dx * dx + dy * dy)
        terminated[i] = False
        steps[i] += 1
        truncated[i] = steps[i] >= max_steps


@njit(cache=True)
def reacher_reset(rng, physics, steps, obs, reward, terminated, truncated, only_done):
    key, base = rng[0], rng[1]
    for i in range(physics.shape[0]):
        if only_done and not (terminated[i] or truncated[i]):
            continue  # every env's draws are reserved anyway: the stream advances the same
        for j in range(4):
            physics[i, j] = -1.0 + 2.0 * uniform01(key, base + np.uint64(4 * i + j))
            obs[i, j] = physics[i, j]
        steps[i] = 0
        if not only_done:
            reward[i] = 0.0
            terminated[i] = False
            truncated[i] = False
    rng[1] = base + np.uint64(4 * physics.shape[0])


def _state(state):
    return state.physics, state.steps, state.obs, state.reward, state.terminated, state.truncated


@drl.env_step.dispatch
def env_step(device: drl.CPU, env: PointReacher, state, action):
    drl.launch(
        device,
        reacher_step,
        state.physics,
        state.steps,
        action,
        state.obs,
        state.reward,
        state.terminated,
        state.truncated,
        env.max_episode_steps,
    )


@drl.env_reset.dispatch
def env_reset(device: drl.CPU, env: PointReacher, state, rng):
    drl.launch(device, reacher_reset, rng, *_state(state), False)


@drl.env_reset_done.dispatch
def env_reset_done(device: drl.CPU, env: PointReacher, state, rng):
    drl.launch(device, reacher_reset, rng, *_state(state), True)


# gymnasium.make(ENV_ID) works like the built-in dispatchrl ids (time limit from max_episode_steps)
drl.envs.register_native_env(ENV_ID, PointReacher())


def main(steps: int = 10_000, seed: int = 0) -> float:
    result = drl.td3.train(drl.CPU(), PointReacher(), drl.td3.Config(total_steps=steps), seed=seed, progress=False)
    step = result.steps
    mean, _ = drl.training.evaluate(result.policy, ENV_ID)
    print(
        f"trained TD3 on PointReacher for {step} steps in {result.train_seconds:.2f} s; "
        f"evaluation return {mean:.1f} (a random policy: about -50)"
    )
    return mean


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.steps, args.seed)
