"""Algorithms written once over generic functions: no device code in here, and nothing of the
training loop (:mod:`dispatchrl.training`, a layer above, runs them).

``td3``, ``sac``, ``ppo`` and ``dqn`` each satisfy :class:`.protocol.Algorithm`; their ``train`` is the
driver's, bound to them by :mod:`dispatchrl.training.entries`.
"""

import warnings
from typing import Any

from . import dqn, ppo, sac, td3
from .protocol import Algorithm
from .registry import ALGORITHMS

__all__ = ["ALGORITHMS", "Algorithm", "dqn", "ppo", "sac", "td3"]

#: names that moved to dispatchrl.training (issue 32): still found here, with a
#: DeprecationWarning, for one release
MOVED_TO_TRAINING = {
    "EVAL_SEEDS": "evaluation",
    "EvalCallback": "callbacks",
    "Hook": "driver",
    "StopOnReward": "callbacks",
    "TrainResult": "runs",
    "TrainingRun": "driver",
    "evaluate": "evaluation",
    "load_run": "runs",
}


def __getattr__(name: str) -> Any:
    module = MOVED_TO_TRAINING.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"dispatchrl.algorithms.{name} moved to dispatchrl.training.{name}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    from ..training import callbacks, driver, evaluation, runs

    return getattr({"callbacks": callbacks, "driver": driver, "evaluation": evaluation, "runs": runs}[module], name)
