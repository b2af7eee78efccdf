"""Algorithms written once over generic functions: no device code in here.

``td3``, ``sac`` and ``ppo`` each satisfy :class:`.protocol.Algorithm`; :mod:`.driver` trains any
of them, :mod:`.runs` saves and loads their runs, :mod:`.evaluation` evaluates their policies.
"""

from . import ppo, sac, td3
from .callbacks import EvalCallback, StopOnReward
from .driver import Hook, TrainingRun
from .evaluation import EVAL_SEEDS, evaluate
from .protocol import Algorithm
from .registry import ALGORITHMS
from .runs import TrainResult, load_run

__all__ = [
    "ALGORITHMS",
    "EVAL_SEEDS",
    "Algorithm",
    "EvalCallback",
    "Hook",
    "StopOnReward",
    "TrainResult",
    "TrainingRun",
    "evaluate",
    "load_run",
    "ppo",
    "sac",
    "td3",
]
