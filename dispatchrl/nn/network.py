"""The network interface the algorithms use, as functions dispatched on the network type.

TD3, SAC and PPO never call MLP code directly: they make networks with the constructors their
config names (``Config.actor_network`` and ``Config.critic_network``, each defaulting to
``Config.network``) and train them through :func:`forward`, :func:`backward`,
:func:`make_buffers`, :func:`parameter_groups`, :func:`adam_update`, :func:`polyak_average` and
:func:`deployable`. :class:`~dispatchrl.nn.MLP` is one method of each; a user's network type adds
its own with ``@nn.forward.dispatch`` etc. (the methods only call generic functions, so a step
using them still fuses). Dispatch happens while a step is traced, not per step.
:func:`parameters` and :func:`load_parameters` show and set a network's tensors as a
:class:`~dispatchrl.data.TensorDict`.

A network's buffers object (what :func:`make_buffers` returns) provides ``output`` and
``d_output`` (B, out) Arrays, and ``d_in[0]``, the (B, in) input gradient, when made with
``input_gradient=True``.
"""

import dataclasses
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..arrays import Array, assign, to_numpy
from ..data.tensordict import TensorDict, flat_key, host_leaf
from ..errors import ConfigError, DTypeError, MissingKeyError, ShapeError
from ..functions import DispatchedFunction
from ..kernels.core.api import (
    accumulate_squared_norm,
    adam_step,
    clip_by_norm,
    fill,
    mse_gradient,
    mse_loss,
    polyak_update,
    weight_decay_step,
)
from ..spaces import Box, Discrete
from .mlp import MLP, MLPBuffers, Parameter, mlp, mlp_backward, mlp_buffers, mlp_forward
from .policy import Policy

__all__ = [
    "NETWORKS",
    "HeadPolicy",
    "NetworkFunction",
    "NetworkPolicy",
    "adam_update",
    "backward",
    "check_device_methods",
    "clip_gradient_norm",
    "decay_weights",
    "deployable",
    "forward",
    "is_network",
    "load_parameters",
    "make_buffers",
    "mlp_train_step",
    "network_constructor",
    "orthogonal_init",
    "parameter_groups",
    "parameters",
    "polyak_average",
    "raw_output",
    "regression_demo",
]


class NetworkFunction(DispatchedFunction):
    """A function dispatched (plum) on its arguments' types, called with the declaration's
    defaults filled in so methods receive every argument positionally."""

    kind = "network function"

    def __init__(self, declaration: Callable[..., Any]) -> None:
        super().__init__(declaration, self._unknown_network)
        self.signature = inspect.signature(declaration)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return super().__call__(*bound.args)

    def _unknown_network(self, args: tuple) -> ConfigError:
        types = ", ".join(type(a).__name__ for a in args)
        return ConfigError(
            f"{self.__name__} has no method for ({types}); register one with @dispatchrl.nn.{self.__name__}.dispatch"
        )


def _network_function(declaration: Callable[..., Any]) -> NetworkFunction:
    return NetworkFunction(declaration)


@_network_function
def forward(device, net, buffers, x) -> None:
    """``buffers.output`` ← net(x)."""


@_network_function
def backward(device, net, buffers, x, d_output, parameters=True, input_gradient=None) -> None:
    """Backpropagate ``d_output`` into the parameters' gradients (unless ``parameters=False``)
    and, where the buffers keep one and ``input_gradient`` is not False, into ``buffers.d_in[0]``."""


@_network_function
def make_buffers(device, net, batch, input_gradient=False) -> Any:
    """The per-batch-size working arrays of ``net`` (see the module)."""


@_network_function
def parameter_groups(net) -> list:
    """The :class:`~dispatchrl.nn.Parameter` s an optimizer updates, one kernel each."""


@_network_function
def adam_update(device, net, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8) -> None:
    """One Adam step on every parameter group of ``net``."""


@_network_function
def decay_weights(device, net, decay) -> None:
    """``w -= decay * w`` on ``net``'s weights (not its biases): RLtools' Adam weight decay, run
    before :func:`adam_update` (whose step does not read the value, so the order changes no math)."""


def clip_gradient_norm(device: Any, groups: Sequence[Parameter], total: Array, max_norm: float) -> None:
    """torch's ``clip_grad_norm_`` over the gradients of ``groups`` (of any networks) together:
    their joint L2 norm, summed in float64 into ``total`` (a (1,) scratch array), and every
    gradient scaled by ``max_norm / (norm + 1e-6)`` where that is below 1. Before the optimizer."""
    fill(device, total, 0.0)
    for p in groups:
        accumulate_squared_norm(device, p.grad, total)
    for p in groups:
        clip_by_norm(device, p.grad, total, max_norm)


@_network_function
def orthogonal_init(net, gain, last_gain, seed) -> None:
    """Re-initialise ``net``'s weights as torch's ``orthogonal_`` does (a random orthogonal
    matrix times ``gain``; the output layer's times ``last_gain``) and its biases to zero: the
    initialisation of Tianshou's and CleanRL's MuJoCo PPO. Drawn on the host from ``seed``."""


@_network_function
def polyak_average(device, target, online, polyak) -> None:
    """target ← polyak·target + (1 − polyak)·online, parameter by parameter."""


@_network_function
def parameters(net, what="value") -> TensorDict:
    """``net``'s tensors as a TensorDict of batch size (), as TorchRL's ``TensorDict.from_module``
    gives a module's: keyed as checkpoints name them (an MLP's ``weights.0``, ``biases.0``, ...),
    and its leaves are the network's own Arrays, so writing into one writes the network
    (``.clone()`` keeps a copy, ``.memmap(path)`` saves one). ``what`` picks each
    :class:`~dispatchrl.nn.Parameter`'s ``"value"``, ``"grad"``, ``"m"`` or ``"v"``."""


@_network_function
def deployable(net, action_low, action_high, squash="tanh") -> Callable[[np.ndarray], np.ndarray]:
    """A host callable ``policy(obs) -> action`` from an actor network (see nn.Policy)."""


# ---------------------------------------------------------------- the MLP methods


@forward.dispatch
def _(device, net: MLP, buffers, x) -> None:
    mlp_forward(device, net, buffers, x)


@backward.dispatch
def _(device, net: MLP, buffers, x, d_output, parameters, input_gradient) -> None:
    mlp_backward(device, net, buffers, x, d_output, parameters, input_gradient)


@make_buffers.dispatch
def _(device, net: MLP, batch, input_gradient) -> MLPBuffers:
    return mlp_buffers(device, net, batch, input_gradient)


@decay_weights.dispatch
def _(device, net: MLP, decay) -> None:
    for w in net.weights:  # views into the flat group are fine: the step counters are not touched
        weight_decay_step(device, w.value, decay)


@orthogonal_init.dispatch
def _(net: MLP, gain, last_gain, seed) -> None:
    g = np.random.default_rng(seed)
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        n_in, n_out = w.value.shape  # stored (in, out): torch's (out, in) weight transposed
        a = g.standard_normal((max(n_in, n_out), min(n_in, n_out)))
        q, r = np.linalg.qr(a)
        q *= np.sign(np.diag(r))  # the Haar measure, as torch's orthogonal_
        q = q if n_in >= n_out else q.T  # (in, out) with orthonormal columns or rows
        scale = last_gain if i == len(net.weights) - 1 else gain
        assign(w.value, (scale * q).astype(to_numpy(w.value).dtype))
        assign(b.value, np.zeros(n_out, to_numpy(b.value).dtype))


@parameter_groups.dispatch
def _(net: MLP) -> list:
    assert net.groups is not None  # set by mlp() when the network is built
    return net.groups


def _annotated_type(annotation: Any) -> type:
    """The class a method's annotation names (``object`` for Any, unions and other forms)."""
    return annotation if isinstance(annotation, type) and annotation is not Any else object


def is_network(value: Any) -> bool:
    """Whether ``value`` is a network: :func:`parameter_groups` has a method for its type (one
    annotated with a class, so untyped fallbacks do not count)."""
    return any(
        _annotated_type(method.signature.types[0]) is not object
        and isinstance(value, _annotated_type(method.signature.types[0]))
        for method in parameter_groups.function.methods
    )


# any network whose parameter_groups are Parameters: one Adam / Polyak kernel per group


@adam_update.dispatch
def _(device, net, lr, beta1, beta2, eps) -> None:
    for p in parameter_groups(net):
        adam_step(device, p.value, p.grad, p.m, p.v, p.t, lr, beta1, beta2, eps)


@polyak_average.dispatch
def _(device, target, online, polyak) -> None:
    for p_target, p_online in zip(parameter_groups(target), parameter_groups(online)):
        polyak_update(device, p_target.value, p_online.value, polyak)


_PARAMETER_FIELDS = ("value", "grad", "m", "v")


def _parameter_tree(node: Any, what: str, path: str) -> Any:
    """The ``what`` Arrays of the Parameters under ``node`` as nested dicts keyed by field name or
    list position (fields marked ``metadata={"checkpoint": False}``, storage other fields are
    views of, are left out as checkpoints leave them out); None where there are none."""
    if isinstance(node, Parameter):
        leaf = getattr(node, what)
        if leaf is None:
            raise ConfigError(f"parameters: '{path}' has no {what!r} (a network built with trainable=False)")
        return leaf
    if isinstance(node, (list, tuple)):
        children = {str(i): item for i, item in enumerate(node)}
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        children = {
            f.name: getattr(node, f.name) for f in dataclasses.fields(node) if f.metadata.get("checkpoint", True)
        }
    else:
        return None
    items = {key: _parameter_tree(child, what, f"{path}.{key}" if path else key) for key, child in children.items()}
    items = {k: v for k, v in items.items() if v is not None}
    return items or None


# any network whose Parameters are in (lists of) dataclass fields, as the MLP's are


@parameters.dispatch
def _(net, what) -> TensorDict:
    if what not in _PARAMETER_FIELDS:
        raise ConfigError(f"parameters: 'what' must be one of {_PARAMETER_FIELDS}, got {what!r}")
    tree = _parameter_tree(net, what, "")
    if not isinstance(tree, dict):
        raise ConfigError(
            f"parameters: found no nn.Parameter fields in a {type(net).__name__}; "
            "register a method with @dispatchrl.nn.parameters.dispatch"
        )
    leaves = list(_leaves(tree))
    if len({type(leaf.device) for leaf in leaves}) != 1:
        raise ConfigError(f"parameters: the {type(net).__name__}'s tensors are on several devices")
    return TensorDict(tree, [], device=leaves[0].device)  # on their own device: kept, not copied


def _leaves(tree: dict) -> Iterator[Any]:
    for value in tree.values():
        yield from _leaves(value) if isinstance(value, dict) else (value,)


def load_parameters(net: Any, params: Any) -> None:
    """Copy ``params`` (what :func:`parameters` gives, from this network or another of its shape,
    with leaves on any device or numpy, or a nested dict of arrays) into ``net``'s parameters.
    Every key, shape and dtype is checked before anything is written, so a mismatch (a
    MissingKeyError, ShapeError or DTypeError naming the key) leaves the network as it was."""
    target = parameters(net)
    if isinstance(params, dict):
        params = TensorDict(params, [])
    if not isinstance(params, TensorDict):
        raise ConfigError(f"load_parameters: 'params' must be a TensorDict or dict, got {type(params).__name__}")
    wanted = {flat_key(k): k for k in target.keys(include_nested=True, leaves_only=True)}
    given = {flat_key(k): k for k in params.keys(include_nested=True, leaves_only=True)}
    for what, keys in (("missing", wanted.keys() - given.keys()), ("unexpected", given.keys() - wanted.keys())):
        if keys:
            names = ", ".join(sorted(".".join(k) for k in keys))
            raise MissingKeyError(f"load_parameters: {what} key(s) {names} for a {type(net).__name__}")
    pairs = []
    for key in sorted(wanted):
        name, into, value = ".".join(key), target[wanted[key]], host_leaf(params[given[key]])
        if tuple(value.shape) != tuple(into.shape):
            raise ShapeError(f"load_parameters: '{name}' has shape {tuple(value.shape)}, expected {into.shape}")
        if value.dtype != into.dtype:
            raise DTypeError(f"load_parameters: '{name}' has dtype {value.dtype}, expected {into.dtype}")
        pairs.append((into, value))
    for into, value in pairs:
        assign(into, value)


@deployable.dispatch
def _(net: MLP, action_low, action_high, squash) -> Policy:
    return Policy.from_mlp(net, action_low, action_high, squash=squash)


def mlp_train_step(device: Any, net: MLP, buffers: MLPBuffers, x: Array, y: Array, loss: Array, lr: Any = 1e-3) -> None:
    """One supervised step: forward, MSE loss, backward, Adam. Written once; :func:`dispatchrl.fuse`
    compiles it per device."""
    mlp_forward(device, net, buffers, x)
    mse_loss(device, buffers.output, y, loss)
    mse_gradient(device, buffers.output, y, buffers.d_output)
    mlp_backward(device, net, buffers, x, buffers.d_output)
    adam_update(device, net, lr)


@deployable.dispatch
def _(net, action_low, action_high, squash) -> Callable[[np.ndarray], np.ndarray]:
    return NetworkPolicy(net, action_low, action_high, squash)


class NetworkPolicy:
    """The deployable policy of any host-memory network: :func:`forward` on a host copy of its
    parameters' device, one observation batch at a time (buffers made per batch size)."""

    def __init__(self, net: Any, action_low: Any, action_high: Any, squash: str = "tanh") -> None:
        first = parameter_groups(net)[0].value
        if not isinstance(first, Array) or first.device.memory != "host":
            raise ConfigError(
                "deployable: a user network's default policy needs host memory; add a "
                "dispatchrl.nn.deployable method for it"
            )
        self.net, self.device, self.squash = net, first.device, squash
        self.action_low = np.asarray(action_low, np.float32)
        self.action_high = np.asarray(action_high, np.float32)
        self._buffers: dict[int, Any] = {}

    def __call__(self, obs: Any) -> np.ndarray:
        from ..arrays import asarray

        x = np.asarray(obs, np.float32)
        single = x.ndim == 1
        x = x[None] if single else x
        buffers = self._buffers.get(x.shape[0])
        if buffers is None:
            buffers = self._buffers[x.shape[0]] = make_buffers(self.device, self.net, x.shape[0])
        forward(self.device, self.net, buffers, asarray(self.device, x))
        y = to_numpy(buffers.output).astype(np.float32)
        y = Box(self.action_low, self.action_high).squash(y, "tanh" if self.squash == "tanh" else "clip")
        y = y.astype(np.float32)
        return y[0] if single else y


def raw_output(net: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The network's own :func:`deployable` policy with unbounded clipping: ``policy(obs)`` is the
    network's output itself (an :class:`~dispatchrl.nn.Policy` for an MLP, which SAC and PPO then
    rewrite in place; any other network's method otherwise)."""
    unbounded = np.full(1, np.inf, np.float32)  # broadcasts over every output
    return deployable(net, -unbounded, unbounded, "clip")  # type: ignore[no-any-return]


class HeadPolicy:
    """An algorithm's action head on a network's raw output (``raw(obs)``, see :func:`raw_output`),
    for networks whose :func:`deployable` is not the MLP's :class:`~dispatchrl.nn.Policy`:
    observations normalised as ``(obs - obs_mean) / obs_std`` when given, the first ``columns``
    outputs kept (SAC: the mean of mean and log-std), then ``"tanh"``: tanh, with [-1, 1] mapped
    onto [low, high]; ``"clip"``: [-1, 1] mapped affinely onto [low, high], then clipped (PPO's
    Gaussian mean); ``"argmax"``: the index of the largest output (int64). The same actions as the
    MLP's Policy computes for an MLP."""

    def __init__(
        self,
        raw: Callable[[np.ndarray], np.ndarray],
        action_low: Any,
        action_high: Any,
        squash: str,
        columns: int | None = None,
        obs_mean: np.ndarray | None = None,
        obs_std: np.ndarray | None = None,
    ) -> None:
        if squash not in ("tanh", "clip", "argmax"):
            raise ConfigError(f"HeadPolicy: argument 'squash' must be 'tanh', 'clip' or 'argmax', got {squash!r}")
        self.raw, self.squash, self.columns = raw, squash, columns
        self.action_low = np.asarray(action_low, np.float32)
        self.action_high = np.asarray(action_high, np.float32)
        self.obs_mean, self.obs_std = obs_mean, obs_std

    def __call__(self, obs: Any) -> np.ndarray:
        x = np.asarray(obs, np.float32)
        if self.obs_mean is not None and self.obs_std is not None:
            x = ((x - self.obs_mean) / self.obs_std).astype(np.float32)
        y = np.asarray(self.raw(x), np.float32)
        if self.columns is not None:
            y = y[..., : self.columns]
        if self.squash == "argmax":
            return np.argmax(y, axis=-1)  # type: ignore[no-any-return]
        space = Box(self.action_low, self.action_high)
        y = space.from_unit(np.tanh(y)) if self.squash == "tanh" else space.affine_from_unit(y)
        return y.astype(np.float32)


#: the action heads of :class:`PolicyHead`
HEADS = ("tanh", "tanh_mean", "clip", "argmax")


@dataclasses.dataclass(frozen=True)
class PolicyHead:
    """How an algorithm's deterministic action comes out of its actor network: the one
    description its host policy (:func:`head_policy`) and its exported C trainer's act program
    both read, instead of each guessing it from the network's output width and activation.

    ``squash``: ``"tanh"``: the output is the action in [-1, 1] (a tanh actor, TD3);
    ``"tanh_mean"``: tanh of the first ``columns`` outputs (the Gaussian mean of SAC's
    [mean, log_std]); ``"clip"``: the output mapped affinely from [-1, 1] onto the bounds, then
    clipped (PPO's Gaussian mean); ``"argmax"``: the index of the largest output is the action of a
    Discrete space (DQN's Q-values, categorical PPO's logits). ``obs_mean``/``obs_std`` (host
    float32): observations are normalised as ``(obs - obs_mean) / obs_std`` first, when given."""

    actor: Any
    squash: str
    columns: int | None = None
    obs_mean: np.ndarray | None = None
    obs_std: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.squash not in HEADS:
            raise ConfigError(f"PolicyHead: argument 'squash' must be one of {HEADS}, got {self.squash!r}")


def head_policy(head: PolicyHead, space: Box | Discrete) -> Callable[[np.ndarray], np.ndarray]:
    """The deterministic host policy ``policy(obs) -> action`` (physical units of ``space``) of
    ``head``: an :class:`~dispatchrl.nn.Policy` for an MLP actor (SAC's last layer cut to its mean
    columns; PPO's affine map folded into its last layer; the argmax of a Discrete space's
    outputs), else the network's own :func:`deployable` policy (TD3) or a :class:`HeadPolicy` on
    its raw output."""
    if (head.squash == "argmax") != isinstance(space, Discrete):
        raise ConfigError(f"head_policy: the {head.squash!r} head cannot act in a {space} action space")
    if isinstance(space, Discrete):
        raw = raw_output(head.actor)
        bounds = np.zeros(1, np.float32), np.full(1, space.n - 1, np.float32)
        if not isinstance(raw, Policy):
            return HeadPolicy(raw, *bounds, "argmax", head.columns, head.obs_mean, head.obs_std)
        return Policy(
            raw.weights,
            raw.biases,
            raw.activation,
            raw.output_activation,
            *bounds,
            "argmax",
            head.obs_mean,
            head.obs_std,
        )
    if head.squash == "tanh":
        return deployable(head.actor, space.low, space.high, "tanh")  # type: ignore[no-any-return]
    raw = raw_output(head.actor)
    squash = "tanh" if head.squash == "tanh_mean" else "clip"
    if not isinstance(raw, Policy):
        return HeadPolicy(raw, space.low, space.high, squash, head.columns, head.obs_mean, head.obs_std)
    weights, biases = list(raw.weights), list(raw.biases)
    if head.squash == "tanh_mean":
        weights[-1] = weights[-1][:, : head.columns].copy()
        biases[-1] = biases[-1][: head.columns].copy()
        return Policy(weights, biases, raw.activation, "tanh", space.low, space.high, "tanh")
    half, centre = space.half_range, space.centre
    weights[-1] = (weights[-1] * half).astype(np.float32)
    biases[-1] = (biases[-1] * half + centre).astype(np.float32)
    return Policy(
        weights,
        biases,
        raw.activation,
        raw.output_activation,
        space.low,
        space.high,
        "clip",
        head.obs_mean,
        head.obs_std,
    )


# ---------------------------------------------------------------- a network's methods per device


def check_device_methods(device: Any, net: Any, role: str = "network") -> None:
    """Refuse (ConfigError, before any kernel runs) a network that ``device`` would run with a
    base type's methods: when :func:`forward`, :func:`backward` or :func:`make_buffers` has a
    method for a more specific network type on another device (e.g. a user network's methods
    for ``drl.Generic``, which the C and CUDA devices do not inherit), plum would silently pick
    the base network's method (an MLP's) for ``device``. ``role`` names the network in the error."""
    mro = type(net).__mro__
    for function in (forward, backward, make_buffers):
        applicable = []  # (position of the method's network type in net's MRO, it runs on device)
        for method in function.function.methods:
            device_type, net_type = (_annotated_type(t) for t in method.signature.types[:2])
            if isinstance(net, net_type):
                position = mro.index(net_type) if net_type in mro else len(mro)  # len: a virtual base
                applicable.append((position, isinstance(device, device_type), device_type))
        if not applicable:
            continue  # the call itself raises the "no method" ConfigError
        best = min(position for position, _, _ in applicable)
        on_device = [position for position, ok, _ in applicable if ok]
        if on_device and min(on_device) == best:
            continue
        devices = " and ".join(sorted({d.__name__ for position, _, d in applicable if position == best}))
        name, kind, device_name = function.__name__, type(net).__name__, type(device).__name__
        instead = (
            f" ({device_name} would run {mro[min(on_device)].__name__}'s method on it instead)" if on_device else ""
        )
        raise ConfigError(
            f"{role}: network type {kind} has its own dispatchrl.nn.{name} method for {devices} but none "
            f"for {device_name}{instead}: add @dispatchrl.nn.{name}.dispatch def {name}(device: "
            f"{device_name}, net: {kind}, ...), calling only functions that have {device_name} methods"
        )


# ---------------------------------------------------------------- constructors by name

#: network constructors by name: ``make(device, sizes, activation, output_activation, seed=...,
#: trainable=...)`` → a network (``Config.network``, ``actor_network`` and ``critic_network`` name
#: one, or give "module:function")
NETWORKS: dict[str, Callable[..., Any]] = {"mlp": mlp}


def network_constructor(name: str, field: str = "network") -> Callable[..., Any]:
    """The constructor a Config's network field names: a key of :data:`NETWORKS` or
    "module:function"; ``field`` names that field in the ConfigError when it names none."""
    if not isinstance(name, str):
        raise ConfigError(f"{field}: expected a name of dispatchrl.nn.NETWORKS or 'module:function', got {name!r}")
    if name in NETWORKS:
        return NETWORKS[name]
    module_name, sep, attribute = name.partition(":")
    if sep:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.append(os.getcwd())  # as `python -m` would
        try:
            target: Any = importlib.import_module(module_name)
            for part in attribute.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"{field} {name!r}: cannot import it ({e})") from None
        if callable(target):
            return target
    raise ConfigError(f"{field}: {name!r} is neither one of {sorted(NETWORKS)} nor an importable 'module:function'")


def regression_demo(device: Any, batch: int = 100) -> tuple:
    """The ``dispatchrl demo`` problem: an MLP 4-64-64-1 (relu, seed 0) regressing sum(sin(x)) on
    ``batch`` fixed points drawn from [-2, 2]^4 (seed 0), by :func:`mlp_train_step` fused on
    ``device``. Returns ``(step, net, loss, (x, y))``, the data as float32 host arrays."""
    from ..arrays import asarray, zeros
    from ..staging import fuse

    g = np.random.default_rng(0)
    x = g.uniform(-2, 2, size=(batch, 4))
    y = np.sin(x).sum(axis=1, keepdims=True)
    x, y = x.astype(np.float32), y.astype(np.float32)
    net = mlp(device, (4, 64, 64, 1), activation="relu", seed=0)
    buffers = mlp_buffers(device, net, batch)
    loss = zeros(device, 1)
    step = fuse(device, mlp_train_step, net, buffers, asarray(device, x), asarray(device, y), loss)
    return step, net, loss, (x, y)
