"""newuser26: after a vLLM upgrade under a tree with eagle3 and tools applied, preflight and run
offered `apply --set eagle3` for the eagle3 findings beside the guard's `apply`; following the
first (listed first) dropped the tools set's record. The one fix offered restores both."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

from helpers import make_patch, pip_install, run_cli_judged, run_cli_writing, write_library
from launch_fixtures import (
    DEEPSEEK_V3,
    DRAFTER,
    PARSER,
    declare,
    serve,
    stock_files,
    write_eagle3_setup,
    write_model,
)

from patchkit.engine import inspection
from patchkit.store.state import read_state

PARSER_STOCK = "def parse(text):\n    return text\n"


def _upgraded(tmp_path: Path) -> tuple[Path, tuple[str, ...], list[str]]:
    """(tree, selection, launch): eagle3 and tools applied to 0.16.0, then vLLM 0.17.0 installed over it."""
    tree, lib = write_eagle3_setup(tmp_path)
    (tree / PARSER).parent.mkdir(parents=True, exist_ok=True)
    (tree / PARSER).write_text(PARSER_STOCK)
    patch = make_patch(tmp_path, tree, {PARSER: "def parse(text):\n    return text.strip()\n"})
    write_library(lib, {"0.16.0": [patch]}, name="tools", upstream=None, versions={"0.16.0": ">=0.16.0"})
    declare(lib / "eagle3", 'speculative_methods = ["eagle3"]')
    declare(lib / "tools", 'tool_call_parsers = ["demo"]')
    (lib / "library.toml").write_text('order = ["eagle3", "tools"]\n')
    _, newer = write_eagle3_setup(tmp_path / "newer", "0.17.0")  # eagle3's series for 0.17.0 beside 0.16.0's
    shutil.copytree(newer / "eagle3" / "0.17.0", lib / "eagle3" / "0.17.0")
    with (lib / "eagle3" / "set.toml").open("a") as manifest:
        manifest.write('\n[[releases]]\nversions = "==0.17.0"\ndir = "0.17.0"\n')
    selection = ("--target", str(tree), "--patches", str(lib))
    assert run_cli_writing("apply", *selection, "--no-import").returncode == 0
    pip_install(tree, "0.17.0", {**stock_files("0.17.0"), PARSER: PARSER_STOCK})  # the upgrade: stock files
    launch = serve(write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    return tree, selection, launch


def test_after_a_vllm_upgrade_the_one_fix_offered_applies_every_set_that_was_applied(tmp_path):
    tree, selection, launch = _upgraded(tmp_path)
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}
    for command in (("preflight", "--no-import"), ("run",)):
        done = run_cli_judged(*command, *selection, "--", *launch, env=no_vllm)
        fixes = set(re.findall(r"fix(?: \(all \d+ above\))?: run `(patchkit apply[^`]*)`", done.stdout))
        assert done.returncode == 1 and len(fixes) == 1, (command, done.stdout)
    (fix,) = fixes
    assert run_cli_judged(*shlex.split(fix)[1:], "--no-import").returncode == 0
    entries = read_state(tree).entries
    assert sorted((e.set_name, e.vllm_version) for e in entries) == [("eagle3", "0.17.0"), ("tools", "0.17.0")]


def test_the_one_fix_is_told_by_a_value_and_survives_the_guards_fix_reworded(run, tmp_path, monkeypatch):
    """launch30 item 3: preflight told the guard's restoring apply from a set's own by the fix's
    words (it ended in RECORDS_AS_IS, its command parsed back from the text): reworded, preflight
    offered both again. The finding carries which sets that apply restores."""
    _tree, selection, launch = _upgraded(tmp_path)
    # a set of the library for another release: the restoring apply names the recorded sets (--set)
    other = b"--- /dev/null\n+++ b/vllm/other.py\n@@ -0,0 +1 @@\n+OTHER = 1\n"
    write_library(Path(selection[3]), {"0.15.0": [other]}, name="other", upstream=None)
    worded = inspection.TreeStatus.guard_fix.fget
    monkeypatch.setattr(inspection.TreeStatus, "guard_fix", property(lambda self: f"to settle it, {worded(self)}."))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    done = run("preflight", "--no-import", *selection, "--", *launch)
    fixes = set(re.findall(r"fix(?: \(all \d+ above\))?: [^`]*`(patchkit apply[^`]*)`", done.output))
    assert done.exit_code == 1 and len(fixes) == 1, done.output
    (fix,) = fixes
    assert "--set eagle3 --set tools" in fix and "to settle it, run" in " ".join(done.output.split()), done.output
