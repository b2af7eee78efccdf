"""Exported trainers as a new user builds them: the shipped Makefile builds what ``--target host``
builds (same checksum, same flags), an export cleans its own earlier output and refuses a folder it
did not write, and ``--run`` under emulation runs a short check unless ``--steps`` is given."""

import json
import shutil
import subprocess

import pytest

from dispatchrl import ConfigError
from dispatchrl.cli import main
from dispatchrl.export.folder import MANIFEST, claim_folder
from dispatchrl.export.trainer import trainer_source, write_trainer
from dispatchrl.export.trainer_targets import EMULATED_CHECK_STEPS, HOST_FLAGS, build_trainer, run_plan, run_trainer

STEPS = 200


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="needs make and cc")
def test_shipped_makefile_builds_the_host_trainer_with_its_flags_and_checksum(tmp_path):
    write_trainer(tmp_path, trainer_source("td3", "pendulum", STEPS, 0, {"hidden": (16, 16)}))
    assert (tmp_path / "Makefile").exists()
    made = subprocess.run(["make", "-C", str(tmp_path)], capture_output=True, text=True, check=True).stdout
    assert all(flag in made for flag in HOST_FLAGS), made  # -march=native: the speed of --target host
    by_make = json.loads(
        subprocess.run(
            [str(tmp_path / "trainer"), str(STEPS), "0", "1"], capture_output=True, text=True, check=True
        ).stdout
    )
    host = run_trainer(build_trainer(tmp_path, "host"), "host", steps=STEPS, seed=0)
    assert by_make["checksum"] == host["checksum"]


def test_export_cleans_its_own_folder_and_refuses_a_foreign_one(tmp_path):
    out = tmp_path / "t"
    argv = ["export-trainer", "td3", "--steps", "500", "--set", "hidden=[16, 16]", "--out", str(out)]
    assert main(argv) == 0
    (out / "trainer.wasm").write_bytes(b"\0asm")  # as a previous build for another target leaves
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"].append("trainer.wasm")
    (out / MANIFEST).write_text(json.dumps(manifest))
    (out / "notes.txt").write_text("mine")  # a file the export did not write stays
    (out / "trainer").write_bytes(b"")  # and `make`'s trainer goes
    assert main(argv) == 0
    assert not (out / "trainer.wasm").exists() and not (out / "trainer").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "trainer.c").exists() and "notes.txt" not in json.loads((out / MANIFEST).read_text())["files"]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("")
    with pytest.raises(ConfigError, match="thesis.tex"):
        claim_folder(foreign)
    assert main([*argv[:-1], str(foreign)]) == 2
    assert sorted(p.name for p in foreign.iterdir()) == ["thesis.tex"]


def test_run_under_emulation_is_a_short_check_unless_steps_are_given():
    plan = run_plan("aarch64-linux", 10_000, steps_given=False)
    assert plan.steps == EMULATED_CHECK_STEPS and "emulation" in plan.note and "--steps" in plan.note
    given = run_plan("cortex-m7", 20_000, steps_given=True)
    assert given.steps == 20_000 and given.timeout > 600 and "about" in given.note
    host = run_plan("host", 10_000, steps_given=False)
    assert host.steps == 10_000 and host.note == ""
