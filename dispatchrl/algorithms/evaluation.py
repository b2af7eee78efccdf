"""Deterministic evaluation of a trained policy on the env's gymnasium twin, from fixed seeds."""

from collections.abc import Callable, Sequence

import gymnasium
import numpy as np

from ..errors import ConfigError

__all__ = ["EVAL_SEEDS", "evaluate"]

#: evaluation episodes and their fixed reset seeds (disjoint from training seeds' streams)
EVAL_SEEDS = tuple(range(10_000, 10_010))


def evaluate(
    policy: Callable[[np.ndarray], np.ndarray], eval_id: str | None, seeds: Sequence[int] = EVAL_SEEDS
) -> tuple[float, list[float]]:
    """(mean, per-episode) undiscounted return of the deterministic ``policy``, one episode per seed."""
    if eval_id is None:
        raise ConfigError(
            "evaluate: the env has no gymnasium id to evaluate on (set the native env's eval_id "
            "and register it with dispatchrl.envs.register_native_env)"
        )
    env = gymnasium.make(eval_id)
    returns = []
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=int(seed))
            total, finished = 0.0, False
            while not finished:
                obs, reward, terminated, truncated, _ = env.step(policy(np.asarray(obs, np.float32)))
                total += float(reward)
                finished = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns)), returns
