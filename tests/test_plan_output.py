"""The plan as `apply` shows it: tab-separated rows per hunk when piped (streamed), aligned rows
per file in a terminal (per hunk with -v), JSON unchanged."""

from __future__ import annotations

import io
import json
import re

import pytest
from conftest import make_patch, write_library, write_tree
from rich.console import Console

from patchkit.patchfile import parse_patch
from patchkit.plan import plan_apply
from patchkit.ui import UI, blank_repeats, offsets_note, plan_file_rows, plan_hunk_rows, write_plan_rows

LONG = "vllm/layers/long.py"
SHORT = "vllm/layers/short.py"
GONE = "vllm/layers/gone.py"
NEW = "vllm/layers/new.py"
LONG_PY = "".join(f"value_{i} = {i}\n" for i in range(1, 61))
SHIFT = "# a\n# b\n# c\n"  # three lines added on the target's side after the diff was made


def edited(text: str, *numbers: int) -> str:
    """`text` with the lines `value_N = N` of these numbers changed."""
    for n in numbers:
        text = text.replace(f"value_{n} = {n}\n", f"value_{n} = -{n}\n")
    return text


@pytest.fixture
def site(tmp_path):
    return write_tree(tmp_path / "site", files={LONG: LONG_PY, SHORT: "x = 1\n", GONE: "old = 1\n"})


@pytest.fixture
def patches(site, scratch):
    """Two patches: long.py at lines 5 and 50 plus a new and a deleted file; then short.py."""
    first = make_patch(scratch, site, {LONG: edited(LONG_PY, 5, 50), NEW: "n = 1\n", GONE: None}, "Description: a\n")
    second = make_patch(scratch, site, {SHORT: "x = 2\n"}, "Description: b\n")
    return [first, second]


@pytest.fixture
def library(tmp_path, patches):
    return write_library(tmp_path / "lib", {"0.16.0": patches})


def plan_of(site, patches):
    return plan_apply(site, [parse_patch(data, f"{i:04d}-change.patch") for i, data in enumerate(patches, 1)])


def shift_second_hunk(site):
    """Lines added between long.py's two hunks: the second lands 3 lines lower."""
    (site / LONG).write_text(LONG_PY.replace("value_30 = 30\n", "value_30 = 30\n" + SHIFT))


def terminal_text(plan, *, verbose: int = 0, width: int = 200) -> str:
    out = io.StringIO()
    ui = UI(verbose=verbose)
    ui.out = Console(file=out, force_terminal=True, width=width, markup=False, highlight=False)
    ui.plan(plan, dry_run=True)
    return re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())


def test_piped_dry_run_is_a_title_a_header_and_one_tab_separated_row_per_hunk(run, site, library):
    shift_second_hunk(site)
    result = run("apply", "--dry-run", "--target", site, "--patches", library)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("plan: would change 4 file(s)")
    assert lines[start + 1] == "patch\tfile\thunk\tstate\tnote"
    rows = [line.split("\t") for line in lines[start + 2 : start + 7]]
    assert all(len(row) == 5 for row in rows)
    by_file = {(row[1], row[2]): row for row in rows}
    assert by_file[(LONG, "#1 at line 2")][4] == ""
    assert by_file[(LONG, "#2 at line 50")][4] == "offset +3"
    assert {row[0] for row in rows if row[1] in (LONG, NEW, GONE)} == {"0001-change.patch"}
    assert by_file[(SHORT, "#1 at line 1")][0] == "0002-change.patch"
    assert {row[3] for row in rows} == {"apply"}
    assert lines[start + 7].startswith("dry run: 4 file(s) would change")
    assert "\u2500" not in result.stdout and "\x1b" not in result.stdout


def test_piped_rows_agree_with_the_engine_placements(site, patches):
    shift_second_hunk(site)
    plan = plan_of(site, patches)
    stream = io.StringIO()
    write_plan_rows(stream, plan, "plan")
    rows = [line.split("\t") for line in stream.getvalue().splitlines()[2:]]
    expected = [
        [
            step.patch.name,
            f.patch.path,
            f"#{i} at line {p.line}",
            step.state,
            f"offset {p.offset:+d}" if p.offset else "",
        ]
        for step in plan.steps
        for f in step.files
        for i, p in enumerate(f.placements, 1)
    ]
    assert rows == expected and len(rows) == sum(len(f.patch.hunks) for s in plan.steps for f in s.files)


class RecordingStream:
    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)


def test_piped_rows_are_written_as_they_are_made(site, patches):
    """A row reaches the stream before the next step is even looked at."""
    plan = plan_of(site, patches)
    first, _ = plan.steps

    def steps_then_failure():
        yield first
        raise RuntimeError("the second step was asked for")

    plan.steps = steps_then_failure()
    stream = RecordingStream()
    with pytest.raises(RuntimeError):
        write_plan_rows(stream, plan, "plan: would change 4 file(s)")
    hunk_rows = stream.writes[2:]
    assert stream.writes[:2] == ["plan: would change 4 file(s)\n", "patch\tfile\thunk\tstate\tnote\n"]
    assert len(hunk_rows) == sum(len(f.placements) for f in first.files) == 4
    assert all(w.count("\t") == 4 and w.endswith("\n") for w in hunk_rows)


def test_terminal_shows_one_row_per_file_with_hunk_count_span_and_notes(site, patches):
    shift_second_hunk(site)
    text = terminal_text(plan_of(site, patches))
    lines = text.splitlines()
    assert lines[0] == "plan: would change 4 file(s)"
    assert lines[1].split() == ["patch", "file", "hunks", "lines", "state", "note"]
    assert set(lines[2]) == {"\u2500"}
    rows = {line.split()[1] if not line.startswith(" ") else line.split()[0]: line for line in lines[3:]}
    assert len(lines) == 3 + 4
    assert re.search(rf"^0001-change\.patch\s+{re.escape(GONE)}\s+1\s+1\s+apply\s+deleted$", lines[3])
    assert re.search(r"\s2\s+2\u201350\s+apply\s+1 of 2 at an offset \(\+3\)$", rows[LONG])
    assert rows[NEW].endswith("apply  new file")
    assert rows[SHORT].startswith("0002-change.patch")
    # a patch's name is shown on its first row only
    assert [line.startswith("0001") for line in lines[3:]] == [True, False, False, False]


def test_terminal_with_v_shows_one_row_per_hunk_and_each_file_once(site, patches):
    shift_second_hunk(site)
    plan = plan_of(site, patches)
    lines = terminal_text(plan, verbose=1).splitlines()
    assert lines[1].split() == ["patch", "file", "hunk", "state", "note"]
    rows = lines[3:]
    assert len(rows) == sum(len(f.placements) for s in plan.steps for f in s.files) == 5
    assert sum(LONG in row for row in rows) == 1
    second_long_hunk = next(row for row in rows if "#2 at line 50" in row)
    assert second_long_hunk.startswith(" ") and second_long_hunk.endswith("apply  offset +3")


def test_terminal_colours_the_state(site, patches):
    out = io.StringIO()
    ui = UI()
    ui.out = Console(file=out, force_terminal=True, color_system="standard", width=200)
    ui.plan(plan_of(site, patches), dry_run=False)
    assert "changes 4 file(s)" in out.getvalue()
    assert "\x1b[33mapply\x1b[0m" in out.getvalue()  # yellow, as `status` shows a pending patch


def test_terminal_narrows_the_file_column_to_fit_and_a_longer_path_pushes_its_row(tmp_path, scratch):
    deep = "vllm/" + "/".join(["a_rather_long_directory_name"] * 4) + "/module.py"
    files = {deep: "a = 1\n", SHORT: "x = 1\n"}
    site = write_tree(tmp_path / "deep", files=files)
    patch = make_patch(scratch, site, {deep: "a = 2\n", SHORT: "x = 2\n"})
    lines = terminal_text(plan_of(site, [patch]), width=100).splitlines()
    assert len(deep) > 100
    short_row = next(line for line in lines if SHORT in line)
    deep_row = next(line for line in lines if deep in line)
    assert len(short_row) <= 100 and len(lines[1]) <= 100
    assert deep_row.endswith("1  1      apply") and short_row.endswith("1  1      apply")


def test_a_conflict_is_a_row_with_its_state_then_the_error(run, site, library):
    (site / SHORT).write_text("x = 9\n")
    result = run("apply", "--dry-run", "--target", site, "--patches", library)
    assert result.exit_code == 1
    rows = [line.split("\t") for line in result.stdout.splitlines() if "\t" in line]
    assert ["0002-change.patch", "", "", "conflict", ""] in rows
    assert SHORT in result.output and "hunk #1" in result.output


def test_json_plan_keeps_its_shape(run, site, library):
    shift_second_hunk(site)
    result = run("apply", "--dry-run", "--target", site, "--patches", library, "--format", "json")
    data = json.loads(result.stdout)
    first = data["plan"][0]
    assert set(first) == {"patch", "state", "problem", "files"}
    long_file = next(f for f in first["files"] if f["path"] == LONG)
    assert long_file == {"path": LONG, "kind": "modify", "hunks": [{"line": 2, "offset": 0}, {"line": 50, "offset": 3}]}
    assert {f["path"]: f["kind"] for f in first["files"]}[NEW] == "add"


def test_quiet_prints_no_plan(run, site, library):
    result = run("apply", "--dry-run", "-q", "--target", site, "--patches", library)
    assert result.exit_code == 0 and result.stdout == ""


def test_offsets_note_counts_and_lists_at_most_three_offsets(site, patches):
    (site / LONG).write_text(SHIFT + LONG_PY)
    placements = next(f for f in plan_of(site, patches).steps[0].files if f.patch.path == LONG).placements
    assert offsets_note(placements) == "2 of 2 at an offset (+3)"
    assert offsets_note(placements[:1]) == "offset +3"

    class At:
        def __init__(self, offset):
            self.offset = offset

    assert offsets_note([At(0), At(0)]) == ""
    assert offsets_note([At(1), At(-2), At(1), At(4), At(7)]) == "5 of 5 at an offset (+1, -2, +4, \u2026)"


def test_blank_repeats_blanks_a_leading_cell_only_when_those_before_it_repeat():
    rows = [("p", "a", "1"), ("p", "a", "2"), ("p", "b", "3"), ("q", "b", "4"), ("q", "b", "4")]
    assert list(blank_repeats(rows, leading=2)) == [
        ("p", "a", "1"),
        ("", "", "2"),
        ("", "b", "3"),
        ("q", "b", "4"),
        ("", "", "4"),
    ]


def test_file_and_hunk_rows_cover_the_same_files(site, patches):
    plan = plan_of(site, patches)
    files = [(row[1], int(row[2])) for row in plan_file_rows(plan)]
    hunks = [row[1] for row in plan_hunk_rows(plan)]
    assert files == [(path, hunks.count(path)) for path in dict.fromkeys(hunks)]
