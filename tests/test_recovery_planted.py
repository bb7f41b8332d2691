"""A journal.json that patchkit did not write (planted, or left by another tree) never makes the
next command, `status` included, delete or overwrite a file with no copy kept (issue 20, review
30 H1). Recovery acts on a file only on evidence its commit made (the marker staged.json, the
staged file's identity); a file's ctime is no evidence, since a `chmod -R`, a `chown -R` or a tar
round trip gives every file a new one. A marker not sealed with this user's key (planted) is
refused, nothing touched, the record included; on the user's `recover --roll-back` each file it
replaces or removes is kept in .patchkit/saved/, with the command that puts it back."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_server import run_patchkit
from helpers import SPEC, SPEC_PY, record_rows, write_tree

from patchkit.base import seal
from patchkit.base.hashing import sha256
from patchkit.distinfo.record import record_hash
from patchkit.store.journal import file_identity

MINE = b"API_KEY_FILE = '/etc/app/key'  # the user's own module\n"
HOTFIX = SPEC_PY.encode() + b"# my local hotfix\n"
HOTFIX_ENTRY = {  # the record of an apply whose output is the hotfix
    "set": "demo",
    "vllm_version": "0.16.0",
    "release": None,
    "applied_at": "2026-01-01T00:00:00+00:00",
    "patches": [{"name": "p.diff", "sha256": "3" * 64}],
    "files": {SPEC: {"before": sha256(SPEC_PY.encode()), "after": sha256(HOTFIX)}},
}
PLANTED = b"raise SystemExit('planted')\n"
PIP = b"__version__ = '25.0'\n"


def _status(tree: Path) -> tuple[int, str]:
    return _run(tree, "status")


def _run(tree: Path, *args: str) -> tuple[int, str]:
    """patchkit ARGS on the tree (`--target` added unless given): its exit code and its output, one line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHKIT_FAULT")}
    target = [] if "--target" in args else ["--target", str(tree)]
    done = run_patchkit([*args, *target], env, None, 120)
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def _tree(base: Path) -> Path:
    """A stock-like tree whose vLLM RECORD lists its files (so vLLM's own originals are vouched for),
    a user's package beside vllm/, and a user's hotfix in a vLLM file."""
    tree = write_tree(base / "site")
    (tree / "vllm-0.16.0.dist-info/RECORD").write_text(record_rows(tree, "vllm-0.16.0.dist-info"))
    (tree / "mydata").mkdir()
    (tree / "mydata/notes.py").write_bytes(MINE)
    (tree / SPEC).write_bytes(HOTFIX)
    return tree


def _plant(tree: Path, files: list[dict], objects: list[bytes], previous: str | None = None) -> None:
    meta = tree / ".patchkit"
    (meta / "objects").mkdir(parents=True, exist_ok=True)
    for data in objects:
        (meta / "objects" / sha256(data)).write_bytes(data)
    journal = {"id": "abc123", "previous_state": previous, "files": files}
    (meta / "journal.json").write_text(json.dumps(journal))


def _created_mine() -> dict:
    """The user's file, said to be created by the journal's commit (its `after`: the file's bytes)."""
    return {"path": "mydata/notes.py", "before": None, "after": sha256(MINE), "staged": None, "created_dirs": []}


def _edited_spec(original: bytes) -> dict:
    """The user's hotfix, said to be the commit's writing over `original` (its `after`: the hotfix)."""
    return {"path": SPEC, "before": sha256(original), "after": sha256(HOTFIX), "staged": None}


def _chmod_r(tree: Path) -> Path:
    """`chmod -R` (or `chown -R`) of the tree visiting .patchkit/ first: every other file's ctime
    is then the journal's or later."""
    time.sleep(0.02)
    for path in [tree / ".patchkit", *sorted(tree.rglob("*"))]:
        if not path.is_symlink():
            os.chmod(path, path.stat().st_mode & 0o7777)
    return tree


def _tar_round_trip(tree: Path) -> Path:
    """The tree through a tar (as a Docker layer or a backup): .patchkit/ sorts first, so every
    file extracted after the journal has a later ctime."""
    archive = tree.parent / "tree.tar"
    time.sleep(0.02)
    with tarfile.open(archive, "w") as tar:
        tar.add(tree, arcname=".")
    dest = tree.parent / "extracted"
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="fully_trusted")
    return dest


def _touched(tree: Path) -> Path:
    """Only the named files' ctimes changed after the journal (a `touch`, a metadata change)."""
    time.sleep(0.02)
    for path in (tree / "mydata/notes.py", tree / SPEC):
        os.utime(path)
    return tree


def _untouched(tree: Path) -> Path:
    return tree


CHANGES: dict[str, Callable[[Path], Path]] = {
    "chmod-R": _chmod_r,
    "tar": _tar_round_trip,
    "ctime": _touched,
    "none": _untouched,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_planted_journal_deletes_no_users_file_outside_vllm(tmp_path, change):
    """(a) A journal saying its commit created mydata/notes.py, with the file's true bytes: after
    the tree's ctimes changed, `status` removed it (and .patchkit/ with it), no copy kept."""
    tree = _tree(tmp_path)
    _plant(tree, [_created_mine()], [])
    tree = CHANGES[change](tree)
    code, said = _status(tree)
    assert (tree / "mydata/notes.py").read_bytes() == MINE, said
    assert code != 2 and "kept, not written by it or changed since: mydata/notes.py" in said, said
    assert not (tree / ".patchkit/journal.json").exists()


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_planted_journal_overwrites_no_users_edit_of_a_vllm_file(tmp_path, change):
    """(b) A journal saying its commit wrote the user's hotfix over the stock file, with the stock
    bytes (which vLLM's RECORD vouches for, and anyone has) as its saved original: `status` put
    the stock file back, the hotfix gone with no copy, with or without a ctime change."""
    tree = _tree(tmp_path)
    _plant(tree, [_edited_spec(SPEC_PY.encode())], [SPEC_PY.encode()])
    tree = CHANGES[change](tree)
    code, said = _status(tree)
    assert (tree / SPEC).read_bytes() == HOTFIX, said
    assert code != 2 and f"kept, not written by it or changed since: {SPEC}" in said, said


@pytest.mark.parametrize("change", ["chmod-R", "tar"])
def test_a_planted_journal_overwrites_no_other_distributions_file(tmp_path, change):
    """Review 30 H1 (b): a planted original written over another distribution's file (its own
    RECORD lists the current bytes), no copy kept."""
    tree = _tree(tmp_path)
    (tree / "pip").mkdir()
    (tree / "pip/__init__.py").write_bytes(PIP)
    (tree / "pip-25.0.dist-info").mkdir()
    (tree / "pip-25.0.dist-info/RECORD").write_text(f"pip/__init__.py,{record_hash(PIP)},{len(PIP)}\n")
    entry = {"path": "pip/__init__.py", "before": sha256(PLANTED), "after": sha256(PIP)}
    _plant(tree, [{**entry, "staged": None}], [PLANTED])
    tree = CHANGES[change](tree)
    code, said = _status(tree)
    assert (tree / "pip/__init__.py").read_bytes() == PIP, said
    assert code != 2 and "kept, not written by it or changed since: pip/__init__.py" in said, said


@pytest.mark.parametrize("change", ["chmod-R", "none"])
def test_a_planted_journal_keeps_the_record_it_does_not_name(tmp_path, change):
    """A journal whose previous record is none (or another one) removed (or replaced) the tree's
    state.json once its ctime was newer; the real record then lost, its originals pruned."""
    tree = _tree(tmp_path)
    ours = _applied_record(tree)
    other = json.dumps({"format": 1, "entries": [{**HOTFIX_ENTRY, "set": "other"}]})
    for previous in (None, other):
        _plant(tree, [], [], previous=previous)
        CHANGES[change](tree)
        _code, said = _status(tree)
        assert (tree / ".patchkit/state.json").read_bytes() == ours, (previous, said)
        assert (tree / ".patchkit/objects" / sha256(SPEC_PY.encode())).exists()


def _planted_marker(tree: Path, paths: list[str]) -> None:
    """A marker beside the planted journal, as patchkit's but naming no true identity."""
    staged = {path: [1, 2, 3] for path in paths}
    (tree / ".patchkit/staged.json").write_text(json.dumps({"id": "abc123", "staged": staged}))


@pytest.mark.parametrize("change", ["chmod-R", "tar", "none"])
def test_a_planted_journal_and_marker_are_refused_and_rolled_back_only_on_the_users_word(tmp_path, change):
    """With a planted marker too (not sealed), recovery changes nothing and refuses (exit 2), naming
    the two ways on. `recover --roll-back` (the user's word) takes the files as reached; none is the
    very file a commit staged, so each is kept in .patchkit/saved/ before it goes, and the command
    it names puts them back: nothing is lost."""
    tree = _tree(tmp_path)
    _plant(tree, [_created_mine(), _edited_spec(SPEC_PY.encode())], [SPEC_PY.encode()])
    _planted_marker(tree, ["mydata/notes.py", SPEC])
    tree = CHANGES[change](tree)
    code, said = _status(tree)
    assert code == 2 and "is not sealed with this user's key" in said, said
    assert (tree / "mydata/notes.py").read_bytes() == MINE and (tree / SPEC).read_bytes() == HOTFIX
    code, said = _run(tree, "recover", "--roll-back")
    assert code == 0, said
    assert "nothing showed it wrote these, so a copy is kept in" in said and f"back): {SPEC} mydata/notes.py" in said, (
        said
    )
    [back] = [c for c in re.findall(r"`([^`]+)`", said) if c.startswith("cp ")]
    subprocess.run(shlex.split(back), check=True)
    assert (tree / "mydata/notes.py").read_bytes() == MINE and (tree / SPEC).read_bytes() == HOTFIX


def test_a_planted_journal_on_a_tree_copied_with_cp_a_is_left_alone(tmp_path):
    """`cp -a` keeps the times: the journal and the files it names go as they were."""
    tree = _tree(tmp_path)
    _plant(tree, [_created_mine(), _edited_spec(SPEC_PY.encode())], [SPEC_PY.encode()])
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy, symlinks=True)
    code, said = _status(copy)
    assert (copy / "mydata/notes.py").read_bytes() == MINE and (copy / SPEC).read_bytes() == HOTFIX, said
    assert code != 2 and f"kept, not written by it or changed since: mydata/notes.py {SPEC}" in said


def _stat_marker(tree: Path, paths: list[str], key: bytes | None) -> None:
    """A marker beside the planted journal holding each file's real identity (anyone's `stat`),
    with no seal, or sealed with a key that is not this user's."""
    staged = {path: list(file_identity(os.lstat(tree / path))) for path in paths}
    marker: dict = {"id": "abc123", "staged": staged}
    if key is not None:
        payload = b"staged-marker\0" + str(tree.resolve()).encode() + b"\0" + seal.canonical(marker)
        marker["seal"] = hmac.new(key, payload, hashlib.sha256).hexdigest()
    (tree / ".patchkit/staged.json").write_text(json.dumps(marker))


@pytest.mark.parametrize("key", [None, b"k" * 32], ids=["unsealed", "another-key"])
def test_a_planted_marker_copying_the_files_stat_changes_nothing(tmp_path, key):
    """The marker's identities are three numbers `stat` shows: planted with the real ones, unsealed
    or sealed with a key not the user's, recovery writes no planted byte and removes no file: it
    refuses (exit 2), says what it found, and names `recover --discard`, which removes the journal
    and leaves every file as it is."""
    tree = _tree(tmp_path)
    _plant(tree, [_created_mine(), _edited_spec(SPEC_PY.encode())], [SPEC_PY.encode()])
    _stat_marker(tree, ["mydata/notes.py", SPEC], key)
    for _ in range(2):  # a second command refuses as the first did: nothing was touched
        code, said = _status(tree)
        assert (
            code == 2
            and "names an unfinished transaction (abc123, 2 file(s))" in said
            and "touched: mydata/notes.py vllm/config" in said
        ), said
        assert (
            "(abc123, 2 file(s)), but its marker" in said and f"nothing was touched: mydata/notes.py {SPEC}" in said
        ), said
        assert (tree / "mydata/notes.py").read_bytes() == MINE and (tree / SPEC).read_bytes() == HOTFIX
        assert not (tree / ".patchkit/saved").exists() and (tree / ".patchkit/journal.json").exists()
    [discard] = [c for c in re.findall(r"`([^`]+)`", said) if c.endswith("--discard")]
    code, said = _run(tree, *shlex.split(discard)[1:])
    assert code == 0 and "removed the journal of an unfinished transaction (abc123); no file changed" in said
    assert (tree / "mydata/notes.py").read_bytes() == MINE and (tree / SPEC).read_bytes() == HOTFIX
    assert not (tree / ".patchkit/journal.json").exists() and not (tree / ".patchkit/staged.json").exists()
    assert not (tree / ".patchkit/saved").exists()
    assert _status(tree)[0] != 2


def _applied_record(tree: Path) -> bytes:
    """A real apply's record of the user's hotfix (its original in the store): the record a planted
    journal would erase."""
    (tree / ".patchkit/objects").mkdir(parents=True)
    (tree / ".patchkit/objects" / sha256(SPEC_PY.encode())).write_bytes(SPEC_PY.encode())
    (tree / ".patchkit/state.json").write_text(json.dumps({"format": 1, "entries": [HOTFIX_ENTRY]}))
    return (tree / ".patchkit/state.json").read_bytes()


@pytest.mark.parametrize("key", [None, b"k" * 32], ids=["unsealed", "another-key"])
@pytest.mark.parametrize("way", ["status", "recover --roll-back", "recover --discard"])
def test_a_planted_journal_of_no_files_erases_no_record(tmp_path, key, way):
    """A journal of no files whose previous record is none, with a marker of its id, removed the
    tree's state.json (the guard then checked nothing, status said ok). The record changes only
    under a marker sealed with this user's key: refused, and neither of the user's ways touches it."""
    tree = _tree(tmp_path)
    ours = _applied_record(tree)
    _plant(tree, [], [], previous=None)
    _stat_marker(tree, [], key)
    code, said = _run(tree, *way.split())
    assert (tree / ".patchkit/state.json").read_bytes() == ours, said
    assert (code == 2) is (way == "status"), said
    assert (tree / ".patchkit/objects" / sha256(SPEC_PY.encode())).exists()


@pytest.mark.parametrize("order", [("--discard", "--roll-back"), ("--roll-back", "--discard")])
def test_the_two_answers_to_an_unsealed_journal_exclude_each_other(tmp_path, order):
    """`recover --discard --roll-back` asks for opposite things: refused as a usage error, the tree and its
    journal as they were (click kept the last of the two and rolled back)."""
    tree = _tree(tmp_path)
    _plant(tree, [_created_mine(), _edited_spec(SPEC_PY.encode())], [SPEC_PY.encode()])
    _planted_marker(tree, ["mydata/notes.py", SPEC])
    code, said = _run(tree, "recover", *order)
    assert code == 2 and "--roll-back and --discard exclude each other" in said, said
    assert (tree / "mydata/notes.py").read_bytes() == MINE and (tree / SPEC).read_bytes() == HOTFIX
    assert (tree / ".patchkit/journal.json").exists() and not (tree / ".patchkit/saved").exists()
