"""Training, a layer above the algorithms: the driver that runs any
:class:`~dispatchrl.algorithms.protocol.Algorithm` (:mod:`.driver`, cut into :mod:`.chunks`), env
specs (:mod:`.envspec`), finished runs and their checkpoints (:mod:`.runs`, :mod:`.trust`),
progress, callbacks and evaluation. Importing it gives every registered algorithm module its
``train`` (:mod:`.entries`): ``drl.td3.train(device, env, config)``."""

from .callbacks import EvalCallback, StopOnReward
from .driver import Hook, TrainingRun, train
from .entries import bind_train
from .envspec import EnvSpec, resolve_env
from .evaluation import EVAL_SEEDS, SELECTION_SEEDS, evaluate, evaluate_lockstep
from .runs import TrainResult, load_run

__all__ = [
    "EVAL_SEEDS",
    "SELECTION_SEEDS",
    "EnvSpec",
    "EvalCallback",
    "Hook",
    "StopOnReward",
    "TrainResult",
    "TrainingRun",
    "bind_train",
    "evaluate",
    "evaluate_lockstep",
    "load_run",
    "resolve_env",
    "train",
]
