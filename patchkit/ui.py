"""All terminal output. Rich tables and colour in a terminal; plain text when piped (tables
aligned; lines and the plan's tab-separated rows written without importing rich); no colour when
NO_COLOR is set, which rich honours; JSON on stdout where asked, one document per run, written
when the CLI knows the run's exit code (see Run)."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TextIO

from patchkit.enums import CheckStatus, ReleaseOutcome, TreeState

# Every JSON document patchkit prints carries it at the top level; it grows when a key changes meaning or goes.
SCHEMA_VERSION = 1
STATE_STYLES = {
    "applied": "green",
    "patched": "green",
    "upstream": "cyan",
    "not-applied": "yellow",
    "apply": "yellow",
    "partial": "red",
    "conflict": "red",
    "unsupported": "magenta",
    "drifted": "red",
    "ok": "green",
    "pass": "green",
    "fail": "red",
    "warning": "yellow",
    "check-failed": "red",
    "damaged": "red",
    "unrecorded": "yellow",
    "upstream-regression": "bold red",
    "skipped": "dim",
}


@dataclass
class Run:
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
        _write_json({**run.known, **run.document, "ok": exit_code == 0, "exit_code": exit_code, **failure})
    elif fmt == "json":
        about = {"command": command, **run.known} if command else run.known
        _write_json({"ok": exit_code == 0, **failure, "exit_code": exit_code, **about})
    elif fmt == "junit" and not run.junit_written and exit_code != 0:
        suite = f"patchkit.{run.known['set']}" if run.known.get("set") else "patchkit"
        sys.stdout.write(error_junit(suite, run.error or f"exit code {exit_code}", run.hint, exit_code))


def write_junit(document: str) -> None:
    sys.stdout.write(document)
    if _run is not None:
        _run.junit_written = True


def _write_json(data: dict[str, Any]) -> None:
    document = {"schema_version": SCHEMA_VERSION, "ok": data.get("ok", True), **data}
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False) + "\n")


def _console(*, stderr: bool):
    """Created on first use: a quiet run that prints nothing never imports rich."""
    # lazy: rich loads only for output drawn on a terminal
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError  # the CLI's to handle, as for every other write (its own exit code)

    stream = sys.stderr if stderr else sys.stdout
    return _Console(
        stderr=stderr, markup=False, highlight=False, soft_wrap=False, width=None if stream.isatty() else 10_000
    )


# What must not reach a terminal raw: C0 controls (ESC starts a sequence, \r overwrites the line),
# DEL, C1 controls, and the surrogates that stand for undecodable bytes (they cannot even be encoded).
_UNSHOWABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\udc80-\udcff]")
_UNSHOWABLE_IN_A_FIELD = re.compile("[\x00-\x1f\x7f-\x9f\udc80-\udcff]")  # tab and newline too


def visible(text: str, *, field: bool = False) -> str:
    """Text from a patch, a library or a tree, safe to show: each control character written as
    an escape (\\x1b), an undecodable byte as its value (\\xff). Tab and newline are kept, except
    in a `field`: a table cell or a tab-separated column. JSON shows the exact text instead."""
    pattern = _UNSHOWABLE_IN_A_FIELD if field else _UNSHOWABLE
    if pattern.search(text) is None:
        return text
    return pattern.sub(lambda m: f"\\x{ord(m.group()) & 0xFF:02x}", text)


@dataclass
class UI:
    fmt: str = "text"
    quiet: bool = False
    verbose: int = 0

    @cached_property
    def out(self):
        return _console(stderr=False)

    @cached_property
    def err(self):
        return _console(stderr=True)

    @property
    def json_mode(self) -> bool:
        return self.fmt == "json"

    @cached_property
    def plain(self) -> bool:
        """stdout is a pipe or a file, told without importing rich: plain lines need none of it."""
        return _plain_stdout()

    @property
    def terminal(self) -> bool:
        return not self.plain and self.out.is_terminal

    # -- primitives ---------------------------------------------------------------------------
    def line(self, text: str = "", style: str | None = None) -> None:
        if self.quiet or self.json_mode:
            return
        text = visible(text)
        if self.plain:
            _write_plainly(lambda stdout: stdout.write(text + "\n"))
        else:
            self.out.print(text, style=style)

    def detail(self, text: str) -> None:
        if self.verbose and not self.json_mode:
            self.err.print(visible(text), style="dim")

    def note(self, text: str) -> None:
        if not self.quiet:
            self.err.print(f"note: {visible(text)}", style="cyan")

    def warn(self, text: str) -> None:
        self.err.print(f"warning: {visible(text)}", style="yellow")

    def error(self, message: str, hint: str | None = None) -> None:
        self.err.print(f"error: {visible(message)}", style="bold red")
        if hint:
            self.err.print(f"hint: {visible(hint)}", style="red")

    def json(self, data: dict[str, Any]) -> None:
        """The run's document: held for the CLI to complete and print (see Run)."""
        if _run is None:
            _write_json(data)
        else:
            _run.document = data

    def wrote(self, what: str) -> None:
        """What the command has put in place (a wheel): said on stderr if its report cannot be written."""
        if _run is not None:
            _run.written = what

    def knows(self, facts: dict[str, Any]) -> None:
        """What the command has found so far (the target, its version...): a run that then fails
        reports it in its JSON document."""
        if _run is not None:
            _run.known.update(facts)

    def table(
        self, columns: list[str], rows: Iterable[list[str]], title: str | None = None, state_column: int | None = None
    ) -> None:
        if self.quiet or self.json_mode:
            return
        # lazy: rich loads only for output drawn on a terminal
        from rich import box
        from rich.table import Table
        from rich.text import Text

        table = Table(
            title=title if self.terminal else None,
            box=box.SIMPLE_HEAD if self.terminal else None,
            show_header=True,
            pad_edge=False,
            title_justify="left",
        )
        for name in columns:
            table.add_column(name, overflow="fold")
        for row in rows:
            cells = [Text(visible(str(c), field=True)) for c in row]
            if state_column is not None:
                cells[state_column].stylize(STATE_STYLES.get(str(row[state_column]), ""))
            table.add_row(*cells)
        if title and not self.terminal:
            self.out.print(title)
        self.out.print(table)

    def diff(self, text: str) -> None:
        if self.terminal:
            # lazy: rich loads only for output drawn on a terminal
            from rich.syntax import Syntax

            self.out.print(Syntax(visible(text), "diff", theme="ansi_dark", background_color="default"))
        else:
            sys.stdout.write(text)

    # -- reports ------------------------------------------------------------------------------
    def header(self, resolved) -> None:
        sel = resolved.selection
        version = resolved.version
        self.line(f"vLLM     {resolved.target.package_dir}  (found by {resolved.target.found_by})")
        if version:
            self.line(f"version  {version.version}  (from {version.source})")
        self.line(
            f"set      {sel.set_name}"
            + (f"  series {sel.release.versions} [{sel.release.directory.name}]" if sel.release else "")
        )
        for note in resolved.notes:
            self.note(note)

    def library(self, where) -> None:
        """Which library root, and what chose it (--patches, PATCHKIT_LIBRARY or installed)."""
        self.line(f"library  {where.path}  ({where.source})")

    def status(self, resolved, status, where=None) -> None:
        self.header(resolved)
        if where:
            self.library(where)
        self.line(f"state    {status.state}", style=STATE_STYLES.get(status.state))
        if status.patches:
            self.table(
                ["patch", "state", "files", "description"],
                ([p.name, p.state, ", ".join(p.files), p.description] for p in status.patches),
                title="patches",
                state_column=1,
            )
        for p in status.patches:
            if p.problem:
                self.line(f"  {p.name}: {p.problem}", style="red")
        for path in status.drifted:
            self.line(f"drifted  {path} was edited after patchkit patched it", style="red")
        for note in status.stale:
            self.line(f"stale    {note} (apply discards it; revert drops it)", style="yellow")
        for note in status.guard_notes:
            self.line(f"note     {note}", style="yellow")
        if status.guard:
            self.line(f"guard    the launch guard refuses this tree: {'; '.join(status.guard)}", style="red")

    def plan(self, plan, *, dry_run: bool) -> None:
        """Where each change lands. Piped: one tab-separated row per hunk, written as it is made.
        In a terminal: each patch a heading with its state, under it one row per file with its
        hunk count (one row per hunk with -v)."""
        if self.quiet or self.json_mode:
            return
        verb = "would change" if dry_run else "changes"
        title = f"plan: {verb} {len(plan.changed_paths)} file(s)"
        if not self.terminal:
            _write_plainly(lambda stdout: write_plan_rows(stdout, plan, title))
        elif self.verbose:
            self._plan_table(title, PLAN_HUNK_HEADER, plan_sections(plan, hunk_rows))
        else:
            self._plan_table(title, PLAN_FILE_HEADER, plan_sections(plan, file_rows), right=(1,))

    def _plan_table(
        self, title: str, columns: tuple[str, ...], sections: list[PlanSection], right: tuple[int, ...] = ()
    ) -> None:
        """One rich Text of padded cells (a rich Table measures every cell and takes seconds for
        thousands of rows). The file column narrows to fit the terminal, a longer path pushing
        the rest of its row along."""
        # lazy: rich loads only for output drawn on a terminal
        from rich.text import Text

        rows = [row for _, _, section_rows in sections for row in section_rows]
        widths = [max(map(len, cells)) for cells in zip(columns, *rows, strict=True)]
        too_wide = INDENT + sum(widths) + COLUMN_GAP * (len(widths) - 1) - self.out.width
        if too_wide > 0:
            widths[0] = max(len(columns[0]), widths[0] - too_wide, MIN_FILE_WIDTH)
        text = Text()
        text.append(title + "\n", style="italic")
        _append_row(text, columns, widths, right, style="bold")
        text.append(" " * INDENT + "\u2500" * (sum(widths) + COLUMN_GAP * (len(widths) - 1)) + "\n")
        for name, state, section_rows in sections:
            text.append(name, style="bold")
            text.append(" " * COLUMN_GAP)
            text.append(state + "\n", style=STATE_STYLES.get(state, ""))
            for row in section_rows:
                _append_row(text, row, widths, right)
        text.rstrip()
        self.out.print(text, soft_wrap=True)

    def checks(self, results) -> None:
        rows = [[r.check, r.path or "", r.status, r.message] for r in results]
        self.table(["check", "file", "result", "detail"], rows, title="checks", state_column=2)

    def releases(self, results) -> None:
        """`verify` against releases: one row per vLLM release."""
        rows = [
            [
                str(r.version),
                r.label,
                r.series or "",
                f"{r.timings.get('total', 0.0):.2f} s" + (" (cached)" if r.cached else ""),
                r.detail,
            ]
            for r in results
        ]
        self.table(["vLLM", "outcome", "series", "time", "detail"], rows, title="releases", state_column=1)

    @contextmanager
    def progress(self, total: int, description: str):
        """Yields advance(label): a progress bar on stderr when both streams are a terminal, else a no-op."""
        if self.quiet or self.fmt != "text" or not (self.terminal and self.err.is_terminal):
            yield lambda label: None
            return
        # lazy: rich loads only for output drawn on a terminal
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
        ) as bar:
            task = bar.add_task(description, total=total)
            yield lambda label: bar.update(task, advance=1, description=visible(label, field=True))

    @contextmanager
    def transfer(self, description: str):
        """Yields on_bytes(done, total): a download's progress bar on stderr when it is a terminal
        (not with -q), else None (the caller's lines say how far it got)."""
        if self.quiet or not self.err.is_terminal:
            yield None
            return
        # lazy: rich loads only for output drawn on a terminal
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self.err,
            transient=True,
        ) as bar:
            task = bar.add_task(visible(description, field=True), total=None)
            yield lambda done, total: bar.update(task, completed=done, total=total or None)

    @contextmanager
    def activity(self, title: str):
        """Yields say(message): a live status line on stderr in a terminal (a whole-wheel download
        shows its percentage there), plain lines with -v otherwise."""
        if self.quiet or not self.err.is_terminal:
            yield self.detail
            return
        with self.err.status(title) as status:

            def say(message: str) -> None:
                status.update(visible(message, field=True))
                self.detail(message)

            yield say


@dataclass(frozen=True)
class JUnitCase:
    name: str
    seconds: float = 0.0
    failure: str | None = None  # the one-line reason; None: passed
    details: str = ""
    skipped: str | None = None
    output: str = ""
    kind: str = "failure"  # the <failure type=...> (or <error type=...>)
    error: str | None = None  # the run could not judge this case: an <error>, not a <failure>


def junit(suite: str, cases: list[JUnitCase]) -> str:
    """JUnit XML: one <testsuite>, a <testcase> per case, <failure>/<skipped> where they apply."""
    # lazy: only a JUnit report needs it
    import xml.etree.ElementTree as ET

    failures = sum(1 for c in cases if c.failure)
    errors = sum(1 for c in cases if c.error and not c.failure)
    skipped = sum(1 for c in cases if c.skipped and not (c.failure or c.error))
    total = f"{sum(c.seconds for c in cases):.3f}"
    root = ET.Element(
        "testsuites",
        name="patchkit verify",
        tests=str(len(cases)),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=total,
    )
    suite_el = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(cases)),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=total,
    )
    for c in cases:  # XML cannot hold a control character, even escaped
        case = ET.SubElement(suite_el, "testcase", classname=suite, name=visible(c.name), time=f"{c.seconds:.3f}")
        if c.failure:
            failure = ET.SubElement(case, "failure", type=c.kind, message=visible(c.failure))
            failure.text = visible(c.details or c.failure)
        elif c.error:
            error = ET.SubElement(case, "error", type=c.kind, message=visible(c.error))
            error.text = visible(c.details or c.error)
        elif c.skipped:
            ET.SubElement(case, "skipped", message=visible(c.skipped))
        if c.output:
            ET.SubElement(case, "system-out").text = visible(c.output)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def error_junit(suite: str, message: str, hint: str | None, exit_code: int) -> str:
    """A run that ended before it could judge anything (the index unreachable, a bad option...):
    one testcase in error, so that a report file is never empty."""
    details = message + (f"\nhint: {hint}" if hint else "")
    return junit(suite, [JUnitCase(name="patchkit verify", error=message, details=details, kind=f"exit-{exit_code}")])


def releases_junit(results, suite: str) -> str:
    """A <testcase> per release, <failure> with the reason, <skipped> when unsupported."""
    cases = []
    for r in results:
        details = "\n".join([r.detail] + [c.describe() for c in r.checks if c.failed])
        cases.append(
            JUnitCase(
                name=f"vllm {r.version}",
                seconds=r.timings.get("total", 0.0),
                failure=f"{r.label}: {r.detail}" if r.failed else None,
                details=details,
                kind=r.label,
                skipped=r.detail if r.outcome == ReleaseOutcome.UNSUPPORTED else None,
                output=f"{r.label}: {r.detail}",
            )
        )
    return junit(suite, cases)


def checks_junit(results, suite: str) -> str:
    """A <testcase> per check result: failed checks fail, warnings and checks not run are skipped."""
    cases = []
    for r in results:
        cases.append(
            JUnitCase(
                name=f"{r.check}: {r.path}" if r.path else r.check,
                failure=r.message if r.status == CheckStatus.FAIL else None,
                kind=r.check,
                skipped=r.message if r.status in (CheckStatus.WARNING, CheckStatus.SKIPPED) else None,
                output=r.message,
            )
        )
    return junit(suite, cases)


PLAN_HUNK_COLUMNS = ("patch", "file", "hunk", "state", "note")  # piped
PLAN_FILE_HEADER = ("file", "hunks", "lines", "note")  # terminal
PLAN_HUNK_HEADER = ("file", "hunk", "note")  # terminal, -v
PlanSection = tuple[str, str, list[tuple[str, ...]]]  # a patch's name, its state, its rows
KIND_NOTES = {"add": "new file", "delete": "deleted"}
INDENT = 2
COLUMN_GAP = 2
MIN_FILE_WIDTH = 30


def plan_hunk_rows(plan) -> Iterator[tuple[str, ...]]:
    """One row per hunk: where it lands and its offset; a file without hunks (a pure rename) is
    one row with its note, a patch with no file steps (already applied, or a conflict) one row
    with its state."""
    for rows in hunk_rows_per_file(plan):
        yield from rows


def hunk_rows_per_file(plan) -> Iterator[list[tuple[str, ...]]]:
    """The rows of `plan_hunk_rows`, a file (or a patch with no file steps) at a time."""
    for step in plan.steps:
        name = visible(step.patch.name, field=True)
        if not step.files:
            yield [(name, "", "", step.state, "")]
        for file_step in step.files:
            path = visible(file_step.patch.path, field=True)
            yield [(name, path, hunk, step.state, note) for _, hunk, note in hunk_rows(file_step)]


def write_plan_rows(stream: TextIO, plan, title: str) -> None:
    """The plan as plain text for a pipe: the title, a header, then one tab-separated row per
    hunk (all five fields, the note possibly empty), written a file at a time as it is made."""
    stream.write(f"{title}\n" + "\t".join(PLAN_HUNK_COLUMNS) + "\n")
    for rows in hunk_rows_per_file(plan):
        stream.write("".join("\t".join(row) + "\n" for row in rows))


def _plain_stdout() -> bool:
    """What rich's Console.is_terminal says of stdout, false only where it surely would: not a
    tty, and none of the variables with which rich treats a pipe as a terminal."""
    if "FORCE_COLOR" in os.environ or os.environ.get("TTY_COMPATIBLE") == "1":
        return False
    try:
        return not sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _write_plainly(write: Callable[[TextIO], object]) -> None:
    """`write` to stdout, flushed (a reader that stopped early, `| head`, is the CLI's to handle:
    BrokenPipeError ends the run quietly with exit 141)."""
    write(sys.stdout)
    sys.stdout.flush()


def plan_sections(plan, rows_of) -> list[PlanSection]:
    """Per patch: its name, its state and `rows_of` each of its file steps."""
    return [
        (visible(step.patch.name, field=True), step.state, [row for f in step.files for row in rows_of(f)])
        for step in plan.steps
    ]


def file_rows(file_step) -> list[tuple[str, ...]]:
    """A file's one row: its hunk count, the lines where its first and last hunk land, its kind
    and offsets summarised."""
    lines = [p.line for p in file_step.placements]
    span = f"{lines[0]}\u2013{lines[-1]}" if len(lines) > 1 else "".join(map(str, lines))
    return [(visible(file_step.patch.path, field=True), str(len(lines)), span, file_note(file_step))]


def hunk_rows(file_step) -> list[tuple[str, ...]]:
    """A row per hunk of a file (its path on the first): where it lands, its offset. A file
    without hunks (a pure rename) is one row with its note."""
    path = visible(file_step.patch.path, field=True)
    if not file_step.placements:
        return [(path, "", file_note(file_step))]
    return [
        (path if index == 1 else "", f"#{index} at line {p.line}", offset_note(p))
        for index, p in enumerate(file_step.placements, 1)
    ]


def file_note(file_step) -> str:
    """A file's kind when it is not a modification, and the offsets its hunks land at."""
    fp = file_step.patch
    kind = f"renamed from {visible(fp.source_path, field=True)}" if fp.kind == "rename" else KIND_NOTES.get(fp.kind, "")
    return "; ".join(note for note in (kind, offsets_note(file_step.placements)) if note)


def offset_note(placement) -> str:
    """For a hunk that lands off its expected line: "offset +3"."""
    offset = placement.offset
    return f"offset {offset:+d}" if offset else ""


def offsets_note(placements) -> str:
    """The offsets of a file's hunks: "offset +3" for one hunk, "2 of 5 at an offset (+3, -1)"
    for more (three offsets at most)."""
    offsets = [p.offset for p in placements if p.offset]
    if not offsets:
        return ""
    if len(placements) == 1:
        return offset_note(placements[0])
    distinct = sorted(set(offsets), key=offsets.index)
    shown = ", ".join(f"{o:+d}" for o in distinct[:3]) + (", \u2026" if len(distinct) > 3 else "")
    return f"{len(offsets)} of {len(placements)} at an offset ({shown})"


def _append_row(
    text, cells: tuple[str, ...], widths: list[int], right: tuple[int, ...], style: str | None = None
) -> None:
    """Indented, padded cells two spaces apart, nothing after the last non-empty one."""
    last = max((i for i, cell in enumerate(cells) if cell), default=0)
    text.append(" " * INDENT)
    for i, cell in enumerate(cells[: last + 1]):
        if i in right:
            cell = cell.rjust(widths[i])
        elif i < last:
            cell = cell.ljust(widths[i])
        text.append(cell, style=style)
        text.append(" " * COLUMN_GAP if i < last else "\n")


def plan_json(plan) -> list[dict]:
    return [
        {
            "patch": step.patch.name,
            "state": step.state,
            "problem": step.mismatch.describe() if step.mismatch else None,
            "files": [
                {
                    "path": f.patch.path,
                    "kind": f.patch.kind,
                    "hunks": [{"line": p.line, "offset": p.offset} for p in f.placements],
                }
                for f in step.files
            ],
        }
        for step in plan.steps
    ]


def target_json(target) -> dict:
    return {"target": str(target.root), "found_by": target.found_by}


def resolved_json(resolved) -> dict:
    """The target, its version and the series chosen, as status reports them (and error documents)."""
    return {
        **target_json(resolved.target),
        "vllm_version": str(resolved.vllm_version) if resolved.version else None,
        "version_source": resolved.version.source if resolved.version else None,
        "set": resolved.selection.set_name,
        "series": resolved.selection.release.directory.name if resolved.selection.release else None,
    }


def status_json(resolved, status, where=None) -> dict:
    return {
        "state": status.state,
        "library": where.to_json() if where else None,
        **resolved_json(resolved),
        "notes": resolved.notes,
        "patches": [
            {"name": p.name, "state": p.state, "files": p.files, "description": p.description, "problem": p.problem}
            for p in status.patches
        ],
        "drifted": status.drifted,
        "stale": status.stale,
        "guard_notes": status.guard_notes,
        "guard": {"refuses": status.guard, "fix": status.guard_fix} if status.guard else None,
        **(
            {"upstream_regression": status.upstream_regression, "checks": [r.to_json() for r in status.checks]}
            if status.state == TreeState.UPSTREAM
            else {}
        ),
    }
