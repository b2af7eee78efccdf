"""The exported trainer in a web page: ``export-trainer --target web`` and ``dispatchrl web``.

The page (index.html, app.js, worker.js under ``dispatchrl/export/web_page/``) is static and plain: no
framework, no CDN, no build step. The trainer is compiled to wasm32-freestanding (no imports; the
page passes nothing in) twice: with SIMD128 and without (browsers lacking it). Both keep the
trainer's float flags, so a run gives the host trainer's checksum bit for bit. A Web Worker calls
``trainer_run`` in chunks of about 100 ms: that keeps the page responsive, lets Stop land between
chunks, and lets V8 tier the hot code up (a wasm function called once, as ``main`` calls
``trainer_run``, never leaves the baseline compiler: V8 has no on-stack replacement for wasm).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from ..backends.c.compiler import run_compiler, zig_command
from ..errors import ConfigError, DeviceError
from .trainer import trainer_source, write_trainer
from .trainer_targets import FLAGS

__all__ = [
    "ASSETS",
    "EXPORTS",
    "FRAME_SECONDS",
    "PAGE_STEPS",
    "WASM_BUILDS",
    "browser_run",
    "build_web",
    "page_env",
    "page_steps",
    "serve",
    "served_page",
    "web_folder",
]

#: the page's static files (copied next to the wasm)
ASSETS = ("index.html", "app.js", "worker.js", "multirotor.js")
#: the page's animation: 20 frames a second (worker.js's FRAME_MS); an env with a shorter time step
#: is stepped several times a frame, so the flight plays in real time
FRAME_SECONDS = 0.05
#: the page's default steps where the env's recipe does not need more
PAGE_STEPS = 10_000
#: what the wasm exports (the trainer's API, plus the glue's observation buffer)
EXPORTS = (
    "trainer_init",
    "trainer_run",
    "trainer_steps",
    "trainer_evaluate",
    "trainer_recent_return",
    "trainer_checksum",
    "trainer_eval_reset",
    "trainer_eval_step",
    "web_obs",
)
#: file -> extra clang flags: SIMD128 (every current browser) and the scalar fallback. Interleaving
#: the vectorised loops 4x (more independent vectors per iteration) took ~15% off the V8 run time;
#: it keeps every lane's operation order (the vectoriser reorders no FP reduction without leave to
#: reassociate, which only forcing a vector *width* would give), so the bits stay the host's.
WASM_BUILDS = {
    "trainer.wasm": ("-msimd128", "-mllvm", "-force-vector-interleave=4"),
    "trainer-scalar.wasm": (),
}

GLUE_C = """\
/* glue.c: a buffer the page reads observations through (the wasm has no allocator) */
#include <stdint.h>
#include "trainer.h"
static float web_obs_buffer[TRAINER_OBS_DIM];
float *web_obs(void) { return web_obs_buffer; }
"""


def _asset(name: str) -> bytes:
    return resources.files("dispatchrl.export").joinpath("web_page").joinpath(name).read_bytes()


def page_steps(algo: str, env: str) -> int:
    """The page's default steps: PAGE_STEPS (10k), or the algorithm's recipe for ``env`` where its
    warm-up alone takes that many (the multirotor's TD3: 15k warm-up steps, 300k in all): a page
    whose default run is all warm-up would show nothing learnt."""
    from ..algorithms import ALGORITHMS

    config = ALGORITHMS[algo].config_for(env)
    return int(config.total_steps) if getattr(config, "warmup_steps", 0) >= PAGE_STEPS else PAGE_STEPS


def page_env(env: str) -> dict:
    """What the page's animation needs of ``env`` beyond its name (trainer.json's ``env_page``):
    ``obs_dim`` (the observation the worker hands over), ``frame_steps`` (env steps per frame,
    so the animation runs in real time; 1 for envs without a ``dt``) and, for the multirotor,
    ``vehicle``: its rotor positions (m, body frame), the box's half-width (m), the drawing's
    enlargement and the action history's length (the last action colours the rotors)."""
    from ..envs.multirotor import Multirotor
    from ..training.envspec import resolve_env

    native = resolve_env(env, 1).native
    if native is None:
        raise ConfigError(f"the page needs a native env (pendulum, acrobot, cartpole, multirotor), got {env!r}")
    dt = getattr(native, "dt", None)
    described: dict = {
        "obs_dim": int(native.observation_dim),
        "frame_steps": max(1, round(FRAME_SECONDS / dt)) if isinstance(dt, float) and dt > 0 else 1,
    }
    if isinstance(native, Multirotor):
        from ..envs.multirotor.render import ENLARGE

        described["vehicle"] = {
            "rotor_positions": [list(r) for r in native.parameters.rotor_positions],
            "box": float(native.termination_position),
            "enlarge": ENLARGE,
            "action_history": int(native.action_history),
        }
    return described


def build_web(
    out: str | Path,
    algo: str = "td3",
    env: str = "pendulum",
    steps: int = 10_000,
    seed: int = 0,
    overrides: dict | None = None,
) -> dict:
    """Write the page for ``algo`` on ``env`` into ``out``: the trainer's C (config: the algorithm's
    default for the env with ``total_steps=steps``), its two wasm builds, the page, and
    ``trainer.json`` (the config and the page's defaults). Returns a summary."""
    if zig_command() is None:
        raise DeviceError("export-trainer: target web needs zig cc: pip install 'dispatchrl[cross]' (ziglang)")
    out = Path(out)
    trainer = trainer_source(algo, env, steps, seed, overrides)
    written = write_trainer(out, trainer)
    (out / "glue.c").write_text(GLUE_C)
    exports = [f"-Wl,--export={name}" for name in EXPORTS]
    for name, extra in WASM_BUILDS.items():
        run_compiler(
            zig_command(),
            [
                *FLAGS,
                *extra,
                "-target",
                "wasm32-freestanding",
                "-nostdlib",
                "-s",
                "-Wl,--no-entry",
                *exports,
                "-I",
                str(out),
                str(written["trainer.c"]),
                str(out / "glue.c"),
                "-o",
                str(out / name),
            ],
            f"the trainer for the web ({name})",
        )
    for name in ASSETS:
        (out / name).write_bytes(_asset(name))
    config = dataclasses.asdict(trainer.config)
    meta = {
        "algo": algo,
        "env": env,
        "steps": int(steps),
        "seed": int(seed),
        "config_name": type(trainer.config).__name__,
        "num_envs": int(trainer.config.num_envs),
        "capacity": int(trainer.config.capacity) if hasattr(trainer.config, "capacity") else None,  # PPO: none
        "config": config,
        "eval_episodes": 10,
        "state_bytes": trainer.state_bytes,
        "env_page": page_env(env),
    }
    (out / "trainer.json").write_text(json.dumps(meta, indent=1) + "\n")
    return {
        "algo": algo,
        "env": env,
        "out": str(out),
        "state_bytes": trainer.state_bytes,
        "files": sorted(p.name for p in out.iterdir()),
    }


def web_folder(algo: str, env: str, steps: int = 10_000, seed: int = 0) -> Path:
    """The page for ``algo``/``env`` in the dispatchrl cache (built once per package version)."""
    import hashlib

    from ..cache import cache_dir, package_fingerprint

    key = hashlib.sha256(package_fingerprint().encode() + b"".join(_asset(name) for name in ASSETS)).hexdigest()
    folder = cache_dir() / "web" / f"{algo}-{env}-{int(steps)}-{int(seed)}-{key[:12]}"
    if not (folder / "trainer.json").exists():
        staging = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        build_web(staging, algo, env, steps, seed)
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    return folder


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm"}

    def log_message(self, format: str, *args: object) -> None:  # quiet: the CLI prints the URL once
        pass


def serve(directory: str | Path, port: int = 8000, host: str = "127.0.0.1") -> http.server.ThreadingHTTPServer:
    """A static file server for ``directory`` on ``host:port`` (port 0: any free one), already
    serving in a daemon thread; ``shutdown()`` stops it."""
    if not 0 <= int(port) < 65536:
        raise ConfigError(f"port must be an int in [0, 65536), got {port!r}")
    handler = functools.partial(_Handler, directory=str(directory))
    server = http.server.ThreadingHTTPServer((host, int(port)), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextlib.contextmanager
def served_page(folder: str | Path, executable: str | None = None, viewport: Any = None) -> Iterator[tuple]:
    """A page of headless Chromium (playwright driving ``executable``, default the system's
    ``chromium``) beside a local server of ``folder``: yields (the page, the server's URL, the
    list of console errors and uncaught page errors so far); both are closed after."""
    from playwright.sync_api import sync_playwright

    executable = executable or shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        raise DeviceError("the browser run needs Chromium: apt-get install chromium")
    server = serve(folder, 0)
    errors: list[str] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport=viewport)  # None: playwright's default size
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                yield page, f"http://127.0.0.1:{server.server_address[1]}", errors
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()


def browser_run(
    folder: str | Path,
    steps: int,
    seed: int,
    timeout: float = 600,
    screenshot: str | Path | None = None,
    executable: str | None = None,
) -> dict:
    """Run the page in ``folder`` in headless Chromium (playwright driving ``executable``, default
    the system's ``chromium``) with ``?steps=&seed=&autostart=1``; returns ``window.trainerResult``
    plus ``console_errors`` (console errors and uncaught page errors), ``curve_pixels`` and
    ``env_pixels`` (the learning-curve and animation canvases' pixels that are not white)."""
    with served_page(folder, executable, viewport={"width": 1000, "height": 720}) as (page, url, errors):
        page.goto(f"{url}/index.html?steps={int(steps)}&seed={int(seed)}&autostart=1")
        page.wait_for_function("window.trainerResult !== undefined", timeout=timeout * 1000)
        result = dict(page.evaluate("window.trainerResult"))
        page.wait_for_timeout(3000 if screenshot is not None else 300)  # the final policy swinging up
        for canvas in ("curve", "env"):
            result[f"{canvas}_pixels"] = page.evaluate(
                """(id) => {
                    const c = document.getElementById(id);
                    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                    let n = 0;
                    for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i + 1] < 250 || d[i + 2] < 250) n++;
                    return n;
                }""",
                canvas,
            )
        if screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=True)
    result["console_errors"] = errors
    return result
