"""A crash leaves a journal whose saved original is then damaged or lost (review 41b M5): recovery
makes that original again where it can, sha256 checked (a patched file from the patches its record
names, a stock file from vLLM's own release file), and rolls back as usual. Where it cannot, every
command refuses with a hint, and the commands the hint names really bring the tree back."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    STOCK_FILES,
    crash_after_the_first_replace,
    follow_hints,
    hint_commands,
    make_patch,
    patchkit_faulted,
    snapshot,
    stock_files_fetched,
    write_library,
    write_tree,
    write_wheel,
)

from patchkit.base.hashing import sha256

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
PATCHED = {SPEC: SPEC_PY.replace('"qwen"', '"deepseek"'), MODEL: MODEL_PY.replace("return x", "return x + 1")}


def _tree_files(tree: Path) -> dict[str, bytes]:
    return {path: data for path, data in snapshot(tree).items() if not path.startswith(".patchkit/")}


@pytest.fixture
def applied(tmp_path, scratch) -> tuple[Path, Path, dict[str, bytes]]:
    """A tree with a --patch diff of two files applied (and the guard): the tree, the diff, its stock files."""
    tree = write_tree(tmp_path / "site")
    stock = _tree_files(tree)
    diff = tmp_path / "site.diff"
    diff.write_bytes(make_patch(scratch, tree, PATCHED))
    assert patchkit_faulted("apply", "--target", tree, "--patch", diff, "--no-import").returncode == 0
    return tree, diff, stock


def _damage(tree: Path, data: bytes) -> None:
    """The saved original holding `data` overwritten (a disk error, a user's mistake): not its bytes."""
    obj = tree / ".patchkit/objects" / sha256(data)
    obj.unlink()
    obj.write_bytes(b"damaged\n")


@pytest.mark.parametrize("where", ["--patch", "library", "library in the tree"])
def test_a_revert_cut_short_whose_patched_original_is_damaged_is_rolled_back(tmp_path, scratch, where):
    """The revert replaced spec.py with its stock bytes and died; the saved original it needs to roll
    back (the patched spec.py) is then damaged. Every command exited 2, and the hint's fetch --force
    kept the recorded file. Recovery now makes it again from the recorded patches (sha256 checked),
    from the user's library too when it lies in the tree (patchkit installed beside vLLM)."""
    tree = write_tree(tmp_path / "site")
    diff = make_patch(scratch, tree, PATCHED)
    if where.startswith("library"):
        library = write_library((tree / "patchkit" if "tree" in where else tmp_path) / "lib", {"0.16.0": [diff]})
        chosen: list[object] = ["--patches", library, "--set", "demo"]
    else:
        (tmp_path / "site.diff").write_bytes(diff)
        chosen = ["--patch", tmp_path / "site.diff"]
    stock = _tree_files(tree)
    assert patchkit_faulted("apply", "--target", tree, *chosen, "--no-import").returncode == 0
    patched = _tree_files(tree)
    crash_after_the_first_replace(tree, ["revert", "--target", tree, *chosen], SPEC, SPEC_PY.encode())
    _damage(tree, PATCHED[SPEC].encode())

    done = patchkit_faulted("status", "--target", tree, *chosen)
    said = " ".join(done.stderr.split())
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"the saved original of {SPEC} was damaged or missing: made again from the patches its record" in said
    assert _tree_files(tree) == patched and not (tree / ".patchkit/journal.json").exists()
    assert patchkit_faulted("revert", "--target", tree, *chosen).returncode == 0
    assert _tree_files(tree) == stock


def test_a_damaged_original_no_patch_at_hand_makes_again_names_a_revert_that_works(applied):
    """The same with the --patch file gone: nothing makes the original again, so every command
    refuses; the fix the hint named (fetch --force, then recover) changed nothing. The hint now
    names the journal's removal and the revert that finishes it: run as said, the tree is stock."""
    tree, diff, stock = applied
    crash_after_the_first_replace(tree, ["revert", "--target", tree, "--patch", diff], SPEC, SPEC_PY.encode())
    _damage(tree, PATCHED[SPEC].encode())
    diff.rename(diff.with_suffix(".gone"))
    for command in (["status"], ["recover"], ["revert"], ["apply", "--no-import"]):
        refused = patchkit_faulted(*command, "--target", tree)
        assert refused.returncode == 2 and f"the saved original of {SPEC} is damaged" in refused.stderr
    hint = " ".join(refused.stderr.split()).split("If one was", 1)[1]
    assert "fetch" not in hint, hint
    forget, finish = re.findall(r"`([^`]+)`", hint)
    assert forget.startswith(shlex.join(["rm", "-f", "--", str(tree / ".patchkit/journal.json")])), hint
    subprocess.run(["bash", "-c", forget], check=True)  # the staged files of its commit too (a glob)
    assert not list(tree.rglob("*.patchkit-*.tmp"))
    words = shlex.split(finish)
    assert words[:2] == ["patchkit", "revert"], hint
    done = patchkit_faulted(*words[1:])
    assert done.returncode == 0, done.stdout + done.stderr
    assert _tree_files(tree) == stock
    assert not (tree / ".patchkit/journal.json").exists()


def test_an_apply_cut_short_whose_stock_original_is_damaged_takes_vllms_own_file(applied, tmp_path):
    """An apply cut short after it patched spec.py, its saved stock original then damaged: the
    release's own spec.py (patchkit's fetcher, checked against the wheel's RECORD) is that
    original, by its sha256, and the rollback puts it back."""
    tree, diff, stock = applied
    assert patchkit_faulted("revert", "--target", tree, "--patch", diff).returncode == 0
    write_wheel(tmp_path / "wheel")  # the release's wheel, published in the test's cache
    stock_files_fetched({p: d for p, d in STOCK_FILES.items() if p == SPEC})
    command: list[object] = ["apply", "--target", tree, "--patch", diff, "--no-import"]
    crash_after_the_first_replace(tree, command, SPEC, PATCHED[SPEC].encode())
    _damage(tree, SPEC_PY.encode())
    done = patchkit_faulted("status", "--target", tree)  # no --patch: the diff is not known to reverse
    said = " ".join(done.stderr.split())
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert f"the saved original of {SPEC} was damaged or missing: made again from vLLM 0.16.0's own file" in said
    assert _tree_files(tree) == stock and not (tree / ".patchkit/journal.json").exists()


def test_an_apply_cut_short_offline_names_a_fetch_that_lays_out_the_lost_file(tmp_path, scratch):
    """The apply's stock original damaged and the release's file out of reach (offline, not cached):
    refused, and the hint names the stock files' fetch, then recover. Its fetch took only the sets'
    files (`--all` now: the lost file may be no set's); run as said once the index answers, the
    tree is stock."""
    python_files = {p: d for p, d in STOCK_FILES.items() if p.endswith(".py")}
    tree = write_tree(tmp_path / "site", files=dict(python_files))
    stock = _tree_files(tree)
    diff = tmp_path / "site.diff"
    diff.write_bytes(make_patch(scratch, tree, PATCHED))
    command: list[object] = ["apply", "--target", tree, "--patch", diff, "--no-import"]
    crash_after_the_first_replace(tree, command, SPEC, PATCHED[SPEC].encode())
    _damage(tree, SPEC_PY.encode())
    refused = patchkit_faulted("status", "--target", tree)
    assert refused.returncode == 2 and f"the saved original of {SPEC} is damaged" in refused.stderr
    fetched, recover = re.findall(r"`([^`]+)`", " ".join(refused.stderr.split()).split("If one was", 1)[1])
    assert shlex.split(fetched) == ["patchkit", "fetch", "0.16.0", "--dest", str(tree), "--force", "--all"]
    assert shlex.split(recover) == ["patchkit", "recover", "--target", str(tree)]
    write_wheel(tmp_path / "wheel")  # the index answers again: the release's files in the cache
    stock_files_fetched(python_files)
    for words in (shlex.split(fetched), shlex.split(recover)):
        done = patchkit_faulted(*words[1:])
        assert done.returncode == 0, done.stdout + done.stderr
    assert _tree_files(tree) == stock and not (tree / ".patchkit/journal.json").exists()


def test_a_lost_original_of_an_older_guard_leaves_no_guard_and_names_apply(applied):
    """An apply replacing an older patchkit's guard, cut short after the replace, its saved copy of the
    older guard then lost: nothing makes that original again (it is no guard of this patchkit's), and
    the hint's fetch of the stock files lays out no guard. The rollback removes the file instead (the
    guard only stops guarding: status says so) and names the apply that installs this patchkit's."""
    tree, diff, _stock = applied
    guard = tree / "patchkit_guard.py"
    own = guard.read_bytes()
    older = own + b"# an older patchkit's guard\n"
    guard.write_bytes(older)
    record = json.loads((tree / ".patchkit/state.json").read_text())
    record["guard"]["patchkit_guard.py"] = sha256(older)
    (tree / ".patchkit/state.json").write_text(json.dumps(record))
    crash_after_the_first_replace(tree, ["apply", "--target", tree, "--patch", diff, "--no-import"], guard.name, own)
    (tree / ".patchkit/objects" / sha256(older)).unlink()
    done = patchkit_faulted("status", "--target", tree, "--patch", diff)
    said = " ".join(done.stderr.split())
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "the launch guard's 1 file(s) it replaced removed, not restored (the saved original is damaged" in said
    assert not guard.exists() and not (tree / ".patchkit/journal.json").exists()
    [apply] = [c for c in re.findall(r"`([^`]+)`", said) if c.startswith("patchkit apply")]
    again = patchkit_faulted(*shlex.split(apply)[1:], "--no-import")
    assert again.returncode == 0, again.stdout + again.stderr
    assert guard.read_bytes() == own
    assert patchkit_faulted("status", "--target", tree, "--patch", diff).returncode == 0


def test_a_revert_whose_stock_originals_are_damaged_takes_vllms_own_files(applied, tmp_path):
    """No crash: the --patch record's saved stock originals damaged and its diff moved away. revert
    refused and named a fetch --force that keeps the patched files (a loop); it now takes the
    release's own files (patchkit's fetcher, checked against the wheel's RECORD) where their sha256 is
    the record's, and the tree is stock."""
    tree, diff, stock = applied
    for path in (SPEC, MODEL):
        _damage(tree, stock[path])
    diff.rename(diff.with_suffix(".gone"))
    write_wheel(tmp_path / "wheel")  # the release's wheel, published in the test's cache
    stock_files_fetched({p: d for p, d in STOCK_FILES.items() if p in (SPEC, MODEL)})
    done = patchkit_faulted("revert", "--target", tree)
    said = " ".join(done.stderr.split())
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{SPEC} was restored from vLLM 0.16.0's own file (sha256 checked)" in said, said
    assert _tree_files(tree) == stock


def test_the_journals_removal_a_hint_names_takes_the_staged_files_of_its_commit_too(tmp_path, scratch):
    """An apply cut short after its first replace, its stock original then lost (offline): the hint's
    way out if no apply was cut short is to remove the journal. The commit's staged new content of the
    file it had not replaced yet (`.model.py.patchkit-<id>.tmp`) stayed in vllm/, named by nothing.
    The hint's `rm` takes those too (by the journal's id), and nothing else."""
    tree = write_tree(tmp_path / "site", files={p: d for p, d in STOCK_FILES.items() if p.endswith(".py")})
    diff = tmp_path / "site.diff"
    diff.write_bytes(make_patch(scratch, tree, PATCHED))
    command: list[object] = ["apply", "--target", tree, "--patch", diff, "--no-import"]
    crash_after_the_first_replace(tree, command, SPEC, PATCHED[SPEC].encode())
    _damage(tree, SPEC_PY.encode())
    staged = sorted(p.relative_to(tree).as_posix() for p in tree.rglob(".*.patchkit-*.tmp"))
    assert staged and all(p.startswith("vllm/") for p in staged), staged
    before = {p: d for p, d in _tree_files(tree).items() if p not in staged}
    refused = patchkit_faulted("status", "--target", tree)
    assert refused.returncode == 2 and f"the saved original of {SPEC} is damaged" in refused.stderr
    forget = re.findall(r"`([^`]+)`", " ".join(refused.stderr.split()))[0]
    assert forget.startswith("rm "), forget
    subprocess.run(["bash", "-c", forget], check=True)
    assert not (tree / ".patchkit/journal.json").exists()
    assert not list(tree.rglob("*.patchkit-*.tmp"))  # the staged files are gone
    assert _tree_files(tree) == before  # and no other file


def test_an_update_cut_short_whose_earlier_patched_original_is_damaged_is_rolled_back(tmp_path, scratch):
    """apply of a library whose series of the set changed (an update) died right after it replaced
    spec.py, and the saved original it rolls back to (spec.py as the earlier series patched it) is
    then damaged: recovery makes it again from the saved stock original and the earlier record's
    patches (sha256 checked), and the tree is the earlier series' again, whole."""
    tree = write_tree(tmp_path / "site")
    later = {**PATCHED, SPEC: PATCHED[SPEC].replace('"deepseek"', '"deepseek", "mimo"')}
    old = write_library(tmp_path / "old", {"0.16.0": [make_patch(scratch, tree, PATCHED)]})
    new = write_library(tmp_path / "new", {"0.16.0": [make_patch(scratch, tree, later)]})
    assert patchkit_faulted("apply", "--target", tree, "--patches", old, "--set", "demo", "--no-import").returncode == 0
    earlier = _tree_files(tree)
    update: list[object] = ["apply", "--target", tree, "--patches", new, "--set", "demo", "--no-import"]
    crash_after_the_first_replace(tree, update, SPEC, later[SPEC].encode())
    _damage(tree, PATCHED[SPEC].encode())

    done = patchkit_faulted("status", "--target", tree, "--patches", new, "--set", "demo")
    said = " ".join(done.stderr.split())
    assert f"the saved original of {SPEC} was damaged or missing: made again from the patches its record" in said
    assert _tree_files(tree) == earlier and not (tree / ".patchkit/journal.json").exists(), said
    assert patchkit_faulted(*update).returncode == 0
    assert (tree / SPEC).read_bytes() == later[SPEC].encode()


def test_an_unsealed_journals_roll_back_offline_names_a_way_that_ends(tmp_path, scratch):
    """A crash's journal read in a copy of the tree (its marker sealed for the other: as another user's
    or node's key), the apply's stock original lost, offline: `recover --roll-back` named the stock
    files' fetch, then plain `recover`, which refuses the unsealed journal and names `recover
    --roll-back` again: a circle. Followed once the index answers, the hints now end: the tree stock."""
    python_files = {p: d for p, d in STOCK_FILES.items() if p.endswith(".py")}
    tree = write_tree(tmp_path / "site", files=dict(python_files))
    stock = _tree_files(tree)
    diff = tmp_path / "site.diff"
    diff.write_bytes(make_patch(scratch, tree, PATCHED))
    crash_after_the_first_replace(
        tree, ["apply", "--target", tree, "--patch", diff, "--no-import"], SPEC, PATCHED[SPEC].encode()
    )
    _damage(tree, SPEC_PY.encode())
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy, symlinks=True)
    refused = patchkit_faulted("status", "--target", copy)
    assert refused.returncode == 2 and "not sealed with this user's key" in refused.stderr, refused.stderr
    first = hint_commands(refused.stderr)[0]
    assert shlex.split(first) == ["patchkit", "recover", "--target", str(copy), "--roll-back"], first
    refused = patchkit_faulted(*shlex.split(first)[1:])
    assert refused.returncode == 2 and f"the saved original of {SPEC} is damaged" in refused.stderr
    write_wheel(tmp_path / "wheel")  # the index answers again: the release's files in the cache
    stock_files_fetched(python_files)
    done, run = follow_hints(refused, first)
    assert done.returncode == 0, (run, done.stdout + done.stderr)
    assert _tree_files(copy) == stock and not (copy / ".patchkit/journal.json").exists(), run


@pytest.mark.parametrize("where", ["--patch", "library"])
def test_an_apply_cut_short_offline_gets_its_lost_stock_original_from_its_series_reversed(tmp_path, scratch, where):
    """An apply cut short after its first replace, its saved stock original then lost, offline (the
    release's file out of reach): refused, though the tree's file holds what the apply wrote and the
    series the user names, reversed on it, gives the lost bytes back (held to the journal's sha256)."""
    python_files = {p: d for p, d in STOCK_FILES.items() if p.endswith(".py")}
    tree = write_tree(tmp_path / "site", files=dict(python_files))
    stock = _tree_files(tree)
    diff = make_patch(scratch, tree, PATCHED)
    if where == "library":
        chosen: list[object] = ["--patches", write_library(tmp_path / "lib", {"0.16.0": [diff]}), "--set", "demo"]
    else:
        (tmp_path / "site.diff").write_bytes(diff)
        chosen = ["--patch", tmp_path / "site.diff"]
    crash_after_the_first_replace(
        tree, ["apply", "--target", tree, *chosen, "--no-import"], SPEC, PATCHED[SPEC].encode()
    )
    _damage(tree, SPEC_PY.encode())
    done = patchkit_faulted("status", "--target", tree, *chosen)
    said = " ".join(done.stderr.split())
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert f"the saved original of {SPEC} was damaged or missing: made again from the tree's file with" in said, said
    assert _tree_files(tree) == stock and not (tree / ".patchkit/journal.json").exists()


# Each recovery refusal a crash with a lost saved original leaves, offline (the index answers once a
# hint says to fetch): the crash of an apply (its stock original lost) or of a revert (its patched one,
# the --patch diff moved away: nothing makes it again), the journal sealed by this user or not (a
# copy of the tree: another user's, node's, key's).
@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "unsealed"])
@pytest.mark.parametrize("crashed", ["apply", "revert"])
def test_every_recovery_refusals_hints_end_without_a_circle(tmp_path, scratch, crashed, sealed):
    """From `status`, the first command a user runs: each hint followed as written ends with the tree
    stock, no journal and no staged file; no refusal names a command run before it (a circle), or
    refuses again as before (review44b M1: `recover --roll-back` -> fetch -> `recover` ->
    `recover --roll-back`)."""
    python_files = {p: d for p, d in STOCK_FILES.items() if p.endswith(".py")}
    tree = write_tree(tmp_path / "site", files=dict(python_files))
    stock = _tree_files(tree)
    diff = tmp_path / "site.diff"
    diff.write_bytes(make_patch(scratch, tree, PATCHED))
    applying: list[object] = ["apply", "--target", tree, "--patch", diff, "--no-import"]
    if crashed == "apply":
        crash_after_the_first_replace(tree, applying, SPEC, PATCHED[SPEC].encode())
        _damage(tree, SPEC_PY.encode())
    else:
        assert patchkit_faulted(*applying).returncode == 0
        crash_after_the_first_replace(tree, ["revert", "--target", tree, "--patch", diff], SPEC, SPEC_PY.encode())
        _damage(tree, PATCHED[SPEC].encode())
        diff.rename(diff.with_suffix(".gone"))
    if not sealed:
        shutil.copytree(tree, tmp_path / "copy", symlinks=True)
        tree = tmp_path / "copy"
    refused = patchkit_faulted("status", "--target", tree)
    assert refused.returncode == 2, refused.stdout + refused.stderr

    def online() -> None:  # the release's wheel and files in the test's cache: the index answers
        write_wheel(tmp_path / "wheel")
        stock_files_fetched(python_files)

    done, run = follow_hints(refused, f"patchkit status --target {tree}", before_fetch=online)
    assert done.returncode in (0, 1), (run, done.stdout + done.stderr)
    assert _tree_files(tree) == stock and not (tree / ".patchkit/journal.json").exists(), run
    assert not list(tree.rglob("*.patchkit-*.tmp")), run


def test_an_apply_patch_cut_short_offline_names_its_own_diff_as_the_way_that_ends_it(tmp_path, scratch):
    """review45b L-A: offline, an `apply --patch FILE` cut short with its stock original lost: the
    hint named a removal of the journal (the tree left mixed) or a fetch (online only); the command
    with its --patch FILE, which rolls it back offline from the diff reversed, was not said."""
    python_files = {p: d for p, d in STOCK_FILES.items() if p.endswith(".py")}
    tree = write_tree(tmp_path / "site", files=dict(python_files))
    stock = _tree_files(tree)
    diff = tmp_path / "site.diff"
    diff.write_bytes(make_patch(scratch, tree, PATCHED))
    crash_after_the_first_replace(
        tree, ["apply", "--target", tree, "--patch", diff, "--no-import"], SPEC, PATCHED[SPEC].encode()
    )
    _damage(tree, SPEC_PY.encode())
    refused = patchkit_faulted("status", "--target", tree)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and "If it was an apply --patch FILE, the same command again (or status)" in said
    done = patchkit_faulted("status", "--target", tree, "--patch", diff)  # as the hint says, offline
    assert done.returncode == 0, done.stdout + done.stderr
    assert _tree_files(tree) == stock and not (tree / ".patchkit/journal.json").exists()
