"""The README and the docs site: every code block runs (or parses), every public name has a docstring, and the
site builds with ``mkdocs build --strict``.

Python blocks run page by page, in order, as one script per page (a page's blocks build on one another), all
pages in one subprocess so that the interpreter, numba and the compiled steps are loaded once. A block that
cannot run here is marked with ``<!-- no-test: REASON -->`` on the line before it; the marked blocks are listed
by ``test_no_test_blocks_say_why``. ``dispatchrl`` command lines in bash blocks are parsed by the CLI's own
argparse parser, so a renamed or removed flag fails here.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import dispatchrl as drl
from dispatchrl.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NO_TEST = re.compile(r"^<!-- no-test: (?P<reason>.+) -->$")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
# pages whose Python blocks another test runs as one script (with its own expectations)
RUN_ELSEWHERE = {"docs/guides/extending.md": "tests/test_extending.py::test_extending_page_runs"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    no_test: str | None  # the reason given by a <!-- no-test: ... --> marker


def code_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, with the no-test reason of the line before each."""
    page = path.relative_to(ROOT).as_posix()
    lines = path.read_text().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        previous = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        marker = NO_TEST.match(previous)
        end = lines.index("```", i + 1)
        blocks.append(
            Block(page, i + 1, fence["lang"], "\n".join(lines[i + 1 : end]) + "\n", marker and marker["reason"])
        )
        i = end + 1
    return blocks


BLOCKS = [block for path in DOC_FILES for block in code_blocks(path)]
PYTHON_PAGES = sorted(
    {b.page for b in BLOCKS if b.lang == "python" and b.no_test is None and b.page not in RUN_ELSEWHERE}
)


def test_the_docs_have_code_blocks():
    # a parser that found nothing would make every test below pass vacuously
    assert len(PYTHON_PAGES) >= 8 and "README.md" in PYTHON_PAGES
    assert sum(b.lang == "bash" for b in BLOCKS) >= 10
    unknown = {(b.page, b.line, b.lang) for b in BLOCKS if b.lang not in {"python", "bash", "json", "text", "mermaid"}}
    assert not unknown, unknown


def test_no_test_blocks_say_why():
    skipped = [(b.page, b.line, b.no_test) for b in BLOCKS if b.no_test is not None]
    print(f"{len(skipped)} block(s) not run:", *skipped, sep="\n  ")
    assert all(reason and len(reason) > 10 for _, _, reason in skipped)
    assert len(skipped) <= 2, skipped


# ---------------------------------------------------------------- Python blocks

DRIVER = """
import json, os, runpy, sys, time, traceback
pages, out = json.loads(sys.argv[1]), sys.argv[2]
results, top = {}, os.getcwd()
for page, script in pages.items():
    folder = os.path.join(top, page.replace("/", "_"))
    os.makedirs(folder)
    os.chdir(folder)
    start = time.perf_counter()
    try:
        runpy.run_path(script, run_name="__main__")
        results[page] = {"ok": True}
    except BaseException:
        results[page] = {"ok": False, "error": traceback.format_exc()}
    results[page]["seconds"] = time.perf_counter() - start
    os.chdir(top)
with open(out, "w") as f:
    json.dump(results, f)
"""


def page_script(page: str) -> str:
    """A page's Python blocks in order, each preceded by a comment naming its line."""
    return "\n".join(
        f"# {page}:{b.line}\n{b.text}" for b in BLOCKS if b.page == page and b.lang == "python" and b.no_test is None
    )


@pytest.fixture(scope="module")
def page_results(tmp_path_factory):
    work = tmp_path_factory.mktemp("docs_snippets")
    scripts = {}
    for page in PYTHON_PAGES:
        script = work / (page.replace("/", "_") + ".py")
        script.write_text(page_script(page))
        scripts[page] = str(script)
    out = work / "results.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("MPLBACKEND", "Agg")
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(scripts), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=str(work),
    )
    assert proc.returncode == 0 and out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    print({page: round(r["seconds"], 1) for page, r in results.items()})
    return results


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_python_blocks_run(page, page_results):
    result = page_results[page]
    assert result["ok"], f"{page}'s Python blocks failed:\n{result.get('error')}"


def test_pages_run_elsewhere_are_run_there():
    for page, test in RUN_ELSEWHERE.items():
        path, name = test.split("::")
        assert (ROOT / page).exists() and f"def {name}(" in (ROOT / path).read_text(), test


# ---------------------------------------------------------------- bash blocks


def dispatchrl_commands() -> list[tuple[str, int, str]]:
    """Every `dispatchrl ...` command of a bash block, split at `&&`, `;` and `|`, comments removed."""
    commands = []
    for b in BLOCKS:
        if b.lang != "bash":
            continue
        for offset, line in enumerate(b.text.splitlines(), start=1):
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for word in [*words, "&&"]:
                if word in {"&&", ";", "|", "||"}:
                    if command and command[0] == "dispatchrl":
                        commands.append((f"{b.page}:{b.line + offset}", line, shlex.join(command)))
                    command = []
                else:
                    command.append(word)
    return commands


COMMANDS = dispatchrl_commands()


def test_bash_blocks_hold_dispatchrl_commands():
    assert len(COMMANDS) >= 30
    assert {shlex.split(c)[1] for _, _, c in COMMANDS} >= {"train", "eval", "export", "export-trainer", "sweep", "plot"}


@pytest.mark.parametrize(("where", "line", "command"), COMMANDS, ids=[w for w, _, _ in COMMANDS])
def test_dispatchrl_command_parses(where, line, command, capsys):
    try:
        build_parser().parse_args(shlex.split(command)[1:])
    except SystemExit as exit:  # --help prints and exits 0
        assert exit.code == 0 and "--help" in command, f"{where}: {line}\n{capsys.readouterr().err}"
    except Exception as error:  # the CLI's parser raises where argparse would exit 2
        pytest.fail(f"{where}: {line}\n{error}")


def test_a_renamed_flag_fails_to_parse():
    # the check above is a real one: argparse refuses what the CLI does not have
    with pytest.raises(Exception, match="unrecognized arguments: --stepz"):
        build_parser().parse_args(["train", "td3", "--env", "pendulum", "--stepz", "10"])


def test_cheap_commands_run(tmp_path):
    # the one bash command cheap enough to run as written: the CLI's own help for every Config field
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    assert any(c == "dispatchrl train td3 --help" for _, _, c in COMMANDS)
    proc = subprocess.run(
        [sys.executable, "-m", "dispatchrl", "train", "td3", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0 and "--actor-lr" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------- docstrings

ALGORITHM_MODULES = ["dispatchrl.algorithms.td3", "dispatchrl.algorithms.sac", "dispatchrl.algorithms.ppo"]


def public_names() -> list[tuple[str, object]]:
    names = [(f"dispatchrl.{name}", getattr(drl, name)) for name in drl.__all__]
    for module_name in [
        *ALGORITHM_MODULES,
        "dispatchrl.training",
        "dispatchrl.facade",
        "dispatchrl.errors",
        "dispatchrl.data",
    ]:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismodule(value):
                names.append((f"{module_name}.{name}", value))
    return names


def test_every_public_name_has_a_docstring():
    names = public_names()
    assert len(names) > 100
    missing = [
        name
        for name, value in names
        if (inspect.isclass(value) or inspect.isfunction(value) or inspect.ismodule(value) or callable(value))
        and not (inspect.getdoc(value) or "").strip()
    ]
    assert missing == [], missing


# ---------------------------------------------------------------- generated pages

CONFIG_PAGE = ROOT / "docs" / "api" / "config.md"


def config_reference() -> str:
    """docs/api/config.md: every Config field of TD3, SAC, PPO and DQN, from the classes (as `train --help` shows them)."""
    import dataclasses
    import typing

    from dispatchrl.cli_config import field_docs, type_name

    parts = [
        "# Config fields\n",
        "Every field is a keyword of `drl.td3.Config(...)` (SAC, PPO, DQN alike), of the facade (`drl.TD3(env, **fields)`)",
        "and a flag of `dispatchrl train` (`--actor-lr 3e-4`, or `--set actor_lr=3e-4`). This page is generated from",
        "the classes; `DISPATCHRL_UPDATE_DOCS=1 python -m pytest tests/test_docs.py -k config` rewrites it.",
        "PPO's defaults are per env: `drl.ppo.config_for(env)` gives the budget each env's PPO runs use.",
    ]
    for algo in (drl.td3, drl.sac, drl.ppo, drl.dqn):
        docs, hints = field_docs(algo.Config), typing.get_type_hints(algo.Config)
        parts += [
            f"\n## `drl.{algo.NAME}.Config`\n",
            "| field | type | default | must be | meaning |",
            "|---|---|---|---|---|",
        ]
        for field in dataclasses.fields(algo.Config):
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]
            text, rule = (t.replace("|", "\\|") for t in (docs.get(field.name, ""), field.metadata["rule"].expected))
            parts.append(f"| `{field.name}` | `{type_name(hints[field.name])}` | `{default!r}` | {rule} | {text} |")
    return "\n".join(parts) + "\n"


def test_config_reference_page_is_current():
    expected = config_reference()
    if os.environ.get("DISPATCHRL_UPDATE_DOCS") == "1":
        CONFIG_PAGE.write_text(expected)
    assert CONFIG_PAGE.read_text() == expected, "docs/api/config.md is stale: rerun with DISPATCHRL_UPDATE_DOCS=1"


# ---------------------------------------------------------------- the site


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def test_site_builds_strictly(tmp_path):
    missing = [name for name in ("mkdocs", "material", "mkdocstrings_handlers.python") if not _installed(name)]
    if missing:
        pytest.skip(f'the docs extra is not installed (no {", ".join(missing)}): pip install ".[docs]"')
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["NO_MKDOCS_2_WARNING"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=str(ROOT),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "algorithms" / "index.html").exists()
