"""The one path rule: its fast path (one regular expression) agrees with the rule spelled out."""

from __future__ import annotations

import errno
import itertools
import os
import re

import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchkit.base import fsutil


def spelled_out(path: str) -> bool:
    """Safe: not empty, no backslash or NUL, not absolute (nor a drive), no '', '.' or '..' component."""
    parts = path.split("/")
    return bool(
        path
        and "\\" not in path
        and "\x00" not in path
        and not path.startswith("/")
        and not re.match(fsutil._DRIVE, path)
        and not any(p in ("", ".", "..") for p in parts)
    )


TOKENS = [*"ab./\\\x00:C \n", "..", "é", "vllm"]


def test_the_fast_path_agrees_with_the_rule_on_every_path_of_up_to_four_tokens():
    """All 41,370 of them, in less CPU than hypothesis' 3,000 examples took."""
    for length in range(5):
        for tokens in itertools.product(TOKENS, repeat=length):
            path = "".join(tokens)
            assert (fsutil.unsafe_reason(path) is None) == spelled_out(path), repr(path)


# the longer paths (every short one is tried above); no time limits: a loaded machine is no failure of the rule
@settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), min_size=5, max_size=12).map("".join))
def test_the_fast_path_agrees_with_the_rule(path):
    assert (fsutil.unsafe_reason(path) is None) == spelled_out(path)


def test_each_refusal_says_why():
    assert fsutil.unsafe_reason("vllm/config/speculative.py") is None
    assert fsutil.unsafe_reason("vllm/.hidden/x.py") is None
    assert fsutil.unsafe_reason("vllm/../etc/passwd") == "contains '..'"
    assert fsutil.unsafe_reason("D:/x.py") == "is absolute"
    assert fsutil.unsafe_reason("vllm//x.py") == "is not a normalized relative path"
    assert fsutil.unsafe_reason("") == "is empty"


PATH_PARTS = st.sampled_from([*"ab./\\\x00:C \n", "..", "é", "vllm", "vllm/x.py", "a:"])


@settings(max_examples=examples(1000))
@given(st.lists(st.lists(PATH_PARTS, max_size=6).map("".join), max_size=5))
def test_the_batch_shortcut_agrees_with_the_rule_path_by_path(paths):
    assert fsutil.all_safe(paths) == all(fsutil.unsafe_reason(p) is None for p in paths)


def test_the_batch_shortcut_refuses_one_bad_path_among_many():
    members = [f"vllm/model_executor/m{i}.py" for i in range(3000)]
    assert fsutil.all_safe(members)
    for bad in ("", "vllm/../x.py", "/etc/passwd", "C:x.py", "vllm//x.py", "vllm/./x.py", "vllm/x/", "a\\b", "a\x00"):
        assert not fsutil.all_safe([*members[:1500], bad, *members[1500:]]), bad
    assert fsutil.all_safe([*members, "vllm/x.py\n/etc"])  # a newline inside a path is no '..' or root


# --------------------------------------------------------------------------- read_regular


def test_read_regular_reads_to_the_limit_and_refuses_past_it(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert fsutil.read_regular(path, 100) == b"x" * 100
    assert fsutil.read_regular(path, 16 << 20) == b"x" * 100
    assert fsutil.read_regular(path, 99, head=True) == b"x" * 99
    with pytest.raises(fsutil.NotRegularFile) as refused:
        fsutil.read_regular(path, 99)
    assert refused.value.errno == errno.EFBIG
    (tmp_path / "empty").write_bytes(b"")
    assert fsutil.read_regular(tmp_path / "empty", 10) == b""


def test_read_regular_refuses_a_symlink_a_fifo_and_a_directory(tmp_path):
    (tmp_path / "f").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    os.mkfifo(tmp_path / "fifo")
    for name in ("link", "fifo", ""):
        with pytest.raises(fsutil.NotRegularFile):
            fsutil.read_regular(tmp_path / name, 10)
    assert fsutil.read_regular(tmp_path / "link", 10, follow_symlinks=True) == b"data"


def test_read_regular_reads_past_the_size_fstat_saw(tmp_path, monkeypatch):
    """A file that grew since fstat (or a /proc file, size 0) is read to its end, up to the limit:
    the first read is sized to fstat's size, the rest in chunks."""
    path = tmp_path / "grown"
    path.write_bytes(bytes(range(256)) * (12 << 10))  # 3 MiB
    real_fstat = os.fstat
    monkeypatch.setattr(fsutil.os, "fstat", lambda fd: os.stat_result((*real_fstat(fd)[:6], 10, *real_fstat(fd)[7:])))
    assert fsutil.read_regular(path, 4 << 20) == path.read_bytes()
    assert fsutil.read_regular(path, 2 << 20, head=True) == path.read_bytes()[: 2 << 20]
    with pytest.raises(fsutil.NotRegularFile):
        fsutil.read_regular(path, 2 << 20)
    monkeypatch.undo()
    assert b"Name:" in fsutil.read_regular("/proc/self/status", 1 << 20)  # st_size 0


def test_plain_directory_judges_a_chain_by_lstat_alone_and_refuses_a_way_back_up(tmp_path, monkeypatch):
    """Issue 21: a chain of real directories below the root lies inside it by construction, so no
    realpath is taken (a third of a warm dry run's cache lookups); a `..` is refused, also where
    what follows it is not there yet (it would have been judged plain, outside the root)."""
    root = tmp_path / "cache"
    (root / "a" / "b").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    (root / "file").write_text("")
    (tmp_path / "via").symlink_to(root)  # the root itself may be reached through a symlink

    def no_realpath(*args, **kwargs):
        raise AssertionError("realpath taken")

    monkeypatch.setattr(os.path, "realpath", no_realpath)
    assert fsutil.plain_directory(root, root / "a" / "b")
    assert fsutil.plain_directory(root, root / "a" / "b" / "not-yet" / "there")
    assert fsutil.plain_directory(tmp_path / "via", tmp_path / "via" / "a")
    assert not fsutil.plain_directory(root, root / "link" / "x")
    assert not fsutil.plain_directory(root, root / "file")
    assert not fsutil.plain_directory(root, tmp_path / "elsewhere")
    assert not fsutil.plain_directory(root, root / "a" / ".." / ".." / "escaped")
    assert not fsutil.plain_directory(root, root / "a" / ".." / "a")
