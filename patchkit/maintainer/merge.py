"""Three-way merge of one file (`git merge-file`), and finding the conflict markers it leaves."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from patchkit.base.errors import ToolFailed, ended_how, excerpt
from patchkit.maintainer.gitrepo import git_in, run_git

_MARKER = re.compile(rb"^(?:<{7}|>{7})(?: |$)", re.MULTILINE)


def merge_file(
    ours: bytes | None, base: bytes | None, theirs: bytes | None, labels: tuple[str, str, str]
) -> tuple[bytes | None, int]:
    """Three-way merge of one file (`git merge-file -p`): (result, number of conflicts)."""
    if theirs == base:
        return ours, 0
    if ours in (base, theirs):
        return theirs, 0
    with tempfile.TemporaryDirectory(prefix="patchkit-merge-") as tmp:
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            (Path(tmp) / name).write_bytes(data or b"")
        status, out, err = run_git(
            git_in(Path(tmp)).merge_file,
            "-p",
            "-L",
            labels[0],
            "-L",
            labels[1],
            "-L",
            labels[2],
            "ours",
            "base",
            "theirs",
        )
    if status < 0 or status > 127:
        raise ToolFailed(f"git merge-file {ended_how(status) if status < 0 else 'failed'}: {excerpt(err.strip())}")
    if not out and ours is None and not status:
        return None, 0
    return out, status


def conflict_lines(data: bytes | None) -> list[int]:
    """1-based lines holding a conflict marker (<<<<<<< or >>>>>>>)."""
    if not data:
        return []
    return [data.count(b"\n", 0, m.start()) + 1 for m in _MARKER.finditer(data)]
