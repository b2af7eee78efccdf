"""Train TD3 on Pendulum-v1 (the RLtools paper's benchmark) and evaluate it with gymnasium.

python examples/train_pendulum.py [--device cpu] [--steps 10000] [--seed 0]
"""

import argparse

import gymnasium as gym
import numpy as np

import dispatchrl as drl
from dispatchrl.devices import device_from_name

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--steps", type=int, default=10_000)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

# The whole loop (env step, replay, critic and actor updates) runs as one fused kernel.
result = drl.td3.train(
    device_from_name(args.device), "pendulum", drl.td3.Config(total_steps=args.steps), seed=args.seed
)
print(
    f"trained {result.steps} steps in {result.train_seconds:.2f} s "
    f"(+{result.compile_seconds:.2f} s compile); last training returns {np.round(result.history['returns'][-5:], 1)}"
)

# The policy is a plain callable on numpy observations, in gymnasium's action units.
env = gym.make("Pendulum-v1")
returns = []
for episode in range(5):
    obs, _ = env.reset(seed=100 + episode)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(result.policy(obs))
        total += reward
        done = terminated or truncated
    returns.append(total)
print(f"evaluation returns: {np.round(returns, 1)} (mean {np.mean(returns):.1f})")
