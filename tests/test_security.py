"""No escape from the tree, and every bad input a clean error with nothing written (issue: reliability)."""

from __future__ import annotations

import os
import re

import pytest
from helpers import SPEC_PY, make_patch, snapshot, write_tree

SPEC = "vllm/config/spec.py"


def _apply(run, tree, tmp_path, raw: bytes, *extra):
    patch = tmp_path / "input.diff"
    patch.write_bytes(raw)
    return run("apply", "--target", tree, "--patch", patch, *extra)


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (b"--- a/vllm/../../escape.py\n+++ b/vllm/../../escape.py\n@@ -0,0 +1 @@\n+x = 1\n", "unsafe path"),
        (b"--- /dev/null\n+++ b/../escape.py\n@@ -0,0 +1 @@\n+x = 1\n", "unsafe path"),
        (b"--- /dev/null\n+++ /tmp/escape.py\n@@ -0,0 +1 @@\n+x = 1\n", "unsafe path"),
        (b"--- /dev/null\n+++ b/setup.py\n@@ -0,0 +1 @@\n+x = 1\n", "outside the patched package"),
        (b"--- /dev/null\n+++ b/vllm\\..\\escape.py\n@@ -0,0 +1 @@\n+x = 1\n", "unsafe path"),
        (b"--- /dev/null\n+++ C:/vllm/escape.py\n@@ -0,0 +1 @@\n+x = 1\n", "unsafe path"),
        (b"--- /dev/null\n+++ b/vllm/./escape.py\n@@ -0,0 +1 @@\n+x = 1\n", "unsafe path"),
    ],
)
def test_traversal_and_absolute_paths_are_refused_with_nothing_created(run, tmp_path, raw, fragment):
    tree = write_tree(tmp_path / "site")
    before = _listing(tmp_path)
    result = _apply(run, tree, tmp_path, raw)
    assert result.exit_code == 2 and fragment in result.output
    assert _listing(tmp_path) == sorted([*before, "input.diff"])
    assert not (tmp_path / "escape.py").exists()


def test_symlink_escape_through_a_directory_is_refused(run, tmp_path):
    tree = write_tree(tmp_path / "site")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tree / "vllm" / "plugins").symlink_to(outside, target_is_directory=True)
    result = _apply(run, tree, tmp_path, b"--- /dev/null\n+++ b/vllm/plugins/evil.py\n@@ -0,0 +1 @@\n+x = 1\n")
    assert result.exit_code == 2 and "symlink" in result.output
    assert list(outside.iterdir()) == []


def test_write_through_a_symlinked_file_is_refused(run, tmp_path):
    tree = write_tree(tmp_path / "site")
    victim = tmp_path / "victim.py"
    victim.write_text("A = 1\n")
    (tree / "vllm" / "a.py").symlink_to(victim)
    result = _apply(run, tree, tmp_path, b"--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1 +1 @@\n-A = 1\n+A = 2\n")
    assert result.exit_code == 2 and "symlink" in result.output
    assert victim.read_text() == "A = 1\n"


def test_device_file_or_fifo_is_refused(run, tmp_path):
    tree = write_tree(tmp_path / "site")
    os.mkfifo(tree / "vllm" / "pipe.py")
    result = _apply(run, tree, tmp_path, b"--- /dev/null\n+++ b/vllm/pipe.py\n@@ -0,0 +1 @@\n+x = 1\n")
    assert result.exit_code in (1, 2) and "pipe.py" in result.output
    assert (tree / "vllm" / "pipe.py").is_fifo()


def test_a_set_may_declare_another_top_level_path(run, tmp_path, scratch):
    from helpers import write_library

    tree = write_tree(tmp_path / "site", files={SPEC: SPEC_PY, "vllm_extra/x.py": "X = 1\n"})
    raw = b"Description: x\n---\n--- a/vllm_extra/x.py\n+++ b/vllm_extra/x.py\n@@ -1 +1 @@\n-X = 1\n+X = 2\n"
    lib = write_library(tmp_path / "lib", {"0.16.0": [raw]})
    assert run("apply", "--target", tree, "--patches", lib).exit_code == 2
    manifest = lib / "demo" / "set.toml"
    manifest.write_text('roots = ["vllm", "vllm_extra"]\n' + manifest.read_text())
    assert run("apply", "--target", tree, "--patches", lib).exit_code == 0
    assert (tree / "vllm_extra/x.py").read_text() == "X = 2\n"


def _good_patch(tmp_path, tree) -> bytes:
    return make_patch(tmp_path / "scratch", tree, {SPEC: SPEC_PY.replace('"qwen"', '"deepseek"')})


BAD_INPUTS = {
    "truncated hunk": (lambda good: good[: good.rindex(b"\n", 0, len(good) - 2) + 1], 2, "malformed"),
    "wrong line counts": (
        lambda good: re.sub(rb"@@ -(\d+),(\d+)", lambda m: b"@@ -%s,%d" % (m[1], int(m[2]) + 5), good, count=1),
        2,
        "malformed",
    ),
    "garbage bytes": (lambda good: good + b"\xff\xfe garbage \x01\x02\n@@ -9,3 +9,3 @@\n", 2, "malformed"),
    "binary data": (lambda good: good.replace(b"deepseek", b"deep\x00seek"), 2, "binary"),
    "empty diff": (lambda good: b"", 2, "no diff"),
    "header only": (lambda good: b"Description: nothing\nOrigin: me\n", 2, "no diff"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_diffs_are_clean_errors_with_nothing_written(run, tmp_path, name):
    tree = write_tree(tmp_path / "site")
    (tmp_path / "scratch").mkdir()
    mutate, code, fragment = BAD_INPUTS[name]
    raw = mutate(_good_patch(tmp_path, tree))
    stock = snapshot(tree)
    result = _apply(run, tree, tmp_path, raw)
    assert result.exit_code == code, (name, result.output)
    assert fragment in result.output.lower()
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert snapshot(tree) == stock and not (tree / ".patchkit" / "state.json").exists()


def test_diff_for_another_version_is_a_conflict_naming_the_line(run, tmp_path):
    tree = write_tree(tmp_path / "site")
    (tmp_path / "scratch").mkdir()
    other = write_tree(tmp_path / "other", files={SPEC: SPEC_PY.replace('"llama"', '"llama4"')})
    raw = make_patch(tmp_path / "scratch", other, {SPEC: SPEC_PY.replace('"llama"', '"llama5"')})
    stock = snapshot(tree)
    result = _apply(run, tree, tmp_path, raw)
    assert result.exit_code == 1 and "llama4" in result.output and SPEC in result.output
    assert snapshot(tree) == stock


def test_mixed_line_endings_mismatch_is_named(run, tmp_path):
    tree = write_tree(tmp_path / "site", files={"vllm/a.py": b"A = 1\nB = 2\nC = 3\n"})
    raw = b"--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,3 +1,3 @@\n A = 1\r\n-B = 2\n+B = 3\n C = 3\n"
    result = _apply(run, tree, tmp_path, raw)
    assert result.exit_code == 1 and "line endings differ" in result.output
    assert (tree / "vllm/a.py").read_bytes() == b"A = 1\nB = 2\nC = 3\n"


def test_mixed_line_endings_that_match_the_file_apply_exactly(run, tmp_path):
    content = b"A = 1\r\nB = 2\nC = 3\r\n"
    tree = write_tree(tmp_path / "site", files={"vllm/a.py": content})
    raw = b"--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,3 +1,3 @@\n A = 1\r\n-B = 2\n+B = 3\n C = 3\r\n"
    assert _apply(run, tree, tmp_path, raw).exit_code == 0
    assert (tree / "vllm/a.py").read_bytes() == b"A = 1\r\nB = 3\nC = 3\r\n"


def test_non_utf8_file_is_patched_byte_exactly(run, tmp_path):
    content = "# caf\xe9\nA = 1\n".encode("latin-1")
    tree = write_tree(tmp_path / "site", files={"vllm/a.txt": content})
    raw = b"--- a/vllm/a.txt\n+++ b/vllm/a.txt\n@@ -1,2 +1,2 @@\n # caf\xe9\n-A = 1\n+A = 2\n"
    assert _apply(run, tree, tmp_path, raw).exit_code == 0
    assert (tree / "vllm/a.txt").read_bytes() == content.replace(b"A = 1", b"A = 2")


def test_apply_over_drift_is_refused(run, tmp_path):
    tree = write_tree(tmp_path / "site")
    (tmp_path / "scratch").mkdir()
    patch = tmp_path / "p.diff"
    patch.write_bytes(_good_patch(tmp_path, tree))
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    (tree / SPEC).write_text((tree / SPEC).read_text() + "# edited\n")
    result = run("apply", "--target", tree, "--patch", patch)
    assert result.exit_code == 1 and "edited after patchkit patched" in result.output
    assert (tree / SPEC).read_text().endswith("# edited\n")


def test_injected_enospc_rolls_back_and_says_so(run, tmp_path, monkeypatch):
    from patchkit.engine import transaction

    tree = write_tree(tmp_path / "site")
    (tmp_path / "scratch").mkdir()
    stock = snapshot(tree)
    monkeypatch.setenv("PATCHKIT_FAULT_AFTER", "5")
    monkeypatch.setattr(transaction, "_faults", transaction._Faults())
    result = _apply(run, tree, tmp_path, _good_patch(tmp_path, tree))
    assert result.exit_code == 4
    assert "No space left on device" in result.output and "rolled back" in result.output
    assert snapshot(tree) == stock
