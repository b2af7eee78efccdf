"""The package's import graph has no cycles, and numba.cuda stays unimported until a CUDA device
is made (the one string-named import: dispatchrl.devices.CUDA.method_modules)."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dispatchrl"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module → the dispatchrl modules it imports, at any depth (lazy imports inside functions
    count: they are cycles deferred, not removed). A package's own parents, which Python imports
    implicitly, are not edges."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in files and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return stack[stack.index(target) :] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_graph_sees_relative_and_absolute_imports():
    graph = import_graph()
    assert "dispatchrl.staging" in graph["dispatchrl.backends.cpu"]  # from ..staging import
    assert "dispatchrl.kernels.core.api" in graph["dispatchrl.kernels.core.cpu"]  # from . import api
    assert "dispatchrl.backends.c.compiler" in graph["dispatchrl.backends.c.render"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


#: the layers of docs/DESIGN.md's layout, bottom first: a module may import its own layer and the
#: ones before it ("" is the package's __init__, the public namespace)
LAYERS = [
    "errors",
    "functions",
    "files",
    "spaces",
    "devices",
    "memory",
    "arrays",
    "activation",
    "checks",
    "dispatch",
    "staging",
    "cache",
    "backends",
    "kernels",
    "data",
    "nn",
    "envs",
    "checkpoint",
    "loggers",
    "algorithms",
    "training",
    "plot",
    "video",
    "export",
    "sweep",
    "facade",
    "",
    "cli_config",
    "cli",
    "__main__",
]


#: the old paths of the modules issue 32 moved from algorithms/ up to training/: for one release each
#: old module is an alias that imports only its new home (and warns), and the algorithms package
#: finds the moved names there on first use (its __getattr__, with a DeprecationWarning)
MOVED_TO_TRAINING = ("callbacks", "driver", "envspec", "evaluation", "progress", "runs", "trust")
DEPRECATED_ALIASES = {
    **{f"dispatchrl.algorithms.{m}": {f"dispatchrl.training.{m}"} for m in MOVED_TO_TRAINING},
    "dispatchrl.algorithms": {f"dispatchrl.training.{m}" for m in ("callbacks", "driver", "evaluation", "runs")},
}


def layer_of(module: str) -> int:
    parts = module.split(".")
    return LAYERS.index(parts[1] if len(parts) > 1 else "")


def test_every_module_has_a_layer_and_imports_only_layers_before_it():
    graph = import_graph()
    unlisted = {m for m in graph if (m.split(".") + [""])[1] not in LAYERS}
    assert not unlisted, f"add these to LAYERS (and to docs/DESIGN.md's layout): {sorted(unlisted)}"
    upward = sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets if layer_of(t) > layer_of(m))
    upward = [edge for edge in upward if edge.split(" -> ")[1] not in DEPRECATED_ALIASES.get(edge.split(" -> ")[0], ())]
    assert not upward, "imports of a later layer: " + ", ".join(upward)
    assert layer_of("dispatchrl.kernels.core.cpu") > layer_of("dispatchrl.backends.cpu")
    assert layer_of("dispatchrl.algorithms.td3") < layer_of("dispatchrl.training.driver")


def test_algorithms_import_nothing_of_training_but_their_deprecated_aliases():
    """The driver runs an algorithm through its protocol: td3, sac, ppo, offpolicy, config,
    protocol, registry, memory and divergence import nothing above nn/data/envs/kernels."""
    graph = import_graph()
    algorithm_modules = [m for m in graph if m.startswith("dispatchrl.algorithms")]
    assert {"dispatchrl.algorithms.td3", "dispatchrl.algorithms.protocol"} <= set(algorithm_modules)
    above = {
        m: sorted(t for t in graph[m] if layer_of(t) >= layer_of("dispatchrl.training")) for m in algorithm_modules
    }
    above = {m: targets for m, targets in above.items() if set(targets) - DEPRECATED_ALIASES.get(m, set())}
    assert not above, f"algorithms importing training or above: {above}"
    # the aliases are only aliases: nothing but the warning and the re-import of the new home
    for module in MOVED_TO_TRAINING:
        path = PACKAGE / "algorithms" / f"{module}.py"
        assert len(path.read_text().splitlines()) < 20, path


def test_algorithms_import_no_numba_cuda_or_ctypes():
    """Algorithm files stay device-free: they call generic functions, never a backend's tools."""
    found = []
    for path in (PACKAGE / "algorithms").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("numba", "ctypes", "cupy")]
            if isinstance(node, ast.ImportFrom) and node.level and "backends" in (node.module or ""):
                found.append(f"{path.name}: {node.module}")
    assert not found, found


STAGING_DISPATCH = ("compile_step.dispatch", "compiling_steps.dispatch")


def test_backends_define_no_generic_function_methods():
    """Backends are runtimes: methods of generic functions live in kernels/ and envs/ (only the
    staging functions compile_step and compiling_steps have methods there)."""
    for path in (PACKAGE / "backends").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    text = ast.unparse(decorator)
                    assert not text.endswith(".dispatch") or text in STAGING_DISPATCH, (path, node.name)


def test_numba_cuda_is_imported_only_for_a_cuda_device():
    script = (
        "import sys, dispatchrl as drl\n"
        "assert not [m for m in sys.modules if m.startswith(('numba.cuda', 'dispatchrl.backends.cuda'))]\n"
        "assert all(m in sys.modules for m in ('dispatchrl.backends.cpu', 'dispatchrl.backends.c'))\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=PACKAGE.parent)


def test_every_cuda_module_registers_with_the_cuda_device():
    """Every cuda.py is imported when a CUDA device is made: named in CUDA.method_modules or
    imported by one named there (each env's through dispatchrl.envs.cuda and the env registry)."""
    from dispatchrl.devices import CUDA

    graph = import_graph()
    assert set(CUDA.method_modules) <= set(graph), "CUDA.method_modules names a module that does not exist"
    reached, pending = set(), list(CUDA.method_modules)
    while pending:
        module = pending.pop()
        if module not in reached:
            reached.add(module)
            pending += graph[module]
    cuda_modules = {module_name(p) for p in PACKAGE.rglob("cuda.py")}
    assert cuda_modules <= reached, f"never imported for a CUDA device: {sorted(cuda_modules - reached)}"
    assert CUDA.method_modules[0] == "dispatchrl.backends.cuda"  # the runtime before the methods


@pytest.mark.parametrize("module", MOVED_TO_TRAINING)
def test_an_old_algorithms_module_path_warns_and_is_the_training_module(module):
    old, new = f"dispatchrl.algorithms.{module}", importlib.import_module(f"dispatchrl.training.{module}")
    sys.modules.pop(old, None)  # a first import runs the alias (an earlier one left the new module there)
    with pytest.warns(DeprecationWarning, match=rf"dispatchrl\.algorithms\.{module} moved to dispatchrl\.training"):
        alias = importlib.import_module(old)
    assert alias is new


@pytest.mark.parametrize("name", ["EVAL_SEEDS", "EvalCallback", "StopOnReward", "TrainResult", "evaluate", "load_run"])
def test_a_moved_name_of_the_algorithms_package_warns_and_is_the_training_one(name):
    import dispatchrl as drl

    with pytest.warns(DeprecationWarning, match=rf"dispatchrl\.algorithms\.{name} moved to dispatchrl\.training"):
        found = getattr(drl.algorithms, name)
    assert found is getattr(drl.training, name)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        drl.algorithms.no_such_name  # noqa: B018


def test_every_algorithm_module_has_its_train_bound_to_the_driver():
    import dispatchrl as drl

    for algo in drl.algorithms.ALGORITHMS.values():
        assert "train" not in algo.__dict__.get("__all__", ())  # bound from training/, not written there
        assert algo.train.__qualname__ == f"{algo.NAME.upper()}.train"
