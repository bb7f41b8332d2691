"""What one node runs: patchkit's own CLI (`python -m patchkit COMMAND --format json`) in a
subprocess, against that node's vLLM, under a time limit; its JSON document summed up in a small
dict the driver reads. Stdlib only, no Ray: the Ray task calls run_step by reference, so patchkit
must be installed in the Ray worker's environment on every node.

The node's target: its own PATCHKIT_TARGET (a directory with vllm/) or PATCHKIT_PYTHON (an
interpreter), else the command line's --target/--python, else the interpreter running the Ray
worker (in a vLLM cluster, vLLM's environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# The patchkit command line each step runs on a node. `prepare` is phase 1 of `fleet apply`: the
# plan and the checks on the contents apply would write (verify on an unpatched tree), no writes.
STEPS: dict[str, list[str]] = {
    "status": ["status"],
    "verify": ["verify"],
    "prepare": ["verify", "--no-import"],
    "apply": ["apply"],
    "revert": ["revert"],
}
TIMED_OUT = "timed-out"
ERROR = "error"


def target_arguments(request: dict[str, Any]) -> tuple[list[str], str]:
    """The target options for this node's patchkit, and what chose them."""
    for variable, option in (("PATCHKIT_TARGET", "--target"), ("PATCHKIT_PYTHON", "--python")):
        if os.environ.get(variable):
            return [option, os.environ[variable]], f"${variable} on the node"
    if request.get("target"):
        return ["--target", request["target"]], "--target"
    if request.get("python"):
        return ["--python", request["python"]], "--python"
    return ["--python", sys.executable], "the Ray worker's interpreter"


def command_line(step: str, request: dict[str, Any]) -> tuple[list[str], str]:
    target, found_by = target_arguments(request)
    args = [*STEPS[step], "--format", "json", *target, *_options(request), *request.get("extra", [])]
    return [sys.executable, "-m", "patchkit", *args], found_by


def _options(request: dict[str, Any]) -> list[str]:
    """The command line's version, library and set options, as the node's patchkit takes them."""
    options = []
    for key, option in (("vllm_version", "--vllm-version"), ("library", "--patches"), ("set_name", "--set")):
        if request.get(key):
            options += [option, str(request[key])]
    for path in request.get("adhoc") or []:
        options += ["--patch", str(path)]
    return options


def run_step(step: str, request: dict[str, Any]) -> dict[str, Any]:
    """One step on this node: its summary (state, ok, detail, target, vllm_version...)."""
    argv, found_by = command_line(step, request)
    timeout = float(request["timeout"])
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired:
        detail = f"patchkit {STEPS[step][0]} did not finish within {timeout:g} s on this node"
        return {"state": TIMED_OUT, "ok": False, "detail": detail, "found_by": found_by}
    except OSError as exc:
        return {"state": ERROR, "ok": False, "detail": f"cannot run patchkit: {exc}", "found_by": found_by}
    summary = summarize(step, _document(done.stdout), done.returncode, done.stderr)
    if step == "prepare" and summary["ok"]:
        summary.update(_unwritable(summary["document"]) or {})
    return {**summary, "found_by": found_by}


def _document(stdout: str) -> dict[str, Any] | None:
    try:
        document = json.loads(stdout)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def summarize(step: str, document: dict[str, Any] | None, code: int, stderr: str = "") -> dict[str, Any]:
    """A node's patchkit document as one row: its state (the tree's state for status and verify,
    the result for apply and revert), whether it passed, and why not."""
    if document is None:
        last = stderr.strip().splitlines()[-1:] or [f"exit code {code}"]
        return {"state": ERROR, "ok": False, "detail": f"no JSON from patchkit: {last[0]}", "exit_code": code}
    state = document.get("result") or document.get("state") or (ERROR if code else "ok")
    if step == "prepare" and code == 0:
        state = "ready"
    return {
        "state": str(state),
        "ok": code == 0,
        "detail": _why(document) if code else "",
        "exit_code": code,
        "target": document.get("target"),
        "vllm_version": document.get("vllm_version"),
        "set": document.get("set"),
        "series": document.get("series"),
        "document": document,
    }


def _why(document: dict[str, Any]) -> str:
    """A failed run's reason: its error, else its failed checks, else what drifted."""
    if document.get("error"):
        hint = document.get("hint")
        return f"{document['error']} ({hint})" if hint else str(document["error"])
    checks = document.get("checks")
    checks = checks if isinstance(checks, list) else []
    failed = [c for c in checks if isinstance(c, dict) and not c.get("ok") and c.get("level") == "error"]
    if failed:
        return "; ".join(f"{c.get('check')}: {c.get('path') or ''}: {c.get('message')}" for c in failed)
    if document.get("drifted"):
        return "edited after patchkit patched it: " + ", ".join(map(str, document["drifted"]))
    return ""


def _unwritable(document: dict[str, Any]) -> dict[str, Any] | None:
    """Phase 1 refuses what phase 2 could not write: the files of the series and the record's
    directory must be writable by the user the Ray worker runs as (the dry run does not ask)."""
    root = Path(document.get("target") or ".")
    places = [root] + [
        root / path
        for patch in document.get("patches") or []
        for path in patch.get("files") or []
        if isinstance(path, str)
    ]
    for place in places:
        where = place if place.exists() else place.parent
        if where.exists() and not os.access(where, os.W_OK):
            return {"state": "unwritable", "ok": False, "detail": f"{where} is not writable by the Ray worker's user"}
    return None
