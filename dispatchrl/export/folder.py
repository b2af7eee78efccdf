"""The ``--out`` folder of an export: a new or empty folder, or one an earlier export wrote.

An export records the files it wrote in ``MANIFEST`` inside the folder. The next export into the
same folder first removes those files, so nothing of the previous export (a ``trainer.wasm``, a
``run_wasi.mjs``, a build for another target) is left beside the new sources; a non-empty folder
without a record is refused, since its files are not the export's to remove.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError

__all__ = ["MANIFEST", "claim_folder", "record_folder"]

MANIFEST = ".dispatchrl-export.json"


def claim_folder(out: str | Path, flag: str = "--out") -> set[str]:
    """Make ``out`` ready for an export: remove the files a previous export recorded there;
    ConfigError (naming some of them) if it holds files no export wrote. The writer creates a new
    folder, so an export refused later (an unsupported network) leaves none. Returns the names of
    the files kept (the user's, beside a previous export's), for :func:`record_folder`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{flag} {out}: is a file, not a folder; give a new or empty folder")
    present = {p.name for p in out.iterdir()} if out.is_dir() else set()
    if not present:
        return set()
    if MANIFEST not in present:
        shown = ", ".join(sorted(present)[:5]) + (", ..." if len(present) > 5 else "")
        raise ConfigError(
            f"{flag} {out}: the folder holds files an export did not write ({shown}); "
            "give a new or empty folder (an export's own folder is cleaned and reused)"
        )
    try:
        written = json.loads((out / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(f"{flag} {out}: its {MANIFEST} is unreadable; give a new or empty folder") from None
    for name in written:
        path = out / str(name)
        if Path(str(name)).name == str(name) and path.is_file() and not path.is_symlink():
            path.unlink()
    (out / MANIFEST).unlink()
    return {p.name for p in out.iterdir()}


def record_folder(out: str | Path, kept: set[str], later: tuple[str, ...] = ()) -> None:
    """Record every file of ``out`` but the ``kept`` ones as this export's (the next export removes
    them), and the names in ``later``: what the user builds from it (the Makefile's ``trainer``)."""
    out = Path(out)
    if not out.is_dir():
        return
    files = {p.name for p in out.iterdir() if p.is_file() and p.name not in kept and p.name != MANIFEST}
    files |= {name for name in later if name not in kept}
    (out / MANIFEST).write_text(json.dumps({"files": sorted(files)}, indent=1) + "\n")
