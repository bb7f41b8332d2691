"""The one path rule: its fast path (one regular expression) agrees with the rule spelled out."""

from __future__ import annotations

from hypothesis import given, settings
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
        and not fsutil._DRIVE.match(path)
        and not any(p in ("", ".", "..") for p in parts)
    )


@settings(max_examples=3000)
@given(st.lists(st.sampled_from([*"ab./\\\x00:C \n", "..", "é", "vllm"]), max_size=12).map("".join))
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


@settings(max_examples=1000)
@given(st.lists(st.lists(PATH_PARTS, max_size=6).map("".join), max_size=5))
def test_the_batch_shortcut_agrees_with_the_rule_path_by_path(paths):
    assert fsutil.all_safe(paths) == all(fsutil.unsafe_reason(p) is None for p in paths)


def test_the_batch_shortcut_refuses_one_bad_path_among_many():
    members = [f"vllm/model_executor/m{i}.py" for i in range(3000)]
    assert fsutil.all_safe(members)
    for bad in ("", "vllm/../x.py", "/etc/passwd", "C:x.py", "vllm//x.py", "vllm/./x.py", "vllm/x/", "a\\b", "a\x00"):
        assert not fsutil.all_safe([*members[:1500], bad, *members[1500:]]), bad
    assert fsutil.all_safe([*members, "vllm/x.py\n/etc"])  # a newline inside a path is no '..' or root
