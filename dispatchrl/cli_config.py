"""Command-line flags generated from the algorithms' Config dataclasses.

Every Config field becomes ``--field-name VALUE``, listed in ``--help`` with its type, default
and one-line doc. A flag is an alias of ``--set field_name=VALUE``: it appends to the same list,
so values are parsed the same way (JSON, lists become tuples; ``64,64`` also works for tuples)
and checked by the Config's ``validate`` (a bad value is the same ConfigError). ``--config
FILE.json`` loads a JSON object of Config fields (as ``config.json`` of a ``--log-dir`` holds).

Docs come from a field's ``metadata["doc"]``, else its attribute docstring (a string right after
the field), else its trailing ``#`` comment in the class source.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import json
import textwrap
import tokenize
import typing
from pathlib import Path
from typing import Any

from .checks import check_json_text, load_json
from .errors import ConfigError

__all__ = ["add_config_flags", "field_docs", "load_config_file", "parse_value", "type_name"]


def field_docs(config_class: type) -> dict[str, str]:
    """One-line docs of a Config dataclass's fields (base classes' first, overridden by subclasses)."""
    docs: dict[str, str] = {}
    for klass in reversed(config_class.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_source_docs(klass))
    for field in dataclasses.fields(config_class):
        if field.metadata.get("doc"):
            docs[field.name] = str(field.metadata["doc"])
    return docs


def _source_docs(klass: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # no source (e.g. a class made at run time)
        return {}
    comments: dict[int, str] = {}  # line → its trailing comment (after code on the same line)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and token.line[: token.start[1]].strip():
            comments[token.start[0]] = token.string.lstrip("#").strip()
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    docs = {}
    for node, following in zip(body.body, [*body.body[1:], None]):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = following.value.value.strip().splitlines()[0]
        elif (node.end_lineno or node.lineno) in comments:
            docs[node.target.id] = comments[node.end_lineno or node.lineno]
    return docs


def type_name(annotation: Any) -> str:
    """``int``, ``float``, ``tuple[int, ...]``, ``int | None``: as written in the class."""
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _field_types(config_class: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(config_class)
    except Exception:  # unresolvable string annotations: show them as written
        return {f.name: f.type for f in dataclasses.fields(config_class)}


def parse_value(raw: str, annotation: Any = None, where: str = "--set") -> Any:
    """A flag's value: JSON (``3e-4``, ``true``, ``null``, ``[64, 64]``; lists become tuples),
    else the string itself; for a tuple field, ``64,64`` too. Text that is not UTF-8 or nests too
    deep is a ConfigError naming ``where``."""
    raw = check_json_text(raw, where)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
        if "," in raw and _is_tuple(annotation):
            try:
                value = [json.loads(part) for part in raw.split(",") if part.strip()]
            except json.JSONDecodeError:
                value = raw
    return tuple(value) if isinstance(value, list) else value


def _is_tuple(annotation: Any) -> bool:
    if isinstance(annotation, str):  # a postponed annotation, as written
        return annotation.startswith(("tuple", "Tuple"))
    return annotation is tuple or typing.get_origin(annotation) is tuple


class _SetAlias(argparse.Action):
    """``--field-name VALUE`` appends ``field_name=VALUE`` to ``--set``'s list."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        pairs = list(getattr(namespace, "set", None) or [])
        pairs.append(f"{self.metavar_field}={values}")
        namespace.set = pairs

    metavar_field = ""


def add_config_flags(parser: argparse.ArgumentParser, config: Any, skip: tuple[str, ...] = ()) -> None:
    """A ``--field-name`` flag per field of ``config`` (a Config instance: its values are the
    defaults shown), except ``skip`` (fields with a flag of their own)."""
    config_class = type(config)
    docs, types = field_docs(config_class), _field_types(config_class)
    group = parser.add_argument_group(
        f"{config_class.__module__.rsplit('.', 1)[-1].upper()} config fields",
        "each flag is an alias of --set FIELD=VALUE (JSON values; tuples also as 64,64)",
    )
    for field in dataclasses.fields(config_class):
        if field.name in skip:
            continue
        action = type(f"Set_{field.name}", (_SetAlias,), {"metavar_field": field.name})
        group.add_argument(
            f"--{field.name.replace('_', '-')}",
            action=action,
            metavar=type_name(types.get(field.name, field.type)).upper().replace(" ", ""),
            help=flag_help(field.name, docs, types.get(field.name, field.type), getattr(config, field.name)),
        )


def flag_help(name: str, docs: dict[str, str], annotation: Any, default: Any) -> str:
    doc = docs.get(name, name.replace("_", " "))
    return f"{doc} [{type_name(annotation)}, default: {default!r}]".replace("%", "%%")


def load_config_file(config: Any, path: str | Path) -> Any:
    """``config`` with the fields of JSON file ``path`` (an object of Config fields, or one with
    them under ``"config"``); lists become tuples. Unknown fields are refused, naming them."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read it ({e.strerror or e})") from None
    data = load_json(raw, f"--config {path}")
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        data = data["config"]
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a JSON object of config fields, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"--config {path}: unknown field(s) {unknown} for {type(config).__module__}.Config; "
            f"expected keys among {sorted(names)}"
        )
    return dataclasses.replace(config, **{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
