"""An SB3-shaped facade over the functional API (``drl.td3.train``)::

    model = drl.TD3("pendulum", device="cpu", seed=0, actor_lr=3e-4)
    model.learn(10_000, callback=drl.EvalCallback(every=2_000, episodes=5))
    action, _ = model.predict(obs)
    model.save("td3_pendulum")
    model = drl.TD3.load("td3_pendulum")

``learn`` continues the same run when called again: ``learn(a)`` then ``learn(b)`` trains exactly
as one ``learn(a + b)`` (bit for bit, where no setting depends on the total budget: prioritized
replay anneals β over it). The run's state passes from one call to the next in memory, as a
resumed checkpoint would, and a Python-stepped env keeps its episodes going.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from . import checkpoint
from .algorithms import dqn, ppo, sac, td3
from .algorithms.acting import ExploringPolicy
from .algorithms.protocol import Algorithm
from .algorithms.registry import ALGORITHMS
from .arrays import to_numpy
from .data import ReplayBuffer, RingStorage, UniformSampler
from .devices import Device, device_from_name
from .errors import CheckpointError, ConfigError
from .loggers import Logger
from .training import driver
from .training.callbacks import EvalCallback, StopOnReward
from .training.envspec import NAMED_ENVS, EnvSpec, check_action_space, resolve_env
from .training.runs import (
    Snapshot,
    build_state,
    config_from_metadata,
    recorded_action_space,
    restore_for_resume,
    save_run,
    snapshot,
)
from .training.trust import check_checkpoint_code, check_run_metadata, in_memory

__all__ = ["DQN", "PPO", "SAC", "TD3", "EvalCallback", "Model", "StopOnReward"]


class _LiveBatch:
    """A Python-stepped batch that outlives one ``train`` call: the first reset resets it, later
    ones continue the episodes where the previous call stopped (as one longer run would)."""

    def __init__(self, batch: Any) -> None:
        self.batch, self.obs = batch, None

    def __getattr__(self, name: str) -> Any:  # dims, bounds, final_obs
        return getattr(self.batch, name)

    def reset(self, seed: int | None = None) -> np.ndarray:
        if self.obs is None:
            self.obs = self.batch.reset(seed)
        return np.array(self.obs, copy=True)

    def step(self, actions: np.ndarray) -> tuple:
        out = self.batch.step(actions)
        self.obs = out[0]
        return out

    def close(self) -> None:
        pass  # the model closes it (Model.close)


class Model:
    """One algorithm's run behind the SB3 methods; subclasses :class:`TD3`, :class:`SAC`,
    :class:`PPO` name the algorithm. ``env``: an env id, a ``gymnasium.Env`` (wrappers kept), a
    ``gymnasium.vector.VectorEnv``, a callable making an env, or a native env; ``device``: a
    Device or its name; ``logger``: metrics backends (:func:`dispatchrl.loggers.make_logger`; also
    :meth:`set_logger`), written by every ``learn``; ``config``: fields of the algorithm's Config
    (``total_steps`` comes from ``learn``)."""

    algo: ClassVar[Algorithm]

    def __init__(
        self,
        env: Any,
        device: str | Device = "cpu",
        seed: int = 0,
        progress: bool | None = None,
        logger: Logger | None = None,
        **config: Any,
    ) -> None:
        self.logger = logger
        self.device = device_from_name(device) if isinstance(device, str) else device
        if not isinstance(self.device, Device):
            raise ConfigError(f"device must be a dispatchrl Device or its name, got {device!r}")
        self.seed = driver.check_seed(seed)
        self.progress = progress
        if "total_steps" in config:
            raise ConfigError("total_steps: pass the budget to learn(total_timesteps)")
        if "num_envs" not in config and hasattr(env, "num_envs") and not isinstance(env, str):
            config["num_envs"] = int(env.num_envs)  # a VectorEnv's own count
        base = self.algo.config_for(env)
        unknown = sorted(set(config) - {f.name for f in dataclasses.fields(base)})
        if unknown:
            fields = ", ".join(f.name for f in dataclasses.fields(base))
            raise ConfigError(f"{type(self).__name__}: unknown Config field(s) {unknown}; the fields are {fields}")
        self.config = dataclasses.replace(base, **config)
        self.env = env
        self.spec = self._live(resolve_env(env, self.config.num_envs))
        check_action_space(self.algo, self.spec, ALGORITHMS)
        self.state: Any = None  # the run's state, once built
        self.num_timesteps = 0
        self.history: dict[str, np.ndarray] = {}
        self.result: Any = None  # the last learn()'s TrainResult

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.spec.name!r}, device={self.device!r}, seed={self.seed}, "
            f"num_timesteps={self.num_timesteps})"
        )

    def _live(self, spec: EnvSpec) -> EnvSpec:
        """``spec`` with its Python batch made once and kept across learn() calls."""
        self._batch: _LiveBatch | None = None
        if spec.make_batch is None:
            return spec
        make = spec.make_batch

        def live() -> _LiveBatch:
            if self._batch is None:
                self._batch = _LiveBatch(make())
            return self._batch

        return dataclasses.replace(spec, make_batch=live)

    def learn(self, total_timesteps: int, callback: Any = None) -> Model:
        """Train ``total_timesteps`` more env steps (all envs), continuing the run; ``callback``:
        a driver hook (:class:`EvalCallback`, :class:`StopOnReward`, any ``f(run)``) or a list."""
        if (
            isinstance(total_timesteps, bool)
            or not isinstance(total_timesteps, (int, np.integer))
            or total_timesteps < 1
        ):
            raise ConfigError(f"learn: 'total_timesteps' must be a positive int, got {total_timesteps!r}")
        if self.spec.native is None and self.spec.make_batch is None:
            raise ConfigError("learn: the model was loaded without its env; load(path, env=...) to train it")
        hooks = [] if callback is None else list(callback) if isinstance(callback, Sequence) else [callback]
        config = dataclasses.replace(self.config, total_steps=self.num_timesteps + int(total_timesteps))
        resume = None
        if self.num_timesteps > 0:
            resume = snapshot(
                self.algo.NAME, self.spec, self.config, self.seed, self.num_timesteps, self.state, self.history
            )
        result = driver.train(
            self.algo, self.device, self.spec, config, self.seed, self.progress, resume, hooks, self.logger
        )
        self.config, self.state, self.result, self.history = config, result.state, result, result.history
        self._policy_of = (result.state, result.policy)  # the best one with EvalCallback(deploy_best=True)
        self.num_timesteps = result.steps
        del resume  # the old state's copy: with the old state, freed now
        from .backends.cpu import trim_heap

        trim_heap()  # ... and handed back to the OS (see trim_heap), or each learn grows the process
        return self

    def set_logger(self, logger: Logger | None) -> None:
        """Log the next ``learn`` calls into ``logger`` (SB3's ``set_logger``; None: stop logging).
        The caller closes it when done."""
        self.logger = logger

    def _state(self) -> Any:
        if self.state is None:  # an untrained model acts with its initial weights
            self.state = build_state(self.algo, self.device, self.spec, self.config, self.seed)
        return self.state

    @property
    def policy(self) -> Any:
        """The deterministic, deployable policy (numpy observations → physical actions): the
        final weights', or after ``learn(callback=EvalCallback(..., deploy_best=True))`` the best
        evaluated ones (:meth:`save` keeps the final state; ``best_path`` saves the best run)."""
        state = self._state()
        cached = getattr(self, "_policy_of", None)
        if cached is None or cached[0] is not state:  # a new state (learn, load): copy its weights
            self._policy_of = (state, self.spec.deployed_policy(self.algo, state))
        return self._policy_of[1]

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = True
    ) -> tuple[np.ndarray, None]:
        """``(action, None)`` for one observation or a batch (SB3's signature; the second item
        is the recurrent state, which these policies do not have). ``deterministic=False`` acts
        as training does after its warm-up, running the algorithm's act program: SAC and PPO
        sample from their policy, TD3 adds its exploration noise (SB3's TD3 ignores the flag),
        DQN is ε-greedy at the run's current ε; the noise comes from a stream seeded by the
        model's seed, apart from training's."""
        obs = np.asarray(observation, np.float32)
        if obs.ndim > 1 and obs.shape[-1] != self.spec.obs_dim:
            obs = obs.reshape(obs.shape[0], -1)
        if deterministic:
            return self.policy(obs), None
        return self.stochastic_policy(obs), None

    @property
    def stochastic_policy(self) -> ExploringPolicy:
        """The exploring policy ``policy(obs) -> action`` (see :meth:`predict`): the algorithm's
        act program on the run's device, with its own random stream seeded by the model's seed."""
        state = self._state()
        cached = getattr(self, "_stochastic_of", None)
        if cached is None or cached[0] is not state:
            policy = ExploringPolicy(
                self.algo, self.device, self.config, state, self.spec.action_space, self.spec.obs_dim, self.seed
            )
            self._stochastic_of = (state, policy)
        return self._stochastic_of[1]

    @property
    def replay_buffer(self) -> ReplayBuffer:
        """The run's replay ring as a :class:`~dispatchrl.data.ReplayBuffer` over a
        :class:`~dispatchrl.data.RingStorage` (SB3's ``model.replay_buffer``), in place and
        read-only (the ring's size and position follow the run's steps): ``sample(batch_size)``
        draws rows training stored, uniformly, from a stream seeded by the model's seed;
        ``state_dict``/``save`` copy it. Off-policy algorithms on host-memory devices; ``learn``
        and ``load`` make a new one."""
        state = self._state()
        cached = getattr(self, "_replay_of", None)
        if cached is None or cached[0] is not state:
            if getattr(state, "replay", None) is None:
                raise ConfigError(
                    f"replay_buffer: {type(self).__name__} keeps no replay buffer (it learns from rollouts)"
                )
            self._replay_of = (
                state,
                ReplayBuffer(RingStorage(state.replay, writable=False), UniformSampler(self.seed)),
            )
        return self._replay_of[1]

    def save(self, path: str | Path) -> Path:
        """Checkpoint the run (npz, never pickle); ``load`` and ``train(..., resume=path)`` read it."""
        steps = self.num_timesteps
        state, history = self._state(), self.history or None
        return save_run(path, self.algo.NAME, self.spec, self.config, self.seed, steps, state, history=history)[0]

    @classmethod
    def load(
        cls,
        path: str | Path,
        env: Any = None,
        device: str | Device = "cpu",
        progress: bool | None = None,
        trust_code: bool = False,
    ) -> Any:
        """The model saved at ``path``; pass ``env`` to train it further on a Python env (native
        envs and registered ids are found from the checkpoint). A user network or env the
        checkpoint names (``"module:..."``) is refused unless ``env`` names it again or
        ``trust_code=True``; the replay ring is kept in memory whatever ``memmap_path`` it names."""
        meta, arrays = checkpoint.load(path)
        check_run_metadata(meta, path)
        if meta.get("algo") != cls.algo.NAME:
            raise CheckpointError(f"checkpoint {path} is a {meta.get('algo')} run, not {cls.algo.NAME}")
        config = config_from_metadata(cls.algo, meta, path)
        # an env the caller passes is theirs: the checkpoint's env name is then only compared
        check_checkpoint_code(
            meta, config, path, trust_code, named=(meta.get("env"), meta.get("eval_id")) if env is not None else ()
        )
        config = in_memory(config)  # a checkpoint never chooses where files are written
        model = cls.__new__(cls)
        model.device = device_from_name(device) if isinstance(device, str) else device
        model.seed, model.progress, model.config, model.env = int(meta.get("seed", 0)), progress, config, env
        model.logger = None
        model.spec = model._live(resolve_env(env, config.num_envs) if env is not None else _recorded_spec(meta))
        check_action_space(cls.algo, model.spec, ALGORITHMS)
        model.state = build_state(cls.algo, model.device, model.spec, config, model.seed)
        _, model.history = restore_for_resume(Snapshot(meta, arrays), cls.algo.NAME, model.spec, config, model.state)
        model.num_timesteps = int(to_numpy(model.state.step)[0]) * config.num_envs
        model.result = None
        return model

    def close(self) -> None:
        """Close the env this model stepped (a Python env's processes)."""
        if self._batch is not None:
            self._batch.batch.close()
            self._batch = None


def _recorded_spec(meta: dict[str, Any]) -> EnvSpec:
    """The env a checkpoint names, where it can be made without the user's objects (native envs,
    registered ids); else its recorded dimensions and bounds only (enough to act, not to train)."""
    name, n = str(meta.get("env")), int(meta.get("num_envs", 1))
    if name.lower() in NAMED_ENVS or ("+" not in name and "(" not in name):
        try:
            return resolve_env(name, n)
        except ConfigError:
            pass
    return EnvSpec(
        name=name,
        native=None,
        make_batch=None,
        obs_dim=int(meta["obs_dim"]),
        action_space=recorded_action_space(meta),
        eval_id=meta.get("eval_id"),
    )


class TD3(Model):
    """TD3 (:mod:`dispatchrl.algorithms.td3`) with the SB3 methods."""

    algo: ClassVar[Algorithm] = td3


class SAC(Model):
    """SAC (:mod:`dispatchrl.algorithms.sac`) with the SB3 methods."""

    algo: ClassVar[Algorithm] = sac


class PPO(Model):
    """PPO (:mod:`dispatchrl.algorithms.ppo`) with the SB3 methods."""

    algo: ClassVar[Algorithm] = ppo


class DQN(Model):
    """DQN (:mod:`dispatchrl.algorithms.dqn`) with the SB3 methods."""

    algo: ClassVar[Algorithm] = dqn
