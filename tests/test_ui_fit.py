"""Output that fits (issue 22): at 80 columns nothing is cut mid-word (a long name is shortened
with an ellipsis, text wrapped at spaces); piped output has no padding after a line's last word."""

from __future__ import annotations

import io
import itertools
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import (
    SPEC_PY,
    assert_clean_failure,
    make_patch,
    on_a_terminal,
    patched_spec,
    run_cli,
    write_library,
    write_tree,
)
from rich.console import Console

from patchkit.cli.ui.console import UI
from patchkit.cli.ui.text import fit_table, fitted, plain_table

SPEC = "vllm/config/spec.py"
SPEC_EDITED = patched_spec()
LONG = "vllm/model_executor/models/a_module_whose_name_is_longer_than_any_column_allows.py"
DESCRIPTION = "Description: " + " ".join(["a description long enough to need wrapping at eighty columns"] * 2)
CONTROL = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]|\r")  # styles, the cursor; \r\n read as \n


def in_a_terminal(*args: object, width: int = 80) -> tuple[int, str]:
    """`python -m patchkit ARGS` on a terminal `width` columns wide: its exit code and what it drew,
    control sequences taken out."""
    code, drawn = on_a_terminal(list(args), width=width, drop_env=("COLUMNS", "LINES", "FORCE_COLOR"))
    return code, CONTROL.sub("", drawn.decode())


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory with a short path: its commands wrap like a user's, not like pytest's long paths."""
    made = Path(tempfile.mkdtemp(prefix="pk-", dir="/tmp"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def long_tree(tmp_path: Path) -> tuple[Path, Path]:
    tree = write_tree(tmp_path / "site", files={LONG: "VALUE = 1\n"})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    patch = make_patch(scratch, tree, {LONG: "VALUE = 2\n"}, header=DESCRIPTION + "\n")
    return tree, write_library(tmp_path / "lib", {"0.16.0": [patch]})


def words(text: str) -> set[str]:
    return set(text.split())


def _a_boundary_piece(piece: str, whole: set[str]) -> bool:
    """`piece` is a name broken where a name breaks: after a / _ or -, never mid-word."""
    for word in whole:
        at = word.find(piece)
        while at >= 0:
            starts = at == 0 or word[at - 1] in "/_-"
            ends = at + len(piece) == len(word) or piece[-1] in "/_-"
            if starts and ends:
                return True
            at = word.find(piece, at + 1)
    return False


def assert_fits_without_cut_words(shown: str, whole: str, width: int = 80) -> None:
    """Every line within `width`; every word shown is a whole word of `whole` (the same answer
    piped, never wrapped) or a piece of one broken after a / _ or -; nothing elided."""
    for line in shown.splitlines():
        assert len(line) <= width, line
        assert line == line.rstrip(), repr(line)
    assert "\u2026" not in shown, shown
    whole_words = words(whole)
    cut = [word for word in words(shown) - whole_words if set(word) != {"\u2500"}]
    assert all(_a_boundary_piece(word, whole_words) for word in cut), cut


def assert_no_word_alone(shown: str, width: int = 80) -> None:
    """No short word on a line of its own that the text goes on under (`reads`, `for`, `(through`
    one per line): text wraps to a sane width. A label whose one-word value (a path) could not sit
    beside it within `width` is not alone: its length follows the test's temporary directory."""
    lines = shown.splitlines()
    indent = [len(line) - len(line.lstrip()) for line in lines]
    alone = [
        line
        for i, line in enumerate(lines[:-1])
        if len(line.split()) == 1
        and len(line.strip()) < 10
        and len(lines[i + 1].split()) == 1
        and set(lines[i + 1].strip()) != {"\u2500"}  # a header over the table's rule
        and indent[i + 1] == indent[i]
        and len(line.rstrip()) + 1 + len(lines[i + 1].strip()) <= width
    ]
    assert not alone, (alone, shown)


@pytest.mark.parametrize("width", [80, 60])
@pytest.mark.parametrize("argv", [["status", "-v"], ["verify", "-v"], ["status"], ["apply", "--dry-run"]])
def test_no_word_is_cut_nor_elided_and_text_keeps_a_sane_width(long_tree, argv, width):
    # issue 22 (trial 11): `vllm/model_…odels/deepseek_v2.py`, and a detail column one word per line
    tree, library = long_tree
    code, shown = in_a_terminal(*argv, "--target", tree, "--patches", library, width=width)
    piped = run_cli(*argv, "--target", tree, "--patches", library)
    assert code == 0 and piped.returncode == 0, shown
    assert ("\u2500" in shown) == (argv != ["status"])  # drawn for a terminal, not the piped text
    assert_fits_without_cut_words(shown, piped.stdout, width)
    assert_no_word_alone(shown, width)


@pytest.mark.parametrize("width", [80, 60])
def test_the_library_list_keeps_its_names_whole_or_broken_at_their_words(width):
    # issue 22 (trial 11): `0001-speculativ…eek-kimi-eagle3-targets.patch`, `KimiK25Fo…tionalGeneration`
    code, shown = in_a_terminal("list", width=width)
    piped = run_cli("list")
    assert code == 0 and piped.returncode == 0, shown
    labels = "state: description:"  # a column moved under its row says its name
    assert_fits_without_cut_words(shown, piped.stdout + labels, width)
    assert "KimiK25ForConditionalGeneration" in shown.split()
    assert "0001-speculative-accept-deepseek-kimi-eagle3-targets.patch" in shown.split()
    table = shown[: shown.index("a cell is")]  # the legend after it is a sentence
    assert_no_word_alone(table, width)


NAMED = "0001-speculative-accept-deepseek-kimi-eagle3-targets.patch"


@pytest.mark.parametrize("width", [80, 60])
def test_verify_v_keeps_a_patch_name_whole_and_says_the_columns_under_it(long_tree, width):
    """Issue 22, trial item A: at 80 columns verify -v's patches table broke a patch's name in two
    (`0001-speculative-accept-deepseek-` / `kimi-eagle3-targets.patch`) to keep its files beside it.
    A name a line holds stays whole; the columns it leaves no room for go under the row, named."""
    tree, library = long_tree
    series = library / "demo" / "0.16.0"
    (series / "0001-change.patch").rename(series / NAMED)
    (series / "series").write_text(NAMED + "\n")
    code, shown = in_a_terminal("verify", "-v", "--target", tree, "--patches", library, width=width)
    assert code == 0, shown
    lines = shown.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("0001"))
    assert lines[row].split()[0] == NAMED
    under = " ".join(lines[row + 1 : row + 8]).split()
    assert "files:" in under and "description:" in under, shown
    assert all(len(line) <= width for line in lines), shown


@pytest.mark.parametrize("argv", [["status", "-v"], ["verify", "-v"], ["list"]])
def test_piped_lines_end_at_their_last_word(long_tree, argv):
    tree, library = long_tree
    target = [] if argv == ["list"] else ["--target", tree]
    done = run_cli(*argv, *target, "--patches", library)
    assert_clean_failure(done, 0)
    assert LONG in done.stdout or argv == ["list"]
    padded = [line for line in done.stdout.splitlines() if line != line.rstrip()]
    assert not padded, padded


def test_a_table_fitted_to_80_columns_keeps_a_name_whole_and_puts_what_has_no_room_under_its_row():
    name = "0001-speculative-accept-deepseek-kimi-eagle3-targets.patch"
    rows = [[name, "applied", LONG, DESCRIPTION]]
    table = fit_table(["patch", "state", "file", "description"], rows, 80)
    assert sum(table.widths) + 2 * (len(table.widths) - 1) <= 80
    assert table.rows[1] == [[name], ["applied"]]  # the name whole: the path has no room beside it
    below = table.below[1]
    path = below[: next(i for i, line in enumerate(below) if "description:" in line)]
    assert path[0].startswith("    file:") and "".join(line.strip() for line in path)[len("file:") :] == LONG
    assert all(line.endswith(("/", ".py")) for line in path[1:]), path
    said = " ".join(below[len(path) :]).split()
    assert said == ["description:", *DESCRIPTION.split()]  # every word kept, wrapped at spaces
    assert all(line.startswith("    ") and len(line) <= 80 for line in below)
    assert all(len(line.split()) > 1 for line in below[len(path) : -1]), below


def test_a_matrix_breaks_its_set_names_over_short_cells_to_fit_60_columns():
    # three sets in the library (session 12): `vLLM  eagle3  deepseek-tool-calls  kimi-k2-tool-calls` was 67 wide
    columns = ["vLLM", "eagle3", "deepseek-tool-calls", "kimi-k2-tool-calls"]
    rows = [[">=0.11.1,<0.13.0", "applied", "applied", "upstream"], ["0.11.0", "-", "-", "applied"]]
    table = fit_table(columns, rows, 60)
    assert sum(table.widths) + 2 * (len(table.widths) - 1) <= 60
    header, *body = table.rows
    assert ["".join(lines) for lines in header] == columns  # broken after a -, never cut
    assert all(len(lines) == 1 for row in body for lines in row)  # a cell is whole on its line


def test_fitted_text_wraps_at_spaces_with_a_hanging_indent():
    lines = fitted("fix: " + "revert the tree and apply again " * 4, 40, first=2, indent=7)
    assert all(len(line) <= 40 for line in lines) and lines[0].startswith("  fix: ")
    assert all(line.startswith(" " * 7) for line in lines[1:])
    assert fitted("never wrapped when piped " * 10, None) == ["never wrapped when piped " * 10]
    path = "/a/path/" + "d" * 80 + "/to/copy"
    assert fitted(f"use --target {path} next", 40) == ["use --target", f"  {path}", "  next"]
    broken_path = fitted(f"use --target {path} next", 40, shorten=True)  # broken after a /, never mid-word
    assert broken_path[1:3] == ["  /a/path/", "  " + "d" * 37 + "\u2026"] and broken_path[3] == "  to/copy next", (
        broken_path
    )
    command = "`patchkit apply --target /a/b`"  # pasted from there: one line, whole, where a line holds it
    assert fitted(f"fix: run {command} now", 40, shorten=True) == [f"fix: run {command}", "  now"]
    # wider than any line: broken between its words with shell continuations, never mid-word, never
    # inside quotes: pasted, it is the one command (new-user 14 item 22: a hard break ran another one)
    wider = f"`patchkit apply --target {path}`"
    assert fitted(f"fix: run {wider} now", 40, shorten=True) == [
        "fix: run",
        "  `patchkit apply --target \\",
        "  /a/path/\\",  # wider than the terminal: broken after a /, the shell joins it again (11m)
        "d" * 80 + "/\\",  # a piece with nowhere to break: whole (the terminal folds it)
        "to/copy`",
        "  now",
    ]


def _pasted(lines: list[str], tmp_path: Path) -> list[str]:
    """The words bash runs for the command a person selects between the backquotes of `lines`."""
    pasted = "\n".join(lines).split("`")[1]
    echo = tmp_path / "words.py"
    echo.write_text("import sys, json\nprint(json.dumps(sys.argv[1:]))\n")
    shell = subprocess.run(
        ["bash", "-c", f"{sys.executable} {echo} " + pasted], capture_output=True, text=True, check=True
    )
    return json.loads(shell.stdout)


def test_a_wrapped_command_never_ends_a_line_between_an_option_and_its_value(tmp_path):
    """newuser18 5f, newuser19 3e: a stock tree's merged fix wrapped as `… --set eagle3 --set \\` /
    `kimi-k2-tool-calls`: a line ends between arguments only."""
    words = ["patchkit", "apply", "--target", "/tmp/nu18/work/stockp", "--set", "eagle3", "--set", "kimi-k2-tool-calls"]
    lines = fitted(f"fix (all 5 above): run `{shlex.join(words)}`", 80, first=2, indent=7, shorten=True)
    assert all(len(line) <= 80 for line in lines) and len(lines) == 3, lines
    assert not any(re.search(r"(--set|--target) \\$", line) for line in lines), lines
    assert lines[-1].strip() == "--set kimi-k2-tool-calls`", lines
    assert _pasted(lines, tmp_path) == words


def test_a_file_name_wider_than_the_terminal_is_broken_where_a_pasted_command_still_works(tmp_path):
    """11m (newuser16 6e, newuser17 5g): the patched wheel's ~99-character file name and its path
    were folded mid-word by the terminal; broken after a / or a - + . _ with a `\\` and no
    indent, bash joins the pieces into the one path."""
    name = "vllm-0.16.0+patchkit.eagle3.deepseek.tool.calls.kimi.k2.tool.calls-cp38-abi3-manylinux1_x86_64.whl"
    words = ["pip", "install", "--no-deps", f"/tmp/nu17/work/dist/{name}"]
    lines = fitted(f"note: next: install it over the stock vLLM of that release: `{shlex.join(words)}`", 80)
    assert all(len(line) <= 80 for line in lines) and len(lines) >= 4, lines
    assert all(re.search(r"[/\-+._]\\$", line) for line in lines[2:-1]), lines  # the word's own breaks
    assert _pasted(lines, tmp_path) == words


def test_a_wrapped_command_pastes_as_the_same_command(tmp_path):
    spec = '{"method": "eagle3", "model": "./drafter", "num_speculative_tokens": 5}'
    words = ["patchkit", "preflight", "--target", "vllm-stock", "--", "vllm", "serve", "deepseek-ai/DeepSeek-V3"]
    words += ["--speculative-config", spec, "--served-model-name", "a b"]
    lines = fitted(f"hint: `{shlex.join(words)}` checks it in full", 80)
    assert all(len(line) <= 80 for line in lines[:-1]) and len(lines) > 3, lines
    pasted = "\n".join(lines).split("`")[1]  # what a person selects between the backquotes
    echo = tmp_path / "words.py"
    echo.write_text("import sys, json\nprint(json.dumps(sys.argv[1:]))\n")
    shell = subprocess.run(
        ["bash", "-c", f"{sys.executable} {echo} " + pasted.removeprefix("patchkit ")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(shell.stdout) == words[1:], pasted


def test_a_plain_table_pads_no_line_past_its_last_cell():
    table = plain_table(["a", "b"], [["x", ""], ["longer", "y"]], "title")
    assert table == "title\na       b\nx\nlonger  y\n"


def test_a_fix_is_never_shortened_it_is_copied(tmp_path, scratch):
    tree = write_tree(tmp_path / ("a-directory-name-long-enough-to-fill-a-line-" * 2) / "site")
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: SPEC_EDITED})]})
    assert run_cli("apply", "--target", tree, "--patches", library).returncode == 0
    (tree / SPEC).write_text((tree / SPEC).read_text() + "# an edit\n")
    code, shown = in_a_terminal("status", "--target", tree, "--patches", library)
    assert code == 1, shown
    assert re.sub(r"\s+", "", f"--target {tree} ") in re.sub(r"\s+", "", shown)  # the fix's command, all of it


def test_a_path_in_a_sentence_is_never_shortened_it_is_copied():
    """A path a finding names is copied from there: whole on a line of its own, not elided (a
    path wider than the terminal itself is the only one still shortened)."""
    path = "/root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V3/snapshots/0123abcd"
    lines = fitted(f"fix: put config.json in {path}", 80, first=2, indent=7, shorten=True)
    assert path in [line.strip() for line in lines] and all(len(line) <= 80 for line in lines), lines
    table = fit_table(["file", "detail"], [[path, f"reads {path}"]], 40)  # a table's cells are fitted: broken at a /
    assert "".join(table.rows[1][0]) == path and all(len(line) <= 40 for line in table.rows[1][0])
    assert "".join(line.strip() for line in table.below[1]) == f"reads{path}", table.below
    assert all(len(line) <= 40 for line in table.below[1])


@pytest.mark.parametrize("width", [60, 64, 68, 72, 76, 80])
def test_a_short_aside_is_never_wrapped_inside_its_parentheses(short_tmp, scratch, width):
    # issue 22 (trial 11): "verify: FAILED: ... (-v shows" / "each)", "(keeps a copy of the" / "edits)"
    tree = write_tree(short_tmp / "site")
    library = write_library(short_tmp / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: SPEC_EDITED})]})
    assert run_cli("apply", "--target", tree, "--patches", library).returncode == 0
    (tree / SPEC).write_text((tree / SPEC).read_text() + "# an edit\n")
    code, shown = in_a_terminal("verify", "--target", tree, "--patches", library, width=width)
    assert code == 1, shown
    lines = [line.strip() for line in shown.splitlines()]
    for aside in ("(keeps a copy of the edits),", "(-v shows each)"):
        assert any(aside in line for line in lines), (aside, shown)


def test_a_note_wraps_at_spaces_never_inside_a_short_aside():
    """New-user trial 14, item 22: a note on stderr was folded by the terminal's width inside its
    asides (`eagle3 (not` / `applied), ...`) and its next line not indented."""
    ui = UI()
    out = io.StringIO()
    ui.err = Console(file=out, force_terminal=True, width=80, markup=False, highlight=False, color_system=None)
    ui.note("not used by this launch: eagle3 (not applied), deepseek-tool-calls (not applied), kimi-k2-tool-calls")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(len(line) <= 80 for line in lines), lines
    assert all(line.count("(") == line.count(")") for line in lines), lines
    assert lines[1].startswith("  ") and not lines[1].startswith("   "), lines


def test_the_words_after_a_broken_path_go_on_after_its_last_piece(short_tmp):
    """New-user trial 16, 6a: preflight's missing-revision finding broke the cache path after a /
    and left `absent;` alone on the line under `config.json`, though it fitted after it."""
    cache = short_tmp / "a-cache-directory" / "huggingface"
    (cache / "hub" / "models--deepseek-ai--DeepSeek-V3" / "snapshots").mkdir(parents=True)
    tree = write_tree(short_tmp / "site")
    command = ["vllm", "serve", "deepseek-ai/DeepSeek-V3", "--revision", "v2"]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HOME", str(cache))
        code, shown = in_a_terminal("preflight", "--target", tree, "--no-import", "--", *command)
    assert code == 4, shown
    lines = shown.splitlines()
    tail = next(line for line in lines if "absent;" in line.split())
    assert tail.split()[0].endswith("config.json"), shown
    assert tail.split()[1:3] == ["absent;", "vLLM"], shown  # the sentence goes on after the path
    assert all(len(line) <= 80 for line in lines), shown
    assert_no_word_alone(shown)


def test_a_warning_wraps_at_spaces_its_lines_after_the_first_indented():
    """New-user trial 16, 6b: a warning was folded by the terminal, its continuations at column 0
    (`is stale: discarded`), unlike every other wrapped line."""
    ui = UI()
    out = io.StringIO()
    ui.err = Console(file=out, force_terminal=True, width=80, markup=False, highlight=False, color_system=None)
    ui.warn("the record of deepseek-tool-calls: recorded 0.16.0, installed 0.17.1: the old record is stale: discarded")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(len(line) <= 80 for line in lines), lines
    assert lines[1].startswith("  ") and not lines[1].startswith("   "), lines


PARSER = "vllm/tool_parsers/a_tool_parser_module_named_at_leng.py"  # its row: a note under it
PARSER_PY = "".join(f"LINE_{n} = {n}\n" for n in range(40))
SERIES_NAMES = ["0001-a-tool-parser-streams-its-calls-from-the-whole-text.patch", "0002-short.patch"]


@pytest.mark.parametrize("argv", [["apply", "--dry-run"], ["apply"], ["apply", "--dry-run", "-v"]])
def test_a_plan_table_header_and_rule_span_its_rows_and_no_header_stands_alone(short_tmp, scratch, argv):
    """New-user trial 16, 6f (15, 11h): at 80 columns the plan's header and rule were narrower than
    the patch names' rows (their states under no header), and the `note` header stood alone on a
    second line over notes put under their rows."""
    stock = write_tree(scratch / "stock", files={PARSER: PARSER_PY, SPEC: SPEC_PY})
    first = make_patch(scratch, stock, {PARSER: PARSER_PY.replace("LINE_20 = 20", "LINE_20 = 21")})
    second = make_patch(scratch, stock, {SPEC: SPEC_EDITED})
    library = write_library(short_tmp / "lib", {"0.16.0": [first, second]})
    series = library / "demo" / "0.16.0"
    for old, new in zip(["0001-change.patch", "0002-change.patch"], SERIES_NAMES, strict=True):
        (series / old).rename(series / new)
    (series / "series").write_text("".join(name + "\n" for name in SERIES_NAMES))
    tree = write_tree(short_tmp / "site", files={PARSER: "EXTRA = 0\n" * 3 + PARSER_PY, SPEC: SPEC_PY})  # at an offset
    code, shown = in_a_terminal(*argv, "--target", tree, "--patches", library)
    assert code == 0, shown
    lines = shown.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"\u2500"})
    table = list(itertools.takewhile(lambda line: line.startswith(("000", "  ")), lines[rule + 1 :]))
    header = lines[rule - 1]
    assert header.split()[0] == "file" and header.split()[-1] == "state", shown  # the states' column named
    assert len(header) == len(lines[rule]) == max(map(len, table)) <= 80, shown  # as wide as the widest row
    headings = [line for line in table if line.startswith(("0001", "0002"))]
    assert len(headings) == 2 and {len(line) for line in headings} == {len(header)}, shown  # states under it
    assert all(line.endswith("apply") for line in headings), shown
    assert "offset +3" in shown and not [line for line in lines if line.strip() == "note"], shown


NESTED = 'CHOICES = {\n    "kinds": [\n        [\n            "hunyuan_v1_dense",\n            "llama",\n        ],\n    ],\n}\n'


@pytest.mark.parametrize("width", [60, 68, 76, 80])
def test_a_quoted_line_of_a_conflict_is_never_wrapped_inside_its_quotes(short_tmp, scratch, width):
    # new-user 20 4a / 21 3: `expected at line 695 '` / `"hunyuan_v1_dense",', found '...'` at 80
    # columns read as if expected and found differed in their indentation
    tree = write_tree(short_tmp / "site", files={SPEC: NESTED})
    patch = make_patch(scratch, tree, {SPEC: NESTED.replace('"llama",', '"llama",\n            "deepseek",')})
    library = write_library(short_tmp / "lib", {"0.16.0": [patch]})
    (tree / SPEC).write_text(NESTED.replace('"hunyuan_v1_dense",', '"hunyuan_v1_dense", "mymodel",'))
    code, shown = in_a_terminal("status", "--target", tree, "--patches", library, width=width)
    assert code == 1, shown
    lines = [line.strip() for line in shown.splitlines()]
    for quoted in ("'            \"hunyuan_v1_dense\",'", '\'            "hunyuan_v1_dense", "mymodel",\''):
        assert any(line.startswith(quoted) or f" {quoted}" in line for line in lines), (quoted, shown)
    assert all(len(line) <= width for line in shown.splitlines()), shown
