"""How the driver cuts a run into chunks (the stretches between hook calls), and so how many
finished episodes the device's episode log must hold."""

from ..algorithms.protocol import Schedule
from .envspec import EnvSpec

__all__ = ["CHUNK_STEPS", "PYTHON_CHUNK_STEPS", "chunk_iterations", "episode_ring_capacity"]

#: a native env's chunk takes at most this many env steps per env (or one iteration, if longer)
CHUNK_STEPS = 2000
#: Python-stepped envs return to the hooks about every this many steps per env
PYTHON_CHUNK_STEPS = 200


def episode_ring_capacity(num_envs: int, env_steps: int) -> int:
    """Episodes the device's episode ring holds: every one that can finish within a chunk (at
    most one per env and step; a chunk is at most CHUNK_STEPS steps per env, or one iteration of
    ``env_steps``), so the driver reads them all at the chunk's end before the ring wraps."""
    return num_envs * max(CHUNK_STEPS, PYTHON_CHUNK_STEPS, env_steps)


def chunk_iterations(spec: EnvSpec, schedule: Schedule, iterations: int) -> int:
    """Iterations per chunk: about 20 chunks a run (at most 2000 env steps per env each) for
    native envs, where a chunk is one call into compiled code; about PYTHON_CHUNK_STEPS env
    steps per env for Python-stepped ones."""
    if spec.native is None:
        return max(1, PYTHON_CHUNK_STEPS // schedule.env_steps)
    return max(1, min(iterations // 20, CHUNK_STEPS // schedule.env_steps))
