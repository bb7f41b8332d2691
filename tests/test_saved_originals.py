"""The originals apply saves, and what one run hashes and syncs (issue 10 defect 13, its time).

An original about to be replaced by a rename is kept as `.patchkit/objects/<sha256>` by a hard link
when its inode is patchkit's alone (one link, the running user's, no bit beyond rwxr-xr-x, still
the file the plan read), else copied; an object is never written in place nor linked back into the
tree. A content is hashed once per run, and each file written is fsynced once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat
import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import (
    MODEL_PY,
    OFFLINE,
    STOCK_FILES,
    fingerprint,
    make_patch,
    record_rows,
    run_cli_judged,
    run_cli_writing,
    stock_files_fetched,
    write_tree,
    write_wheel,
)

from patchkit.base import hashing
from patchkit.base.hashing import sha256
from patchkit.engine.transaction import commit_changes
from patchkit.series.plan import View
from patchkit.store.state import Entry, State

MODEL = "vllm/models/model.py"
PATCHED_MODEL = MODEL_PY.replace("return x", "return x * 2")


def digest(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@pytest.fixture
def scene(tmp_path) -> tuple[Path, Path]:
    tree = write_tree(tmp_path / "site")
    patch = tmp_path / "model.diff"
    patch.write_bytes(make_patch(tmp_path, tree, {MODEL: PATCHED_MODEL}))
    return tree, patch


def saved_original(tree: Path) -> Path:
    return tree / ".patchkit" / "objects" / digest(MODEL_PY)


def test_apply_keeps_the_original_inode_and_revert_writes_a_new_file(run, scene):
    tree, patch = scene
    inode = (tree / MODEL).stat().st_ino
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    kept = saved_original(tree).stat()
    assert (kept.st_ino, kept.st_nlink) == (inode, 1)  # the original file itself, now only the store's
    assert saved_original(tree).read_text() == MODEL_PY and (tree / MODEL).read_text() == PATCHED_MODEL
    assert run("revert", "--target", tree, "--patch", patch).exit_code == 0
    restored = (tree / MODEL).stat()
    assert (tree / MODEL).read_text() == MODEL_PY
    assert restored.st_ino != inode and restored.st_nlink == 1  # written from the bytes, never linked back


def _linked_elsewhere(tree: Path, outside: Path) -> None:
    os.link(tree / MODEL, outside / "same-inode.py")


def _group_writable(tree: Path, outside: Path) -> None:
    (tree / MODEL).chmod(0o664)


def _setgid(tree: Path, outside: Path) -> None:
    (tree / MODEL).chmod(0o2755)


def _another_owner(tree: Path, outside: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    os.chown(tree / MODEL, 65534, 65534)


@pytest.mark.parametrize("make", [_linked_elsewhere, _group_writable, _setgid, _another_owner])
def test_an_inode_that_is_not_patchkits_alone_is_copied(run, scene, tmp_path, make):
    tree, patch = scene
    outside = tmp_path / "outside"
    outside.mkdir()
    make(tree, outside)
    inode = (tree / MODEL).stat().st_ino
    before = fingerprint(outside)
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    kept = saved_original(tree).lstat()
    assert kept.st_ino != inode and kept.st_nlink == 1
    assert saved_original(tree).read_text() == MODEL_PY
    assert not stat.S_IMODE(kept.st_mode) & 0o7022  # a copy patchkit wrote: no special bits, no group write
    assert run("revert", "--target", tree, "--patch", patch).exit_code == 0
    assert (tree / MODEL).read_text() == MODEL_PY and fingerprint(outside) == before


def test_a_file_changed_since_the_plan_read_it_is_copied_from_the_planned_bytes(tmp_path):
    tree = write_tree(tmp_path / "site")
    view = View(tree)
    before = view.read(MODEL)
    assert before is not None
    (tree / MODEL).write_text(MODEL_PY + "# edited behind patchkit's back\n")  # same inode, new size
    after = PATCHED_MODEL.encode()
    files = {MODEL: {"before": sha256(before), "after": sha256(after)}}
    new_state = State([Entry("demo", "0.16.0", None, "", [], files)])
    commit_changes(tree, {MODEL: (before, after)}, new_state, origins=view.origins)
    assert saved_original(tree).read_bytes() == before  # the store holds what its name says
    assert (tree / MODEL).read_bytes() == after


# -- a planted object that shares its inode with a file outside the tree ----------------------------


def _plant_linked_object(tree: Path, outside: Path, content: str) -> Path:
    foreign = outside / "foreign.py"
    foreign.write_text(content)
    saved_original(tree).unlink()
    os.link(foreign, saved_original(tree))
    return foreign


@pytest.mark.parametrize(
    "content",
    [MODEL_PY, "# not the original at all\n"],
    ids=["the-original-bytes", "other-bytes"],
)
def test_a_planted_object_linked_outside_changes_nothing_outside(scene, tmp_path, content):
    tree, patch = scene
    outside = tmp_path / "outside"
    outside.mkdir()
    assert run_cli_writing("apply", "--target", tree, "--patch", patch).returncode == 0
    foreign = _plant_linked_object(tree, outside, content)
    before = fingerprint(outside)
    done = run_cli_writing("revert", "--target", tree, "--patch", patch)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in output, output
    # Restored from the planted bytes when they are the original (checked by sha256), else rebuilt by
    # reverse-applying the patch: either way a file of the tree's own, not the one outside.
    assert (tree / MODEL).read_text() == MODEL_PY
    assert (tree / MODEL).stat().st_ino != foreign.stat().st_ino and (tree / MODEL).stat().st_nlink == 1
    assert fingerprint(outside) == before
    assert ("corrupt" in output) == (content != MODEL_PY)


# -- one run hashes each content once, and syncs each file once ---------------------------------------


def large_module(lines: int) -> str:
    return "".join(f"ENTRY_{i:06d} = {i * 3}  # one row of a generated lookup table\n" for i in range(lines))


def test_apply_and_revert_hash_each_large_content_once(run, tmp_path, monkeypatch):
    table = large_module(30_000)  # about 2 MiB: above the size whose digest a run remembers
    assert len(table) > 1 << 20
    tree = write_tree(tmp_path / "site", files={"vllm/table.py": table})
    lines = table.splitlines(True)
    patch = tmp_path / "table.diff"
    patch.write_bytes(
        make_patch(tmp_path, tree, {"vllm/table.py": "".join([*lines[:100], "EXTRA = 1\n", *lines[100:]])})
    )
    hashed: Counter[str] = Counter()
    real = hashlib.sha256

    class Counting:  # a large content is hashed at once or piece by piece (on a thread)
        def __init__(self, data=b""):
            self.hasher, self.size = real(data), len(data)

        def update(self, data):
            self.hasher.update(data)
            self.size += len(data)

        def copy(self):  # a state kept for a content that starts the same way
            twin = Counting()
            twin.hasher, twin.size = self.hasher.copy(), self.size
            return twin

        def hexdigest(self):
            digest = self.hasher.hexdigest()
            if self.size > 1 << 20:
                hashed[digest] += 1
            return digest

    # patchkit.store.state's digests: the record's, the journal's, the store's (the checks hash for their caches)
    monkeypatch.setattr(hashing, "hashlib", SimpleNamespace(sha256=Counting))
    for command in ("apply", "revert"):
        hashed.clear()
        assert run(command, "--target", tree, "--patch", patch).exit_code == 0
        assert len(hashed) == 2 and set(hashed.values()) == {1}, (command, hashed)


def test_each_file_written_is_synced_once(run, scene, monkeypatch):
    tree, patch = scene
    synced: Counter[tuple[int, bool]] = Counter()
    real = os.fsync

    def recording(fd):
        info = os.fstat(fd)
        synced[info.st_ino, stat.S_ISDIR(info.st_mode)] += 1
        return real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    files = [count for (_, is_dir), count in synced.items() if not is_dir]
    assert files and set(files) == {1}
    assert synced[(tree / MODEL).stat().st_ino, False] == 1  # the new content, before its rename
    assert synced[(tree / MODEL).parent.stat().st_ino, True] == 1  # its directory, after the rename
    assert synced[(tree / ".patchkit" / "objects").stat().st_ino, True] == 1  # before the first rename


def test_a_large_original_and_its_new_content_are_hashed_side_by_side(monkeypatch):
    real = hashlib.sha256
    both_at_once = threading.Barrier(2, timeout=20)  # broken (an error) if the two run one after the other

    def meeting(data=b""):
        both_at_once.wait()
        return real(data)

    before, after = os.urandom(3 << 20), os.urandom(2 << 20)
    monkeypatch.setattr(hashing, "hashlib", SimpleNamespace(sha256=meeting))
    hashing.hash_side_by_side([before, None, after, b"small"])

    def forbidden(data=b""):
        raise AssertionError("hashed again")

    monkeypatch.setattr(hashing, "hashlib", SimpleNamespace(sha256=forbidden))
    assert (sha256(before), sha256(after)) == (real(before).hexdigest(), real(after).hexdigest())


def test_a_damaged_original_names_the_command_for_this_release_and_tree(run, scene):
    """Review 10b L2: the hint said `vllm==VERSION` though the tree names its release, and pip on a
    tree `patchkit fetch --dest` laid out (no installer's files), where fetching again is the fix."""
    tree, patch = scene
    installer = tree / "vllm-0.16.0.dist-info/INSTALLER"
    installer.write_text("pip\n")  # as pip marks an installed vLLM: reinstalling it is the fix
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    saved_original(tree).chmod(0o644)
    saved_original(tree).write_text("damaged\n")
    (tree / MODEL).write_text("edited by hand\n")  # reverse-applying cannot rebuild it either
    result = run("revert", "--target", tree, "--patch", patch, "--force")
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "is corrupt" in said, said
    assert "VERSION" not in said and "vllm==0.16.0" in said, said
    installer.unlink()
    (tree / "vllm-0.16.0.dist-info/RECORD").write_text("")  # a laid-out tree: METADATA and RECORD only
    said = " ".join(run("revert", "--target", tree, "--patch", patch, "--force").output.split())
    assert f"patchkit fetch 0.16.0 --dest {tree} --force" in said, said


def test_a_file_in_objects_that_no_digest_names_is_kept_and_said(scene):
    """Review 41b L6: a full revert deleted any file in .patchkit/objects/ (a README, say), though
    objects are named by their sha256 only and the prune removes only patchkit's own entries. It
    stays, as other unknown files in .patchkit/ do, and revert says so and how it goes."""
    tree, patch = scene
    assert run_cli_writing("apply", "--target", tree, "--patch", patch).returncode == 0
    readme = tree / ".patchkit" / "objects" / "README"
    readme.write_text("the team's notes\n")
    status = run_cli_judged("status", "--target", tree, "--patch", patch)
    noted = " ".join(status.stdout.split())
    assert status.returncode == 0 and ".patchkit/objects/ holds README: no saved original of patchkit's" in noted, noted
    done = run_cli_writing("revert", "--target", tree, "--patch", patch)
    said = " ".join(done.stderr.split())
    assert done.returncode == 0 and (tree / MODEL).read_text() == MODEL_PY, done.stdout + done.stderr
    assert readme.read_text() == "the team's notes\n"
    assert sorted(p.name for p in (tree / ".patchkit").rglob("*")) == ["README", "objects"]
    assert "kept 1 file(s)" in said and "objects/README" in said, said
    assert f"rm -r {tree / '.patchkit'}" in said, said
    after = " ".join(run_cli_judged("status", "--target", tree, "--patch", patch).stdout.split())
    assert "holds README: no saved original" in after and "revert` removes" not in after, after


def test_a_digest_named_symlink_in_objects_is_kept_and_said(scene, tmp_path):
    """Review 42b F4: a symlink named by a digest in .patchkit/objects/ was removed by the revert's
    prune without a word. patchkit writes regular files only there: it stays and is named as the
    other entries patchkit did not write are, and its target is untouched."""
    tree, patch = scene
    assert run_cli_writing("apply", "--target", tree, "--patch", patch).returncode == 0
    outside = tmp_path / "mine.txt"
    outside.write_text("not patchkit's\n")
    link = tree / ".patchkit" / "objects" / ("b" * 64)
    link.symlink_to(outside)
    status = run_cli_judged("status", "--target", tree, "--patch", patch)
    noted = " ".join(status.stdout.split())
    assert status.returncode == 0 and f".patchkit/objects/ holds {'b' * 64}: no saved original" in noted, noted
    done = run_cli_writing("revert", "--target", tree, "--patch", patch)
    said = " ".join(done.stderr.split())
    assert done.returncode == 0 and (tree / MODEL).read_text() == MODEL_PY, done.stdout + done.stderr
    assert link.is_symlink() and outside.read_text() == "not patchkit's\n"
    assert "kept 1 file(s)" in said and f"objects/{'b' * 64}" in said, said
    after = " ".join(run_cli_judged("status", "--target", tree, "--patch", patch).stdout.split())
    assert f"holds {'b' * 64}: no saved original" in after and "revert` removes" not in after, after


def test_the_fetch_a_patch_applys_integrity_refusal_names_lays_its_file_out(tmp_path):
    """apply --patch of a file that is not the release's (RECORD) refuses, naming the fetch that puts
    the stock files back; without --all that fetch laid out the sets' files only, the diff's file
    stayed edited and apply refused again. Run as printed, the apply then goes through."""
    tree = write_tree(tmp_path / "site")
    for rel, data in STOCK_FILES.items():  # the release's own files, with a RECORD of them
        if rel.endswith(".py") and (tree / rel).exists():
            (tree / rel).write_bytes(data)
    (tree / "vllm-0.16.0.dist-info/RECORD").write_text(record_rows(tree, "vllm-0.16.0.dist-info"))
    stock = (tree / MODEL).read_text()
    patch = tmp_path / "model.diff"
    patch.write_bytes(make_patch(tmp_path, tree, {MODEL: stock.replace("return x", "return x * 2")}))
    (tree / MODEL).write_text(stock + "# edited\n")
    refused = run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import", env=OFFLINE)
    assert refused.returncode == 1 and "not the stock files" in refused.stderr, refused.stdout + refused.stderr
    [fetch] = re.findall(r"`(patchkit fetch [^`]+)`", " ".join(refused.stderr.split()))
    write_wheel(tmp_path / "wheel")  # the release's files, as the index serves them
    stock_files_fetched({p: d for p, d in STOCK_FILES.items() if p.endswith(".py")})
    fetched = run_cli_judged(*shlex.split(fetch)[1:], env=OFFLINE)
    assert fetched.returncode == 0 and (tree / MODEL).read_text() == stock, fetched.stdout + fetched.stderr
    done = run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import", env=OFFLINE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_fetch_a_damaged_original_of_a_patch_file_names_lays_that_file_out(scene, tmp_path):
    """The class of review 41b M5 in revert: a --patch apply's saved original damaged, its file edited
    since (nothing reverses), so revert refused, naming `fetch VERSION --dest T --force`, which lays
    out the sets' files only: the --patch file's stays as it is, and revert refuses again. The named
    fetch now takes every file (--all); run as said, revert --force then puts the stock file back."""
    tree, patch = scene
    (tree / "vllm/__init__.py").write_bytes(STOCK_FILES["vllm/__init__.py"])  # the release's own
    assert run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import").returncode == 0
    saved_original(tree).chmod(0o644)
    saved_original(tree).write_text("damaged\n")
    (tree / MODEL).write_text(PATCHED_MODEL + "# edited by hand\n")
    refused = run_cli_writing("revert", "--target", tree, "--patch", patch, "--force", env=OFFLINE)
    assert refused.returncode == 2 and "is corrupt" in refused.stderr, refused.stdout + refused.stderr
    [fetch] = re.findall(r"`(patchkit fetch [^`]+)`", " ".join(refused.stderr.split()))
    assert shlex.split(fetch) == ["patchkit", "fetch", "0.16.0", "--dest", str(tree), "--force", "--all"]
    write_wheel(tmp_path / "wheel")  # the release's files, as the index serves them
    stock_files_fetched({p: d for p, d in STOCK_FILES.items() if p.endswith(".py")})
    fetched = run_cli_judged(*shlex.split(fetch)[1:], env=OFFLINE)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    done = run_cli_writing("revert", "--target", tree, "--patch", patch, "--force", env=OFFLINE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / MODEL).read_text() == MODEL_PY


def test_a_damaged_original_of_a_moved_patch_file_names_a_fetch_that_runs_then_the_revert(scene, tmp_path):
    """A --patch apply's saved original damaged and its diff moved, offline: `revert --set adhoc-…`
    (what status names after a crash) refused, naming `fetch --set adhoc-… V --dest T --force --all`,
    which fetch refuses (an ad-hoc record is no library set). The hint names the fetch without the
    set, says it needs the index, and the revert after it; run as said once the index answers, the
    tree is stock."""
    tree, patch = scene
    (tree / "vllm/__init__.py").write_bytes(STOCK_FILES["vllm/__init__.py"])  # the release's own
    assert run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import").returncode == 0
    adhoc = json.loads((tree / ".patchkit/state.json").read_text())["entries"][0]["set"]
    patch.rename(tmp_path / "elsewhere.diff")
    saved_original(tree).chmod(0o644)
    saved_original(tree).write_text("damaged\n")
    refused = run_cli_writing("revert", "--target", tree, "--set", adhoc, env=OFFLINE)
    assert refused.returncode == 2 and "is corrupt" in refused.stderr, refused.stdout + refused.stderr
    said = " ".join(refused.stderr.split())
    assert "package index" in said, said
    fetch, again = re.findall(r"`(patchkit [^`]+)`", said)
    assert shlex.split(fetch) == ["patchkit", "fetch", "0.16.0", "--dest", str(tree), "--force", "--all"], said
    assert shlex.split(again) == ["patchkit", "revert", "--target", str(tree), "--set", adhoc], said
    write_wheel(tmp_path / "wheel")  # the index answers again
    stock_files_fetched({p: d for p, d in STOCK_FILES.items() if p.endswith(".py")})
    fetched = run_cli_judged(*shlex.split(fetch)[1:], env=OFFLINE)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    done = run_cli_writing(*shlex.split(again)[1:], env=OFFLINE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / MODEL).read_text() == MODEL_PY
