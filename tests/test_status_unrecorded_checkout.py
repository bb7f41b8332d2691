"""A vLLM checkout (no dist-info, so no RECORD) whose record was lost after patchkit applied a set:
status said `upstream` in JSON and on its last line, though nothing proves the release ships the
change (the files are patchkit's earlier apply, or a hand's). The state is `unrecorded`, the same
word in text and JSON, with the fix that hands the change back to patchkit; following it leaves the
set applied with a record (issue 20 residuals, words30 item 5)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess

from helpers import EAGLE_MODEL, MODEL, MODEL_PY, SPEC, SPEC_PY, make_patch, patched_spec, write_library


def _git(root, *args: str) -> None:
    who = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(root), *who, *args], check=True, capture_output=True)


def test_a_checkout_whose_record_was_lost_is_unrecorded_not_upstream(run, tmp_path, scratch):
    co = tmp_path / "co"
    files = {"vllm/__init__.py": "", "vllm/_version.py": '__version__ = "0.16.0"\n', SPEC: SPEC_PY, MODEL: MODEL_PY}
    for rel, content in files.items():
        (co / rel).parent.mkdir(parents=True, exist_ok=True)
        (co / rel).write_text(content)
    _git(co, "init", "-q")
    _git(co, "add", "-A")
    _git(co, "commit", "-qm", "v0.16.0")
    patches = [make_patch(scratch, co, {SPEC: patched_spec()}), make_patch(scratch, co, {MODEL: EAGLE_MODEL})]
    library = write_library(scratch / "lib", {"0.16.0": patches})
    assert run("apply", "--target", co, "--patches", library, "--no-guard").exit_code == 0
    shutil.rmtree(co / ".patchkit")  # the record lost; the files as patchkit's apply left them

    text = run("status", "--target", co, "--patches", library)
    lines = text.output.strip().splitlines()
    assert "state    unrecorded" in lines and lines[-1] == "status: unrecorded", text.output
    assert "upstream" not in lines[-1] and "state    upstream" not in lines, text.output
    document = json.loads(run("status", "--target", co, "--patches", library, "--format", "json").stdout)
    assert document["state"] == "unrecorded", document
    restore, apply = (shlex.split(c) for c in re.findall(r"`([^`]+)`", document["hint"]))
    assert restore == ["git", "-C", str(co), "checkout", "--", SPEC, MODEL], document["hint"]
    assert document["hint"].endswith("applies it with a record"), document["hint"]

    preflight_free = run("verify", "--target", co, "--patches", library)
    assert preflight_free.exit_code == 0 and "upstream" not in preflight_free.output.splitlines()[-1]

    subprocess.run(restore, check=True, capture_output=True)
    assert run(*apply[1:]).exit_code == 0
    after = json.loads(run("status", "--target", co, "--patches", library, "--format", "json").stdout)
    assert after["state"] == "applied", after
