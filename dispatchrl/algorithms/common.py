"""What TD3 and SAC share: env resolution, the training driver (native envs fused into one step,
other envs stepped from Python between two fused halves), evaluation, results and checkpoints.

An off-policy algorithm module provides ``Config``, ``build(device, config, obs_dim, action_dim,
num_envs, seed) -> state``, ``act(device, config, state, obs)``, ``learn(device, config, state)``
and ``policy(state, low, high) -> Policy``; its state has the fields ``rng``, ``step``,
``action``, ``replay``, ``log`` and ``io`` (a Transitions of N rows).
"""

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass

import gymnasium
import numpy as np

from .. import checkpoint
from ..arrays import assign, to_numpy
from ..envs import (AcrobotContinuous, Pendulum, env_reset, env_reset_done, env_state, env_step,
                    from_gymnasium)
from ..errors import CheckpointError, ConfigError
from ..kernels.api import copy, increment
from ..kernels.rl.api import replay_add, track_episodes
from ..staging import fuse

#: evaluation episodes and their fixed reset seeds (disjoint from training seeds' streams)
EVAL_SEEDS = tuple(range(10_000, 10_010))
EPISODE_LOG_CAPACITY = 1 << 16


def validate_fields(config, rules):
    """``rules``: field → (predicate, expectation); raise ConfigError naming the first bad field."""
    for name, (ok, expected) in rules.items():
        value = getattr(config, name)
        try:
            good = ok(value)
        except TypeError:
            good = False
        if not good:
            raise ConfigError(f"{type(config).__name__}.{name} must be {expected}, got {value!r}")


def positive_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1


def unit_interval(v):
    return isinstance(v, (int, float)) and 0 <= v <= 1


def positive(v):
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def non_negative(v):
    return isinstance(v, (int, float)) and math.isfinite(v) and v >= 0


def validate_off_policy(config, extra_rules):
    """The fields TD3 and SAC share, then the algorithm's own."""
    validate_fields(config, {
        "total_steps": (positive_int, "a positive int"),
        "warmup_steps": (lambda v: isinstance(v, int) and v >= 0, "an int >= 0"),
        "batch_size": (positive_int, "a positive int"),
        "hidden": (lambda v: len(v) >= 1 and all(positive_int(h) for h in v), "a tuple of positive ints"),
        "activation": (lambda v: v in ("relu", "tanh", "gelu"), "'relu', 'tanh' or 'gelu'"),
        "gamma": (unit_interval, "in [0, 1]"),
        "polyak": (unit_interval, "in [0, 1]"),
        "actor_lr": (positive, "a positive number"),
        "critic_lr": (positive, "a positive number"),
        "policy_delay": (positive_int, "a positive int"),
        "replay_capacity": (lambda v: v is None or positive_int(v), "None or a positive int"),
        "num_envs": (positive_int, "a positive int"),
        **extra_rules,
    })
    if config.total_steps < config.num_envs:
        raise ConfigError(f"{type(config).__name__}.total_steps ({config.total_steps}) must be >= "
                          f"num_envs ({config.num_envs})")


def validate_off_policy_checkpoint(state, values, context):
    """Checkpoint invariants of a TD3/SAC state (its ``validate_checkpoint``): every step stored
    ``num_envs`` transitions, so the step fixes the replay buffer's size and position, and no
    more episodes ended than env steps were taken."""
    config = context.get("config")
    if config is None:
        return
    n = config.num_envs
    step = values.require("step", 0, config.total_steps // n, "environment steps per env, within total_steps")
    written, capacity = step * n, state.replay.capacity
    for field, expected in (("replay.size", min(written, capacity)), ("replay.position", written % capacity)):
        if values.scalar(field) != expected:
            values.refuse(field, f"= {values.scalar(field)} does not match step {step}: {step} steps × {n} envs "
                                 f"into {capacity} rows give {expected}")
    values.require("log.count", 0, written, "episodes finished, at most one per env step")
    values.require("log.end_steps", 0, step, "steps at which episodes ended")
    for net in ("actor", "critic1", "critic2", "log_alpha"):  # trained by Adam: at most one update per step
        for name, _ in checkpoint.named_arrays(getattr(state, net, None), f"{net}."):
            if name.endswith(".t."):
                values.require(name[:-1], 0, step, "Adam steps, at most one per env step")


# ---------------------------------------------------------------- environments

@dataclass
class EnvSpec:
    """What the driver needs to know about an env: how to step it, its action bounds (physical
    units, for the deployable policy) and which gymnasium id evaluates it."""

    name: str
    native: object       # a native env description (fused), or None
    make_batch: object   # () -> batch with reset/step/final_obs (Python-stepped), or None
    obs_dim: int
    action_dim: int
    action_low: np.ndarray
    action_high: np.ndarray
    eval_id: str


def resolve_env(env, num_envs=1):
    """``"pendulum"``, ``"acrobot"``, a gymnasium id, or a native env description → EnvSpec.
    Native envs run with actions in [-1, 1] (Pendulum: RLtools' normalised torque)."""
    if isinstance(env, str) and env.lower() in ("pendulum", "pendulum-v1"):
        env = Pendulum(num_envs=num_envs, normalized_actions=True)
    elif isinstance(env, str) and env.lower() in ("acrobot", "acrobotcontinuous-v1"):
        env = AcrobotContinuous(num_envs=num_envs)
    if isinstance(env, Pendulum):
        if not env.normalized_actions:
            env = dataclasses.replace(env, normalized_actions=True)
        torque = np.full(1, env.max_torque, np.float32)
        return EnvSpec("pendulum", env, None, 3, 1, -torque, torque, "Pendulum-v1")
    if isinstance(env, AcrobotContinuous):
        return EnvSpec("acrobot", env, None, 6, 1, env.action_low, env.action_high,
                       "dispatchrl/AcrobotContinuous-v1")
    if isinstance(env, str):
        if env.lower() in ("ant", "ant-v5", "dispatchrl/ant-v5"):
            from ..envs import AntBatch

            probe = AntBatch(1, num_threads=1)
            make, eval_id = (lambda: AntBatch(num_envs)), "dispatchrl/Ant-v5"
        else:
            probe = from_gymnasium(env, 1)
            make, eval_id = (lambda: from_gymnasium(env, num_envs)), env
        dims = (probe.observation_dim, probe.action_dim, probe.action_low, probe.action_high)
        probe.close()
        if not (np.all(np.isfinite(dims[2])) and np.all(np.isfinite(dims[3]))):
            raise ConfigError(f"env {env!r}: action bounds must be finite, got {dims[2]}..{dims[3]}")
        return EnvSpec(env, None, make, *dims, eval_id)
    raise ConfigError(f"env: expected 'pendulum', 'acrobot', a gymnasium id or a native env, got {env!r}")


# ---------------------------------------------------------------- training driver

def native_step(device, algo, config, env, state):
    """One environment step and learning update, for envs that are kernels too: fused whole."""
    es = state.env_state
    algo.act(device, config, state, es.obs)
    copy(device, es.obs, state.io.obs)
    env_step(device, env, es, state.action)
    replay_add(device, state.replay, state.io.obs, state.action, es.reward, es.obs, es.terminated, es.truncated)
    track_episodes(device, state.log, es.reward, es.terminated, es.truncated, state.step)
    env_reset_done(device, env, es, state.rng)
    algo.learn(device, config, state)
    increment(device, state.step)


def store_and_learn(device, algo, config, state):
    """The second fused half for Python-stepped envs: ``state.io`` holds the transition."""
    io = state.io
    replay_add(device, state.replay, io.obs, state.action, io.reward, io.next_obs, io.terminated, io.truncated)
    track_episodes(device, state.log, io.reward, io.terminated, io.truncated, state.step)
    algo.learn(device, config, state)
    increment(device, state.step)


class Progress:
    """A one-line progress bar on a terminal (steps, steps/s, recent return); silent when piped."""

    def __init__(self, total, enabled=None, stream=sys.stderr):
        self.total, self.stream = total, stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.start = time.perf_counter()

    def update(self, done, state):
        if not self.enabled:  # reading the episode log copies it: only for a visible bar
            return
        recent_return = _recent_return(state)
        rate = done / max(time.perf_counter() - self.start, 1e-9)
        width = 30
        filled = int(width * done / max(self.total, 1))
        ret = "n/a" if recent_return is None else f"{recent_return:9.2f}"
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} steps "
                          f"{rate:10.0f} steps/s  return {ret}")
        self.stream.flush()

    def close(self):
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class TrainResult:
    algo: str
    env: str
    device: object
    seed: int
    steps: int
    config: object
    policy: object           # dispatchrl.nn.Policy: callable on numpy observations
    history: dict            # "steps", "returns", "lengths" of finished training episodes
    train_seconds: float     # the training loop only
    compile_seconds: float   # building the state, tracing and compiling (or loading) the steps
    state: object            # every Array of the run (for checkpoints)
    spec: object

    def summary(self):
        returns = self.history["returns"]
        return {"algo": self.algo, "env": self.env, "device": type(self.device).__name__.lower(),
                "seed": self.seed, "steps": self.steps, "train_seconds": round(self.train_seconds, 4),
                "compile_seconds": round(self.compile_seconds, 4), "episodes": int(len(returns)),
                "recent_return": None if len(returns) == 0 else round(float(np.mean(returns[-10:])), 3)}

    def save(self, path):
        """Checkpoint the whole training state (npz + json, never pickle)."""
        return checkpoint.save(path, self.state, {
            "algo": self.algo, "env": self.env, "num_envs": self.config.num_envs, "seed": self.seed,
            "steps": self.steps, "config": dataclasses.asdict(self.config),
            "obs_dim": self.spec.obs_dim, "action_dim": self.spec.action_dim,
            "action_low": self.spec.action_low.tolist(), "action_high": self.spec.action_high.tolist(),
            "eval_id": self.spec.eval_id})


def train_off_policy(algo, name, device, env, config, seed, progress=None, resume=None):
    """Train ``algo`` (td3 or sac module) on ``env``; see the module docstring."""
    config = config if config is not None else algo.Config()
    config.validate()
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**31:
        raise ConfigError(f"seed must be an int in [0, 2**31), got {seed!r}")
    seed = int(seed)
    spec = resolve_env(env, config.num_envs)
    start = time.perf_counter()
    state = build_state(algo, device, spec, config, seed)
    if resume is not None:
        seed = _resume(resume, name, spec, config, state)
    iterations = config.total_steps // config.num_envs
    done = int(to_numpy(state.step)[0])
    if done > iterations:
        raise ConfigError(f"the checkpoint is at {done * config.num_envs} steps, past total_steps={config.total_steps}")
    bar = Progress(iterations * config.num_envs, progress)
    if spec.native is not None:
        step = fuse(device, native_step, algo, config, spec.native, state)
        compile_seconds = time.perf_counter() - start
        loop_start = time.perf_counter()
        chunk = max(1, min(iterations // 20, 2000))
        while done < iterations:
            n = min(chunk, iterations - done)
            step(n)
            done += n
            bar.update(done * config.num_envs, state)
        train_seconds = time.perf_counter() - loop_start
    else:
        compile_seconds, train_seconds = _train_python_stepped(algo, device, spec, config, state, done,
                                                               iterations, seed, bar, start)
    bar.close()
    ends, returns, lengths = state.log.finished()
    return TrainResult(name, spec.name, device, seed, iterations * config.num_envs, config,
                       algo.policy(state, spec.action_low, spec.action_high),
                       {"steps": ends * config.num_envs, "returns": returns, "lengths": lengths},
                       train_seconds, compile_seconds, state, spec)


def build_state(algo, device, spec, config, seed):
    """The algorithm's state, plus the env state (reset from the run's stream) for native envs."""
    state = algo.build(device, config, spec.obs_dim, spec.action_dim, seed)
    if spec.native is not None:
        state.env_state = env_state(device, spec.native)
        env_reset(device, spec.native, state.env_state, state.rng)
    return state


def _train_python_stepped(algo, device, spec, config, state, done, iterations, seed, bar, start):
    batch = spec.make_batch()
    obs = batch.reset(seed)
    act = fuse(device, algo.act, config, state, state.io.obs)
    learn = fuse(device, store_and_learn, algo, config, state)
    compile_seconds = time.perf_counter() - start
    low, high = spec.action_low, spec.action_high
    loop_start = time.perf_counter()
    try:
        while done < iterations:
            assign(state.io.obs, obs)
            act()
            action = to_numpy(state.action)
            obs, reward, terminated, truncated, _ = batch.step(low + (action + 1) * 0.5 * (high - low))
            for arr, value in ((state.io.next_obs, batch.final_obs), (state.io.reward, reward),
                               (state.io.terminated, terminated), (state.io.truncated, truncated)):
                assign(arr, value)
            learn()
            done += 1
            if done % 200 == 0 or done == iterations:
                bar.update(done * config.num_envs, state)
    finally:
        batch.close()
    return compile_seconds, time.perf_counter() - loop_start


def _recent_return(state):
    _, returns, _ = state.log.finished()
    return float(np.mean(returns[-10:])) if len(returns) else None


def _resume(path, name, spec, config, state):
    meta, arrays = checkpoint.load(path)  # one read: the newest checkpoint may rotate meanwhile
    if meta.get("algo") != name or meta.get("env") != spec.name:
        raise CheckpointError(f"checkpoint {path} is a {meta.get('algo')} run on {meta.get('env')}, "
                              f"not {name} on {spec.name}")
    if meta.get("num_envs") != config.num_envs:
        raise CheckpointError(f"checkpoint {path} has num_envs={meta.get('num_envs')}, this run {config.num_envs}")
    if getattr(state, "replay", None) is not None:  # on-policy states (PPO) have no replay buffer
        _grow_replay(arrays, state)
    checkpoint.restore(state, arrays, source=str(path), context={"config": config, "env": spec.native})
    return int(meta.get("seed", 0))


def _grow_replay(arrays, state):
    """A run resumed with a larger total budget gets a larger replay buffer (capacity defaults to
    total steps). That is exact while the old buffer has never wrapped: rows keep their places."""
    capacity = state.replay.capacity
    old = arrays.get("replay.obs")
    if old is None or old.ndim != 2 or old.shape[0] >= capacity:
        return
    size = int(arrays["replay.size"][0])
    if int(arrays["replay.position"][0]) != size % old.shape[0]:
        raise CheckpointError("checkpoint replay buffer is inconsistent (position vs size)")
    written = int(arrays["step"][0]) * state.io.obs.shape[0]
    if written > old.shape[0]:
        raise CheckpointError(f"cannot grow a replay buffer that has wrapped ({written} transitions "
                              f"written into {old.shape[0]} rows); resume with the original total_steps")
    for field in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
        key = f"replay.{field}"
        grown = np.zeros((capacity,) + arrays[key].shape[1:], arrays[key].dtype)
        grown[:old.shape[0]] = arrays[key]
        arrays[key] = grown
    arrays["replay.position"] = np.array([size], np.int64)


def load_run(path, algorithms, device=None):
    """(algo module, name, spec, config, state) of a checkpoint, restored on ``device``
    (default Generic); ``algorithms`` maps names to algorithm modules."""
    from ..devices import Generic

    meta, arrays = checkpoint.load(path)
    name = meta.get("algo")
    if name not in algorithms:
        raise CheckpointError(f"checkpoint {path}: unknown algorithm {name!r}; expected one of {sorted(algorithms)}")
    algo = algorithms[name]
    try:
        fields = dict(meta["config"])
        fields["hidden"] = tuple(fields.get("hidden", ()))
        config = algo.Config(**fields)
        config.validate()
        spec = resolve_env(meta["env"], config.num_envs)
        seed = int(meta["seed"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: metadata does not describe a run: {e}") from None
    if (meta.get("obs_dim"), meta.get("action_dim")) != (spec.obs_dim, spec.action_dim):
        raise CheckpointError(f"checkpoint {path}: dimensions {meta.get('obs_dim')}, {meta.get('action_dim')} do "
                              f"not match env {spec.name} ({spec.obs_dim}, {spec.action_dim})")
    state = build_state(algo, device or Generic(), spec, config, seed)
    checkpoint.restore(state, arrays, source=str(path), context={"config": config, "env": spec.native})
    return algo, name, spec, config, state


# ---------------------------------------------------------------- evaluation

def evaluate(policy, eval_id, seeds=EVAL_SEEDS):
    """Mean undiscounted return of the deterministic ``policy`` over one episode per seed."""
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


def result_json(result, eval_return, eval_returns):
    return json.dumps({**result.summary(), "eval_return": round(eval_return, 3),
                       "eval_returns": [round(r, 3) for r in eval_returns]})
