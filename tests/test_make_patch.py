"""helpers.make_patch: the diff git writes between a commit of the stock files and a commit of the edits,
made in as few git runs as that takes (83 test modules make their patches with it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import helpers
from helpers import SPEC, make_patch, write_tree

PARSER = SPEC  # a module of the tree write_tree makes


def _committed_diff(tmp: Path, tree: Path, edits: dict[str, bytes | None]) -> bytes:
    """The reference: stock committed, the edits committed, `git diff` of the two commits."""
    work = tmp / "reference"
    shutil.copytree(tree / "vllm", work / "vllm")
    helpers._git(work, "init", "-q")
    helpers._git(work, "add", "-A")
    helpers._git(work, "commit", "-qm", "stock")
    helpers.write_edits(work, edits)
    helpers._git(work, "add", "-A")
    helpers._git(work, "commit", "-qm", "edited", "--allow-empty")
    return helpers._git(work, "diff", "--no-renames", "--no-color", "HEAD~1", "HEAD")


def _edits(tree: Path) -> list[dict[str, bytes | None]]:
    stock = (tree / PARSER).read_bytes()
    return [
        {PARSER: stock.replace(b'"llama",', b'"llama",\n    "mistral",')},
        {PARSER: stock.rstrip(b"\n")},  # "\ No newline at end of file"
        {PARSER: None},  # deleted
        {"vllm/new/deep/module.py": b"x = 1\n"},  # added under new directories
        {"vllm/empty.py": b""},  # an empty new file: a header and no hunk
        {"vllm/blob.bin": b"\x00\x01\x02", PARSER: b"\x00" + stock},  # binary
        {PARSER: stock},  # no change: an empty diff
        {PARSER: stock + b"# more\r\n", "vllm/crlf.py": b"a\r\nb\r\n", "vllm/__init__.py": None},
    ]


def test_make_patch_writes_the_diff_between_two_commits(tmp_path):
    tree = write_tree(tmp_path / "site")
    for number, edits in enumerate(_edits(tree)):
        case = tmp_path / f"case{number}"
        case.mkdir()
        made = make_patch(case, tree, edits, header="")
        assert made == b"---\n" + _committed_diff(case, tree, edits), edits


def test_an_uncached_make_patch_runs_git_four_times(tmp_path, monkeypatch):
    """Five runs before (init, add, commit, add, diff --cached): ~330 uncached diffs a `make test-fast`."""
    tree = write_tree(tmp_path / "site")
    runs: list[tuple[str, ...]] = []
    real = helpers._git

    def counted(cwd: Path, *args: str) -> bytes:
        runs.append(args)
        return real(cwd, *args)

    monkeypatch.setattr(helpers, "_git", counted)
    monkeypatch.setattr(helpers, "_DIFFS", {})
    edits = {PARSER: (tree / PARSER).read_bytes() + b"# counted\n"}
    make_patch(tmp_path, tree, edits)
    assert len(runs) == 4, runs
    make_patch(tmp_path, tree, edits)
    assert len(runs) == 4, runs  # the same files and edits again: kept, no git run


def test_make_patch_copies_no_hook_templates(tmp_path, monkeypatch):
    """git init copies its sample hooks (a dozen files) unless told not to: nothing runs them here."""
    tree = write_tree(tmp_path / "site")
    made: list[Path] = []
    real = helpers._git

    def watched(cwd: Path, *args: str) -> bytes:
        out = real(cwd, *args)
        if args[0] == "init":
            made.extend((cwd / ".git").rglob("*.sample"))
        return out

    monkeypatch.setattr(helpers, "_git", watched)
    monkeypatch.setattr(helpers, "_DIFFS", {})
    make_patch(tmp_path, tree, {PARSER: (tree / PARSER).read_bytes() + b"# hooks\n"})
    assert made == []
