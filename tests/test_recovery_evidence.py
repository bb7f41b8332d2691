"""Recovery after a crash rolls a file back only with evidence that the interrupted transaction
wrote it (issue 20, M1-M3): its bytes are the journal's "after" bytes and the commit reached it
(its marker, staged.json, is there, and the file comes before the first one still staged). Anything
else stays as it is and is named; only the originals put back are read. A file's times are no
evidence (a copy, chmod or chown of the tree changes them); a file that is not the very one the
commit staged (its identity) is kept aside before it is replaced or removed."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from cli_server import run_patchkit
from helpers import MODEL_PY, SPEC_PY, make_patch, mark_staged, snapshot, write_tree

from patchkit.base.hashing import sha256
from patchkit.distinfo.record import record_hash
from patchkit.engine import transaction
from patchkit.store.journal import staged_name
from patchkit.store.state import read_state

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
NEW = "vllm/brand/new/mod.py"


@pytest.fixture
def change(tmp_path, scratch) -> tuple[Path, Path]:
    """A patch that deletes vllm/__init__.py, adds a module in a new package and changes two files:
    in the journal's order, the delete and the add come before SPEC and MODEL."""
    tree = write_tree(tmp_path / "site")
    edits = {
        SPEC: SPEC_PY.replace('"qwen"', '"deepseek"'),
        MODEL: MODEL_PY.replace("return x", "return x + 1"),
        NEW: "NEW = True\n",
        "vllm/__init__.py": None,
    }
    (tmp_path / "p.diff").write_bytes(make_patch(scratch, tree, edits))
    return tree, tmp_path / "p.diff"


def _patchkit(*args: object, fault: str = "") -> subprocess.CompletedProcess:
    """`python -m patchkit ARGS` in a process of its own (forked by cli_server), which the fault ends."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHKIT_FAULT")}
    if fault:
        env |= {"PATCHKIT_FAULT_AFTER": fault, "PATCHKIT_FAULT_MODE": "exit"}
    return run_patchkit([str(a) for a in args], env, None, 120)


def _copy(source: Path, dest: Path) -> None:
    """`cp -a`: times and modes kept (recovery reads a file's time against the journal's)."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, symlinks=True)


def _crash_just_before_replacing(tree: Path, patch: Path, path: str) -> None:
    """Crash the apply at its last step before `path` is replaced (its original saved by a link)."""
    stock = (tree / path).read_bytes()
    keep = tree.parent / "stock-copy"
    _copy(tree, keep)
    last = None
    for n in range(1, 60):
        _copy(keep, tree)
        done = _patchkit("apply", "--target", tree, "--patch", patch, "--no-import", fault=str(n))
        if done.returncode == 0 or (tree / path).read_bytes() != stock:
            break
        last = n
    assert last is not None
    _copy(keep, tree)
    died = _patchkit("apply", "--target", tree, "--patch", patch, "--no-import", fault=str(last))
    assert died.returncode == 70 and (tree / ".patchkit/journal.json").exists(), died.stderr


def test_a_file_edited_in_place_after_a_crash_is_kept_and_the_rest_rolled_back(change):
    """The apply crashed with SPEC's original saved by a hard link and SPEC not yet replaced; the user
    then edits SPEC in place, which changes the saved original too. Recovery read every original,
    found that one damaged and refused (every command exit 2, the tree half patched)."""
    tree, patch = change
    stock = snapshot(tree) | {"vllm/__init__.py": b""}
    _crash_just_before_replacing(tree, patch, SPEC)
    assert not (tree / "vllm/__init__.py").exists() and (tree / NEW).exists()  # the commit got that far
    edited = SPEC_PY.encode() + b"# my note\n"
    with open(tree / SPEC, "r+b") as fh:  # in place: the same inode
        fh.seek(0, os.SEEK_END)
        fh.write(b"# my note\n")

    done = _patchkit("status", "--target", tree, "--patch", patch)
    assert done.returncode == 0, done.stderr
    assert f"kept, not written by it or changed since: {SPEC}" in done.stderr
    assert snapshot(tree) == stock | {SPEC: edited}  # __init__.py back, the new package gone, the edit kept
    assert not (tree / "vllm/brand").exists() and not (tree / ".patchkit/journal.json").exists()


def _journal(tree: Path, files: list[dict]) -> None:
    (tree / ".patchkit").mkdir(exist_ok=True)
    (tree / ".patchkit/journal.json").write_text(json.dumps({"id": "abc123", "previous_state": None, "files": files}))


def test_a_file_holding_the_journals_bytes_that_the_commit_never_reached_is_kept(tmp_path):
    """The journal's first file is still staged, so the commit replaced nothing; a file further on
    that already held the bytes the journal would write (from before the journal) is no file the
    transaction wrote: it stays (it was deleted as the transaction's own)."""
    tree = write_tree(tmp_path / "site", files={SPEC: SPEC_PY, "vllm/extra.py": "E = 2\n"})
    time.sleep(0.05)  # the journal is written after the file, in a later clock tick
    staged = staged_name(SPEC, "abc123")
    (tree / staged).write_text("X = 1\n")
    (tree / ".patchkit/objects").mkdir(parents=True)
    (tree / ".patchkit/objects" / sha256(SPEC_PY.encode())).write_text(SPEC_PY)
    _journal(
        tree,
        [
            {"path": SPEC, "before": sha256(SPEC_PY.encode()), "after": sha256(b"X = 1\n"), "staged": staged},
            {
                "path": "vllm/extra.py",
                "before": None,
                "after": sha256(b"E = 2\n"),
                "staged": staged_name("vllm/extra.py", "abc123"),
                "created_dirs": [],
            },
        ],
    )
    said = transaction.recover(tree)
    assert "kept, not written by it or changed since: vllm/extra.py" in said, said
    assert (tree / "vllm/extra.py").read_text() == "E = 2\n" and (tree / SPEC).read_text() == SPEC_PY
    assert not (tree / staged).exists() and not (tree / ".patchkit/journal.json").exists()


def test_a_file_changed_after_the_journal_is_no_file_the_commit_wrote_without_its_marker(tmp_path):
    """Review 30 H1: a file holding the journal's bytes that changed after the journal (as a chmod
    or chown of the tree makes every file) was rolled back on that alone. The commit writes its
    marker before it replaces any file: without it, the file stays and is named."""
    tree = write_tree(tmp_path / "site", files={SPEC: SPEC_PY})
    (tree / ".patchkit/objects").mkdir(parents=True)
    (tree / ".patchkit/objects" / sha256(SPEC_PY.encode())).write_text(SPEC_PY)
    _journal(tree, [{"path": SPEC, "before": sha256(SPEC_PY.encode()), "after": sha256(b"X = 1\n"), "staged": None}])
    time.sleep(0.05)
    (tree / SPEC).write_text("X = 1\n")
    said = transaction.recover(tree)
    assert "restored" not in said and f"kept, not written by it or changed since: {SPEC}" in said, said
    assert (tree / SPEC).read_text() == "X = 1\n" and not (tree / ".patchkit/journal.json").exists()


# --- M3, the record's half: revert deletes a created file only for a patch at hand that creates it ---


@pytest.fixture
def created(run, tree, scratch) -> Path:
    """An ad-hoc patch that adds a module, applied."""
    patch = scratch / "adds.diff"
    patch.write_bytes(make_patch(scratch, tree, {"vllm/brand_new.py": "NEW = 1\n"}))
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    return patch


def test_revert_without_the_patch_that_created_a_file_keeps_it_and_names_the_command(run, tree, created):
    result = run("revert", "--target", tree)  # the library's series: it creates no such file
    assert result.exit_code == 2, result.output
    assert (
        "vllm/brand_new.py" in result.output and f"patchkit revert --target {tree} --patch {created}" in result.output
    )
    assert (tree / "vllm/brand_new.py").read_text() == "NEW = 1\n" and read_state(tree).entries

    result = run("revert", "--target", tree, "--patch", created)  # as it says
    assert result.exit_code == 0, result.output
    assert not (tree / "vllm/brand_new.py").exists() and not read_state(tree).entries


def test_a_record_naming_a_users_file_as_created_never_deletes_it(run, tree, created):
    """A record planted (or left by an older set) that names a file of the user's, with its hash."""
    mine = tree / "vllm/my_plugin.py"
    mine.write_text("MINE = 1\n")
    path = tree / ".patchkit/state.json"
    record = json.loads(path.read_text())
    record["entries"][0]["files"]["vllm/my_plugin.py"] = {"before": None, "after": sha256(b"MINE = 1\n")}
    path.write_text(json.dumps(record))
    result = run("revert", "--target", tree, "--patch", created)
    assert result.exit_code == 2, result.output
    assert "vllm/my_plugin.py" in result.output and mine.read_text() == "MINE = 1\n"


def _forged_journal(tree: Path, files: list[dict], previous: str | None = None) -> None:
    """A journal written after the files it names, no staged file left."""
    (tree / ".patchkit").mkdir(exist_ok=True)
    journal = {"id": "f00d", "previous_state": previous, "files": files}
    (tree / ".patchkit" / "journal.json").write_text(json.dumps(journal))


def test_a_forged_journal_reaching_every_file_deletes_and_overwrites_nothing(tmp_path):
    """Review 5 H1: no staged file left made every entry "reached", so a journal alone could make
    the next command delete user files (listed as created) or overwrite one (with a planted
    original). Without the commit's marker nothing was replaced: every file stays, named."""
    tree = write_tree(tmp_path / "site")
    mine, other = b"MINE = 1\n", b"VALUE = 42\n"
    (tree / "vllm/userdir").mkdir()
    (tree / "vllm/userdir/mine.py").write_bytes(mine)
    (tree / "otherpkg").mkdir()
    (tree / "otherpkg/mod.py").write_bytes(other)
    (tree / ".patchkit/objects").mkdir(parents=True)
    planted = b"import os  # not the user's\n"
    (tree / ".patchkit/objects" / sha256(planted)).write_bytes(planted)
    before = snapshot(tree)
    time.sleep(0.02)
    created = [
        {"path": path, "before": None, "after": sha256(data), "staged": None, "created_dirs": [path.rpartition("/")[0]]}
        for path, data in (("vllm/userdir/mine.py", mine), ("otherpkg/mod.py", other))
    ]
    overwritten = {"path": SPEC, "before": sha256(planted), "after": sha256(SPEC_PY.encode()), "staged": None}
    _forged_journal(tree, [*created, overwritten])
    said = transaction.recover(tree)
    assert f"kept, not written by it or changed since:\n  otherpkg/mod.py\n  {SPEC}\n  vllm/userdir/mine.py" in said
    assert snapshot(tree) == before and (tree / "otherpkg/mod.py").read_bytes() == other
    assert not (tree / ".patchkit/saved").exists()


def test_a_forged_journal_with_no_previous_record_keeps_an_older_state_json(tree, created):
    """Review 5 L4: "previous_state": null removed the state.json of an applied tree."""
    record = (tree / ".patchkit/state.json").read_bytes()
    time.sleep(0.02)
    _forged_journal(tree, [])
    transaction.recover(tree)
    assert (tree / ".patchkit/state.json").read_bytes() == record


def test_a_deleted_file_the_commit_reached_still_gets_its_original_back(tmp_path):
    """A delete leaves no file to show: reached by the commit (its marker), its original returns."""
    tree = write_tree(tmp_path / "site")
    original = (tree / "vllm/__init__.py").read_bytes()
    (tree / ".patchkit/objects").mkdir(parents=True)
    (tree / ".patchkit/objects" / sha256(original)).write_bytes(original)
    _forged_journal(tree, [{"path": "vllm/__init__.py", "before": sha256(original), "after": None, "staged": None}])
    mark_staged(tree, "f00d")
    (tree / "vllm/__init__.py").unlink()
    said = transaction.recover(tree)
    assert "1 file(s) restored" in (said or ""), said
    assert (tree / "vllm/__init__.py").read_bytes() == original


# --- review 10b H1: a copy, chmod or chown after a crash gives every file a new ctime ---


def _with_record(tree: Path) -> Path:
    """vLLM's RECORD for the tree's vllm/ files, as an installed wheel has it."""
    rows = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and p.parts[-2:][0] != ".patchkit"):
        rel = path.relative_to(tree).as_posix()
        if rel.startswith("vllm/"):
            data = path.read_bytes()
            rows.append(f"{rel},{record_hash(data)},{len(data)}")
    (tree / "vllm-0.16.0.dist-info/RECORD").write_text("\n".join(rows) + "\n")
    return tree


# _crash_at_the_last_step's step by (patch, tree's files): the same apply takes the same steps, so the search
# (an apply a step, ~20 of them) runs once a worker, not once a test
_LAST_STEP: dict[tuple[bytes, str], int] = {}


def _crash_at_the_last_step(tree: Path, patch: Path) -> None:
    """Crash the apply at its last step before its commit point: every file in place, the journal kept."""
    key = (patch.read_bytes(), repr(sorted(snapshot(tree).items())))
    if key not in _LAST_STEP:
        _LAST_STEP[key] = _last_step_before_the_commit(tree, patch)
    _patchkit("apply", "--target", tree, "--patch", patch, "--no-import", fault=str(_LAST_STEP[key]))
    assert (tree / ".patchkit/journal.json").exists()


def _last_step_before_the_commit(tree: Path, patch: Path) -> int:
    """The last fault step of the apply that leaves its journal (tried on copies; `tree` is left as it was)."""
    keep = tree.parent / "stock-copy"
    _copy(tree, keep)
    last = None
    for n in range(1, 80):
        _copy(keep, tree)
        if _patchkit("apply", "--target", tree, "--patch", patch, "--no-import", fault=str(n)).returncode == 0:
            break
        if (tree / ".patchkit/journal.json").exists():  # not past the commit point
            last = n
    assert last is not None
    _copy(keep, tree)
    return last


@pytest.fixture
def crashed(tmp_path, scratch) -> tuple[Path, dict[str, bytes]]:
    """An apply of a patch that changes two of vLLM's files, crashed with both in place."""
    tree = _with_record(
        write_tree(tmp_path / "site", files={SPEC: SPEC_PY, MODEL: MODEL_PY, "vllm/keep.py": "K = 1\n"})
    )
    edits = {SPEC: SPEC_PY.replace('"qwen"', '"deepseek"'), MODEL: MODEL_PY.replace("return x", "return x + 1")}
    patch = tmp_path / "p.diff"
    patch.write_bytes(make_patch(scratch, tree, edits))
    stock = snapshot(tree)
    _crash_at_the_last_step(tree, patch)
    assert (tree / SPEC).read_text() == edits[SPEC] and (tree / MODEL).read_text() == edits[MODEL]
    return tree, stock


def _moved(tree: Path, dest: Path) -> Path:
    """`cp -a` of a tree that copies .patchkit/ last (as a tar that lists it last): every file's
    ctime is new, the journal's newest."""
    shutil.copytree(tree, dest, symlinks=True, ignore=lambda d, names: [".patchkit"] if Path(d) == tree else [])
    time.sleep(0.05)
    shutil.copytree(tree / ".patchkit", dest / ".patchkit", symlinks=True)
    return dest


def _chmodded(tree: Path) -> Path:
    """A chmod (as `chmod -R` or `chown -R` of the environment) of the journal, after the crash."""
    time.sleep(0.05)
    os.chmod(tree / ".patchkit/journal.json", 0o644)
    return tree


@pytest.mark.parametrize("how", ["copy", "chmod"])
def test_a_tree_copied_or_chmodded_after_a_crash_still_gets_its_originals_back(crashed, tmp_path, how):
    """The ctime alone decided: after `cp -a` (every ctime new) or a chmod of the journal, recovery
    kept the patched files, dropped the journal and the saved originals, and `revert` said the tree
    was stock. Their bytes are the journal's and the originals are vLLM's own (RECORD): restore.
    A copy is another tree, for which the marker was not sealed: only on the user's word."""
    tree, stock = crashed
    tree = _moved(tree, tmp_path / "moved") if how == "copy" else _chmodded(tree)
    if how == "copy":
        patched = snapshot(tree)
        refused = _patchkit("recover", "--target", tree)
        assert refused.returncode == 2 and "is not sealed with this user's key" in refused.stderr, refused.stderr
        assert snapshot(tree) == patched
    done = _patchkit("recover", "--target", tree, *(["--roll-back"] if how == "copy" else []))
    assert done.returncode == 0, done.stderr
    assert "2 file(s) restored" in done.stdout, done.stdout
    assert snapshot(tree) == stock
    assert not (tree / ".patchkit/journal.json").exists()


def test_a_copied_tree_is_rolled_back_keeping_aside_the_files_it_replaces(crashed, tmp_path):
    """A copy of the tree after the crash (new inodes): the marker shows the commit reached both
    files, but neither is the very file it staged. They go back to their originals, whatever
    vouches for those (here nothing: no RECORD), and a copy of each file replaced is kept, said
    with the command that puts it back. The marker was sealed for the other tree: only on the
    user's `recover --roll-back`."""
    tree, stock = crashed
    (tree / "vllm-0.16.0.dist-info/RECORD").unlink()
    tree = _moved(tree, tmp_path / "moved")
    patched = snapshot(tree)
    done = _patchkit("recover", "--target", tree, "--roll-back")
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert (
        "2 file(s) restored" in said
        and "nothing showed it wrote these, so a copy is kept in" in said
        and f"back): {MODEL} {SPEC}" in said
    )
    assert snapshot(tree) == stock and not (tree / ".patchkit/journal.json").exists()
    [back] = re.findall(r"`([^`]+)`", said)
    subprocess.run(shlex.split(back), check=True)
    assert snapshot(tree) == patched


def _deepest_brackets(text: str) -> int:
    depth = deepest = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        deepest = max(deepest, depth)
    return deepest


def test_a_fetched_tree_whose_record_was_removed_is_told_to_fetch_it_again(crashed, tmp_path):
    """Review 11 L5: the refusal named `pip install --force-reinstall` for a tree `fetch --dest` laid
    out (no environment to reinstall into), inside nested brackets, and not where the originals are."""
    tree, stock = crashed
    (tree / "vllm-0.16.0.dist-info/RECORD").unlink()
    (tree / ".patchkit/state.json").unlink(missing_ok=True)
    (tree / ".patchkit/objects" / sha256(stock[SPEC])).unlink()  # an original gone: it cannot go back
    tree = _moved(tree, tmp_path / "moved")
    done = _patchkit("recover", "--target", tree, "--roll-back")
    assert done.returncode == 2, done.stderr
    fetch = f"`patchkit fetch 0.16.0 --dest {tree} --force --all`"
    assert fetch in done.stderr and "pip" not in done.stderr, done.stderr
    assert f"The saved originals are in {tree}/.patchkit/objects" in done.stderr, done.stderr
    assert _deepest_brackets(done.stderr) <= 1, done.stderr


def test_a_damaged_saved_original_is_named_as_the_cause(crashed, tmp_path):
    """Review 11 L5: with a saved original damaged, the refusal blamed a copy or the files' times."""
    tree, stock = crashed
    tree = _moved(tree, tmp_path / "moved")
    with open(tree / ".patchkit/objects" / sha256(stock[SPEC]), "ab") as fh:
        fh.write(b"x\n")
    done = _patchkit("recover", "--target", tree, "--roll-back")
    assert done.returncode == 2, done.stderr
    assert f"the saved original of {SPEC} is damaged" in done.stderr, done.stderr
    assert "copied" not in done.stderr, done.stderr
    hint = " ".join(done.stderr.split()).split("hint: ", 1)[1]
    assert "remove the files" not in hint and "delete the" not in hint, hint


@pytest.mark.parametrize("command", ["status", "recover"])
def test_a_rollback_that_leaves_nothing_recorded_leaves_no_store(crashed, tmp_path, command):
    """Review 11 L4: `status` rolled a crashed first apply back and left .patchkit/lock and an empty
    .patchkit/objects/ in the tree, which was otherwise stock."""
    tree, stock = crashed
    patch = ("--patch", tmp_path / "p.diff") if command == "status" else ()
    done = _patchkit(command, "--target", tree, *patch)
    assert "rolled back an interrupted patchkit transaction" in done.stdout + done.stderr, done.stdout + done.stderr
    assert snapshot(tree) == stock, done.stdout + done.stderr
    assert not (tree / ".patchkit").exists(), sorted(p.name for p in (tree / ".patchkit").rglob("*"))


def test_a_revert_with_no_record_says_stock_only_as_vllms_record_vouches(run, tree, scratch):
    """Review 10b H1: with no record, revert said "the tree is stock" on a tree whose files were not."""
    patch = scratch / "p.diff"
    patch.write_bytes(make_patch(scratch, tree, {SPEC: SPEC_PY.replace('"qwen"', '"deepseek"')}))
    result = run("revert", "--target", tree, "--patch", patch)
    assert result.exit_code == 0 and "nothing to revert: the tree records no apply (no RECORD" in result.output

    _with_record(tree)
    result = run("revert", "--target", tree, "--patch", patch)
    assert result.exit_code == 0 and "nothing to revert: the tree is stock" in result.output, result.output

    (tree / SPEC).write_text(SPEC_PY + "# edited, not by the patch\n")
    result = run("revert", "--target", tree, "--patch", patch)
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and "is stock" not in said, said
    assert f"the tree records no apply, but {SPEC} differs from vLLM's RECORD" in said and "--force" in said, said


def test_a_planted_journal_naming_a_users_file_leaves_it_and_says_so(tmp_path):
    """words30 item 1: a planted journal that says patchkit created a file of the user's (older than
    the journal) got "put the stock files back …, or remove the files it created": a delete on the
    journal's word. Without the commit's marker it names the file as kept and goes on."""
    tree = write_tree(tmp_path / "site")
    mine = b"SETTINGS = {'mine': True}\n"
    (tree / "mypkg").mkdir()
    (tree / "mypkg/settings.py").write_bytes(mine)
    time.sleep(0.02)
    entry = {"path": "mypkg/settings.py", "before": None, "after": sha256(mine), "staged": None}
    _forged_journal(tree, [{**entry, "created_dirs": ["mypkg"]}])
    done = _patchkit("recover", "--target", tree)
    assert done.returncode == 0, done.stderr
    assert "kept, not written by it or changed since: mypkg/settings.py" in done.stdout, done.stdout
    assert (tree / "mypkg/settings.py").read_bytes() == mine and not (tree / ".patchkit/journal.json").exists()


def test_recovery_names_each_file_it_keeps_one_a_line_and_bounds_a_long_list(tmp_path):
    """words22's leftover: recovery said "kept ...: A, B, C, D, E and 20 more", naming five. Several
    files are named one a line; past twenty, how many more and the file in .patchkit/ that lists
    every one (the journal that named them is gone)."""
    for count in (3, 25):
        tree = write_tree(tmp_path / f"site{count}")
        (tree / "vllm/userdir").mkdir()
        paths = [f"vllm/userdir/mine{n:02d}.py" for n in range(count)]
        for path in paths:
            (tree / path).write_text(f"MINE = {path!r}\n")
        before = snapshot(tree)
        created = [{"path": p, "before": None, "after": sha256((tree / p).read_bytes()), "staged": None} for p in paths]
        _forged_journal(tree, created)
        said = transaction.recover(tree)
        assert "more" not in said.split("\n")[0] and snapshot(tree) == before, said
        lines = said.split("\n")
        head = lines.index("kept, not written by it or changed since:")
        listed = [line.removeprefix("  ") for line in lines[head + 1 :]]
        if count == 3:
            assert listed == paths and not list((tree / ".patchkit").glob("recovered-*")), said
            continue
        every = tree / ".patchkit" / "recovered-f00d.txt"
        assert listed == [*paths[:20], f"and 5 more ({every} lists every one)"], said
        assert every.read_text().split() == paths and all(len(line) <= 80 for line in lines[1:-1]), said


def test_a_full_revert_after_a_recovery_that_listed_its_kept_files_removes_the_store(tmp_path, scratch):
    """The list a recovery wrote (.patchkit/recovered-ID.txt, past twenty files kept) is patchkit's
    own: a revert that leaves nothing recorded removes it with .patchkit/, which it kept before."""
    tree = write_tree(tmp_path / "site")
    (tree / "vllm/userdir").mkdir()
    paths = [f"vllm/userdir/mine{n:02d}.py" for n in range(25)]
    for path in paths:
        (tree / path).write_text(f"MINE = {path!r}\n")
    _forged_journal(
        tree, [{"path": p, "before": None, "after": sha256((tree / p).read_bytes()), "staged": None} for p in paths]
    )
    transaction.recover(tree)
    assert (tree / ".patchkit" / "recovered-f00d.txt").is_file()
    patch = tmp_path / "model.diff"
    patch.write_bytes(make_patch(scratch, tree, {"vllm/models/model.py": MODEL_PY.replace("return x", "return -x")}))
    for verb in ("apply", "revert"):
        done = _patchkit(verb, "--target", tree, "--patch", patch)
        assert done.returncode == 0, done.stdout + done.stderr
    assert not (tree / ".patchkit").exists(), sorted(p.name for p in (tree / ".patchkit").iterdir())
    assert all((tree / path).is_file() for path in paths)  # the user's files stay
