"""Train TD3 (or SAC) on the continuous Acrobot of the RLtools paper (appendix I) for 50k steps.

    python examples/train_acrobot.py [--algo td3|sac] [--steps 50000] [--seed 0]

Swinging up takes 30k-50k steps for some seeds (the paper's observation); returns near -500 mean
no swing-up within the 500-step limit, higher is better.
"""

import argparse

import numpy as np

import dispatchrl as drl
from dispatchrl.training import evaluate

parser = argparse.ArgumentParser()
parser.add_argument("--algo", choices=["td3", "sac"], default="td3")
parser.add_argument("--steps", type=int, default=50_000)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

algo = {"td3": drl.td3, "sac": drl.sac}[args.algo]
result = algo.train(drl.CPU(), "acrobot", algo.Config(total_steps=args.steps), seed=args.seed)
steps, returns = result.history["steps"], result.history["returns"]
print(
    f"{args.algo}: {len(returns)} episodes in {result.train_seconds:.2f} s; "
    f"best training return {returns.max():.0f} at step {steps[returns.argmax()]}"
)
mean, eval_returns = evaluate(result.policy, result.spec.eval_id)
print(f"evaluation: mean {mean:.1f}, returns {np.round(eval_returns, 0)}")
