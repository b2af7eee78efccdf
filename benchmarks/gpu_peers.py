"""The peers of ``cpu_vs_gpu.py``: its demo step and dense layer in JAX and in PyTorch.

Imports neither dispatchrl nor the other peer, so ``cpu_vs_gpu.py`` runs each peer in its own
subprocess and a peer that fails to import (or crashes) costs only its own rows. Prints one JSON
line per row, in the keys of ``cpu_vs_gpu.py``:

* ``demo_step``: MLP 4-64-64-1 (relu), batch 100, MSE + Adam (lr 1e-3, the betas and eps of
  ``dispatchrl.nn.adam_update``), float32, from the initial weights and data in ``--weights`` (the
  arrays W0, b0, W1, b1, W2, b2, x, y that ``cpu_vs_gpu.py`` writes from dispatchrl's own net), so
  ``final_loss`` after ``--steps`` steps can be compared with dispatchrl's. JAX: one ``jax.jit``
  of ``lax.scan`` over the steps, Adam written out. PyTorch: an eager loop with
  ``torch.optim.Adam`` (fused where available), and on CUDA the same step captured once in a CUDA
  graph and replayed.
* ``dense_fwd_bwd``: ``pre = x W + b``, ``out = relu(pre)``, ``d_pre = d_out * (pre > 0)``,
  ``dW = xᵀ d_pre``, ``db = Σ d_pre``, ``d_x = d_pre Wᵀ`` (``cpu_vs_gpu.layer_step``), reported in
  TFLOP/s of its 3 GEMMs (6·batch·width² FLOPs). ``precision`` "fp32" is true float32 matmuls
  (what dispatchrl computes); on a GPU also "tf32" (tensor cores, 10 mantissa bits: JAX's default
  on a GPU, PyTorch's ``allow_tf32``).

    python benchmarks/gpu_peers.py --impl jax|torch --weights demo.npz [--steps 2000] [--shapes 1024x4096]
"""

import argparse
import json
import statistics
import time
import traceback

import numpy as np

LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8
LAYERS = 3  # 4-64-64-1
#: steps per timed call of the eager PyTorch loop (about 2 ms a step on an H100: 2000 would take
#: half a minute over the repeats); final_loss still comes from the full --steps
EAGER_TIMED_STEPS = 200


def emit(**record):
    print(json.dumps(record), flush=True)


def sig(value):
    """``value`` to 6 significant digits (losses near 1e-5 compare only so)."""
    return float(f"{float(value):.6g}")


def timed(call, synchronize, repeats, min_seconds=0.05):
    """Median seconds per ``call()`` over ``repeats`` timings after a warm-up, each timing
    ``k`` calls then one ``synchronize()`` with ``k`` doubled until a timing takes
    ``min_seconds`` (so launch latency is amortised as in dispatchrl's ``step(n)``)."""
    call()
    synchronize()
    k = 1
    while True:
        start = time.perf_counter()
        for _ in range(k):
            call()
        synchronize()
        if time.perf_counter() - start >= min_seconds or k >= 1 << 16:
            break
        k *= 2
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(k):
            call()
        synchronize()
        times.append((time.perf_counter() - start) / k)
    return statistics.median(times), k


def demo_record(impl, device, mode, seconds, steps, repeats, first, final):
    """A demo_step row's common keys: ``seconds`` per timed call of ``steps`` steps, the first and
    final losses."""
    return dict(
        bench="demo_step",
        impl=impl,
        device=device,
        mode=mode,
        us_per_step=round(seconds / steps * 1e6, 2),
        steps_per_call=steps,
        repeats=repeats,
        first_loss=sig(first),
        final_loss=sig(final),
    )


def dense_arrays(width, batch):
    """x, W, b, d_out drawn N(0, 1) as in ``cpu_vs_gpu.make_step`` (values matter only for the relu mask)."""
    g = np.random.default_rng(0)
    shapes = ((batch, width), (width, width), (width,), (batch, width))
    return [g.normal(size=s).astype(np.float32) for s in shapes]


def dense_record(impl, device, precision, width, batch, seconds, calls, repeats):
    flops = 3 * 2 * batch * width * width
    return dict(
        bench="dense_fwd_bwd",
        impl=impl,
        device=device,
        width=width,
        batch=batch,
        precision=precision,
        us_per_step=round(seconds * 1e6, 2),
        tflops=round(flops / seconds / 1e12, 3),
        calls_per_timing=calls,
        repeats=repeats,
    )


def run_jax(args, data, shapes):
    import jax
    import jax.numpy as jnp
    from jax import lax

    device = jax.devices()[0]
    impl = f"jax-{device.platform}"
    name = str(getattr(device, "device_kind", device))
    versions = dict(jax=jax.__version__, numpy=np.__version__)

    def matmul(a, b, precision):
        return jnp.matmul(a, b, precision=precision)

    highest = lax.Precision.HIGHEST

    def loss_fn(params, x, y):
        h = x
        for i in range(LAYERS):
            h = matmul(h, params[2 * i], highest) + params[2 * i + 1]
            if i < LAYERS - 1:
                h = jnp.maximum(h, 0)
        return jnp.mean((h - y) ** 2)

    def train(state, x, y, steps):
        def step(state, _):
            params, m, v, t = state
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            t = t + 1
            scale1 = 1 / (1 - BETA1**t)
            scale2 = 1 / (1 - BETA2**t)
            m = [BETA1 * mi + (1 - BETA1) * g for mi, g in zip(m, grads)]
            v = [BETA2 * vi + (1 - BETA2) * g * g for vi, g in zip(v, grads)]
            params = [p - LR * (mi * scale1) / (jnp.sqrt(vi * scale2) + EPS) for p, mi, vi in zip(params, m, v)]
            return (params, m, v, t), loss

        state, losses = lax.scan(step, state, None, length=steps)
        return state, losses[0], losses[-1]

    params = [jnp.asarray(data[f"{kind}{i}"]) for i in range(LAYERS) for kind in ("W", "b")]
    zeros = [jnp.zeros_like(p) for p in params]
    state0 = (params, zeros, list(zeros), jnp.zeros((), jnp.float32))
    x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"])
    run = jax.jit(train, static_argnums=3)
    start = time.perf_counter()
    _, first, loss = jax.block_until_ready(run(state0, x, y, args.steps))
    build = time.perf_counter() - start
    last = []

    def call():
        last[:] = [run(state0, x, y, args.steps)]

    seconds, _ = timed(call, lambda: jax.block_until_ready(last), args.repeats)
    emit(
        **demo_record(impl, name, "jit(lax.scan)", seconds, args.steps, args.repeats, first, loss),
        build_seconds=round(build, 3),
        **versions,
    )

    def dense(x, W, b, d_out, precision):
        pre = matmul(x, W, precision) + b
        out = jnp.maximum(pre, 0)
        d_pre = jnp.where(pre > 0, d_out, 0)
        return out, matmul(x.T, d_pre, precision), d_pre.sum(axis=0), matmul(d_pre, W.T, precision)

    precisions = [("fp32", highest)] + ([("tf32", lax.Precision.DEFAULT)] if device.platform == "gpu" else [])
    for width, batch in shapes:
        arrays = [jnp.asarray(a) for a in dense_arrays(width, batch)]
        for label, precision in precisions:
            step = jax.jit(dense, static_argnums=4)
            last = []

            def call(step=step, precision=precision, last=last):
                last[:] = [step(*arrays, precision)]

            seconds, calls = timed(call, lambda last=last: jax.block_until_ready(last), args.repeats)
            emit(**dense_record(impl, name, label, width, batch, seconds, calls, args.repeats), **versions)


def run_torch(args, data, shapes):
    import torch

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    impl = "torch-gpu" if cuda else "torch-cpu"
    name = torch.cuda.get_device_name() if cuda else "cpu"
    versions = dict(torch=torch.__version__, numpy=np.__version__)
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 matmuls, as dispatchrl's
    torch.backends.cudnn.allow_tf32 = False

    def fresh_params():
        return [
            torch.tensor(data[f"{kind}{i}"], device=device, requires_grad=True)
            for i in range(LAYERS)
            for kind in ("W", "b")
        ]

    x = torch.tensor(data["x"], device=device)
    y = torch.tensor(data["y"], device=device)

    def loss_of(params):
        h = x
        for i in range(LAYERS):
            h = torch.addmm(params[2 * i + 1], h, params[2 * i])
            if i < LAYERS - 1:
                h = torch.relu(h)
        return torch.mean((h - y) ** 2)

    def adam(params, **options):
        try:
            return torch.optim.Adam(params, lr=LR, betas=(BETA1, BETA2), eps=EPS, **options)
        except (RuntimeError, TypeError, ValueError):  # no fused Adam on this device or version
            options.pop("fused", None)
            return torch.optim.Adam(params, lr=LR, betas=(BETA1, BETA2), eps=EPS, **options)

    # eager: one Python step per training step, as a PyTorch user writes it
    params = fresh_params()
    optimizer = adam(params, fused=True)

    def eager_step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(params)
        loss.backward()
        optimizer.step()
        return loss.detach()

    start = time.perf_counter()
    first = float(eager_step())
    for _ in range(args.steps - 1):
        loss = eager_step()
    final = float(loss)
    build = time.perf_counter() - start

    timed_steps = min(args.steps, EAGER_TIMED_STEPS)

    def eager_run():
        for _ in range(timed_steps):
            eager_step()

    seconds, _ = timed(eager_run, synchronize, args.repeats)
    mode = "eager" + (" (fused Adam)" if optimizer.defaults.get("fused") else "")
    emit(
        **demo_record(impl, name, mode, seconds, timed_steps, args.repeats, first, final),
        first_run_seconds=round(build, 3),
        **versions,
    )

    if cuda:
        # the whole step (forward, backward, Adam) captured once in a CUDA graph, then replayed:
        # PyTorch's "whole network capture" recipe (torch.cuda.graphs docs)
        params = fresh_params()
        optimizer = adam(params, capturable=True)
        warmup = 3
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        warmup_losses = []
        with torch.cuda.stream(side):
            for _ in range(warmup):
                optimizer.zero_grad(set_to_none=True)
                loss = loss_of(params)
                loss.backward()
                optimizer.step()
                warmup_losses.append(loss.detach())
        torch.cuda.current_stream().wait_stream(side)
        first = float(warmup_losses[0])
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = loss_of(params)
            static_loss.backward()
            optimizer.step()
        for _ in range(args.steps - warmup):
            graph.replay()
        final = float(static_loss)

        def graph_run():
            for _ in range(args.steps):
                graph.replay()

        seconds, _ = timed(graph_run, synchronize, args.repeats)
        emit(**demo_record(impl, name, "cuda-graph", seconds, args.steps, args.repeats, first, final), **versions)

    for width, batch in shapes:
        xd, W, b, d_out = (torch.tensor(a, device=device) for a in dense_arrays(width, batch))

        def dense():
            pre = torch.addmm(b, xd, W)
            out = torch.relu(pre)
            d_pre = d_out * (pre > 0)
            return out, xd.T @ d_pre, d_pre.sum(dim=0), d_pre @ W.T

        for label in ("fp32", "tf32") if cuda else ("fp32",):
            torch.backends.cuda.matmul.allow_tf32 = label == "tf32"
            with torch.no_grad():
                seconds, calls = timed(dense, synchronize, args.repeats)
            emit(**dense_record(impl, name, label, width, batch, seconds, calls, args.repeats), **versions)
        torch.backends.cuda.matmul.allow_tf32 = False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=("jax", "torch"), required=True)
    parser.add_argument("--weights", required=True, help="npz of W0 b0 W1 b1 W2 b2 x y (cpu_vs_gpu.py writes it)")
    parser.add_argument("--steps", type=int, default=2000, help="demo steps per timed call and to final_loss (>= 4)")
    parser.add_argument("--shapes", default="1024x4096", help="dense layers as WIDTHxBATCH,...; '' for none")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    data = dict(np.load(args.weights))
    try:
        (run_jax if args.impl == "jax" else run_torch)(args, data, shapes)
    except ImportError as error:
        emit(bench="peer", impl=args.impl, skipped=f"not importable: {error!r}")
    except Exception as error:  # one peer's failure is a row, not the end of the benchmark run
        emit(bench="peer", impl=args.impl, failed=repr(error), traceback=traceback.format_exc()[-2000:])


if __name__ == "__main__":
    main()
