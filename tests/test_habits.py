"""Habits issue 12 asked for, kept by tests: every module says what it exports (``__all__``, and
each name in it exists), only plum's public API is used, no module imports another's private names
(issue 32), and package functions carry return annotations (a ratchet: the count of those without
may only go down)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dispatchrl"

#: package functions without a return annotation, outside the exemptions of `exempt` (measured;
#: lower it when you annotate more, never raise it: annotate new functions instead)
MAX_UNANNOTATED = 270


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def declared_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = node.value
            if isinstance(value, (ast.List, ast.Tuple)):
                return [e.value for e in value.elts if isinstance(e, ast.Constant)]
            return []  # computed (e.g. list(api.__all__)): present, names checked on import elsewhere
    return None


def top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):  # module level, also inside if/try blocks at module level
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            for t in node.targets:
                if isinstance(t, ast.Tuple):
                    names.update(e.id for e in t.elts if isinstance(e, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_module_declares_all_and_its_names_exist():
    missing, unknown = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__main__.py":
            continue
        tree = parsed(path)
        names = declared_all(tree)
        if names is None:
            missing.append(str(path.relative_to(ROOT)))
            continue
        defined = top_level_names(tree)
        lazy = "__getattr__" in defined  # a module __getattr__ provides some names lazily
        unknown += [f"{path.relative_to(ROOT)}:{n}" for n in names if n not in defined and not lazy]
    assert not missing, f"modules without __all__: {missing}"
    assert not unknown, f"__all__ names not defined: {unknown}"


def private_plum_uses(path: Path) -> list[str]:
    """Private names of plum: `from plum._x import`, `from plum import _x`, `plum._x`, and any
    `_name` read from a plum Function (dispatchrl keeps it as `.function` of its generic and
    network functions)."""
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "plum":
            if node.module != "plum" or any(a.name.startswith("_") for a in node.names):
                found.append(f"{path.name}:{node.lineno} from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            if owner == "plum" or owner.endswith(".function") or owner == "function":
                found.append(f"{path.name}:{node.lineno} {owner}.{node.attr}")
    return found


def test_only_plums_public_api():
    files = [p for folder in ("dispatchrl", "tests", "examples", "benchmarks") for p in (ROOT / folder).rglob("*.py")]
    found = [use for path in sorted(files) for use in private_plum_uses(path)]
    assert not found, f"private plum names: {found}"


def test_the_plum_check_sees_private_names(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import plum\nfrom plum._function import x\nfn.function._cache\nplum._resolver\n")
    assert len(private_plum_uses(sample)) == 3


def private_imports(path: Path) -> list[str]:
    """Private names one dispatchrl module takes from another: ``from .x import _y``, ``from
    dispatchrl.x import _y`` and ``x._y`` where ``x`` was imported from dispatchrl. A name shared
    across modules is public (or lives with its users)."""
    found, modules, where = [], set(), f"{path.parent.name}/{path.name}"
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "dispatchrl"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(
                        f"{where}:{node.lineno} from {'.' * node.level}{node.module or ''} import {alias.name}"
                    )
                modules.add(alias.asname or alias.name)  # it may be a module: its private names count too
        elif isinstance(node, ast.Import):
            modules.update(
                alias.asname or alias.name for alias in node.names if alias.name.split(".")[0] == "dispatchrl"
            )
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if ast.unparse(node.value) in modules:
                found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_module_imports_another_modules_private_names():
    found = [use for path in sorted(PACKAGE.rglob("*.py")) for use in private_imports(path)]
    assert not found, f"private names of other modules (make them public where they are shared): {found}"


def test_the_private_import_check_sees_every_form(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import dispatchrl.cache\nfrom . import api\nfrom .api import _x, y\nfrom dispatchrl.files import _z\n"
        "from numpy import _private\napi._check\napi.public\ndispatchrl.cache._hidden\n"
    )
    assert len(private_imports(sample)) == 4


def exempt(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Functions a return annotation would not serve: Numba/CUDA kernels and their overloads (Numba
    types them itself), plum methods (plum would convert every result to the annotated type on each
    call) and ``__init__``."""
    for decorator in node.decorator_list:
        text = ast.unparse(decorator)
        if any(word in text for word in ("jit", "overload", "intrinsic", "block_form")) or text.endswith("dispatch"):
            return True
    return node.name == "__init__"


def unannotated() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is None and not exempt(node):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return found


def test_return_annotations_only_increase():
    found = unannotated()
    assert len(found) <= MAX_UNANNOTATED, (
        f"{len(found)} package functions lack a return annotation (at most {MAX_UNANNOTATED}); annotate the new "
        "ones: " + ", ".join(found[-20:])
    )


def _wrapperless(tree: ast.Module) -> set[str]:
    """The functions a module compiles without a CPython wrapper (``@njit(**JIT_*_INNER)``)."""
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any("_INNER" in ast.unparse(d) and ast.unparse(d).startswith("njit") for d in node.decorator_list)
    }


def _module_of(path: Path, node: ast.ImportFrom) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    base = parts[: len(parts) - node.level] if node.level else []
    return ".".join(base + ([node.module] if node.module else []))


def wrapperless_calls_from_python(package: Path) -> list[str]:
    """``file:line name`` for each call from the Python layers (all but the kernel modules of
    kernels/, envs/ and backends/, whose helpers are jitted in other ways too: cfunc drivers,
    overload implementations) of a function compiled without a CPython wrapper, and each
    ``.compile``/``_entry_point`` on one anywhere: Python cannot call those (a TypeError, or a
    segfault through the compiled entry point)."""
    trees = {path: ast.parse(path.read_text()) for path in package.rglob("*.py")}
    inner = {".".join(path.relative_to(ROOT).with_suffix("").parts): _wrapperless(t) for path, t in trees.items()}
    found = []
    for path, tree in trees.items():
        names = set(inner[".".join(path.relative_to(ROOT).with_suffix("").parts)])
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = inner.get(_module_of(path, node), set())
                names |= {a.asname or a.name for a in node.names if a.name in source}
        jitted = {
            id(n)
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in n.decorator_list)
        }
        parts = path.relative_to(package).parts
        python_layer = parts[0] not in ("kernels", "envs", "backends") or path.name in ("generic.py", "host.py")
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef) or id(function) in jitted:
                continue
            for call in ast.walk(function):
                if not isinstance(call, ast.Call):
                    continue
                callee = call.func.id if isinstance(call.func, ast.Name) else None
                passed = [n.id for a in call.args for n in ast.walk(a) if isinstance(n, ast.Name)]
                entry = callee == "_entry_point" or (
                    isinstance(call.func, ast.Attribute) and call.func.attr == "compile"
                )
                called = [callee] if python_layer and callee in names else []
                for name in called + ([a for a in passed if a in names] if entry else []):
                    found.append(f"{path.relative_to(ROOT)}:{call.lineno} {name}")
    return sorted(set(found))


def test_wrapperless_helpers_are_only_called_from_jitted_code():
    assert wrapperless_calls_from_python(PACKAGE) == []


def test_the_wrapperless_check_sees_calls_and_entry_points(tmp_path):
    package = tmp_path / "dispatchrl"
    (package / "kernels").mkdir(parents=True)
    (package / "kernels" / "cpu.py").write_text(
        "@njit(**JIT_EXACT_INNER)\ndef body(i, x):\n    x[i] = 0\n\n\n"
        "@njit(**JIT_EXACT)\ndef kernel(x):\n    for i in range(3):\n        body(i, x)\n"
    )
    (package / "user.py").write_text(
        "from .kernels.cpu import body\n\n\ndef host(x):\n    body(0, x)\n    return _entry_point(body, x)\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert wrapperless_calls_from_python(package) == ["dispatchrl/user.py:5 body", "dispatchrl/user.py:6 body"]
    finally:
        ROOT = saved
