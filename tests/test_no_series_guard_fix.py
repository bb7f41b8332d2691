"""After vLLM is upgraded in place to a version some applied sets have no series for, the launch
guard's fix (status's `guard` line, apply's warning) is commands apply accepts: `apply --set` the
sets with a series (a stale record is dropped by it), after `revert` where the records are not
stale (only METADATA changed), and never `apply` of a set with no series. Following the fix
leaves a tree the guard lets launch; the fix never names the command that was just run.

Real vLLM 0.16.0 stock files (fetched), relabelled 0.16.1 (eagle3 and kimi-k2-tool-calls have no
series of it)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from helpers import lay_out_release, run_cli_judged, run_cli_writing
from launch_fixtures import REGISTRY

from patchkit.releases.files import files_for

pytestmark = pytest.mark.release

STOCK, UPGRADE = "0.16.0", "0.16.1"
TOOL_PARSERS = "vllm/tool_parsers/__init__.py"
GAP_SETS = ("eagle3", "kimi-k2-tool-calls")


def upgraded(tmp_path: Path, how: str) -> Path:
    """0.16.0 with every set applied, then `how`: `pip` (vllm/ and the dist-info replaced by the
    new release's: the records are stale), `metadata` (the Version alone edited: the files hold
    the patches)."""
    site = tmp_path / "site"
    lay_out_release(STOCK, sorted({*files_for(STOCK), REGISTRY, TOOL_PARSERS}), site)
    assert run_cli_writing("apply", "--target", site).returncode == 0
    if how == "pip":
        record = json.loads((site / ".patchkit" / "state.json").read_text())
        recorded = {path for entry in record["entries"] for path in entry["files"]}
        shutil.rmtree(site / "vllm")
        lay_out_release(STOCK, sorted({*files_for(STOCK), REGISTRY, TOOL_PARSERS, *recorded}), site)
    metadata = site / f"vllm-{STOCK}.dist-info" / "METADATA"
    metadata.write_text(metadata.read_text().replace(f"Version: {STOCK}\n", f"Version: {UPGRADE}\n", 1))
    if how == "pip":
        metadata.parent.rename(site / f"vllm-{UPGRADE}.dist-info")
    return site


def guard_fix(done) -> str:
    document = json.loads(done.stdout)
    fixes = [part["guard"]["fix"] for part in document.get("sets", [document]) if part.get("guard", {}).get("fix")]
    assert fixes, done.stdout
    return fixes[0]


def commands(fix: str) -> list[list[str]]:
    """The patchkit commands a fix names, in order."""
    return [shlex.split(said)[1:] for said in re.findall(r"`(patchkit [^`]*)`", fix)]


@pytest.mark.parametrize("how", ["pip", "metadata"])
def test_the_guards_fix_after_an_upgrade_into_a_gap_is_accepted_and_clears_the_refusal(tmp_path, how):
    site = upgraded(tmp_path, how)
    done = run_cli_judged("status", "--target", site, "--format", "json")
    assert done.returncode == 1, done.stdout + done.stderr
    fix = guard_fix(done)
    for name in GAP_SETS:
        assert not any("apply" in c and name in c for c in commands(fix)), fix  # apply refuses a set with no series
    if how == "pip":  # apply drops the stale records of the sets it leaves out
        assert [c[0] for c in commands(fix)] == ["apply"] and "deepseek-tool-calls" in commands(fix)[0], fix
    for command in commands(fix):
        ran = run_cli_judged(*command)
        assert ran.returncode == 0, f"{fix}\n{command}: {ran.stdout}{ran.stderr}"
    done = run_cli_judged("status", "--target", site)
    assert done.returncode == 0, fix + "\n" + done.stdout + done.stderr
    assert "launch guard refuses" not in done.stdout + done.stderr


def test_after_only_metadata_changed_apply_of_the_others_names_revert_not_itself(tmp_path):
    site = upgraded(tmp_path, "metadata")
    done = run_cli_writing("apply", "--target", site, "--set", "deepseek-tool-calls")
    said = " ".join((done.stdout + done.stderr).split())
    assert "still refuses" in said, said
    fix = said[said.index("to fix it") :]
    assert [c[0] for c in commands(fix)] == ["revert", "apply"], fix


@pytest.mark.parametrize("how", ["pip", "metadata"])
def test_the_fix_of_a_guard_gone_after_an_upgrade_into_a_gap_is_accepted(tmp_path, how):
    """The guard uninstalled too: its fix (put it back by apply) never names an apply that refuses."""
    site = upgraded(tmp_path, how)
    for installed in site.glob("patchkit_guard*"):
        shutil.rmtree(installed) if installed.is_dir() else installed.unlink()
    done = run_cli_judged("status", "--target", site, "--format", "json")
    document = json.loads(done.stdout)
    [fix] = [p["guard"]["missing_fix"] for p in document.get("sets", [document]) if p.get("guard", {}).get("missing")][
        :1
    ]
    for command in commands(fix):
        assert not (command[0] == "apply" and any(name in command for name in GAP_SETS)), fix
        assert command[0] != "apply" or "--set" in command, fix  # apply alone applies every set: refused
        ran = run_cli_judged(*command)
        assert ran.returncode == 0, f"{fix}\n{command}: {ran.stdout}{ran.stderr}"
    done = run_cli_judged("status", "--target", site)
    assert done.returncode == 0, fix + "\n" + done.stdout + done.stderr
