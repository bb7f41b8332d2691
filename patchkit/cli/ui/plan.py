"""The plan table: where each change lands, as tab-separated rows for a pipe or a table in a terminal."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TextIO

from patchkit.cli.ui.screen import Screen
from patchkit.cli.ui.text import STATE_STYLES, rich, shortened, visible, write_plainly

if TYPE_CHECKING:  # pragma: no cover
    from rich.text import Text

    from patchkit.series.plan import FileStep, Placement, Plan

PLAN_HUNK_COLUMNS = ("patch", "file", "hunk", "state", "note")  # piped
PLAN_FILE_HEADER = ("file", "hunks", "lines", "note")  # terminal
PLAN_HUNK_HEADER = ("file", "hunk", "note")  # terminal, -v
PlanSection = tuple[str, str, list[tuple[str, ...]]]  # a patch's name, its state, its rows
KIND_NOTES = {"add": "new file", "delete": "deleted"}
INDENT = 2
COLUMN_GAP = 2
MIN_FILE_WIDTH = 30


def plan_hunk_rows(plan: Plan) -> Iterator[tuple[str, ...]]:
    """One row per hunk: where it lands and its offset; a file without hunks (a pure rename) is
    one row with its note, a patch with no file steps (already applied, or a conflict) one row
    with its state."""
    for rows in hunk_rows_per_file(plan):
        yield from rows


def hunk_rows_per_file(plan: Plan) -> Iterator[list[tuple[str, ...]]]:
    """The rows of `plan_hunk_rows`, a file (or a patch with no file steps) at a time."""
    for step in plan.steps:
        name = visible(step.patch.name, field=True)
        if not step.files:
            yield [(name, "", "", step.state, "")]
        for file_step in step.files:
            path = visible(file_step.patch.path, field=True)
            yield [(name, path, hunk, step.state, note) for _, hunk, note in hunk_rows(file_step)]


def write_plan_rows(stream: TextIO, plan: Plan, title: str) -> None:
    """The plan as plain text for a pipe: the title, a header, then one tab-separated row per
    hunk (all five fields, the note possibly empty), written a file at a time as it is made."""
    stream.write(f"{title}\n" + "\t".join(PLAN_HUNK_COLUMNS) + "\n")
    for rows in hunk_rows_per_file(plan):
        stream.write("".join("\t".join(row) + "\n" for row in rows))


def show_plan(ui: Screen, plan: Plan, *, dry_run: bool) -> None:
    """Where each change lands. Piped: one tab-separated row per hunk, written as it is made.
    In a terminal: each patch a heading with its state, under it one row per file with its
    hunk count (one row per hunk with -v)."""
    if ui.quiet or ui.json_mode:
        return
    verb = "would change" if dry_run else "changes"
    title = f"plan: {verb} {len(plan.changed_paths)} file(s)"
    if not ui.terminal:
        write_plainly(lambda stdout: write_plan_rows(stdout, plan, title))
    elif ui.verbose:
        _plan_table(ui, title, PLAN_HUNK_HEADER, plan_sections(plan, hunk_rows))
    else:
        _plan_table(ui, title, PLAN_FILE_HEADER, plan_sections(plan, file_rows), right=(1,))


def _plan_table(
    ui: Screen, title: str, columns: tuple[str, ...], sections: list[PlanSection], right: tuple[int, ...] = ()
) -> None:
    """One rich Text of padded cells (a rich Table measures every cell and takes seconds for
    thousands of rows). The file column narrows to fit the terminal, a longer path shortened
    with an ellipsis (its file name kept)."""
    rows = [row for _, _, section_rows in sections for row in section_rows]
    widths = [max(map(len, cells)) for cells in zip(columns, *rows, strict=True)]
    too_wide = INDENT + sum(widths) + COLUMN_GAP * (len(widths) - 1) - ui.out.width
    if too_wide > 0:
        widths[0] = max(len(columns[0]), widths[0] - too_wide, MIN_FILE_WIDTH)
    text = rich().text.Text()
    text.append(title + "\n", style="italic")
    _append_row(text, columns, widths, right, style="bold")
    text.append(" " * INDENT + "\u2500" * (sum(widths) + COLUMN_GAP * (len(widths) - 1)) + "\n")
    for name, state, section_rows in sections:
        text.append(name, style="bold")
        text.append(" " * COLUMN_GAP)
        text.append(state + "\n", style=STATE_STYLES.get(state, ""))
        for row in section_rows:
            _append_row(text, (shortened(row[0], widths[0]), *row[1:]), widths, right)
    text.rstrip()
    ui.out.print(text, soft_wrap=True)


def plan_sections(plan: Plan, rows_of: Callable[[FileStep], list[tuple[str, ...]]]) -> list[PlanSection]:
    """Per patch: its name, its state and `rows_of` each of its file steps."""
    return [
        (visible(step.patch.name, field=True), step.state, [row for f in step.files for row in rows_of(f)])
        for step in plan.steps
    ]


def file_rows(file_step: FileStep) -> list[tuple[str, ...]]:
    """A file's one row: its hunk count, the lines where its first and last hunk land, its kind
    and offsets summarised."""
    lines = [p.line for p in file_step.placements]
    span = f"{lines[0]}\u2013{lines[-1]}" if len(lines) > 1 else "".join(map(str, lines))
    return [(visible(file_step.patch.path, field=True), str(len(lines)), span, file_note(file_step))]


def hunk_rows(file_step: FileStep) -> list[tuple[str, ...]]:
    """A row per hunk of a file (its path on the first): where it lands, its offset. A file
    without hunks (a pure rename) is one row with its note."""
    path = visible(file_step.patch.path, field=True)
    if not file_step.placements:
        return [(path, "", file_note(file_step))]
    return [
        (path if index == 1 else "", f"#{index} at line {p.line}", offset_note(p))
        for index, p in enumerate(file_step.placements, 1)
    ]


def file_note(file_step: FileStep) -> str:
    """A file's kind when it is not a modification, and the offsets its hunks land at."""
    fp = file_step.patch
    kind = (
        f"renamed from {visible(fp.source_path or '', field=True)}"
        if fp.kind == "rename"
        else KIND_NOTES.get(fp.kind, "")
    )
    return "; ".join(note for note in (kind, offsets_note(file_step.placements)) if note)


def offset_note(placement: Placement) -> str:
    """For a hunk that lands off its expected line: "offset +3"."""
    offset = placement.offset
    return f"offset {offset:+d}" if offset else ""


def offsets_note(placements: Sequence[Placement]) -> str:
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
    text: Text, cells: tuple[str, ...], widths: list[int], right: tuple[int, ...], style: str | None = None
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
