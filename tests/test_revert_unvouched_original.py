"""revert writes a file back to an original only something other than the record vouches for: vLLM's
RECORD lists it, or the recorded patches reversed give it (in the library given, or the one the
record says the set came from). An original only the record (read back from the tree) vouches for
goes back with --force alone, a copy of what it replaces kept; without it, exit 1, nothing written
and the command named (issue 20 residuals, words30 item 2)."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
from pathlib import Path

from helpers import MODEL, MODEL_PY, SPEC, SPEC_PY, make_patch, record_rows, snapshot, write_library

MINE = b"# an original nobody but the record vouches for\nACCEPTED = ['anything']\n"


def _revert_of_a_planted_after(run, tree: Path, library: Path, path: str, data: bytes) -> str:
    """`data` written to `path` and planted as the record's "after" of it, then revert: what it said."""
    (tree / path).write_bytes(data)
    state = json.loads((tree / ".patchkit/state.json").read_text())
    state["entries"][0]["files"][path]["after"] = hashlib.sha256(data).hexdigest()
    (tree / ".patchkit/state.json").write_text(json.dumps(state))
    done = run("revert", "--target", tree, "--patches", library)
    said = " ".join(done.output.split())
    assert done.exit_code == 0, said
    return said


def _kept(tree: Path) -> list[bytes]:
    """The copies revert kept under .patchkit/saved/."""
    return [p.read_bytes() for p in (tree / ".patchkit/saved").rglob("*") if p.is_file()]


def _library(tree, scratch, where):
    patches = [
        make_patch(scratch, tree, {SPEC: SPEC_PY.replace('"qwen"', '"deepseek"')}),
        make_patch(scratch, tree, {MODEL: MODEL_PY + "# eagle3\n"}),
    ]
    return write_library(where, {"0.16.0": patches})


def _record_original(tree, path: str, data: bytes) -> None:
    """The record says `path` held `data` before the apply, the object store holding those bytes."""
    digest = hashlib.sha256(data).hexdigest()
    (tree / ".patchkit/objects" / digest).write_bytes(data)
    state = json.loads((tree / ".patchkit/state.json").read_text())
    state["entries"][0]["files"][path]["before"] = digest
    (tree / ".patchkit/state.json").write_text(json.dumps(state))


def test_an_original_only_the_record_vouches_for_needs_force(run, tree, scratch, tmp_path):
    library = _library(tree, scratch, tmp_path / "lib")
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0
    _record_original(tree, SPEC, MINE)
    before = snapshot(tree)

    for dry in ((), ("--dry-run",)):
        done = run("revert", "--target", tree, "--patches", library, *dry)
        said = " ".join(done.output.split())
        assert done.exit_code == 1, said
        assert f"state.json vouches for what revert would put back at {SPEC}" in said, said
        assert "nothing was written" in said, said
        forced = [shlex.split(c) for c in re.findall(r"`([^`]+)`", said) if "--force" in c and "revert" in c]
        assert forced == [["patchkit", "revert", "--target", str(tree), "--patches", str(library), "--force"]], said
        assert snapshot(tree) == before and not (tree / ".patchkit/saved").exists()

    patched = (tree / SPEC).read_bytes()
    done = run(*forced[0][1:])
    assert done.exit_code == 0, done.output
    assert (tree / SPEC).read_bytes() == MINE and (tree / MODEL).read_text() == MODEL_PY
    assert _kept(tree) == [patched], done.output


def test_the_library_the_record_names_vouches_without_force_or_copies(run, tree, scratch, tmp_path):
    """Applied from a library given with --patches, reverted without it: the recorded patches, found
    by sha256 in the library the record names, vouch for the originals; no --force, no copy."""
    stock = snapshot(tree)
    library = _library(tree, scratch, tmp_path / "lib")
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0
    done = run("revert", "--target", tree)
    assert done.exit_code == 0, done.output
    assert "only the record" not in done.output and snapshot(tree) == stock
    assert not (tree / ".patchkit/saved").exists(), done.output


def test_a_file_the_patch_deleted_comes_back_without_force(run, tree, scratch, tmp_path):
    """The patch given vouches for what it deleted (its removed lines): no --force, no copy kept, the
    tree back as it was (a rename: test_operations' module turned into a package)."""
    moved = "vllm/models/moved.py"
    patch = make_patch(scratch, tree, {SPEC: None, MODEL: None, moved: MODEL_PY.replace("return x", "return x * 2")})
    (tmp_path / "p.diff").write_bytes(patch)
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patch", tmp_path / "p.diff", "--no-guard").exit_code == 0
    assert not (tree / SPEC).exists() and not (tree / MODEL).exists()

    done = run("revert", "--target", tree, "--patch", tmp_path / "p.diff")
    assert done.exit_code == 0, done.output
    assert snapshot(tree) == stock and not (tree / ".patchkit/saved").exists()


def test_a_record_whose_after_names_a_hotfix_keeps_it(run, tree, scratch, tmp_path):
    """A record whose "after" is the sha256 of the user's hotfixed file (its "before" the stock file,
    vLLM's RECORD's own) is no proof the file is patchkit's: the recorded patches applied to that
    original do not give it, so revert keeps a copy of the hotfix under .patchkit/saved/ and says so."""
    (tree / "vllm-0.16.0.dist-info/RECORD").write_text(record_rows(tree, "vllm-0.16.0.dist-info"))
    stock = snapshot(tree)
    library = _library(tree, scratch, tmp_path / "lib")
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0
    hotfix = SPEC_PY.encode() + b"# my local hotfix\n"
    said = _revert_of_a_planted_after(run, tree, library, SPEC, hotfix)
    assert (tree / SPEC).read_text() == SPEC_PY and (tree / MODEL).read_text() == MODEL_PY
    assert _kept(tree) == [hotfix], said
    assert f"{SPEC} held bytes the recorded patches do not make of its original" in said, said
    assert f"{SPEC} as it was before the revert was saved under" in said, said
    assert snapshot(tree) == stock


def test_a_created_file_whose_after_names_other_bytes_keeps_them(run, tree, scratch, tmp_path):
    """A file the patches created has no original to reverse to: revert deletes it. A record whose
    "after" names other bytes (the user's own, planted) is no proof they are the patches' output: the
    added file made again from nothing differs, so a copy is kept and said; the patch's own output
    goes without one."""
    created = "vllm/models/added.py"
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {created: "ADDED = 1\n"})]})
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0
    mine = b"ADDED = 1\n# the user's own line\n"
    said = _revert_of_a_planted_after(run, tree, library, created, mine)
    assert snapshot(tree) == stock, said
    assert _kept(tree) == [mine], said
    assert f"{created} held bytes the recorded patches do not make of its original" in said, said

    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0
    shutil.rmtree(tree / ".patchkit/saved")
    done = run("revert", "--target", tree, "--patches", library)
    assert done.exit_code == 0 and snapshot(tree) == stock, done.output
    assert not (tree / ".patchkit/saved").exists(), done.output
