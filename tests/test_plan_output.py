"""The plan as `apply` shows it: aligned rows per file (per hunk with -v) under each patch's
heading, fitted to a terminal; piped, the same lines (no colour, no rule, no padding); JSON unchanged."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest
from helpers import make_patch, write_library, write_tree
from rich.console import Console

from patchkit.cli.ui.console import UI
from patchkit.cli.ui.plan import (
    PLAN_FILE_HEADER,
    PLAN_HUNK_HEADER,
    file_rows,
    hunk_rows,
    offsets_note,
    plain_plan,
    plan_sections,
    show_plan,
    shown_columns,
)
from patchkit.series.patchfile import parse_patch
from patchkit.series.plan import plan_apply

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


def terminal_ui(out: io.StringIO, *, verbose: int = 0, width: int = 200, **console) -> UI:
    """A UI whose stdout is a terminal `width` columns wide, written into `out`."""
    ui = UI(verbose=verbose)
    ui.plain = False
    ui.out = Console(file=out, force_terminal=True, width=width, markup=False, highlight=False, **console)
    return ui


def terminal_text(plan, *, verbose: int = 0, width: int = 200) -> str:
    out = io.StringIO()
    show_plan(terminal_ui(out, verbose=verbose, width=width), plan, dry_run=True)
    return re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())


@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_piped_plan_is_the_terminals_plan_without_colour_rule_or_padding(run, site, patches, library, verbose):
    # issue 22 (trial 11): piped, apply printed a tab-separated row per hunk, unlike the terminal's plan
    shift_second_hunk(site)
    result = run("apply", "--dry-run", *verbose, "--target", site, "--patches", library)
    assert result.exit_code == 0, result.output
    piped = result.stdout.splitlines()
    start = piped.index("plan: would change 4 file(s)")
    drawn = terminal_text(plan_of(site, patches), verbose=len(verbose), width=200).splitlines()
    terminal = [line for line in drawn if set(line.strip()) != {"\u2500"}]
    assert piped[start : start + len(terminal)] == terminal, (piped, terminal)
    assert piped[start + len(terminal)] == ("checks" if verbose else piped[-1])  # what follows the plan
    assert piped[-1].startswith("dry run: 4 file(s) would change")
    assert all(line == line.rstrip() for line in piped) and "\t" not in result.stdout
    assert "\u2500" not in result.stdout and "\x1b" not in result.stdout


def test_piped_hunk_rows_agree_with_the_engine_placements(site, patches):
    shift_second_hunk(site)
    plan = plan_of(site, patches)
    rows = plain_plan("plan", PLAN_HUNK_HEADER, plan_sections(plan, hunk_rows)).splitlines()[2:]
    expected = []
    for step in plan.steps:
        expected.append(f"{step.patch.name}  {step.state}")
        for f in step.files:
            for i, p in enumerate(f.placements, 1):
                note = f"offset {p.offset:+d}" if p.offset else ""
                expected.append(" ".join([f.patch.path if i == 1 else "", f"#{i} at line {p.line}", note]).split())
    assert [row if row.endswith(("apply", "applied")) else row.split() for row in rows] == expected


def test_terminal_shows_each_patch_as_a_heading_and_one_row_per_file(site, patches):
    shift_second_hunk(site)
    lines = terminal_text(plan_of(site, patches)).splitlines()
    assert lines[0] == "plan: would change 4 file(s)"
    assert lines[1].split() == ["file", "hunks", "lines", "note"]
    assert set(lines[2].strip()) == {"\u2500"}
    assert lines[3] == "0001-change.patch  apply"
    assert re.fullmatch(rf"  {re.escape(GONE)} +1  1 +deleted", lines[4])
    assert re.fullmatch(rf"  {re.escape(LONG)} +2  2\u201350 +1 of 2 at an offset \(\+3\)", lines[5])
    assert re.fullmatch(rf"  {re.escape(NEW)} +1  1 +new file", lines[6])
    assert lines[7] == "0002-change.patch  apply"
    assert re.fullmatch(rf"  {re.escape(SHORT)} +1  1", lines[8])
    assert len(lines) == 9
    # the columns line up: each count ends where "hunks" ends, each note starts where "note" does
    hunks_end = lines[1].index("hunks") + len("hunks")
    assert {len(re.sub(r"(\d+)  \d.*", r"\1", line)) for line in lines[4:7] + lines[8:]} == {hunks_end}
    assert {lines[4].index("deleted"), lines[5].index("1 of 2"), lines[6].index("new file")} == {lines[1].index("note")}


@pytest.mark.parametrize("width", [80, 120])
def test_the_header_names_only_filled_columns_and_the_states_stand_in_one_column(tmp_path, scratch, width):
    """Issue 22, trial item E: with no note in any row, "note" headed nothing and each patch's state
    stood after its own name, one column off "note" or under "lines", as if it were their cell. The
    header names the columns its rows fill; the states start at one column, after the widest
    name, the rule under the header running to them; piped, the same. A name that reaches the rows'
    last column puts them past the rows' columns, named in the header (new-user 16, 6f)."""
    site = write_tree(tmp_path / "names", files={SHORT: "x = 1\n", GONE: "old = 1\n"})
    named = {
        "0001-a-change-whose-name-is-longer-than-its-rows.patch": make_patch(scratch, site, {SHORT: "x = 2\n"}),
        "0002-short.patch": make_patch(scratch, site, {GONE: "old = 2\n"}),
    }
    plan = plan_apply(site, [parse_patch(data, name) for name, data in named.items()])
    lines = terminal_text(plan, width=width).splitlines()
    assert lines[1].split() == ["file", "hunks", "lines", "state"]
    headings = [line for line in lines if line.startswith("0")]
    assert [line.split() for line in headings] == [[name, "apply"] for name in named]
    assert {line.index("apply") for line in headings} == {len(max(named, key=len)) + 2}
    assert len(lines[2]) == len(headings[0]) == len(lines[1]) and set(lines[2].strip()) == {"\u2500"}
    piped = plain_plan(
        "plan: would change 2 file(s)", *shown_columns(PLAN_FILE_HEADER, plan_sections(plan, file_rows), (1,))
    )
    assert piped.splitlines() == [line for line in lines if line != lines[2]]


def test_terminal_with_v_shows_one_row_per_hunk_and_each_file_once(site, patches):
    shift_second_hunk(site)
    plan = plan_of(site, patches)
    lines = terminal_text(plan, verbose=1).splitlines()
    assert lines[1].split() == ["file", "hunk", "note"]
    rows = [line for line in lines[3:] if line.startswith("  ")]
    assert len(rows) == sum(len(f.placements) for s in plan.steps for f in s.files) == 5
    assert sum(LONG in row for row in rows) == 1
    first, second = (row for row in rows if "at line" in row and (LONG in row or row.strip().startswith("#2")))
    assert first.split() == [LONG, "#1", "at", "line", "2"]
    assert second.split() == ["#2", "at", "line", "50", "offset", "+3"]
    assert second.index("#2") == first.index("#1")


def test_terminal_shows_an_applied_or_conflicting_patch_as_a_heading_without_rows(site, patches):
    (site / LONG).write_text(edited(LONG_PY, 5, 50))
    (site / NEW).write_text("n = 1\n")
    (site / GONE).unlink()
    (site / SHORT).write_text("x = 9\n")
    lines = terminal_text(plan_of(site, patches)).splitlines()
    assert lines[0] == "plan: would change 0 file(s)"
    assert lines[3:] == ["0001-change.patch  applied", "0002-change.patch  conflict"]


def test_terminal_colours_the_state(site, patches):
    out = io.StringIO()
    show_plan(terminal_ui(out, color_system="standard"), plan_of(site, patches), dry_run=False)
    assert "changes 4 file(s)" in out.getvalue()
    assert "\x1b[33mapply\x1b[0m" in out.getvalue()  # yellow, as `status` shows a pending patch


def test_terminal_narrows_the_file_column_to_fit_and_breaks_a_longer_path_after_a_slash(tmp_path, scratch):
    deep = "vllm/" + "/".join(["a_rather_long_directory_name"] * 4) + "/module.py"
    site = write_tree(tmp_path / "deep", files={deep: "a = 1\n", SHORT: "x = 1\n"})
    patch = make_patch(scratch, site, {deep: "a = 2\n", SHORT: "x = 2\n"})
    lines = terminal_text(plan_of(site, [patch]), width=80).splitlines()
    assert len(deep) > 80
    assert all(len(line) <= 80 for line in lines), lines  # issue 22: nothing runs past the terminal
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("vllm/a_rather"))
    pieces = [lines[first].split()[0]]
    for line in lines[first + 1 :]:
        if pieces[-1].endswith(".py"):
            break
        pieces.append(line.strip())
    assert "".join(pieces) == deep and all(piece.endswith(("/", ".py")) for piece in pieces), lines
    assert lines[first].endswith("      1  1") and next(line for line in lines if SHORT in line).endswith("      1  1")


def test_a_conflict_is_a_row_with_its_state_then_the_error(run, site, library):
    (site / SHORT).write_text("x = 9\n")
    result = run("apply", "--dry-run", "--target", site, "--patches", library)
    assert result.exit_code == 1
    assert "0002-change.patch  conflict" in result.stdout.splitlines()
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


def test_file_hunk_and_piped_rows_cover_the_same_files_and_hunks(site, patches):
    plan = plan_of(site, patches)
    piped = [(step.patch.name, f.patch.path) for step in plan.steps for f in step.files for _ in f.placements]
    per_file = [(name, row[0], int(row[1])) for name, _, rows in plan_sections(plan, file_rows) for row in rows]
    per_hunk = [(name, len(rows)) for name, _, rows in plan_sections(plan, hunk_rows)]
    assert per_file == [(name, path, piped.count((name, path))) for name, path in dict.fromkeys(piped)]
    assert per_hunk == [(name, sum(1 for n, _ in piped if n == name)) for name in dict.fromkeys(n for n, _ in piped)]


def test_a_reader_that_stops_early_ends_the_run_quietly(tmp_path, scratch):
    """`apply --dry-run | head`: exit 141 (the reader went away, as a shell reports SIGPIPE) with nothing
    on stderr (no internal error)."""
    lines = "".join(f"v{i} = {i}\n" for i in range(20_000))
    site = write_tree(tmp_path / "big", files={LONG: lines})
    patch = make_patch(scratch, site, {LONG: lines.replace("0 = ", "0 = -")})
    (tmp_path / "big.patch").write_bytes(patch)
    command = [
        sys.executable,
        "-m",
        "patchkit",
        "apply",
        "--dry-run",
        "--target",
        site,
        "--patch",
        tmp_path / "big.patch",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().startswith(b"vLLM")
        process.stdout.close()
        errors = process.stderr.read()
    assert process.returncode == 141 and errors == b""


def test_a_reader_that_stops_early_is_the_same_exit_through_rich(tmp_path, site, library):
    """`list` prints through rich in a pipe: its broken pipe ends the run the same way (rich's own
    handler would exit 1, "a check failed")."""
    env = {**os.environ, "FORCE_COLOR": "1"}  # rich even on a pipe
    command = [sys.executable, "-m", "patchkit", "list", "--patches", library]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        errors = process.stderr.read()
    assert process.returncode == 141 and b"Traceback" not in errors and b"internal error" not in errors


def test_closed_standard_streams_are_no_internal_error(site, library):
    done = subprocess.run(
        f'"{sys.executable}" -m patchkit status --target "{site}" --patches "{library}" >&- 2>&-', shell=True
    )
    assert done.returncode == 0


REPORT_RICH = (
    "import atexit, sys; "
    "atexit.register(lambda: sys.stderr.write('rich imported' if 'rich' in sys.modules else 'no rich')); "
    "from patchkit.cli.main import main; main()"
)


@pytest.mark.parametrize("force_color", [None, "1"])
def test_piped_text_output_needs_no_rich_unless_colour_is_forced(tmp_path, site, library, force_color):
    """A pipe gets plain lines without importing rich; FORCE_COLOR makes rich (and patchkit)
    treat it as a terminal."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR")}
    if force_color:
        env.update(FORCE_COLOR=force_color, TERM="xterm-256color")
    command = [sys.executable, "-c", REPORT_RICH, "apply", "--dry-run", "--target", site, "--patches", library]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    if force_color:
        assert done.stderr == "rich imported"
        shown = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)
        assert "\x1b[" in done.stdout and "0001-change.patch  apply" in shown.splitlines() and "\t" not in shown
    else:
        assert done.stderr == "no rich"
        lines = done.stdout.splitlines()
        assert lines[0].startswith("vLLM     ") and lines[2] == "set      demo  series 0.16.0"
        assert lines[3] == "plan: would change 4 file(s)" and lines[4].split() == ["file", "hunks", "lines", "note"]
        assert len(lines) == 12 and lines[-1].startswith("dry run: 4 file(s) would change")


def test_a_pure_rename_without_hunks_is_shown_in_every_view(tmp_path):
    site = write_tree(tmp_path / "rename", files={SHORT: "x = 1\n"})
    moved = "vllm/layers/moved.py"
    diff = f"diff --git a/{SHORT} b/{moved}\nsimilarity index 100%\nrename from {SHORT}\nrename to {moved}\n"
    plan = plan_apply(site, [parse_patch(diff.encode(), "rename.patch")])
    assert plan.changed_paths == [SHORT, moved]
    piped = plain_plan("plan", PLAN_HUNK_HEADER, plan_sections(plan, hunk_rows)).splitlines()[2:]
    assert piped[0] == "rename.patch  apply" and re.fullmatch(rf"  {moved} +renamed from {SHORT}", piped[1])
    assert re.fullmatch(rf"  {moved} +0 +renamed from {SHORT}", terminal_text(plan).splitlines()[4])
    assert re.fullmatch(rf"  {moved} +renamed from {SHORT}", terminal_text(plan, verbose=1).splitlines()[4])


def test_a_reader_that_stops_early_ends_diff_with_141(tmp_path, scratch):
    """New-user trial 12, item 4: `patchkit diff | head -1` exited 0: its one write of the whole diff
    took a short write, whose EPIPE was lost. Written in flushed chunks, the reader gone ends it
    with 141, as the exit codes say, and nothing on stderr."""
    lines = "".join(f"v{i} = {i}\n" for i in range(20_000))
    site = write_tree(tmp_path / "big", files={LONG: lines})
    patch = make_patch(scratch, site, {LONG: lines.replace("0 = ", "0 = -")})
    assert len(patch) > 2 * 65536  # more than a pipe holds
    library = write_library(tmp_path / "lib", {"0.16.0": [patch]}, upstream=None)
    script = '"$0" -m patchkit diff --target "$1" --patches "$2" | head -1 >/dev/null; exit "${PIPESTATUS[0]}"'
    for _ in range(3):
        done = subprocess.run(["bash", "-c", script, sys.executable, site, library], capture_output=True, timeout=120)
        assert done.returncode == 141 and done.stderr == b"", done.stderr
