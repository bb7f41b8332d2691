"""The engine on small trees: placements, offsets, file kinds, line endings, bytes, states."""

from __future__ import annotations

import pytest
from helpers import SPEC_PY, make_patch, patched_spec, write_tree

from patchkit.base.enums import StepState
from patchkit.base.errors import BadInput
from patchkit.series import hunks
from patchkit.series.patchfile import parse_patch
from patchkit.series.plan import plan_apply, plan_revert

SPEC = "vllm/config/spec.py"


def test_plan_computes_new_content_in_memory_and_writes_nothing(tree, scratch):
    patch = parse_patch(make_patch(scratch, tree, {SPEC: patched_spec()}), "p")
    before = (tree / SPEC).read_bytes()
    plan = plan_apply(tree, [patch])
    assert plan.steps[0].state == StepState.WILL_CHANGE
    assert plan.changes == {SPEC: (before, patched_spec().encode())}
    assert (tree / SPEC).read_bytes() == before


def test_hunk_lands_at_an_offset_and_the_offset_is_reported(tree, scratch):
    patch = parse_patch(make_patch(scratch, tree, {SPEC: patched_spec()}), "p")
    (tree / SPEC).write_text("# one\n# two\n# three\n" + SPEC_PY)
    plan = plan_apply(tree, [patch])
    placement = plan.steps[0].files[0].placements[0]
    assert placement.offset == 3
    assert plan.changes[SPEC][1] == ("# one\n# two\n# three\n" + patched_spec()).encode()


def test_already_present_change_counts_as_applied_not_conflict(tree, scratch):
    patch = parse_patch(make_patch(scratch, tree, {SPEC: patched_spec()}), "p")
    (tree / SPEC).write_text(patched_spec())
    plan = plan_apply(tree, [patch])
    assert plan.steps[0].state == StepState.ALREADY_APPLIED
    assert plan.changes == {}


def test_conflict_names_file_hunk_expected_and_found_lines(tree, scratch):
    patch = parse_patch(make_patch(scratch, tree, {SPEC: patched_spec()}), "p")
    (tree / SPEC).write_text(SPEC_PY.replace('    "qwen",\n', '    "mistral",\n'))
    step = plan_apply(tree, [patch]).steps[0]
    assert step.state == StepState.CONFLICT
    message = step.mismatch.describe()
    assert SPEC in message and "hunk #1" in message
    assert "'    \"qwen\",'" in message and "'    \"mistral\",'" in message


def test_new_and_deleted_files(tree, scratch):
    patch = parse_patch(make_patch(scratch, tree, {"vllm/new/mod.py": "X = 1\n", "vllm/models/model.py": None}), "p")
    plan = plan_apply(tree, [patch])
    assert plan.changes["vllm/new/mod.py"] == (None, b"X = 1\n")
    assert plan.changes["vllm/models/model.py"][1] is None
    kinds = {f.patch.path: f.patch.kind for f in plan.steps[0].files}
    assert kinds == {"vllm/new/mod.py": "add", "vllm/models/model.py": "delete"}


def test_new_file_that_already_exists_with_other_content_conflicts(tree, scratch):
    patch = parse_patch(make_patch(scratch, tree, {"vllm/new.py": "X = 1\n"}), "p")
    (tree / "vllm/new.py").write_text("Y = 2\n")
    step = plan_apply(tree, [patch]).steps[0]
    assert step.state == StepState.CONFLICT and "already exists" in step.mismatch.describe()


def test_no_newline_at_end_of_file_both_ways(tmp_path, scratch):
    root = write_tree(tmp_path / "t", files={"vllm/a.py": "A = 1\nB = 2"})
    raw = make_patch(scratch, root, {"vllm/a.py": "A = 1\nB = 3\n"})
    assert b"\\ No newline at end of file" in raw
    plan = plan_apply(root, [parse_patch(raw, "p")])
    assert plan.changes["vllm/a.py"] == (b"A = 1\nB = 2", b"A = 1\nB = 3\n")
    raw_back = make_patch(
        scratch, write_tree(tmp_path / "u", files={"vllm/a.py": "A = 1\nB = 3\n"}), {"vllm/a.py": "A = 1\nB = 2"}
    )
    plan = plan_apply(tmp_path / "u", [parse_patch(raw_back, "p")])
    assert plan.changes["vllm/a.py"][1] == b"A = 1\nB = 2"


def test_crlf_file_keeps_its_line_endings(tmp_path, scratch):
    root = write_tree(tmp_path / "t", files={"vllm/a.py": b"A = 1\r\nB = 2\r\nC = 3\r\n"})
    raw = make_patch(scratch, root, {"vllm/a.py": b"A = 1\r\nB = 20\r\nC = 3\r\n"})
    plan = plan_apply(root, [parse_patch(raw, "p")])
    assert plan.changes["vllm/a.py"][1] == b"A = 1\r\nB = 20\r\nC = 3\r\n"


def test_crlf_diff_against_lf_file_is_a_conflict_not_a_silent_change(tmp_path, scratch):
    root = write_tree(tmp_path / "t", files={"vllm/a.py": b"A = 1\r\nB = 2\r\n"})
    raw = make_patch(scratch, root, {"vllm/a.py": b"A = 1\r\nB = 3\r\n"})
    (root / "vllm/a.py").write_bytes(b"A = 1\nB = 2\n")
    assert plan_apply(root, [parse_patch(raw, "p")]).steps[0].state == StepState.CONFLICT


def test_non_utf8_bytes_survive_untouched(tmp_path, scratch):
    latin = "# caf\xe9\nA = 1\n# na\xefve\n".encode("latin-1")
    root = write_tree(tmp_path / "t", files={"vllm/a.py": latin})
    raw = make_patch(scratch, root, {"vllm/a.py": latin.replace(b"A = 1", b"A = 2")})
    plan = plan_apply(root, [parse_patch(raw, "p")])
    assert plan.changes["vllm/a.py"][1] == latin.replace(b"A = 1", b"A = 2")


def test_revert_plan_restores_exact_bytes(tree, scratch):
    patch = parse_patch(make_patch(scratch, tree, {SPEC: patched_spec(), "vllm/n.py": "N = 1\n"}), "p")
    stock = (tree / SPEC).read_bytes()
    (tree / SPEC).write_text(patched_spec())
    (tree / "vllm/n.py").write_text("N = 1\n")
    plan = plan_revert(tree, [patch])
    assert plan.changes == {SPEC: (patched_spec().encode(), stock), "vllm/n.py": (b"N = 1\n", None)}


def test_series_where_a_later_patch_edits_an_earlier_ones_lines(tree, scratch):
    first = make_patch(scratch, tree, {SPEC: patched_spec()})
    step_tree = write_tree(scratch / "mid", files={SPEC: patched_spec()})
    second = make_patch(scratch, step_tree, {SPEC: patched_spec().replace('"deepseek"', '"deepseek_v3"')})
    patches = [parse_patch(first, "1"), parse_patch(second, "2")]
    plan = plan_apply(tree, patches)
    assert [s.state for s in plan.steps] == [StepState.WILL_CHANGE, StepState.WILL_CHANGE]
    assert b'"deepseek_v3"' in plan.changes[SPEC][1]


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (b"", "contains no diff"),
        (b"Description: nothing here\n", "contains no diff"),
        (b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,3 +1,3 @@\n x\n-y\n", "malformed"),
        (b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,1 +1,1 @@\n x\n", "changes nothing"),
        (b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-\x00\n+y\n", "binary"),
        (b"--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n", "unsafe path"),
        (b"--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-x\n+y\n", "unsafe path"),
        (b"--- a/setup.py\n+++ b/setup.py\n@@ -1 +1 @@\n-x\n+y\n", "outside the patched package"),
        (b"diff --git a/vllm/x.so b/vllm/x.so\nBinary files a/vllm/x.so and b/vllm/x.so differ\n", "binary"),
        # cut off after a header line: git ignores the unterminated line, unidiff reads an empty new file
        (b"diff --git a/vllm/x.py b/vllm/x.py\nnew file mode 100644", "looks truncated"),
        (b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-x\n+y", "looks truncated"),
        (
            b"diff --git a/vllm/l.py b/vllm/l.py\nnew file mode 120000\n--- /dev/null\n+++ b/vllm/l.py\n@@ -0,0 +1 @@\n+x\n",
            "only regular files",
        ),
    ],
)
def test_bad_diffs_are_clean_errors(raw, fragment):
    with pytest.raises(BadInput, match=fragment):
        parse_patch(raw, "bad.patch")


def test_dep3_header_is_parsed(tree, scratch):
    header = (
        "Description: Accept DeepSeek\n more text on a continuation line\nOrigin: patchkit\n"
        "Forwarded: not-needed\nApplied-Upstream: 0.18.0\nLast-Update: 2026-11-29\n"
    )
    patch = parse_patch(make_patch(scratch, tree, {SPEC: patched_spec()}, header=header), "p")
    assert patch.description == "Accept DeepSeek"
    assert patch.header["Applied-Upstream"] == "0.18.0"
    assert patch.header["Origin"] == "patchkit"


def test_insertion_at_the_top_is_recognised_as_applied_not_applied_twice(tmp_path, scratch):
    root = write_tree(tmp_path / "t", files={"vllm/a.py": "A = 1\nB = 2\nC = 3\nD = 4\n"})
    patch = parse_patch(make_patch(scratch, root, {"vllm/a.py": "import typing\nA = 1\nB = 2\nC = 3\nD = 4\n"}), "p")
    assert plan_apply(root, [patch]).steps[0].state == StepState.WILL_CHANGE
    (root / "vllm/a.py").write_text("import typing\nA = 1\nB = 2\nC = 3\nD = 4\n")
    plan = plan_apply(root, [patch])
    assert plan.steps[0].state == StepState.ALREADY_APPLIED and plan.changes == {}


def test_a_hunk_whose_first_lines_repeat_lands_where_its_whole_block_is(tmp_path):
    # the block's first 64 bytes (eight identical lines) are everywhere in the file; the block,
    # those lines and one that differs, only once, well before the line its header names
    same = b"value = 0  # padding\n"
    content = same * 40 + b"marker = 1\n" + same * 10 + b"marker = 2\n" + same * 200
    write_tree(tmp_path, files={"vllm/table.py": content})
    diff = (
        b"--- a/vllm/table.py\n+++ b/vllm/table.py\n@@ -200,9 +200,9 @@\n"
        + (b" " + same) * 8
        + b"-marker = 2\n+marker = 3\n"
    )
    plan = plan_apply(tmp_path, [parse_patch(diff, "m.patch")])
    assert plan.steps[0].state == StepState.WILL_CHANGE
    placement = plan.steps[0].files[0].placements[0]
    assert placement.line == 44 and placement.offset == 44 - 200
    assert plan.content("vllm/table.py") == content.replace(b"marker = 2", b"marker = 3")


class _CountingBytes(bytes):
    """bytes that count their whole-block comparisons (hunks._find's startswith)."""

    compares = 0

    def startswith(self, *args):
        type(self).compares += 1
        return super().startswith(*args)


@pytest.mark.parametrize("present", [False, True])
def test_a_block_whose_head_starts_every_line_is_searched_in_linear_time(present):
    """Every line is the block's first 64 bytes but the block is nowhere (or once, at the end):
    comparing the whole block at each of them was lines x block bytes (a hostile diff's hang)."""

    line = b"x" * 63 + b"\n"
    block = line * 300 + b"y\n"
    data = _CountingBytes(line * 5000 + (line * 300 + b"y\n" if present else b"") + line * 3)
    _CountingBytes.compares = 0
    found = hunks._find(data, block, 0, 0, 0)
    assert found == ((5000, 5000 * 64) if present else None)
    assert _CountingBytes.compares <= 10  # a few misses, then the whole block is searched for
