"""A Policy as dependency-free C99: ``policy.h`` + ``policy.c`` (RLtools' checkpoint example).

Weights are ``static const float`` arrays, ``policy_forward`` keeps its activations on the stack
(no heap, reentrant) and needs nothing beyond libm, and ``policy_selftest`` replays input/output
vectors computed by the Python policy. The dense layers are the C device's own ``dense_forward``
blocks (:mod:`dispatchrl.kernels.core.c`) specialised to batch 1, so training and deployment share one
implementation.
"""

import re

import numpy as np

from ..activation import ACTIVATIONS
from ..backends.c import render_function, render_invocation
from ..errors import ConfigError, ShapeError
from ..kernels.core.c import dense_forward_kernel

__all__ = ["SELFTEST_TOLERANCE", "c_source", "check_policy", "selftest_observations"]

#: |action - expected| <= tol * (1 + |expected|) per element in policy_selftest
SELFTEST_TOLERANCE = 1e-5
TEST_COUNT = 4
SQUASHES = ("tanh", "clip", "argmax")
#: float libm functions a generated policy may call; declared by hand where there is no <math.h>
LIBM_FLOAT = ("tanhf", "erff", "expf", "sqrtf")


def _vector(policy, field, value, size):
    value = np.asarray(value, dtype=np.float32)
    if value.size == 1:
        value = np.full(size, value.reshape(-1)[0], np.float32)
    if value.shape != (size,):
        raise ShapeError(f"export: policy.{field} has shape {value.shape}, expected ({size},) to match the network")
    if not np.all(np.isfinite(value)):
        raise ConfigError(f"export: policy.{field} holds non-finite values")
    return value


def check_policy(policy):
    """Validate a Policy for export; returns (weights, biases, low, high, mean, std) as float32
    host arrays. ShapeError/ConfigError name the offending field."""
    if not hasattr(policy, "weights"):  # a user network's policy (nn.NetworkPolicy, or SAC/PPO's nn.HeadPolicy on one)
        network = getattr(getattr(policy, "raw", policy), "net", None)
        kind = type(network if network is not None else policy).__name__
        raise ConfigError(
            f"export: the policy runs a network of type {kind}, and the C policy exporter writes MLP "
            f"policies (dispatchrl.nn.Policy) only: add a dispatchrl.nn.deployable method for {kind} "
            f"returning an nn.Policy (where {kind} computes what an MLP does); no other network has a "
            f"C policy export"
        )
    weights, biases = list(policy.weights), list(policy.biases)
    if not weights or len(weights) != len(biases):
        raise ShapeError(
            f"export: policy has {len(weights)} weight and {len(biases)} bias arrays; expected the same positive number"
        )
    ws, bs = [], []
    for i, (w, b) in enumerate(zip(weights, biases)):
        w, b = np.asarray(w, np.float32), np.asarray(b, np.float32)
        if w.ndim != 2:
            raise ShapeError(f"export: policy.weights[{i}] has shape {w.shape}, expected (in, out)")
        if i and w.shape[0] != ws[-1].shape[1]:
            raise ShapeError(
                f"export: policy.weights[{i}] has shape {w.shape} but layer {i - 1} outputs {ws[-1].shape[1]} values"
            )
        if b.shape != (w.shape[1],):
            raise ShapeError(f"export: policy.biases[{i}] has shape {b.shape}, expected ({w.shape[1]},)")
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
            raise ConfigError(f"export: layer {i} of the policy holds non-finite weights")
        ws.append(np.ascontiguousarray(w))
        bs.append(np.ascontiguousarray(b))
    for field in ("activation", "output_activation"):
        if getattr(policy, field) not in ACTIVATIONS:
            raise ConfigError(
                f"export: policy.{field} is {getattr(policy, field)!r}; expected one of {sorted(ACTIVATIONS)}"
            )
    if policy.squash not in SQUASHES:
        raise ConfigError(f"export: policy.squash is {policy.squash!r}; expected one of {SQUASHES}")
    n_obs, n_act = ws[0].shape[0], ws[-1].shape[1]
    low = _vector(policy, "action_low", policy.action_low, n_act)
    high = _vector(policy, "action_high", policy.action_high, n_act)
    if (policy.obs_mean is None) != (policy.obs_std is None):
        raise ConfigError("export: policy.obs_mean and policy.obs_std must both be set or both be None")
    mean = std = None
    if policy.obs_mean is not None:
        mean = _vector(policy, "obs_mean", policy.obs_mean, n_obs)
        std = _vector(policy, "obs_std", policy.obs_std, n_obs)
    return ws, bs, low, high, mean, std


def selftest_observations(policy, count=TEST_COUNT, seed=12345):
    """The observations embedded as the self-test: normal around the normalisation statistics."""
    ws, _, _, _, mean, std = check_policy(policy)
    z = np.random.default_rng(seed).normal(size=(count, ws[0].shape[0])).astype(np.float32)
    return z if mean is None else (mean + std * z).astype(np.float32)


def _float(v):
    text = f"{float(v):.9g}"  # 9 significant digits round-trip every float32
    if not any(c in text for c in ".en"):
        text += ".0"
    return text + "f"


def _array(qualifiers, name, values, per_line=8):
    flat = [_float(v) for v in np.asarray(values, np.float32).reshape(-1)]
    rows = [", ".join(flat[i : i + per_line]) for i in range(0, len(flat), per_line)]
    dims = "".join(f"[{d}]" for d in np.shape(values))
    return f"{qualifiers}float {name}{dims} = {{\n    " + ",\n    ".join(rows) + "\n};\n"


def _nested(qualifiers, name, values):
    rows = ["{" + ", ".join(_float(v) for v in row) + "}" for row in np.asarray(values, np.float32)]
    dims = "".join(f"[{d}]" for d in np.shape(values))
    return f"{qualifiers}float {name}{dims} = {{\n    " + ",\n    ".join(rows) + "\n};\n"


def c_source(policy, name="policy", extra=("", "")):
    """``(header_text, source_text)`` of ``policy`` as C99; ``name`` prefixes every symbol.
    ``extra`` is C text to add: (declarations for the header, definitions appended to the
    source), e.g. an env's entry point (:meth:`~dispatchrl.envs.NativeEnv.exported_policy_c`)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        raise ConfigError(f"export: name {name!r} is not a C identifier")
    ws, bs, low, high, mean, std = check_policy(policy)
    sizes = [ws[0].shape[0]] + [w.shape[1] for w in ws]
    n_obs, n_out, upper = sizes[0], sizes[-1], name.upper()
    discrete = policy.squash == "argmax"  # one action: the index of the largest output, as a float
    n_act = 1 if discrete else n_out
    obs = selftest_observations(policy)
    actions = np.asarray(policy(obs), np.float32).reshape(len(obs), n_act)
    description = (
        f"{'-'.join(map(str, sizes))} {policy.activation} MLP policy, "
        f"{policy.output_activation} output, {policy.squash} squash"
        + (", normalised observations" if mean is not None else "")
    )

    header = f"""\
/* generated by dispatchrl.export: {description}; do not edit */
#ifndef {upper}_H
#define {upper}_H

#define {upper}_OBSERVATION_DIM {n_obs}
#define {upper}_ACTION_DIM {n_act}{
        f'''
#define {upper}_ACTION_COUNT {n_out} /* action[0] is an index in [0, {upper}_ACTION_COUNT) */'''
        if discrete
        else ""
    }
#define {upper}_TEST_COUNT {len(obs)}

#ifdef __cplusplus
extern "C" {{
#endif

/* action[{upper}_ACTION_DIM] = policy(obs[{upper}_OBSERVATION_DIM]); no heap, reentrant */
void {name}_forward(const float *obs, float *action);

/* replays the embedded test vectors: the number of action elements further than
   {SELFTEST_TOLERANCE:g} * (1 + |expected|) from the Python policy's (0 = pass) */
int {name}_selftest(void);

extern const float {name}_test_observations[{upper}_TEST_COUNT][{upper}_OBSERVATION_DIM];
extern const float {name}_test_actions[{upper}_TEST_COUNT][{upper}_ACTION_DIM];
{extra[0]}
#ifdef __cplusplus
}}
#endif

#endif
"""

    # Each layer is the C device's dense_forward block at batch 1; buffers live on the stack.
    names = {}
    data = [_array("static const ", f"{name}_action_low", low), _array("static const ", f"{name}_action_high", high)]
    if mean is not None:
        data += [_array("static const ", f"{name}_obs_mean", mean), _array("static const ", f"{name}_obs_std", std)]
    functions, calls, buffers = [], [], []
    x = np.empty((1, n_obs), np.float32)
    names[id(x)] = f"{name}_x" if mean is not None else "obs"
    for i, (w, b) in enumerate(zip(ws, bs)):
        pre, out = np.empty((1, w.shape[1]), np.float32), np.empty((1, w.shape[1]), np.float32)
        names.update(
            {id(w): f"{name}_weight{i}", id(b): f"{name}_bias{i}", id(pre): f"{name}_pre{i}", id(out): f"{name}_out{i}"}
        )
        buffers.append(f"    float {name}_pre{i}[{w.shape[1]}], {name}_out{i}[{w.shape[1]}];")
        data += [
            _array("static const ", f"{name}_weight{i}", w.reshape(-1)),
            _array("static const ", f"{name}_bias{i}", b),
        ]
        act = policy.output_activation if i == len(ws) - 1 else policy.activation
        kernel = dense_forward_kernel(1, w.shape[0], w.shape[1], act, np.float32)
        functions.append(render_function(kernel, (x, w, b, pre, out), f"{name}_layer{i}"))
        calls.append("    " + render_invocation(f"{name}_layer{i}", (x, w, b, pre, out), lambda a: names[id(a)]))
        x = out
    y = names[id(x)]
    if mean is not None:
        normalise = [
            f"    float {name}_x[{n_obs}];",
            f"    for (int i = 0; i < {n_obs}; i++) {name}_x[i] = (obs[i] - {name}_obs_mean[i]) / {name}_obs_std[i];",
        ]
    else:
        normalise = []
    if discrete:  # the first largest output, as numpy's argmax
        squash = f"if ({y}[i] > {y}[best]) best = i;"
    elif policy.squash == "tanh":  # same operation order as nn.Policy
        squash = (
            f"action[i] = {name}_action_low[i] + ({y}[i] + 1.0f) * 0.5f * "
            f"({name}_action_high[i] - {name}_action_low[i]);"
        )
    else:
        squash = (
            f"action[i] = {y}[i] < {name}_action_low[i] ? {name}_action_low[i] : "
            f"({y}[i] > {name}_action_high[i] ? {name}_action_high[i] : {y}[i]);"
        )
    body = "\n".join(functions)
    used = [f for f in LIBM_FLOAT if re.search(rf"\b{f}\(", body)]
    declarations = "".join(f"float {f}(float);\n" for f in used)

    source = "\n".join(
        [
            f"/* generated by dispatchrl.export: {description}; do not edit.",
            "   C99; no heap allocation; nothing beyond libm. */",
            f'#include "{name}.h"',
            *(
                [
                    "#if defined(__STDC_HOSTED__) && __STDC_HOSTED__ == 0",
                    "/* freestanding (microcontroller) builds: libm provides these */",
                    declarations.rstrip("\n"),
                    "#else",
                    "#include <math.h>",
                    "#endif",
                ]
                if used
                else []
            ),
            "",
            *data,
            _nested("const ", f"{name}_test_observations", obs),
            _nested("const ", f"{name}_test_actions", actions),
            body,
            f"void {name}_forward(const float *obs, float *action)",
            "{",
            *normalise,
            *buffers,
            *calls,
            *(
                ["    int best = 0;", f"    for (int i = 1; i < {n_out}; i++) {squash}", "    action[0] = (float)best;"]
                if discrete
                else [f"    for (int i = 0; i < {n_act}; i++) {squash}"]
            ),
            "}",
            "",
            f"int {name}_selftest(void)",
            "{",
            "    int failures = 0;",
            f"    for (int k = 0; k < {upper}_TEST_COUNT; k++) {{",
            f"        float action[{upper}_ACTION_DIM];",
            f"        {name}_forward({name}_test_observations[k], action);",
            f"        for (int i = 0; i < {upper}_ACTION_DIM; i++) {{",
            f"            const float expected = {name}_test_actions[k][i];",
            "            const float error = action[i] > expected ? action[i] - expected : expected - action[i];",
            "            const float size = expected > 0 ? expected : -expected;",
            f"            if (!(error <= {_float(SELFTEST_TOLERANCE)} * (1.0f + size))) failures++;",
            "        }",
            "    }",
            "    return failures;",
            "}",
            *(["", extra[1].strip("\n")] if extra[1] else []),
            "",
        ]
    )
    return header, source


def main_source(policy_name="policy"):
    """A command-line runner for Linux targets: runs the self-test, then prints one line of
    actions per observation given as arguments (the embedded test observations if none)."""
    upper = policy_name.upper()
    return f"""\
/* generated by dispatchrl.export: command-line runner for {policy_name}.c; do not edit */
#include <stdio.h>
#include <stdlib.h>
#include "{policy_name}.h"

static void print_action(const float *obs)
{{
    float action[{upper}_ACTION_DIM];
    {policy_name}_forward(obs, action);
    for (int i = 0; i < {upper}_ACTION_DIM; i++) printf(i ? " %.9g" : "%.9g", action[i]);
    printf("\\n");
}}

int main(int argc, char **argv)
{{
    const int failures = {policy_name}_selftest();
    fprintf(stderr, "{policy_name}_selftest: %s (%d mismatches)\\n", failures ? "FAILED" : "passed", failures);
    if (failures) return 1;
    if ((argc - 1) % {upper}_OBSERVATION_DIM != 0) {{
        fprintf(stderr, "usage: %s [obs_0 ... obs_%d]...\\n", argv[0], {upper}_OBSERVATION_DIM - 1);
        return 2;
    }}
    if (argc == 1)
        for (int k = 0; k < {upper}_TEST_COUNT; k++) print_action({policy_name}_test_observations[k]);
    for (int k = 1; k < argc; k += {upper}_OBSERVATION_DIM) {{
        float obs[{upper}_OBSERVATION_DIM];
        for (int i = 0; i < {upper}_OBSERVATION_DIM; i++) obs[i] = strtof(argv[k + i], NULL);
        print_action(obs);
    }}
    return 0;
}}
"""
