"""``drl.td3.train(device, env, config, ...)``: every registered algorithm module's ``train``, the
driver's :func:`~.driver.train` bound to that module. It is bound from here, a layer above the
algorithms, because an algorithm imports nothing of the driver that runs it."""

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..algorithms.protocol import Algorithm
from ..algorithms.registry import ALGORITHMS
from ..devices import Device
from ..loggers import Logger
from . import driver
from .progress import Progress
from .runs import Snapshot, TrainResult

__all__ = ["bind_train", "train_entry"]


def train_entry(algo: Algorithm) -> Callable[..., TrainResult]:
    """``train(device, env="pendulum", config=None, seed=0, ...)`` of ``algo``."""

    def train(
        device: Device,
        env: object = "pendulum",
        config: object = None,
        seed: object = 0,
        progress: bool | Progress | None = None,
        resume: str | Path | Snapshot | None = None,
        hooks: Sequence[driver.Hook] = (),
        logger: Logger | None = None,
    ) -> TrainResult:
        return driver.train(algo, device, env, config, seed, progress, resume, hooks, logger)

    name = algo.NAME.upper()
    train.__doc__ = (
        f"Train {name} on ``env`` (:func:`dispatchrl.training.driver.train` with this module); returns a "
        ":class:`~dispatchrl.training.runs.TrainResult` (``.policy`` acts on numpy observations, ``.history``, "
        "``.train_seconds``, ``.compile_seconds``, ``.save(path)``). ``config`` defaults to ``config_for(env)``."
    )
    train.__qualname__ = f"{name}.train"
    return train


def bind_train(algorithms: Mapping[str, Algorithm] = ALGORITHMS) -> None:
    """Give each algorithm module of ``algorithms`` its ``train`` (done on import for ALGORITHMS)."""
    for algo in algorithms.values():
        setattr(algo, "train", train_entry(algo))  # noqa: B010 (no protocol attribute: bound from above)


bind_train()
