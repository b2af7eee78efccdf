"""Deterministic evaluation of a trained policy on the env's gymnasium twin, from fixed seeds."""

from collections.abc import Callable, Sequence

import gymnasium
import numpy as np

from ..errors import ConfigError

__all__ = ["EVAL_SEEDS", "SELECTION_SEEDS", "evaluate", "evaluate_lockstep"]

#: evaluation episodes and their fixed reset seeds (disjoint from training seeds' streams)
EVAL_SEEDS = tuple(range(10_000, 10_010))
#: the reset seeds of evaluations that choose which policy to deploy (EvalCallback's
#: ``deploy_best``): disjoint from EVAL_SEEDS, so the reported evaluation is on held-out episodes
SELECTION_SEEDS = tuple(range(20_000, 20_100))


def evaluate(
    policy: Callable[[np.ndarray], np.ndarray], eval_id: object, seeds: Sequence[int] = EVAL_SEEDS
) -> tuple[float, list[float]]:
    """(mean, per-episode) undiscounted return of the deterministic ``policy``, one episode per
    seed, on ``eval_id``: a gymnasium id, a callable making a gymnasium env, or an env instance
    (used as is and left open)."""
    if eval_id is None:
        raise ConfigError(
            "evaluate: the env has no gymnasium id to evaluate on (set the native env's eval_id "
            "and register it with dispatchrl.envs.register_native_env)"
        )
    if isinstance(eval_id, gymnasium.Env):
        env, owned = eval_id, False
    elif isinstance(eval_id, str):
        env, owned = gymnasium.make(eval_id), True
    elif callable(eval_id):
        env, owned = eval_id(), True
    else:
        raise ConfigError(f"evaluate: 'eval_id' must be a gymnasium id, env or callable, got {eval_id!r}")
    returns = []
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=int(seed))
            total, finished = 0.0, False
            while not finished:
                obs, reward, terminated, truncated, _ = env.step(policy(np.asarray(obs, np.float32).reshape(-1)))
                total += float(reward)
                finished = terminated or truncated
            returns.append(total)
    finally:
        if owned:
            env.close()
    return float(np.mean(returns)), returns


def evaluate_lockstep(
    policy: Callable[[np.ndarray], np.ndarray], envs: Sequence[gymnasium.Env], seeds: Sequence[int]
) -> tuple[float, list[float]]:
    """:func:`evaluate` with one episode per env of ``envs`` (as many as ``seeds``), stepped
    together: ``policy`` acts on the rows of the episodes still running, one call per step
    instead of one per episode and step. Its returns may differ from :func:`evaluate`'s in the
    last bits (a batched product rounds as it likes); fine for choosing a policy, not for the
    reported evaluation."""
    if len(envs) != len(seeds):
        raise ConfigError(f"evaluate_lockstep: {len(envs)} envs for {len(seeds)} seeds")
    obs = [np.asarray(env.reset(seed=int(seed))[0], np.float32).reshape(-1) for env, seed in zip(envs, seeds)]
    returns = [0.0] * len(envs)
    running = list(range(len(envs)))
    while running:
        actions = policy(np.stack([obs[i] for i in running]))
        still = []
        for i, action in zip(running, actions):
            o, reward, terminated, truncated, _ = envs[i].step(action)
            obs[i] = np.asarray(o, np.float32).reshape(-1)
            returns[i] += float(reward)
            if not (terminated or truncated):
                still.append(i)
        running = still
    return float(np.mean(returns)), returns
