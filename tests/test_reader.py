"""The hunk reader against unidiff's full parse, the reference it stands in for.

patchkit lets unidiff read a diff's file entries and reads the hunk bodies itself, by their counts
(unidiff's line-by-line parse is most of the time of a large dry run). For every diff, both must
agree: unidiff refuses it and so does patchkit, or both read the same hunks, byte for byte.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers import examples, hunk_header_mutation
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from patchkit.base.errors import BadInput
from patchkit.series.patchfile import decode, encode, parse_patch

# What patchkit refuses on top of unidiff (its own rules, tested elsewhere).
STRICTER = (
    "unsafe path",
    "outside the patched package",
    "changes nothing",
    "appears twice",
    "has no hunks",
    "without a rename header",
    "contains no diff",
    "names no file",
    "binary",
    "has no line end",
    "only regular files",
    "corrupt hunk header",  # unidiff skips a line it cannot read as one; git calls it corrupt
)

LINES = st.lists(
    st.sampled_from(["a = 1", "b = 2", "", "# c", "-- x", "++ y", "@@ z", "\\ w", " lead", "\t", "é = 'ü'"]),
    max_size=14,
)


@st.composite
def file_pair(draw):
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    old = draw(LINES)
    new = list(old)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(new)))
        if draw(st.booleans()) or not new:
            new.insert(at, draw(st.sampled_from(["NEW = 1", "", "--- a/vllm/x.py", "+++ b/vllm/x.py", "-", "+"])))
        else:
            del new[min(at, len(new) - 1)]
    old_text = ending.join(old) + (ending if old and draw(st.booleans()) else "")
    new_text = ending.join(new) + (ending if new and draw(st.booleans()) else "")
    return old_text.encode(), new_text.encode()


def git_diff(work: Path, pairs: list[tuple[bytes, bytes]], context: int) -> bytes:
    for side in "ab":
        (work / side / "vllm").mkdir(parents=True, exist_ok=True)
    for i, (old, new) in enumerate(pairs):
        (work / "a/vllm" / f"f{i}.py").write_bytes(old)
        (work / "b/vllm" / f"f{i}.py").write_bytes(new)
    done = subprocess.run(
        ["git", "diff", "--no-index", "--no-prefix", "--no-color", f"-U{context}", "a", "b"],
        cwd=work,
        capture_output=True,
    )
    return done.stdout


def plain(diff: bytes) -> bytes:
    """The same diff as `diff -u` writes it: no `diff --git` and `index` lines."""
    return b"".join(line for line in diff.splitlines(True) if not line.startswith((b"diff --git ", b"index ")))


REWRITES = {
    "as is": lambda d: d,
    "plain": plain,
    "format-patch trailer": lambda d: d + b"-- \n2.39.5\n\n",
    "bare empty context lines": lambda d: d.replace(b"\n \n", b"\n\n"),
    "blank line between files": lambda d: d.replace(b"\ndiff --git", b"\n\ndiff --git"),
    "no final newline": lambda d: d[:-1],
    "CRLF diff": lambda d: d.replace(b"\n", b"\r\n"),
}


@st.composite
def diffs(draw, work_dir):
    pairs = draw(st.lists(file_pair(), min_size=1, max_size=3))
    work = work_dir()
    raw = git_diff(work, pairs, draw(st.integers(0, 3)))
    raw = REWRITES[draw(st.sampled_from(sorted(REWRITES)))](raw)
    if draw(st.booleans()):  # a line dropped, doubled, or a count changed: the error paths
        lines = raw.split(b"\n")
        if lines:
            i = draw(st.integers(0, len(lines) - 1))
            kind = draw(st.sampled_from(["drop", "double", "count"]))
            if kind == "drop":
                del lines[i]
            elif kind == "double":
                lines.insert(i, lines[i])
            else:
                lines[i] = re.sub(rb"\d+", str(draw(st.integers(0, 9))).encode(), lines[i], count=1)
        raw = b"\n".join(lines)
    if draw(st.booleans()):
        raw = draw(hunk_header_mutation(raw))
    return raw


def unidiff_hunks(raw: bytes) -> list[tuple[str, list[tuple[int, int, bytes, bytes]]]]:
    """Per file (unidiff's path), per hunk: starts and the source and target blocks, from the full parse."""
    files = []
    for patched_file in PatchSet(decode(raw)):
        hunks = []
        for hunk in patched_file:
            source: list[str] = []
            target: list[str] = []
            last: list[list[str]] = []
            source_left, target_left = hunk.source_length, hunk.target_length
            for line in hunk:
                if line.line_type == "\\":
                    for side in last:
                        side[-1] = side[-1].removesuffix("\n")
                    continue
                if source_left == 0 and target_left == 0:
                    break  # a trailing empty line unidiff attaches to the hunk: not part of it
                kind = line.line_type
                last = [source] if kind == "-" else [target] if kind == "+" else [source, target]
                source_left -= kind != "+"
                target_left -= kind != "-"
                for side in last:
                    side.append(line.value)
            hunks.append((hunk.source_start, hunk.target_start, encode("".join(source)), encode("".join(target))))
        files.append((patched_file.path, hunks))
    return files


def ours(raw: bytes) -> list[tuple[str, list[tuple[int, int, bytes, bytes]]]]:
    patch = parse_patch(raw, "p.diff")
    return [(f.path, [(h.source_start, h.target_start, h.source, h.target) for h in f.hunks]) for f in patch.files]


def agree(raw: bytes) -> None:
    try:
        reference = unidiff_hunks(raw)
    except UnidiffParseError:
        with pytest.raises(BadInput):
            ours(raw)
        return
    try:
        mine = ours(raw)
    except BadInput as exc:
        assert any(rule in exc.message for rule in STRICTER), (exc.message, reference)
        return
    # unidiff keeps the a/ b/ prefix and a CRLF diff's \r in a path; patchkit strips both
    assert [(path.strip().removeprefix("a/").removeprefix("b/"), hunks) for path, hunks in reference] == mine


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_reader_and_unidiff_read_the_same_hunks(tmp_path_factory, data):
    agree(data.draw(diffs(lambda: tmp_path_factory.mktemp("reader"))))


@pytest.mark.parametrize(
    "raw",
    [
        # a removed "-- x" and an added "++ y" look like file headers; the counts say they are not
        b"--- a/vllm/f.py\n+++ b/vllm/f.py\n@@ -1,2 +1,2 @@\n a\n--- x\n+++ y\n",
        # a hunk that ends the file without a newline, then a second file
        b"--- a/vllm/f.py\n+++ b/vllm/f.py\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n"
        b"--- a/vllm/g.py\n+++ b/vllm/g.py\n@@ -1 +1 @@\n-c\n+d\n",
        # an empty context line written as a bare newline, and one as a bare CRLF
        b"--- a/vllm/f.py\n+++ b/vllm/f.py\n@@ -1,3 +1,3 @@\n\n-a\n+b\n\r\n",
        # counts that are one short and one long
        b"--- a/vllm/f.py\n+++ b/vllm/f.py\n@@ -1,2 +1,2 @@\n-a\n+b\n",
        b"--- a/vllm/f.py\n+++ b/vllm/f.py\n@@ -1 +1 @@\n-a\n+b\n-c\n+d\n",
        # a hunk header where no file has begun
        b"@@ -1 +1 @@\n-a\n+b\n",
        # a line that cannot be in a body, inside one
        b"--- a/vllm/f.py\n+++ b/vllm/f.py\n@@ -1,2 +1,2 @@\n-a\nX\n+b\n",
        # a new file's hunk (every line added: read by two counts) with a context, removed, bare,
        # marker or foreign line among its added ones, one line short, one long; then a second file
        *(
            b"--- /dev/null\n+++ b/vllm/new.py\n@@ -0,0 +1,3 @@\n+p\n" + middle + b"+r\n"
            b"--- a/vllm/g.py\n+++ b/vllm/g.py\n@@ -1 +1 @@\n-c\n+d\n"
            for middle in (b" q\n", b"-q\n", b"\n", b"\\ No newline at end of file\n", b"Q\n", b"", b"+q\n+s\n")
        ),
        # `diff -ruN`: timestamps after the paths
        b"diff -ruN a/vllm/x.py b/vllm/x.py\n--- a/vllm/x.py\t2026-11-30 00:37:29.0 +0000\n"
        b"+++ b/vllm/x.py\t2026-11-30 00:37:29.0 +0000\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        b"diff -ruN a/vllm/y.py b/vllm/y.py\n--- a/vllm/y.py\t2026-11-30 00:37:29.0 +0000\n"
        b"+++ b/vllm/y.py\t2026-11-30 00:37:29.0 +0000\n@@ -1 +1,2 @@\n q\n+r\n",
        # Subversion: `Index:` and `===` lines between files, no `diff` line
        b"Index: vllm/x.py\n" + b"=" * 67 + b"\n--- vllm/x.py\t(revision 1)\n+++ vllm/x.py\t(working copy)\n"
        b"@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\nIndex: vllm/y.py\n" + b"=" * 67 + b"\n--- vllm/y.py\t(revision 1)\n"
        b"+++ vllm/y.py\t(working copy)\n@@ -1 +1,2 @@\n q\n+r\n",
    ],
)
def test_edge_cases_agree_with_unidiff(raw):
    agree(raw)


TWO_FILES = (
    b"--- a/vllm/f.py\n+++ b/vllm/f.py\n{first}\n a\n-b\n+B\n"
    b"--- a/vllm/g.py\n+++ b/vllm/g.py\n@@ -1,3 +1,3 @@\n q\n-r\n+R\n s\n{second}\n t\n-u\n+U\n"
)


@pytest.mark.parametrize(
    "header",
    [
        b"@@ -N,2 +N,2 @",
        b"@@ -N,2 +N,2",
        b"@@ -N,2 -N,2 @@",
        b"@@ --N,2 +N,2 @@",
        b"@@ -N;2 +N,2 @@",
        b"@@ -N,2 +N,y @@",
        b"@@ -N,2  +N,2 @@",
        b"@@ -N,2 +N,2@@",
        b"@@ -N,2 +N,2 @@@ trailing",  # well-formed: git reads anything after " @@"
        b"@@ -N,2 +N,2 @@",
    ],
)
@pytest.mark.parametrize("where", ["first", "second"])
def test_a_hunk_header_is_refused_exactly_when_git_calls_it_corrupt(tmp_path, header, where):
    good = {"first": b"@@ -1,2 +1,2 @@", "second": b"@@ -4,2 +4,2 @@"}
    raw = TWO_FILES.replace(b"{%s}" % where.encode(), header.replace(b"N", good[where][4:5]))
    for name, value in good.items():
        raw = raw.replace(b"{%s}" % name.encode(), value)
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm/f.py").write_bytes(b"a\nb\n")
    (tmp_path / "vllm/g.py").write_bytes(b"q\nr\ns\nt\nu\n")
    git = subprocess.run(["git", "apply", "--check", "-"], input=raw, cwd=tmp_path, capture_output=True)
    if git.returncode == 0:
        ours(raw)
        return
    assert b"corrupt patch at line" in git.stderr
    line = int(git.stderr.split(b"corrupt patch at line ")[1].split()[0])
    with pytest.raises(BadInput, match=rf"malformed diff: line {line}: corrupt hunk header"):
        ours(raw)


@pytest.mark.release
def test_the_reader_agrees_with_unidiff_on_a_real_release_diff(tmp_path):
    from helpers import CONSECUTIVE, release_diff

    from patchkit.fetch import release_tree

    old, new = (release_tree(v, all_python=True) for v in CONSECUTIVE)
    raw = release_diff(old, new, tmp_path)
    agree(raw)
    assert raw.count(b"\n@@ -") > 50
