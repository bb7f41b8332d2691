"""The run's one machine-readable document on stdout, written when the CLI knows the exit code."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import patchkit.cli.ui as views
from patchkit.base.enums import OutputFormat
from patchkit.base.fsutil import json_text
from patchkit.base.values import Value
from patchkit.cli.ui.notes import show_notes

# Every JSON document patchkit prints carries it at the top level; it grows when a key changes meaning or goes.
SCHEMA_VERSION = 1


@dataclass(eq=False, repr=False)
class Run(Value):
    """What one CLI run says on stdout in a machine-readable format. The command's JSON document
    is held until the CLI knows the exit code, so that it says whether the run succeeded (`ok`,
    `exit_code`) and why not (`error`, `hint`); a run that fails before making one still prints
    one, with what the command had found (`known`: the target, the version...). A JUnit document
    is written at once; a run that wrote none and failed gets one with an error testcase."""

    document: dict[str, Any] | None = None
    junit_written: bool = False
    known: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    hint: str | None = None
    written: str | None = None  # what the run put in place, said if its report then cannot be written

    def failed(self, message: str, hint: str | None = None) -> None:
        self.error, self.hint = message, hint


_run: Run | None = None  # the CLI run in progress; None outside the CLI (a document is printed at once)


def begin_run() -> Run:
    global _run
    show_notes()
    _run = Run()
    return _run


def finish_run(run: Run, *, fmt: str, command: str | None, exit_code: int) -> None:
    """The run's document on stdout, as its format asks: the command's own JSON document with
    `ok` and `exit_code` (and `error`, `hint` when it failed with one) beside what the run found,
    else, with `--format json`, one with what the run knows; with `--format junit`, a failed run
    that wrote no JUnit gets a document with one error testcase."""
    global _run
    _run = None
    failure = {"error": run.error, "hint": run.hint} if run.error is not None else {}
    if run.document is not None:  # what the run found (the target, its version...), then the command's own keys
        write_json({**run.known, **run.document, "ok": exit_code == 0, "exit_code": exit_code, **failure})
    elif fmt == OutputFormat.JSON:
        about = {"command": command, **run.known} if command else run.known
        write_json({"ok": exit_code == 0, **failure, "exit_code": exit_code, **about})
    elif fmt == OutputFormat.JUNIT and not run.junit_written and exit_code != 0:
        suite = f"patchkit.{run.known['set']}" if run.known.get("set") else "patchkit"
        said = run.error or f"exit code {exit_code}"
        sys.stdout.write(views.junit.error_junit(suite, said, run.hint, exit_code, command or "verify"))


def write_junit(document: str) -> None:
    sys.stdout.write(document)
    if _run is not None:
        _run.junit_written = True


def write_json(data: dict[str, Any]) -> None:
    document = {"schema_version": SCHEMA_VERSION, "ok": data.get("ok", True), **data}
    sys.stdout.write(json_text(document, "the JSON output", indent=2, sort_keys=False) + "\n")


def hold(data: dict[str, Any]) -> None:
    """The run's document: held for the CLI to complete and print (see Run)."""
    if _run is None:
        write_json(data)
    else:
        _run.document = data


def wrote(what: str) -> None:
    """What the command has put in place (a wheel): said on stderr if its report cannot be written."""
    if _run is not None:
        _run.written = what


def knows(facts: dict[str, Any]) -> None:
    """What the command has found so far (the target, its version...): a run that then fails
    reports it in its JSON document."""
    if _run is not None:
        _run.known.update(facts)
