"""The plan table: where each change lands, as tab-separated rows for a pipe or a table in a terminal."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from patchkit.base.enums import FileKind, StepState
from patchkit.cli.ui.screen import Screen
from patchkit.cli.ui.text import STATE_STYLES, FittedTable, broken, fit_table, rich, visible, write_plainly

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.series.hunks import Placement
    from patchkit.series.plan import FileStep, Plan

PLAN_FILE_HEADER = ("file", "hunks", "lines", "note")
PLAN_HUNK_HEADER = ("file", "hunk", "note")  # -v
PlanSection = tuple[str, str, list[tuple[str, ...]]]  # a patch's name, its state, its rows
KIND_NOTES = {FileKind.ADD: "new file", FileKind.DELETE: "deleted"}
INDENT = 2
COLUMN_GAP = 2
STATE = "state"  # the header over the patches' states
UNDONE = "the earlier series' change"  # the heading over the files an update takes it out of


def show_plan(ui: Screen, plan: Plan, *, dry_run: bool) -> None:
    """Where each change lands: each patch a heading with its state, under it one row per file
    with its hunk count (one row per hunk with -v). Fitted to a terminal; piped, the same lines
    in aligned plain columns (no rich: plain strings, ~10 ms for 5,624 rows)."""
    if ui.quiet or ui.json_mode:
        return
    verb = "would change" if dry_run else "changes"
    title = f"plan: {verb} {len(plan.changed_paths)} file(s)"
    header, rows_of, numbers = (PLAN_HUNK_HEADER, hunk_rows, ()) if ui.verbose else (PLAN_FILE_HEADER, file_rows, (1,))
    columns, sections, right = shown_columns(header, plan_sections(plan, rows_of, len(header)), numbers)
    if not ui.terminal:
        text = plain_plan(title, columns, sections, right)
        write_plainly(lambda stdout: stdout.write(text))
    else:
        _plan_table(ui, title, columns, sections, right)


def shown_columns(
    columns: tuple[str, ...], sections: list[PlanSection], right: tuple[int, ...]
) -> tuple[tuple[str, ...], list[PlanSection], tuple[int, ...]]:
    """Only the columns some row fills (the first always): a header over nothing (eagle3's plan has
    no note) reads as if the patches' states under it were its cells."""
    kept = [0] + [i for i in range(1, len(columns)) if any(row[i] for _, _, rows in sections for row in rows)]
    return (
        tuple(columns[i] for i in kept),
        [(name, state, [tuple(row[i] for i in kept) for row in rows]) for name, state, rows in sections],
        tuple(kept.index(i) for i in right if i in kept),
    )


def state_column(headings: list[str], states: list[str], width: int | None, *, after: int = 0) -> int | None:
    """Where every patch's state starts when all of them fit there, in one straight column after
    the widest heading (and past column `after`: the rows' columns, for a header over it):
    states at ragged columns read as cells of the table's columns."""
    if not headings:
        return None
    column = max(*map(len, headings), after) + COLUMN_GAP
    return column if width is None or column + max(map(len, states)) <= width else None


def states_at(names: list[str], states: list[str], width: int | None, widths: list[int]) -> tuple[int | None, bool]:
    """Where the patches' states stand (state_column), and whether the header names that column.
    After the widest name, unless a state there would reach the rows' last column: then past the
    rows' columns (a state under that column reads as its cell), named `state` in the header, which
    with its rule then spans the widest row, where the width leaves room."""
    rows_end = INDENT + sum(widths) + COLUMN_GAP * (len(widths) - 1)
    if names and max(map(len, names)) + COLUMN_GAP + max(map(len, states)) > rows_end - widths[-1]:
        at = state_column(names, states, width, after=rows_end)
        if at is not None:
            return at, True
    return state_column(names, states, width), False


def plain_plan(title: str, columns: tuple[str, ...], sections: list[PlanSection], right: tuple[int, ...] = ()) -> str:
    """The plan as a terminal shows it, for a pipe: the title, the header (the states' column named),
    each patch's heading and its rows, the columns aligned two spaces apart, nothing after a row's
    last cell, no rule."""
    rows = [row for _, _, section_rows in sections for row in section_rows]
    widths = [max(map(len, cells)) for cells in zip(columns, *rows, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        last = max((i for i, cell in enumerate(cells) if cell), default=0)
        shown = [
            cell.rjust(width) if i in right else cell.ljust(width) if i < last else cell
            for i, (cell, width) in enumerate(zip(cells[: last + 1], widths, strict=False))
        ]
        return " " * INDENT + (" " * COLUMN_GAP).join(shown)

    at, named = states_at([name for name, _, _ in sections], [state for _, state, _ in sections], None, widths)
    lines = [title, line(columns).ljust(at or 0) + STATE if named else line(columns)]  # as the terminal's header
    at = at or 0
    for name, state, section_rows in sections:
        lines.append(f"{name.ljust(at - COLUMN_GAP)}{' ' * COLUMN_GAP}{state}")
        lines += [line(row) for row in section_rows]
    return "\n".join(lines) + "\n"


def _plan_table(
    ui: Screen, title: str, columns: tuple[str, ...], sections: list[PlanSection], right: tuple[int, ...] = ()
) -> None:
    """One rich Text of padded cells (a rich Table measures every cell and takes seconds for
    thousands of rows), fitted as every table is (text.fit_table: a path wrapped after a `/`, a
    note with no room beside its row on a line of its own); each patch a heading with its state.
    The header names the states' column too, and it and the rule span the widest row."""
    rows = [list(row) for _, _, section_rows in sections for row in section_rows]
    width = ui.out.width
    table = fit_table(list(columns), rows, width - INDENT)
    text = rich().text.Text()
    text.append(title + "\n", style="italic")
    headings = [broken(name, width) for name, _, _ in sections]
    states = [state for _, state, _ in sections]
    header = _row_lines(table, 0, right, below=False)  # a column moved under the rows: its cells say what they are
    rows_end = INDENT + sum(table.widths) + COLUMN_GAP * (len(table.widths) - 1)
    at, named = states_at([heading[-1] for heading in headings], states, width, table.widths)
    if named:
        header[0] = header[0].ljust(at or 0) + STATE
    text.append("\n".join(header) + "\n", style="bold")
    headings_end = max(len(line) for heading in headings for line in heading)
    states_end = at + max(map(len, states)) if at is not None else 0
    text.append(" " * INDENT + "\u2500" * (max(rows_end, headings_end, states_end) - INDENT) + "\n")
    number = 1
    for heading, (_, state, section_rows) in zip(headings, sections, strict=True):
        for line in heading[:-1]:
            text.append(line + "\n", style="bold")
        text.append(heading[-1], style="bold")
        fits = len(heading[-1]) + COLUMN_GAP + len(state) <= width
        gap = " " * (at - len(heading[-1]) if at is not None else COLUMN_GAP)
        text.append(gap if fits else "\n" + " " * INDENT)
        text.append(state + "\n", style=STATE_STYLES.get(state, ""))
        for _ in section_rows:
            text.append("\n".join(_row_lines(table, number, right)) + "\n")
            number += 1
    text.rstrip()
    ui.out.print(text, soft_wrap=True)


def plan_sections(
    plan: Plan, rows_of: Callable[[FileStep], list[tuple[str, ...]]], columns: int = len(PLAN_FILE_HEADER)
) -> list[PlanSection]:
    """Per patch: its name, its state and `rows_of` each of its file steps (none for a patch whose
    change is there already); then the files an earlier series' change is taken out of (an update
    from another library), each with where it goes."""
    sections: list[PlanSection] = []
    for step in plan.steps:
        state = plan.shown_state(step)
        rows = [row for f in step.files for row in rows_of(f)] if state == StepState.WILL_CHANGE else []
        sections.append((visible(step.patch.name, field=True), state, rows))
    undone = [
        (
            visible(path, field=True),
            *[""] * (columns - 2),
            "back to stock" * (plan.content(path) == plan.stock_content(path)),
        )
        for path in plan.undone_paths()
    ]
    return sections + ([(UNDONE, "revert", undone)] if undone else [])


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
        if fp.kind == FileKind.RENAME
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
    distinct = list(dict.fromkeys(offsets))  # each once, in order: a file may have thousands of hunks
    shown = ", ".join(f"{o:+d}" for o in distinct[:3]) + (", \u2026" if len(distinct) > 3 else "")
    return f"{len(offsets)} of {len(placements)} at an offset ({shown})"


def _row_lines(table: FittedTable, number: int, right: tuple[int, ...], *, below: bool = True) -> list[str]:
    """Row `number` of the fitted table (0: the header): indented, padded cells two spaces apart,
    nothing after the last non-empty one; then (`below`) its lines of its own."""
    row, widths = table.rows[number], table.widths
    lines = []
    for depth in range(max(map(len, row))):
        cells = [lines[depth] if depth < len(lines) else "" for lines in row]
        last = max((i for i, cell in enumerate(cells) if cell), default=0)
        shown = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) if i < last else cell
            for i, cell in enumerate(cells[: last + 1])
        ]
        lines.append(" " * INDENT + (" " * COLUMN_GAP).join(shown))
    return lines + ([" " * INDENT + line for line in table.below[number]] if below else [])
