"""Evaluation that means flying: from the task's random initial states, does the policy bring the
vehicle to the target and hold it there?"""

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ...arrays import asarray
from ...devices import CPU
from ...errors import ConfigError
from ...kernels.random.api import rng
from ...staging import fuse
from ..api import env_reset, env_state, env_step
from .layout import HISTORY, POS, RPM, VEL

__all__ = ["FLIGHT_SEED", "SELECTION_FLIGHT_SEED", "Lissajous", "flight_metrics", "hovering_start", "tracking_metrics"]

#: the reset stream of the flight evaluation (disjoint from training's seeds, which are small)
FLIGHT_SEED = 10_000
#: the flights keep-best selection scores (held out from the reported ones)
SELECTION_FLIGHT_SEED = 20_000


def flight_metrics(
    policy: Callable[[np.ndarray], np.ndarray],
    env: Any,
    flights: int = 100,
    seconds: float = 5.0,
    seed: int = FLIGHT_SEED,
    position_tolerance: float = 0.1,
    speed_tolerance: float = 0.2,
) -> dict[str, float]:
    """Fly ``flights`` vehicles from the initial-state distribution of ``env`` (a Multirotor) (disturbances and
    observation noise included) for ``seconds`` with the deterministic ``policy`` (a batch of
    observations → a batch of actions in [-1, 1]), all at once on the CPU kernels.

    ``eval_success``: the fraction that end within ``position_tolerance`` m of the target, slower
    than ``speed_tolerance`` m/s, having never left the termination box. ``eval_position_rmse``:
    the root-mean-square distance to the target over every step of every flight (m; a flight that
    left the box counts at the box's distance from then on), ``eval_final_position_error``: the
    median distance at the end (infinite for flights that left). ``eval_hover_score``: the mean over flights
    of ``1 − d / box`` for the final distance ``d`` of a flight that never left the box (0 for
    one that did): 1 for a perfect hover; it tells a close hover from a far one while success is
    still 0, and a crash from both (keep-best selection maximises it)."""
    if not hasattr(env, "without_curriculum"):  # the Multirotor (env.py imports this module)
        raise ConfigError(f"flight_metrics: 'env' must be a Multirotor, got {type(env).__name__}")
    if flights < 1:
        raise ConfigError(f"flight_metrics: 'flights' must be >= 1, got {flights}")
    task = dataclasses.replace(env.without_curriculum(), num_envs=flights, max_episode_steps=2**62)
    device = CPU()
    state, stream = env_state(device, task), rng(device, seed)
    env_reset(device, task, state, stream)
    action = asarray(device, np.zeros((flights, 4), np.float32))
    # staged once: each step is then one compiled call, no dispatch or argument checks
    step = fuse(device, lambda device: env_step(device, task, state, action))
    obs, terminated, physics = state.obs.data, state.terminated.data, state.physics.data
    box = task.termination_position
    left, parked = np.zeros(flights, bool), physics.copy()
    squared = 0.0
    steps = max(1, round(seconds / task.dt))
    for _ in range(steps):
        chosen = _act(policy, obs, left, "flight_metrics")
        action.data[...] = chosen
        step()
        left |= terminated
        _park(physics, parked, left)
        in_box = np.where(left, box * box, (physics[:, POS : POS + 3] ** 2).sum(axis=1))
        squared += float(in_box.sum())
    distance = np.where(left, np.inf, np.linalg.norm(physics[:, POS : POS + 3], axis=1))
    speed = np.linalg.norm(physics[:, VEL : VEL + 3], axis=1)
    success = ~left & (distance < position_tolerance) & (speed < speed_tolerance)
    return {
        "eval_hover_score": float(np.where(left, 0.0, np.maximum(0.0, 1.0 - distance / box)).mean()),
        "eval_success": float(success.mean()),
        "eval_position_rmse": float(np.sqrt(squared / (steps * flights))),
        "eval_final_position_error": float(np.median(distance)),
    }


def _act(policy: Callable[[np.ndarray], np.ndarray], obs: np.ndarray, left: np.ndarray, fn: str) -> np.ndarray:
    """The policy's actions for the flights still flying (refusing NaN or inf ones); flights that
    left see zeros and get zeros: they no longer count."""
    seen = obs.copy()
    seen[left] = 0.0
    with np.errstate(all="ignore"):
        chosen = np.asarray(policy(seen), np.float32).reshape(len(obs), 4)
    if not np.all(np.isfinite(chosen[~left])):
        raise ConfigError(f"{fn}: the policy outputs NaN or inf actions")
    chosen[left] = 0.0
    return chosen


def _park(physics: np.ndarray, parked: np.ndarray, left: np.ndarray) -> None:
    """Flights that left go back to their initial state each step: a policy that spins a vehicle
    up would otherwise integrate it into inf and NaN (their numbers are fixed at leaving)."""
    physics[left] = parked[left]


@dataclasses.dataclass(frozen=True)
class Lissajous:
    """The moving target of the tracking evaluation: ``(A sin(a φ), B sin(b φ), C sin(c φ))`` with
    the phase ``φ = 2π t / period``. The defaults are RLtools' l2f trajectory
    (``parameters/trajectories/lissajous.h``: A 0.5, B 1, C 0, a 2, b 1, c 1, 6.5 s, no ramp): a
    figure-eight 1 m × 2 m in the horizontal plane, flown at up to 0.97 m/s."""

    amplitudes: tuple[float, float, float] = (0.5, 1.0, 0.0)  # m, per axis
    frequencies: tuple[float, float, float] = (2.0, 1.0, 1.0)  # per period, per axis
    period: float = 6.5  # s

    def __call__(self, t: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """The target's position and velocity at the times ``t`` (s): two arrays (..., 3)."""
        rate = 2 * np.pi / self.period
        phase = np.multiply.outer(np.asarray(t, np.float64) * rate, np.asarray(self.frequencies))
        amplitudes = np.asarray(self.amplitudes)
        return amplitudes * np.sin(phase), amplitudes * np.asarray(self.frequencies) * rate * np.cos(phase)


def hovering_start(device: Any, env: Any, flights: int, seed: int) -> tuple[Any, Any]:
    """``flights`` copies of ``env`` (a Multirotor) for a tracking evaluation, reset at rest on their
    targets with the motors at hover speed and a hover action history: the task (no curriculum,
    no time limit, the kernels' box out of the way: the caller checks the target's) and its state
    on ``device``."""
    task = dataclasses.replace(
        env.without_curriculum(),
        num_envs=flights,
        max_episode_steps=2**62,
        init_guidance=1.0,
        init_max_linear_velocity=0.0,
        init_max_angular_velocity=0.0,
        termination_position=1e6,
    )
    state = env_state(device, task)
    env_reset(device, task, state, rng(device, seed))
    hover, history = task.parameters.hover_action, 4 * task.action_history
    state.physics.data[:, RPM : RPM + 4] = task.parameters.hover_rpm
    state.physics.data[:, HISTORY : HISTORY + history] = hover
    state.obs.data[:, 18 : 18 + history] = hover
    return task, state


def tracking_metrics(
    policy: Callable[[np.ndarray], np.ndarray],
    env: Any,
    trajectory: Lissajous = Lissajous(),
    flights: int = 10,
    seconds: float | None = None,
    seed: int = FLIGHT_SEED,
    tolerance: float = 0.1,
) -> dict[str, float]:
    """Fly ``flights`` vehicles of ``env`` (a Multirotor) from the hover state at the origin
    (level, at rest, rotors at the hover RPM and the action history full of the hover action;
    each with its episode's random disturbance and the observation noise) after the moving
    ``trajectory`` for ``seconds`` (default: one period), as the paper's tracking does: the policy
    observes its position and linear velocity relative to the target's (RLtools' trajectory-
    tracking observations) and the integral of that position error (where the task has one), the
    rest of its observation as in hover.

    ``eval_tracking_rmse``: the root-mean-square distance to the target over every step of every
    flight (m); ``eval_tracking_within``: the fraction of those steps within ``tolerance`` m;
    ``eval_tracking_lost``: the fraction of flights that were ever farther from the target than
    the env's termination distance (the box moves with the target); from then on a flight counts
    at that distance, as in :func:`flight_metrics`."""
    if not hasattr(env, "without_curriculum"):  # the Multirotor (env.py imports this module)
        raise ConfigError(f"tracking_metrics: 'env' must be a Multirotor, got {type(env).__name__}")
    if flights < 1:
        raise ConfigError(f"tracking_metrics: 'flights' must be >= 1, got {flights}")
    if not isinstance(trajectory, Lissajous):
        raise ConfigError(f"tracking_metrics: 'trajectory' must be a Lissajous, got {type(trajectory).__name__}")
    seconds = trajectory.period if seconds is None else seconds
    if not seconds > 0:
        raise ConfigError(f"tracking_metrics: 'seconds' must be > 0, got {seconds!r}")
    if not tolerance > 0:
        raise ConfigError(f"tracking_metrics: 'tolerance' must be > 0 (m), got {tolerance!r}")
    device = CPU()
    task, state = hovering_start(device, env, flights, seed)
    action = asarray(device, np.zeros((flights, 4), np.float32))
    step = fuse(device, lambda device: env_step(device, task, state, action))
    obs, position = state.obs.data, state.physics.data[:, POS : POS + 3]
    steps = max(1, round(seconds / task.dt))
    target, target_velocity = trajectory(np.arange(steps + 1) * task.dt)
    lost, parked, box = np.zeros(flights, bool), state.physics.data.copy(), env.termination_position
    squared, within = 0.0, 0
    relative = np.empty_like(obs)
    integral, gain = np.zeros((flights, task.integral_columns)), task.position_integral
    for k in range(steps):
        relative[...] = obs
        relative[:, 0:3] -= target[k]
        relative[:, 12:15] -= target_velocity[k]
        relative[:, obs.shape[1] - integral.shape[1] :] = integral
        action.data[...] = _act(policy, relative, lost, "tracking_metrics")
        step()
        error = position - target[k + 1]
        if integral.shape[1]:  # as the kernels integrate the position, of the error to the target
            integral[...] = np.clip(integral + gain * task.dt * error, -1.0, 1.0)
        lost |= np.abs(error).max(axis=1) > box
        _park(state.physics.data, parked, lost)
        distance_squared = np.where(lost, box * box, (error**2).sum(axis=1))
        squared += float(distance_squared.sum())
        within += int((distance_squared < tolerance**2).sum())
    return {
        "eval_tracking_rmse": float(np.sqrt(squared / (steps * flights))),
        "eval_tracking_within": within / (steps * flights),
        "eval_tracking_lost": float(lost.mean()),
    }
