"""``export-trainer``: a whole training run as one dependency-free C99 program.

The trainer is generated from the same traced steps ``train --device c`` runs: the algorithm's
state is built on the C device while the launches are recorded (weight initialisation and env
reset become ``trainer_init``), the driver's fused native step becomes ``trainer_run``'s loop body,
and a deterministic-policy rollout on a one-env copy of the env becomes ``trainer_evaluate``.
Every array is a static object sized at generation time; the math is the C device's own
(:mod:`dispatchrl.backends.c.mathlib`), so with ``-ffp-contract=off`` a run gives the same bits
on every target. ``trainer.c`` includes no libc header beyond <stdint.h>/<stdbool.h>.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import staging
from ..algorithms.acting import head_action
from ..algorithms.dueling import DuelingQNetwork
from ..arrays import Array
from ..backends.c.render import (
    CTYPES,
    HEADER,
    render_function,
    render_invocation,
    render_statements,
    renders_in_c,
)
from ..data import episode_log
from ..devices import C
from ..envs import env_reset, env_state, env_step
from ..errors import ConfigError
from ..kernels.core.api import copy
from ..kernels.onpolicy.api import normalize_observations
from ..kernels.random.api import SPLITMIX_GOLDEN, SPLITMIX_MIX1, SPLITMIX_MIX2, rng, stream_key
from ..nn import MLP, forward, make_buffers
from ..spaces import Box
from ..staging import Branch
from .scratch import plan_scratch, scratch_intervals
from .trainer_targets import MAKEFILE

__all__ = ["EPISODE_LOG", "EVAL_SEED", "TrainerSource", "trainer_source", "weights_checksum"]

#: the evaluation episodes' reset stream (fixed, so trainer_evaluate is a function of the weights)
EVAL_SEED = 10_000
#: the trainer's ring of the latest finished training episodes (trainer_recent_return reads it)
EPISODE_LOG = 64
_MASK = (1 << 64) - 1
#: the input-gradient blocks' per-function transposition buffer (kernels/core/c.py input_gradient_body)
_TRANSPOSE = "static T WT[N * K];"


@dataclass
class TrainerSource:
    header: str  # trainer.h
    source: str  # trainer.c
    main: str  # main.c for hosted targets
    state_bytes: int  # static RAM of the training state
    config: Any


def _splitmix_key(value: int) -> int:
    return stream_key(value & _MASK)


def _unxorshift(y: int, shift: int) -> int:
    x = y
    for _ in range(64 // shift + 1):
        x = y ^ (x >> shift)
    return x & _MASK


def _splitmix_seed(key: int) -> int:
    """The inverse of :func:`_splitmix_key` (each of its steps is a bijection on 64 bits)."""
    z = _unxorshift(key, 31)
    z = (z * pow(int(SPLITMIX_MIX2), -1, 1 << 64)) & _MASK
    z = _unxorshift(z, 27)
    z = (z * pow(int(SPLITMIX_MIX1), -1, 1 << 64)) & _MASK
    z = _unxorshift(z, 30)
    return (z - int(SPLITMIX_GOLDEN)) & _MASK


def _trace(algo, config, env, seed):
    """Build the state for ``seed`` on the C device, recording its init, and trace the programs."""
    from ..training.envspec import resolve_env
    from ..training.runs import build_state

    device = C()
    spec = resolve_env(env, config.num_envs)
    if spec.native is None:
        raise ConfigError(
            f"export-trainer: env {env!r} is stepped from Python; the trainer needs a native env (pendulum, acrobot, cartpole, mountaincar, multirotor)"
        )
    names = ("init", "step", "update", "act", "eval_reset", "eval_step")
    programs: dict[str, list] = {name: [] for name in names}
    with staging.trace(programs["init"]):
        state = build_state(algo, device, spec, config, seed)
        state.episodes = episode_log(device, config.num_envs, EPISODE_LOG)
    with staging.trace(programs["step"]):
        algo.native_step(device, config, spec.native, state)
    if algo.schedule(config).updates:  # PPO: the minibatch update, run between rollouts
        with staging.trace(programs["update"]):
            algo.update(device, config, state)
    # acting and evaluation: one env, the deterministic policy the algorithm's head describes
    eval_spec = resolve_env(env, 1)
    head = algo.policy_head(state)
    actor = head.actor
    if not isinstance(_mlp_of(actor), MLP):
        raise ConfigError(f"export-trainer: {algo.NAME}'s actor is a {type(actor).__name__}; the trainer exports MLPs")
    action_dim = spec.action_dim
    stats = getattr(state, "obs_stats", None) if getattr(config, "normalize_observations", False) else None
    act = dict(
        obs=Array(device, np.zeros((1, spec.obs_dim), np.float32)),
        norm=Array(device, np.zeros((1, spec.obs_dim), np.float32)),
        buffers=make_buffers(device, actor, 1),  # an MLP's, or a dueling Q network's (its MLP's and n Q-values)
        action=Array(device, np.zeros((1, action_dim), np.float32)),
    )
    eval_env = env_state(device, eval_spec.native)
    eval_rng = rng(device, EVAL_SEED)

    def act_program(device):
        if stats is not None:  # PPO acts on normalised observations (the running statistics, frozen)
            normalize_observations(device, stats, act["obs"], act["norm"])
        forward(device, actor, act["buffers"], act["norm"] if stats is not None else act["obs"])
        head_action(device, head.squash, act["buffers"].output, act["action"])

    with staging.trace(programs["act"]):
        act_program(device)
    with staging.trace(programs["eval_reset"]):
        env_reset(device, eval_spec.native, eval_env, eval_rng)
    with staging.trace(programs["eval_step"]):
        copy(device, eval_env.obs, act["obs"])
        act_program(device)
        env_step(device, eval_spec.native, eval_env, act["action"])
    for name, calls in programs.items():
        if not renders_in_c(calls):
            others = sorted(
                {
                    type(k).__name__ + ":" + getattr(k, "__name__", "?")
                    for k, _ in staging.kernel_calls(calls)
                    if type(k).__name__ != "CKernel"
                }
            )
            raise ConfigError(
                f"export-trainer: {algo.NAME}'s {name} program has kernels without a C method "
                f"({', '.join(others[:5])}); only fully generated-C algorithms export"
            )
    weights = state_weights(state)
    named = dict(
        act_obs=act["obs"],
        act_action=act["action"],
        eval_obs=eval_env.obs,
        eval_reward=eval_env.reward,
        eval_terminated=eval_env.terminated,
        eval_truncated=eval_env.truncated,
        eval_rng=eval_rng,
        step=state.step,
        episode_count=state.episodes.count,
        episode_returns=state.episodes.returns,
    )
    return spec, state, programs, weights, named


def weights_checksum(weights: list) -> str:
    """64-bit FNV-1a over the float32 bits of ``weights`` (arrays, in order), as trainer_checksum()."""
    h = 0xCBF29CE484222325
    for w in weights:
        data = w.data if isinstance(w, Array) else w
        for word in np.ascontiguousarray(data, np.float32).view(np.uint32).reshape(-1).tolist():
            h = ((h ^ word) * 0x100000001B3) & _MASK
    return f"{h:016x}"


def state_weights(state: Any) -> list:
    """The arrays :func:`weights_checksum` hashes for a training state (every MLP's parameters,
    a dueling Q network's its MLP's)."""
    return [
        p.value
        for field in dataclasses.fields(state)
        if isinstance(_mlp_of(getattr(state, field.name)), MLP)
        for net in [_mlp_of(getattr(state, field.name))]
        for p in (*net.weights, *net.biases)
    ]


def _mlp_of(value: Any) -> Any:
    """A dueling Q network's MLP (its body), else ``value`` itself."""
    return value.body if isinstance(value, DuelingQNetwork) else value


# ---------------------------------------------------------------- storage


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _c_literal(value, dtype: np.dtype) -> str:
    if dtype == np.float32:
        return (
            float(value).hex() + "f"
            if np.isfinite(value)
            else ("NAN" if np.isnan(value) else ("INFINITY" if value > 0 else "-INFINITY"))
        )
    if dtype == np.float64:
        return (
            float(value).hex()
            if np.isfinite(value)
            else ("NAN" if np.isnan(value) else ("INFINITY" if value > 0 else "-INFINITY"))
        )
    if dtype == np.uint64:
        return f"UINT64_C({int(value)})"
    if dtype == np.int64:
        return f"INT64_C({int(value)})" if value != -(2**63) else "INT64_MIN"
    return str(int(value))


class _Storage:
    """Static globals for the traced arrays: arrays sharing memory (views of a flat parameter
    buffer) share one global of their element type; an array is ``(gK + offset)``. After
    :meth:`share_scratch`, scratch arrays live in one arena per element type instead."""

    def __init__(self) -> None:
        self.roots: dict[int, dict] = {}
        self.order: list[np.ndarray] = []
        self.arenas: dict[str, tuple[np.dtype, int]] = {}  # name -> (dtype, elements)

    def add(self, a: np.ndarray) -> None:
        if not a.flags.c_contiguous:
            raise ConfigError("export-trainer: a traced array is not contiguous")
        root = _root(a)
        entry = self.roots.setdefault(id(root), {"root": root, "arrays": [], "dtype": a.dtype})
        if entry["dtype"] != a.dtype:
            raise ConfigError("export-trainer: arrays of different dtypes share memory")
        if not any(b is a for b in entry["arrays"]):
            entry["arrays"].append(a)
            self.order.append(a)

    def layout(self) -> None:
        for index, entry in enumerate(self.roots.values()):
            starts = [b.ctypes.data for b in entry["arrays"]]
            ends = [b.ctypes.data + b.nbytes for b in entry["arrays"]]
            entry["start"], entry["end"], entry["name"] = min(starts), max(ends), f"g{index}"
            entry["size"] = (entry["end"] - entry["start"]) // entry["dtype"].itemsize

    def name(self, a: np.ndarray) -> str:
        entry = self.roots[id(_root(a))]
        offset = (a.ctypes.data - entry["start"]) // entry["dtype"].itemsize + entry.get("base", 0)
        return f"({entry['name']} + {offset})"

    def share_scratch(self, programs: dict[str, list], pinned: set[int]) -> None:
        """Move the arrays that are scratch in the programs (:mod:`.scratch`), except ``pinned``
        roots, into one arena per element type, sharing memory where their lifetimes allow."""
        intervals, live_in = scratch_intervals(programs, lambda a: id(_root(a)))
        by_dtype: dict[np.dtype, dict[int, int]] = {}
        for key, entry in self.roots.items():
            if key in intervals and key not in live_in and key not in pinned:
                by_dtype.setdefault(entry["dtype"], {})[key] = entry["end"] - entry["start"]
        for dtype, sizes in by_dtype.items():
            offsets, arena_bytes = plan_scratch(sizes, {key: intervals[key] for key in sizes})
            name = f"scratch_{CTYPES[dtype].removesuffix('_t')}"
            for key, offset in offsets.items():
                self.roots[key].update(name=name, base=offset // dtype.itemsize, arena=True)
            self.arenas[name] = (dtype, arena_bytes // dtype.itemsize)

    def nbytes(self) -> int:
        """Static bytes of the stored arrays: their globals and the scratch arenas."""
        own = sum(e["end"] - e["start"] for e in self.roots.values() if not e.get("arena"))
        return own + sum(dtype.itemsize * size for dtype, size in self.arenas.values())

    def contents(self, entry: dict) -> np.ndarray:
        nbytes = entry["end"] - entry["start"]
        base = entry["root"].view(np.uint8).reshape(-1)
        offset = entry["start"] - entry["root"].ctypes.data
        return base[offset : offset + nbytes].view(entry["dtype"]).copy()


# ---------------------------------------------------------------- rendering


def trainer_source(
    algo_name: str,
    env: str = "pendulum",
    steps: int = 10_000,
    seed: int = 0,
    overrides: dict | None = None,
    share_scratch: bool = True,
) -> TrainerSource:
    """trainer.h, trainer.c and main.c for ``algo_name`` on ``env`` (config: the algorithm's
    default for the env with ``total_steps=steps`` and ``overrides``); ``seed`` is main's default.
    ``share_scratch``: arrays whose lifetimes never overlap share memory (:mod:`.scratch`), which
    changes no result; off, every array has its own global."""
    from ..algorithms import ALGORITHMS
    from ..training.driver import check_seed

    if algo_name not in ALGORITHMS:
        raise ConfigError(f"export-trainer: unknown algorithm {algo_name!r}; expected one of {sorted(ALGORITHMS)}")
    algo = ALGORITHMS[algo_name]
    seed = check_seed(seed)
    config = algo.config_for(env)
    config = dataclasses.replace(config, total_steps=int(steps), **(overrides or {}))
    config.validate()
    _check_memory(algo, env, config)
    schedule = algo.schedule(config)
    # three traces: every array's initial content must not depend on the seed, except rng keys
    traces = [_trace(algo, config, env, s) for s in (0, 1, 2)]
    spec, _state, programs, weights, named = traces[0]
    storage = _Storage()
    for name in programs:
        for _, args in staging.kernel_calls(programs[name]):
            for a in map(staging.raw, args):
                if isinstance(a, np.ndarray):
                    storage.add(a)
        for node in _branches(programs[name]):
            storage.add(staging.raw(node.condition.counter))
    for a in [*map(staging.raw, weights), *(staging.raw(v) for v in named.values())]:
        storage.add(a)
    storage.layout()
    if share_scratch:
        storage.share_scratch(programs, {id(_root(staging.raw(a))) for a in [*weights, *named.values()]})
    others = []
    for other in traces[1:]:
        o_storage = _Storage()
        for name in programs:
            for _, args in staging.kernel_calls(other[2][name]):
                for a in map(staging.raw, args):
                    if isinstance(a, np.ndarray):
                        o_storage.add(a)
            for node in _branches(other[2][name]):
                o_storage.add(staging.raw(node.condition.counter))
        for a in [*map(staging.raw, other[3]), *(staging.raw(v) for v in other[4].values())]:
            o_storage.add(a)
        if [a.shape for a in o_storage.order] != [a.shape for a in storage.order]:
            raise ConfigError("export-trainer: the traced programs differ between seeds")
        others.append(o_storage)
    seeded = {}  # position in storage.order -> (a, b): the array is rng(a * seed + b)
    for position, a in enumerate(storage.order):
        values = [np.array(a), *(np.array(o.order[position]) for o in others)]
        if all(np.array_equal(values[0], v) for v in values[1:]):
            continue
        if not (a.dtype == np.uint64 and a.shape == (2,) and all(v[1] == 0 for v in values)):
            raise ConfigError("export-trainer: an array's initial value depends on the seed and is not an rng stream")
        raw_seeds = [_splitmix_seed(int(v[0])) for v in values]
        slope, offset = (raw_seeds[1] - raw_seeds[0]) & _MASK, raw_seeds[0]
        if (offset + 2 * slope) & _MASK != raw_seeds[2]:
            raise ConfigError("export-trainer: an rng stream's seed is not an affine function of the run's seed")
        seeded[id(a)] = (slope, offset)

    source = _render(algo_name, spec, config, schedule, programs, weights, named, storage, seeded)
    state_bytes = storage.nbytes()
    return TrainerSource(_header(algo_name, spec, config, seed, state_bytes), source, MAIN_C, state_bytes, config)


def _check_memory(algo: Any, env: str, config: Any) -> None:
    """Refuse a config whose three traced states (each as large as the trainer's static arrays)
    do not fit in the memory available, before any is built: a replay buffer of 10⁹ rows would
    otherwise be allocated here on the host, whatever the target."""
    from ..algorithms.memory import check_fits, estimate
    from ..training.driver import available_memory, episode_ring_capacity
    from ..training.envspec import resolve_env

    spec = resolve_env(env, config.num_envs)
    episodes = episode_ring_capacity(config.num_envs, algo.schedule(config).env_steps)  # built, then replaced
    allocations = estimate(algo, config, spec.obs_dim, spec.action_dim, episodes)
    check_fits(allocations, available_memory(), "export-trainer", copies=3, what="tracing the trainer's state")


def _branches(nodes: list):
    for node in nodes:
        if isinstance(node, Branch):
            yield node
            yield from _branches(node.then)
            yield from _branches(node.otherwise)


def _render(algo_name, spec, config, schedule, programs, weights, named, storage, seeded) -> str:
    helpers: dict[str, None] = {}
    functions: dict[str, str] = {}
    transpose = [0]  # elements of the shared transposition scratch

    def call(kernel, args):
        helpers.update(dict.fromkeys(kernel.helpers))
        text = render_function(kernel, args, "@NAME")
        if _TRANSPOSE in text and kernel.dtype == np.float32:
            # one transposition buffer for every input-gradient block: each call rewrites it
            transpose[0] = max(transpose[0], kernel.consts["N"] * kernel.consts["K"])
            text = text.replace(_TRANSPOSE, "float *const WT = drl_transpose; /* shared: rewritten first */")
        fname = functions.setdefault(text, f"k{len(functions)}")
        return render_invocation(fname, args, storage.name)

    program_text = []
    for name, calls in programs.items():
        program_text += [
            f"static void program_{name}(void)",
            "{",
            *render_statements(calls, "    ", storage.name, call),
            "}",
            "",
        ]

    globals_text, init_text = [], []
    if transpose[0]:
        globals_text.append(f"static float drl_transpose[{transpose[0]}] DRL_ALIGNED; /* input-gradient scratch */")
    for gname, (dtype, size) in storage.arenas.items():
        globals_text.append(f"static {CTYPES[dtype]} {gname}[{size}] DRL_ALIGNED; /* shared scratch */")
        init_text.append(f"    for (int32_t i = 0; i < {size}; i++) {gname}[i] = 0;")
    for entry in storage.roots.values():
        if entry.get("arena"):  # scratch: written before it is read, no initial value
            continue
        ctype, gname, size = CTYPES[entry["dtype"]], entry["name"], entry["size"]
        globals_text.append(f"static {ctype} {gname}[{size}] DRL_ALIGNED;")
        values = storage.contents(entry)
        rng_slots = [(storage.name(a), seeded[id(a)]) for a in entry["arrays"] if id(a) in seeded]
        if np.any(values != 0):
            literals = [_c_literal(v, entry["dtype"]) for v in values.tolist()]
            rows = [", ".join(literals[i : i + 8]) for i in range(0, len(literals), 8)]
            globals_text.append(f"static const {ctype} {gname}_init[{size}] = {{\n    " + ",\n    ".join(rows) + "\n};")
            init_text.append(f"    for (int32_t i = 0; i < {size}; i++) {gname}[i] = {gname}_init[i];")
        else:
            init_text.append(f"    for (int32_t i = 0; i < {size}; i++) {gname}[i] = 0;")
        for slot, (slope, offset) in rng_slots:
            init_text.append(f"    {slot}[0] = drl_stream_key(seed * UINT64_C({slope}) + UINT64_C({offset}));")
            init_text.append(f"    {slot}[1] = 0;")

    checksum = [f"    h = drl_hash_floats(h, {storage.name(staging.raw(w))}, {w.size});" for w in weights]
    if isinstance(spec.action_space, Box):  # the policy's [-1, 1] maps onto the bounds
        low = ", ".join(float(np.float32(v)).hex() + "f" for v in spec.action_low)
        high = ", ".join(float(np.float32(v)).hex() + "f" for v in spec.action_high)
        bounds = [
            "static const float drl_action_low[TRAINER_ACTION_DIM] = {" + low + "};",
            "static const float drl_action_high[TRAINER_ACTION_DIM] = {" + high + "};",
            "",
        ]
        to_action = [
            f"    for (int32_t j = 0; j < {spec.action_dim}; j++)",
            "        action[j] = drl_action_low[j] + (@ACT_ACTION[j] + 1.0f) * 0.5f"
            " * (drl_action_high[j] - drl_action_low[j]);",
        ]
    else:  # a Discrete space: the index itself
        bounds, to_action = [], ["    action[0] = @ACT_ACTION[0];"]
    eval_key = _splitmix_key(EVAL_SEED)
    n = lambda key: storage.name(staging.raw(named[key]))  # noqa: E731
    obs_dim = spec.obs_dim
    return "\n".join(
        [
            f"/* generated by dispatchrl export-trainer: {algo_name} on {spec.name}, do not edit.",
            f"   config: {dataclasses.asdict(config)} */",
            '#include "trainer.h"',
            HEADER,
            "#if defined(__GNUC__) || defined(__clang__)",
            "#define DRL_ALIGNED __attribute__((aligned(64)))",
            "#else",
            "#define DRL_ALIGNED",
            "#endif",
            "",
            "/* ---- the training state: every array, static ---- */",
            *globals_text,
            "",
            "static uint64_t drl_stream_key(uint64_t z)",
            "{",
            f"    z += UINT64_C(0x{int(SPLITMIX_GOLDEN):X});",
            f"    z = (z ^ (z >> 30)) * UINT64_C(0x{int(SPLITMIX_MIX1):X});",
            f"    z = (z ^ (z >> 27)) * UINT64_C(0x{int(SPLITMIX_MIX2):X});",
            "    return z ^ (z >> 31);",
            "}",
            "",
            "static uint64_t drl_hash_floats(uint64_t h, const float *x, int32_t n)",
            "{",
            "    for (int32_t i = 0; i < n; i++) {",
            "        union { float f; uint32_t u; } v;",
            "        v.f = x[i];",
            "        h = (h ^ v.u) * UINT64_C(0x100000001B3);",
            "    }",
            "    return h;",
            "}",
            "",
            *helpers,
            *(text.replace("@NAME", fname) for text, fname in functions.items()),
            *program_text,
            "/* ---- the API (trainer.h) ---- */",
            "void trainer_init(uint64_t seed)",
            "{",
            *init_text,
            "    program_init();",
            "}",
            "",
            *_run_function(n("step"), config.num_envs, schedule),
            "",
            f"int64_t trainer_steps(void) {{ return {n('step')}[0] * TRAINER_NUM_ENVS; }}",
            "",
            "double trainer_recent_return(int32_t episodes)",
            "{",
            f"    const int64_t count = {n('episode_count')}[0];",
            f"    const int64_t held = count < {EPISODE_LOG} ? count : {EPISODE_LOG};  /* a ring of the latest */",
            "    if (held <= 0 || episodes <= 0) return 0.0;",
            "    double total = 0.0;",
            "    int32_t used = 0;",
            "    for (int64_t i = count - 1; i >= count - held && used < episodes; i--, used++) total += "
            f"{n('episode_returns')}[i % {EPISODE_LOG}];",
            "    return total / used;",
            "}",
            "",
            *bounds,
            "void trainer_act(const float *obs, float *action)",
            "{",
            f"    for (int32_t i = 0; i < {obs_dim}; i++) {n('act_obs')}[i] = obs[i];",
            "    program_act();",
            *(line.replace("@ACT_ACTION", n("act_action")) for line in to_action),
            "}",
            "",
            "double trainer_evaluate(int32_t episodes)",
            "{",
            "    if (episodes <= 0) return 0.0;",
            f"    {n('eval_rng')}[0] = UINT64_C({eval_key});",
            f"    {n('eval_rng')}[1] = 0;",
            "    double total = 0.0;",
            "    for (int32_t e = 0; e < episodes; e++) {",
            "        program_eval_reset();",
            "        for (int64_t t = 0; t < INT64_C(1000000); t++) {",
            "            program_eval_step();",
            f"            total += (double){n('eval_reward')}[0];",
            f"            if ({n('eval_terminated')}[0] || {n('eval_truncated')}[0]) break;",
            "        }",
            "    }",
            "    return total / episodes;",
            "}",
            "",
            "/* one evaluation env for viewers (the web page's animation): trainer_evaluate reseeds it */",
            "void trainer_eval_reset(float *obs)",
            "{",
            "    program_eval_reset();",
            f"    for (int32_t i = 0; i < {obs_dim}; i++) obs[i] = {n('eval_obs')}[i];",
            "}",
            "",
            "int32_t trainer_eval_step(float *obs)",
            "{",
            "    program_eval_step();",
            f"    for (int32_t i = 0; i < {obs_dim}; i++) obs[i] = {n('eval_obs')}[i];",
            f"    return {n('eval_terminated')}[0] || {n('eval_truncated')}[0];",
            "}",
            "",
            "uint64_t trainer_checksum(void)",
            "{",
            "    uint64_t h = UINT64_C(0xCBF29CE484222325);",
            *checksum,
            "    return h;",
            "}",
            "",
        ]
    )


def _run_function(step: str, envs: int, schedule: Any) -> list[str]:
    """trainer_run: one vectorised env step (``envs`` env steps) per program_step; an algorithm
    with separate updates (PPO) runs them after every ``schedule.env_steps`` of those, as the
    driver's iterations do."""
    if not schedule.updates:
        loop = ["    for (int64_t i = 0; i < steps / TRAINER_NUM_ENVS; i++) program_step();"]
    else:
        loop = [
            "    for (int64_t i = 0; i < steps / TRAINER_NUM_ENVS; i++) {",
            "        program_step();",
            f"        if ({step}[0] % INT64_C({schedule.env_steps}) == 0)",
            f"            for (int32_t u = 0; u < {schedule.updates}; u++) program_update();",
            "    }",
        ]
    return ["void trainer_run(int64_t steps)", "{", *loop, "}"]


def _memory_note(config: Any) -> str:
    if hasattr(config, "capacity"):
        return f"replay buffer of {config.capacity} transitions"
    return f"rollout of {config.num_envs} envs x {config.steps_per_env} steps"


def _action_count(spec) -> str:
    """A Discrete space's number of actions (trainer_act's action[0] is an index below it)."""
    if isinstance(spec.action_space, Box):
        return ""
    return f"\n#define TRAINER_ACTION_COUNT {spec.action_space.n}  /* trainer_act: action[0] is an index */"


def _header(algo_name, spec, config, seed, state_bytes) -> str:
    return f"""\
/* trainer.h: {algo_name} on {spec.name}, generated by dispatchrl export-trainer (do not edit).

   One training run as static C99: no malloc, no stdio, no libm. Every array of the run (networks,
   optimiser moments, {_memory_note(config)}, env state) is a static object
   in trainer.c: {state_bytes} bytes. Not reentrant: one trainer per program.
   A run gives the same bits on every target when built with -ffp-contract=off (no FMA
   contraction) and without -ffast-math. */
#ifndef DISPATCHRL_TRAINER_H
#define DISPATCHRL_TRAINER_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {{
#endif

#define TRAINER_ALGO "{algo_name}"
#define TRAINER_ENV "{spec.name}"
#define TRAINER_OBS_DIM {spec.obs_dim}
#define TRAINER_ACTION_DIM {spec.action_dim}{_action_count(spec)}
#define TRAINER_NUM_ENVS {config.num_envs}  /* env steps per vectorised step */
#define TRAINER_STEPS INT64_C({config.total_steps})      /* the exported config's total_steps */
#define TRAINER_SEED UINT64_C({seed})
#define TRAINER_STATE_BYTES {state_bytes}

/* (Re)initialise every array: networks from `seed` (as train(..., seed=seed) does), env reset. */
void trainer_init(uint64_t seed);
/* Run `steps` environment steps (whole vectorised steps of TRAINER_NUM_ENVS envs) with their
   learning updates: fused into each step (TD3, SAC; warm-up first), or after each rollout (PPO). */
void trainer_run(int64_t steps);
/* Environment steps taken since trainer_init. */
int64_t trainer_steps(void);
/* Mean return of the deterministic policy over `episodes` episodes from fixed reset seeds. */
double trainer_evaluate(int32_t episodes);
/* Mean return of the last `episodes` finished training episodes (0 if none). */
double trainer_recent_return(int32_t episodes);
/* The deterministic action (physical units; a Discrete space's index) for one observation. */
void trainer_act(const float *obs, float *action);
/* Reset the evaluation env (the policy's own, reseeded by trainer_evaluate); its observation to `obs`. */
void trainer_eval_reset(float *obs);
/* One deterministic-policy step of that env; the new observation to `obs`; 1 when the episode ended. */
int32_t trainer_eval_step(float *obs);
/* 64-bit FNV-1a hash of every network weight's float32 bits. */
uint64_t trainer_checksum(void);

#ifdef __cplusplus
}}
#endif
#endif
"""


MAIN_C = r"""/* main.c: run the exported trainer and print one JSON line (hosted targets). */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "trainer.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    const long long steps = argc > 1 ? atoll(argv[1]) : (long long)TRAINER_STEPS;
    const unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 10) : (unsigned long long)TRAINER_SEED;
    const int episodes = argc > 3 ? atoi(argv[3]) : 10;
    trainer_init(seed);
    const double start = now();
    trainer_run(steps);
    const double seconds = now() - start;
    const double eval_return = trainer_evaluate(episodes);
    printf("{\"algo\": \"%s\", \"env\": \"%s\", \"seed\": %llu, \"steps\": %lld, \"train_seconds\": %.4f, "
           "\"eval_return\": %.3f, \"checksum\": \"%016llx\"}\n", TRAINER_ALGO, TRAINER_ENV, seed, steps, seconds,
           eval_return, (unsigned long long)trainer_checksum());
    return 0;
}
"""


def write_trainer(out: str | Path, trainer: TrainerSource) -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"trainer.h": out / "trainer.h", "trainer.c": out / "trainer.c", "main.c": out / "main.c"}
    paths["trainer.h"].write_text(trainer.header)
    paths["trainer.c"].write_text(trainer.source)
    paths["main.c"].write_text(trainer.main)
    paths["Makefile"] = out / "Makefile"
    paths["Makefile"].write_text(MAKEFILE)
    return paths
