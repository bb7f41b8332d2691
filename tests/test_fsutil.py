"""The one path rule: its fast path (one regular expression) agrees with the rule spelled out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit import fsutil


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
