"""git for the maintainer tools (GitPython, imported when first used): the workspace repository,
and git's own unified diff rewritten to the library's form.

Our git calls whose output lands in the library ignore the user's git configuration
(diff.noprefix, merge.conflictStyle, diff.algorithm, attributes ...).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import git

from patchkit.base.errors import BadInput, ToolFailed
from patchkit.maintainer.meta import META
from patchkit.series.patchfile import decode

if TYPE_CHECKING:  # pragma: no cover
    import git

ISOLATED = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}
DIFF_OPTIONS = (
    "--no-index",
    "--no-prefix",
    "--no-renames",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--unified=3",
    "--inter-hunk-context=0",
    "--diff-algorithm=myers",
    "--indent-heuristic",
)

Changes = dict[str, tuple[bytes | None, bytes | None]]  # path -> (before, after); None: no such file


def git_in(cwd: Path) -> git.Git:
    return git.Git(str(cwd))


def run_git(command: Any, *args: str) -> tuple[int, bytes, str]:
    """Run a git.Git command isolated from the user's configuration: (status, stdout, stderr)."""
    status, out, err = command(
        *args,
        with_extended_output=True,
        with_exceptions=False,
        stdout_as_string=False,
        strip_newline_in_stdout=False,
        env=ISOLATED,
    )
    return status, out, decode(err) if isinstance(err, bytes) else str(err)


def git_diff(changes: Changes) -> dict[str, str]:
    """git's unified diff of each path's (before, after), keyed by path, in the library's form."""
    changes = {p: ba for p, ba in changes.items() if ba[0] != ba[1]}
    if not changes:
        return {}
    with tempfile.TemporaryDirectory(prefix="patchkit-diff-") as tmp:
        for side, index in (("a", 0), ("b", 1)):
            (Path(tmp) / side).mkdir()
            for path, contents in changes.items():
                data = contents[index]
                if data is not None:
                    file = Path(tmp) / side / path
                    file.parent.mkdir(parents=True, exist_ok=True)
                    file.write_bytes(data)
        status, out, err = run_git(git_in(Path(tmp)).diff, *DIFF_OPTIONS, "a", "b")
    if status not in (0, 1):
        raise ToolFailed(f"git diff failed: {err.strip()}")
    sections = {}
    for section in re.split(r"(?m)^(?=diff --git )", decode(out)):
        if section:
            path, text = _library_form(section)
            sections[path] = text
    return sections


def _library_form(section: str) -> tuple[str, str]:
    """`diff --git a/P b/P`, the mode lines of a new or deleted file, `--- `, `+++ `, the hunks."""
    lines = section.splitlines(True)
    hunks_at = next((i for i, line in enumerate(lines) if line.startswith("@@ ")), None)
    if hunks_at is None or any(line.startswith("Binary files ") for line in lines):
        raise BadInput(f"{lines[0].split()[-1][2:]}: binary or empty change; only text diffs are supported")
    head = lines[1:hunks_at]
    minus = next(line for line in head if line.startswith("--- "))[4:].rstrip("\n")
    plus = next(line for line in head if line.startswith("+++ "))[4:].rstrip("\n")
    path = (plus if plus != "/dev/null" else minus)[2:]
    kept = [line for line in head if not line.startswith("index ")]
    return path, f"diff --git a/{path} b/{path}\n" + "".join(kept) + "".join(lines[hunks_at:])


def init_repo(directory: Path) -> git.Repo:
    """A new repository in `directory` that keeps bytes as they are and ignores patchkit's own files."""
    repo = git.Repo.init(str(directory))
    with repo.config_writer() as config:
        config.set_value("core", "autocrlf", "false")
    exclude = directory / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a", encoding="utf-8") as handle:
        handle.write(f"/{META}\n/.patchkit/\n__pycache__/\n*.pyc\n")
    return repo


def commit_all(repo: git.Repo, message: str) -> str:
    repo.git.add("-A")
    return repo.index.commit(message).hexsha
