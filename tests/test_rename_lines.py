"""A git diff's `rename from/to` and `copy from/to` lines are paths too: one that names a path like
../x is refused as git apply refuses it; one naming another file than the entry's `diff --git
a/.. b/..` header is refused too (git renames to the line's name; patchkit applied the header's)."""

from __future__ import annotations

import subprocess

import pytest

from patchkit.base.errors import BadInput
from patchkit.series.patchfile import parse_patch

OLD, NEW = "vllm/envs.py", "vllm/envs_moved.py"


def rename(header_to: str, said_from: str, said_to: str, kind: str = "rename") -> bytes:
    return (
        f"diff --git a/{OLD} b/{header_to}\nsimilarity index 100%\n{kind} from {said_from}\n{kind} to {said_to}\n"
    ).encode()


def git_refuses(tmp_path, diff: bytes) -> bool:
    (tmp_path / "vllm").mkdir(exist_ok=True)
    (tmp_path / OLD).write_text("x = 1\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "d.patch").write_bytes(diff)
    return subprocess.run(["git", "apply", "--check", "d.patch"], cwd=tmp_path, capture_output=True).returncode != 0


@pytest.mark.parametrize(
    "diff",
    [
        rename(NEW, OLD, "../evil.py"),
        rename(NEW, "../vllm/envs.py", NEW),
        rename(NEW, OLD, "../vllm/envs_moved.py"),
        rename(NEW, OLD, "../x.py", kind="copy"),
    ],
)
def test_a_rename_line_git_refuses_is_refused(tmp_path, diff):
    assert git_refuses(tmp_path, diff)
    with pytest.raises(BadInput) as refused:
        parse_patch(diff, "moved.patch")
    assert refused.value.message.startswith("moved.patch: unsafe path '../"), refused.value.message


@pytest.mark.parametrize(("said_from", "said_to"), [(OLD, "vllm/other.py"), ("vllm/config.py", NEW)])
def test_a_rename_line_naming_another_file_than_its_header_is_refused(tmp_path, said_from, said_to):
    diff = rename(NEW, said_from, said_to)
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "config.py").write_text("y = 2\n")
    assert not git_refuses(tmp_path, diff)
    subprocess.run(["git", "apply", "d.patch"], cwd=tmp_path, check=True)
    assert (tmp_path / said_to).exists() and not (tmp_path / said_from).exists()  # git takes the lines' names
    with pytest.raises(BadInput) as refused:
        parse_patch(diff, "moved.patch")
    assert "names another file than its diff --git header" in refused.value.message, refused.value.message


def test_a_rename_whose_lines_agree_with_its_header_is_read_as_the_rename(tmp_path):
    diff = rename(NEW, OLD, NEW)
    assert not git_refuses(tmp_path, diff)
    [entry] = parse_patch(diff, "moved.patch").files
    assert (entry.source_path, entry.target_path) == (OLD, NEW)
