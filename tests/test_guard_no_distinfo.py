"""An applied tree whose vllm-*.dist-info is gone (a slimmed image, a dist-info lost): the guard cannot
tell which vLLM runs and refuses every launch. Its words say so (never "vLLM None is installed"), and
status, preflight and apply agree with it: the fix they name, run, gives a tree the guard lets launch
and status calls fine; apply, which installs no guard on such a tree, removes the one it refuses with."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

import pytest
from helpers import load_plugins_like_vllm, run_cli_judged, run_cli_read_only, run_cli_writing
from launch_fixtures import DEEPSEEK_V3, DRAFTER, findings, serve, write_eagle3_setup, write_model


@pytest.fixture
def bare(tmp_path):
    """(tree, library): eagle3 applied with the guard, then the tree's vllm-*.dist-info removed (its
    version still told by vllm/_version.py, as a built vLLM holds it)."""
    tree, library = write_eagle3_setup(tmp_path)
    (tree / "vllm" / "_version.py").write_text("__version__ = version = '0.16.0'\n")
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    shutil.rmtree(tree / "vllm-0.16.0.dist-info")
    return tree, library


def _fix(said: str) -> list[str]:
    command = re.search(r"run `(patchkit [^`]*)`", " ".join(said.split()))
    assert command is not None, said
    return shlex.split(command.group(1))[1:]


def test_the_guards_refusal_says_no_dist_info_and_the_named_fix_ends_the_refusal(bare, tmp_path):
    tree, library = bare
    refused = load_plugins_like_vllm(tree)
    assert refused.returncode != 0 and "vLLM None" not in refused.stderr, refused.stderr[-600:]
    assert "no vllm-*.dist-info" in refused.stderr, refused.stderr[-600:]
    status = run_cli_read_only("status", "--target", tree, "--patches", library)
    assert status.returncode == 1 and "vLLM None" not in status.stdout, status.stdout
    assert "no vllm-*.dist-info" in status.stdout, status.stdout
    command = serve(write_model(tmp_path / "ds", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    pre = ("preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--", *command)
    found = findings(run_cli_judged(*pre))["tree-state"]
    assert not found["ok"] and "vLLM None" not in found["message"], found
    fix = _fix(status.stdout)
    assert fix[0] == "apply" and _fix(found["fix"]) == fix, (status.stdout, found)
    applied = run_cli_judged(*fix, "--no-import")
    said = " ".join((applied.stdout + applied.stderr).split())
    assert applied.returncode == 0 and "still refuses" not in said, said
    assert "launch guard removed" in said and "no vllm-*.dist-info" in said, said
    assert load_plugins_like_vllm(tree).returncode == 0
    assert run_cli_read_only("status", "--target", tree, "--patches", library).returncode == 0
    assert findings(run_cli_judged(*pre))["tree-state"]["ok"]


def test_a_dist_info_without_a_version_is_said_as_such(bare):
    tree, _ = bare
    info = tree / "vllm-0.16.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\n")
    code = f"import patchkit_guard; print(patchkit_guard.find_problems({str(tree)!r}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=True)
    assert "vLLM None" not in done.stdout and "vllm-0.16.0.dist-info names no version" in done.stdout, done.stdout


def _metadata_with_version(tmp_path, version: str):
    """(tree, library): a demo set for 0.16.0 and a tree whose METADATA says `Version: {version}` (its
    files' release told by vllm/_version.py, as a built vLLM holds it)."""
    from helpers import SPEC, make_patch, patched_spec, write_library, write_tree

    clean = write_tree(tmp_path / "clean")
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, clean, {SPEC: patched_spec()})]})
    tree = write_tree(tmp_path / "site", files={SPEC: (clean / SPEC).read_bytes()})
    (tree / "vllm" / "_version.py").write_text("__version__ = version = '0.16.0'\n")
    (tree / "vllm-0.16.0.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return tree, library


def test_an_empty_metadata_version_is_named_with_the_fix_that_installs_the_guard(tmp_path):
    """`Version: ` (empty) in the one vllm-*.dist-info: apply warned "no one vLLM version (none, or
    several vllm-*.dist-info)" with no fix. It names the empty Version and the commands that end it."""
    tree, library = _metadata_with_version(tmp_path, "")
    done = run_cli_writing("apply", "--target", tree, "--patches", library)
    assert done.returncode == 0, done.stderr
    warning = " ".join(done.stderr.split())
    assert "vllm-0.16.0.dist-info/METADATA's Version is empty" in warning and "several" not in warning, warning
    assert "vllm==0.16.0" in warning and "`patchkit apply --target" in warning, warning
    assert not (tree / "patchkit_guard.py").exists()
    # what the named pip command does (the dist-info and stock files written again), then the named apply
    (tree / "vllm-0.16.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n")
    shutil.copy(tmp_path / "clean" / "vllm" / "config" / "spec.py", tree / "vllm" / "config" / "spec.py")
    again = run_cli_writing("apply", "--target", tree, "--patches", library)
    assert again.returncode == 0 and "launch guard installed" in again.stdout, again.stdout + again.stderr
    assert load_plugins_like_vllm(tree).returncode == 0


def test_a_metadata_version_that_is_no_version_names_both_fixes(tmp_path):
    """`Version: 0.16.0-garbage!!`: status and apply exit 2 "... is not a valid version" with no hint.
    The hint names --vllm-version (the release the dist-info's name carries) and pip's repair, and
    --vllm-version then works."""
    tree, library = _metadata_with_version(tmp_path, "0.16.0-garbage!!")
    for command in ("status", "apply"):
        done = run_cli_judged(command, "--target", tree, "--patches", library)
        assert done.returncode == 2, done.stdout + done.stderr
        hint = " ".join(done.stderr.split()).partition("hint: ")[2]
        assert "--vllm-version 0.16.0" in hint and "vllm-0.16.0.dist-info" in hint and "vllm==0.16.0" in hint, hint
    told = run_cli_read_only("status", "--target", tree, "--patches", library, "--vllm-version", "0.16.0")
    assert told.returncode == 0, told.stdout + told.stderr


@pytest.mark.parametrize("metadata", ["Version: \n", ""], ids=["empty", "missing"])
def test_status_of_a_tree_applied_without_a_guard_for_an_unread_version_says_it_is_unguarded(tmp_path, metadata):
    """`Version: ` empty (or none) in the one dist-info, the release told by vllm/_version.py: apply
    warns and installs no guard; status said "applied" and nothing else, though nothing checks a
    launch. It says no guard runs, why, and the commands that end it."""
    tree, library = _metadata_with_version(tmp_path, "")
    (tree / "vllm-0.16.0.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\n{metadata}")
    assert run_cli_writing("apply", "--target", tree, "--patches", library).returncode == 0
    assert not (tree / "patchkit_guard.py").exists()
    done = run_cli_read_only("status", "--target", tree, "--patches", library)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0 and "no launch guard" in said and "vLLM launches this tree unchecked" in said, said
    assert "vllm-0.16.0.dist-info/METADATA" in said and "vllm==0.16.0" in said and "--no-guard" in said, said
    told = run_cli_writing("apply", "--target", tree, "--patches", library, "--no-guard")
    assert told.returncode == 0
    again = run_cli_read_only("status", "--target", tree, "--patches", library)
    assert "no launch guard" not in again.stdout + again.stderr  # told: none wanted


def test_a_version_emptied_after_apply_is_refused_as_naming_no_version_with_pips_fix(tmp_path):
    """The guard installed, then METADATA's Version emptied: the guard said "vLLM  is installed, but
    the patches were applied to vLLM 0.16.0" (an empty version quoted) and status's fix was an apply
    that drops the guard. It names the dist-info that names no version, and pip's repair."""
    tree, library = _metadata_with_version(tmp_path, "0.16.0")
    assert run_cli_writing("apply", "--target", tree, "--patches", library).returncode == 0
    assert (tree / "patchkit_guard.py").exists()
    (tree / "vllm-0.16.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: \n")
    refused = load_plugins_like_vllm(tree)
    assert refused.returncode != 0 and "vllm-0.16.0.dist-info names no version" in refused.stderr, refused.stderr
    assert "vLLM  is installed" not in refused.stderr
    done = run_cli_read_only("status", "--target", tree, "--patches", library)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and "vllm-0.16.0.dist-info names no version" in said, said
    assert "vllm==0.16.0" in said.partition("fix:")[2], said
