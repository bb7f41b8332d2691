"""A tree whose record is lost, emptied or outdated (issue 20, review 11 M1; newuser16 finding 1):
`.patchkit/` gone with `cp -r tree/*`, `rsync --exclude '.*'` or a .dockerignore, or emptied; or the
stock files back under the record (`pip install --force-reinstall vllm==X`). What patchkit says and
does there is true, and one command makes the tree whole."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import Releases, load_plugins_like_vllm, make_patch, run_cli, snapshot, write_library, write_tree
from launch_fixtures import write_model

from patchkit.store.state import read_state

PARSER = "vllm/parsers/toolcall.py"
ROUTER = "vllm/serving/router.py"

PARSER_PY = "def parse(text):\n    calls = []\n    for line in text.splitlines():\n        calls.append(line)\n    return calls\n"
ROUTER_PY = "ROUTES = {\n    'chat': 'v1/chat',\n}\n\n\ndef route(kind):\n    return ROUTES[kind]\n"


def _record(tree: Path, version: str = "0.17.1") -> None:
    """vLLM's RECORD for the tree as it is now (stock): each file of vllm/ with its hash."""
    rows = []
    for path in sorted((tree / "vllm").rglob("*")):
        if path.is_file():
            digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
            rows.append(f"{path.relative_to(tree).as_posix()},sha256={digest},{path.stat().st_size}")
    (tree / f"vllm-{version}.dist-info" / "RECORD").write_text("\n".join(rows) + "\n")


@pytest.fixture
def stock(tmp_path, scratch) -> tuple[Path, Path]:
    """A 0.17.1 tree with a RECORD, and a library of two sets that each change one of its files."""
    tree = write_tree(tmp_path / "site", "0.17.1", {PARSER: PARSER_PY, ROUTER: ROUTER_PY})
    _record(tree)
    library = scratch / "lib"
    streamed = PARSER_PY.replace("calls.append(line)", "calls.append(line.strip())")
    routed = ROUTER_PY.replace("'chat': 'v1/chat',", "'chat': 'v1/chat',\n    'tools': 'v1/tools',")
    write_library(library, {"0.17.1": [make_patch(scratch, tree, {PARSER: streamed})]}, name="parsers")
    write_library(library, {"0.17.1": [make_patch(scratch, tree, {ROUTER: routed})]}, name="routes")
    (library / "library.toml").write_text('order = ["parsers", "routes"]\n')
    return tree, library


def _lose_record(tree: Path, how: str) -> None:
    if how == "lost":  # cp -r tree/*, rsync --exclude '.*', a .dockerignore
        shutil.rmtree(tree / ".patchkit")
    else:
        (tree / ".patchkit" / "state.json").write_text(json.dumps({"entries": [], "format": 1}) + "\n")


@pytest.mark.parametrize("how", ["lost", "emptied"])
def test_revert_of_every_set_undoes_what_is_applied_when_the_record_is_lost(run, stock, how):
    tree, library = stock
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    assert snapshot(tree) != before
    _lose_record(tree, how)

    reverted = run("revert", "--target", tree, "--patches", library)
    assert reverted.exit_code == 0, reverted.output
    assert "reverted: 2 file(s) restored to stock" in reverted.output, reverted.output
    assert "no RECORD" not in reverted.output
    assert snapshot(tree) == before
    again = run("revert", "--target", tree, "--patches", library)
    assert again.exit_code == 0 and "the tree is stock (its files are as vLLM's RECORD lists them)" in again.output


def test_a_lost_record_over_an_edited_patched_file_is_refused_with_the_command_that_works(run, stock):
    tree, library = stock
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    _lose_record(tree, "lost")
    (tree / PARSER).write_text((tree / PARSER).read_text().replace("line.strip()", "line.lower()"))
    edited = snapshot(tree)

    refused = run("revert", "--target", tree, "--patches", library)
    assert refused.exit_code == 1, refused.output
    assert PARSER in refused.output and "the tree records no apply" in refused.output, refused.output
    assert f"0.17.1 --dest {tree} --force` puts the stock files back" in refused.output, refused.output
    assert snapshot(tree) == edited


@pytest.mark.parametrize("how", ["lost", "emptied"])
def test_apply_records_the_sets_it_finds_applied_with_their_originals(run, stock, how):
    tree, library = stock
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    _lose_record(tree, how)

    again = run("apply", "--target", tree, "--patches", library)
    assert again.exit_code == 0, again.output
    assert again.output.count("already applied, with no record of it; recorded") == 2, again.output
    # the last line says what the run did: it recorded both (newuser17 5e: "0 set(s) applied; …")
    assert again.output.rstrip().splitlines()[-1].endswith("recorded 2 set(s) found applied (parsers, routes)"), (
        again.output
    )
    assert "0 set(s) applied" not in again.output, again.output
    entries = read_state(tree).entries
    assert [e.set_name for e in entries] == ["parsers", "routes"]
    for entry in entries:  # each original saved, as an apply that wrote the files saves it
        for path, shas in entry.files.items():
            assert shas["before"] == hashlib.sha256(before[path]).hexdigest()
            assert (tree / ".patchkit/objects" / shas["before"]).read_bytes() == before[path]
    assert run("apply", "--target", tree, "--patches", library).output.count("already applied: nothing to do") == 2

    # the record now undoes it, as any apply's would: a set at a time
    assert run("revert", "--target", tree, "--patches", library, "--set", "routes").exit_code == 0
    assert run("revert", "--target", tree, "--patches", library, "--set", "parsers").exit_code == 0
    assert snapshot(tree) == before and not (tree / ".patchkit").exists()


def _fix_of(status_output: str) -> list[str]:
    """The commands on the guard's `fix:` line, in order."""
    lines = status_output.splitlines()
    guard = next(i for i, line in enumerate(lines) if line.startswith("guard:"))
    line = next(line for line in lines[guard:] if line.strip().startswith("fix:"))
    return re.findall(r"`patchkit ([^`]*)`", line)


@pytest.mark.parametrize("reinstalled", [[PARSER, ROUTER], [ROUTER]], ids=["every-file", "one-file"])
def test_stock_files_back_under_the_record_get_one_line_and_a_fix_that_works(run, stock, reinstalled):
    """`pip install --force-reinstall` of the same vLLM over an applied tree: the stock files come
    back, .patchkit/ and the guard stay. One line with a count, not a line per file, and a fix
    that names no set wrongly and clears the guard; where some files are still patched too, the
    fix is revert then apply."""
    tree, library = stock
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    for path in reinstalled:
        (tree / path).write_bytes(before[path])

    status = run("status", "--target", tree, "--patches", library)
    assert status.exit_code == 1, status.output
    assert "another set" not in status.output, status.output
    if len(reinstalled) == 2:
        assert "was changed after patchkit patched it" not in status.output, status.output
        assert "the files are stock again (vLLM reinstalled?): all 2 recorded" in status.output, status.output
        assert _fix_of(status.output) == [f"apply --target {tree} --patches {library}"], status.output
    else:  # the file is named with its set's fix: a count would lose whose it is (a narrower --set/--patch)
        assert "vllm/serving/router.py holds its stock bytes again" in status.output, status.output
        assert _fix_of(status.output) == [f"apply --target {tree} --patches {library} --set routes"], status.output

    verify = run("verify", "--target", tree, "--patches", library, "--no-import")
    verdicts = [line for line in verify.output.splitlines() if line.startswith("verify: FAILED:") and "passed" in line]
    assert verdicts and all("the launch guard refuses the tree" in line for line in verdicts), verify.output

    for command in _fix_of(status.output):
        done = run(*command.split())
        assert done.exit_code == 0, done.output
    assert run("status", "--target", tree, "--patches", library).exit_code == 0
    assert snapshot(tree) != before


@pytest.mark.parametrize("reinstalled", [[PARSER, ROUTER], [ROUTER]], ids=["every-file", "one-file"])
def test_the_guards_own_refusal_after_a_reinstall_says_stock_again_as_status_does(run, stock, reinstalled):
    """New-user 17, 3: after a reinstall, the guard inside vLLM said each file "was changed after
    patchkit patched it" (9 clauses, ~1,000 characters in vLLM's log) while status said "stock
    again": all N recorded. The guard says it itself, folded to a count when every file is, with
    the status command; status's words are the guard's."""
    tree, library = stock
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    for path in reinstalled:
        (tree / path).write_bytes(before[path])

    loaded = load_plugins_like_vllm(tree)
    refusal = next(line for line in loaded.stderr.splitlines() if line.startswith("patchkit_guard.TreeChanged"))
    assert loaded.returncode != 0 and "changed after patchkit patched it" not in refusal, loaded.stderr
    assert f"Run `patchkit status --target {tree}`" in refusal, refusal
    said = " ".join(run("status", "--target", tree, "--patches", library).output.split())
    if len(reinstalled) == 2:
        assert "the files are stock again (vLLM reinstalled?): all 2 recorded" in refusal, refusal
        assert PARSER not in refusal and len(refusal) < 300 + 2 * len(str(tree)), refusal
    else:  # the other file is as patchkit wrote it: not named
        assert f"{tree}: {ROUTER} holds its stock bytes again." in refusal and PARSER not in refusal, refusal
    assert refusal.split(f"{tree}: ", 1)[1].split(". Run", 1)[0] in said, (refusal, said)


def test_a_file_stock_again_beside_another_sets_edited_file_gets_a_fix_that_clears_both(run, stock):
    """The class of newuser16 finding 1: one set's file stock again, another set's file edited. The
    fix named the edited file's set alone ("the refused files are X's (another set's)"), and after
    it the guard still refused the file stock again."""
    tree, library = stock
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    (tree / PARSER).write_bytes(before[PARSER])  # the first set's: its status names the other's fix
    (tree / ROUTER).write_text((tree / ROUTER).read_text() + "# tuned\n")

    status = run("status", "--target", tree, "--patches", library)
    assert status.exit_code == 1 and "another set's" not in status.output, status.output
    assert "belong to set" in status.output, status.output  # each file with its own set's fix
    *first, last = _fix_of(status.output)
    for command in first:  # a fix the next one completes may leave the guard refusing: said, exit 1
        done = run(*command.split())
        assert done.exit_code == 0 or "the launch guard still refuses" in done.output, done.output
    assert run(*last.split()).exit_code == 0
    after = run("status", "--target", tree, "--patches", library)
    assert after.exit_code == 0, (status.output, after.output)


def test_a_damaged_record_on_an_applied_tree_says_what_to_do_and_following_it_gives_stock(run, stock):
    """review 12a L4: a damaged state.json's hint was "inspect or remove" (on an applied tree the
    record names the saved originals); a 5000-digit integer in it printed Python's own advice
    (sys.set_int_max_str_digits); a damaged previous_state in a journal named the journal as not JSON."""
    tree, library = stock
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    record = tree / ".patchkit" / "state.json"
    damaged = record.read_text().replace('"format": 1', '"format": ' + "7" * 5000, 1)
    assert damaged != record.read_text()
    record.write_text(damaged)

    refused = run("status", "--target", tree, "--patches", library)
    said = " ".join(refused.output.split())
    assert refused.exit_code == 2, refused.output
    assert "an integer of 5000 digits" in said and "set_int_max_str_digits" not in said, said
    moved = re.search(r"\(mv (\S+) (\S+)\); then `patchkit revert ([^`]+)` undoes the series it finds applied", said)
    assert moved and moved[1] == str(record), said
    Path(moved[1]).rename(moved[2])  # the hint followed
    args = moved[3].split()
    assert args == ["--target", str(tree), "--patches", str(library)], args
    assert run("revert", *args).exit_code == 0
    assert snapshot(tree) == before and Path(moved[2]).read_text() == damaged


def test_a_damaged_previous_state_in_a_journal_is_named_as_the_field(run, stock):
    tree, library = stock
    meta = tree / ".patchkit"
    meta.mkdir()
    (meta / "journal.json").write_text(json.dumps({"id": "c0ffee", "previous_state": "{not a record", "files": []}))
    refused = run("status", "--target", tree, "--patches", library)
    said = " ".join(refused.output.split())
    assert refused.exit_code == 2, refused.output
    assert "its 'previous_state' is no record patchkit wrote: not JSON" in said, said
    assert said.count("journal.json is damaged") == 1, said


@pytest.mark.parametrize("damage", ["missing", "symlink", "changed"])
def test_a_plain_revert_with_a_saved_original_lost_reverse_applies_the_recorded_series(run, stock, tmp_path, damage):
    """review 12a M3: with a saved original missing or damaged, a plain revert (no --set) refused
    ("reverse-applying … does not give the original back") while `revert --set X` worked."""
    tree, library = stock
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    original = hashlib.sha256(before[PARSER]).hexdigest()
    saved = tree / ".patchkit" / "objects" / original
    assert saved.is_file()
    saved.unlink()
    if damage == "symlink":
        (tmp_path / "elsewhere").write_bytes(before[PARSER])
        saved.symlink_to(tmp_path / "elsewhere")
    elif damage == "changed":
        saved.write_bytes(before[PARSER] + b"# not the original\n")
    reverted = run("revert", "--target", tree, "--patches", library)
    assert reverted.exit_code == 0, reverted.output
    assert f"{PARSER} was restored by reverse-applying the series (sha256 checked)" in " ".join(reverted.output.split())
    assert snapshot(tree) == before


def test_a_set_applied_again_after_a_reinstall_leaves_the_others_said_as_stock_with_apply_alone(run, stock):
    """New-user 17, 2: after a reinstall, one set applied again by its own --set: the other set's
    files were said "changed after patchkit patched it" with revert --force "(it keeps a copy of
    edits)" though they hold their stock bytes and there is no edit; apply alone fixes them."""
    tree, library = stock
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    for path in (PARSER, ROUTER):
        (tree / path).write_bytes(before[path])
    again = run("apply", "--target", tree, "--patches", library, "--set", "parsers")
    assert again.exit_code == 1 and "the launch guard still refuses" in again.output, again.output  # routes' file

    status = run("status", "--target", tree, "--patches", library)
    assert status.exit_code == 1, status.output
    said = " ".join(status.output.split())
    assert f"{ROUTER} holds its stock bytes again" in said and "changed after patchkit" not in said, said
    assert _fix_of(status.output) == [f"apply --target {tree} --patches {library} --set routes"], status.output
    assert run(*_fix_of(status.output)[0].split()).exit_code == 0
    assert run("status", "--target", tree, "--patches", library).exit_code == 0


def test_a_record_naming_some_sets_is_reverted_with_the_others_found_applied(run, stock):
    """Review 12b M2: the record lost, then one set recorded again by its own --set (or an apply cut
    short on such a tree): a plain revert restored that set's files, said "reverted", exit 0, and
    left the other set's patched files. The sets the record does not name, found applied, go too."""
    tree, library = stock
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    shutil.rmtree(tree / ".patchkit")
    assert run("apply", "--target", tree, "--patches", library, "--set", "parsers").exit_code == 0
    assert [e.set_name for e in read_state(tree).entries] == ["parsers"]
    done = run("revert", "--target", tree, "--patches", library)
    assert done.exit_code == 0, done.output
    assert snapshot(tree) == before, done.output


@pytest.mark.parametrize("record", ["lost", "kept"])
def test_a_patched_file_reached_through_a_symlink_is_refused_by_apply_with_the_fix_that_works(run, stock, record):
    """Review 12b M1: apply found the series applied through a symlink out of the tree, exit 0, and
    (the record lost) recorded the file and installed a guard that then refused every launch; its
    own fix was `apply` again, a loop. It refuses as a write does, with status's fix."""
    tree, library = stock
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    if record == "lost":
        shutil.rmtree(tree / ".patchkit")
    outside = tree.parent / "elsewhere.py"
    outside.write_bytes((tree / ROUTER).read_bytes())
    (tree / ROUTER).unlink()
    (tree / ROUTER).symlink_to(outside)
    done = run("apply", "--target", tree, "--patches", library)
    said = " ".join(done.output.split())
    assert done.exit_code == 2 and f"{ROUTER} is a symlink" in said and "replace the symlink" in said, said
    recorded = [path for entry in read_state(tree).entries for path in entry.files]
    assert (ROUTER in recorded) == (record == "kept")  # nothing recorded through it
    (tree / ROUTER).unlink()
    (tree / ROUTER).write_bytes(outside.read_bytes())  # as the hint says
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0


def test_a_stock_file_reached_through_a_symlink_is_fixed_by_a_copy_never_by_removing_it(run, stock, tmp_path):
    """Apply refuses to write through a symlinked stock file; its hint also offered "(or remove it)",
    which leaves the series nothing to patch (exit 1). The hint is the copy alone, its path quoted."""
    tree = shutil.copytree(stock[0], tmp_path / "my site", symlinks=True)
    library = stock[1]
    outside = tmp_path / "elsewhere.py"
    outside.write_bytes((tree / ROUTER).read_bytes())
    (tree / ROUTER).unlink()
    (tree / ROUTER).symlink_to(outside)
    done = run("apply", "--target", tree, "--patches", library)
    said = " ".join(done.output.split())
    link = f"'{tree / ROUTER}'"  # a path with a space, as a shell takes it
    copy = f"replace the symlink {link} with a copy of the file it points to, then run again"
    assert done.exit_code == 2 and copy in said, said
    assert "remove" not in said, said
    (tree / ROUTER).unlink()  # removing it instead: nothing for the series to patch
    assert run("apply", "--target", tree, "--patches", library).exit_code == 1
    (tree / ROUTER).write_bytes(outside.read_bytes())  # as the hint says
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    assert run("status", "--target", tree, "--patches", library).exit_code == 0


@pytest.mark.parametrize("record", ["lost", "partial"])
def test_an_edit_the_reversed_series_keeps_is_refused_as_a_recorded_edit_and_force_gives_stock(
    run, stock, record, tmp_path, monkeypatch
):
    """Review 12b L3: with no record of the set, a line added to a patched file away from its hunks
    still reverses; revert said "restored to stock", exit 0, and left stock plus the edit. vLLM's
    RECORD tells it: refused (exit 1, kept) as a recorded edited file is; --force puts the
    release's own file back and keeps a copy of the edit."""
    tree, library = stock
    before = snapshot(tree)
    Releases(tmp_path / "index", monkeypatch).add("0.17.1", {PARSER: PARSER_PY, ROUTER: ROUTER_PY})
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    shutil.rmtree(tree / ".patchkit")
    if record == "partial":  # the other set recorded again: only the edited one is unrecorded
        assert run("apply", "--target", tree, "--patches", library, "--set", "routes").exit_code == 0
    mine = (tree / PARSER).read_text() + "\n\ndef mine():\n    return 1\n"
    (tree / PARSER).write_text(mine)
    edited = snapshot(tree)

    refused = run("revert", "--target", tree, "--patches", library)
    assert refused.exit_code == 1, refused.output
    assert f"{PARSER} was edited after patchkit patched it; keeping your version" in refused.output
    assert "restored to stock" not in refused.output
    assert snapshot(tree) == edited

    forced = run("revert", "--target", tree, "--patches", library, "--force")
    assert forced.exit_code == 0, forced.output
    assert "reverted: 2 file(s) restored to stock" in forced.output, forced.output
    assert snapshot(tree) == before
    (copy,) = (tree / ".patchkit" / "saved").rglob("toolcall.py")
    assert copy.read_text() == mine


def test_a_record_of_no_set_that_still_names_chosen_sets_goes_with_the_revert(run, stock):
    """Review 12b L6: a record whose entries are [] but which still has "chosen" (the guard's and
    the choice's record, the sets' lost) was not empty to revert: .patchkit/ stayed for ever."""
    tree, library = stock
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    record = json.loads((tree / ".patchkit" / "state.json").read_text())
    assert record["chosen"], record
    (tree / ".patchkit" / "state.json").write_text(json.dumps({**record, "entries": []}))
    for _ in range(2):
        done = run("revert", "--target", tree, "--patches", library)
        assert done.exit_code == 0, done.output
    assert snapshot(tree) == before
    assert not (tree / ".patchkit").exists(), sorted(p.name for p in (tree / ".patchkit").rglob("*"))
    assert run("status", "--target", tree, "--patches", library).exit_code == 0


@pytest.fixture
def two_patch_set(tmp_path, scratch) -> tuple[Path, Path]:
    """A 0.17.1 tree with a RECORD; set `one` changes PARSER, set `two` ROUTER and then CONFIG (two patches)."""
    config_py = "LIMIT = 10\nNAME = 'x'\nDEBUG = False\n"
    tree = write_tree(tmp_path / "site", "0.17.1", {PARSER: PARSER_PY, ROUTER: ROUTER_PY, CONFIG: config_py})
    _record(tree)
    library = scratch / "lib"
    streamed = PARSER_PY.replace("calls.append(line)", "calls.append(line.strip())")
    routed = ROUTER_PY.replace("'chat': 'v1/chat',", "'chat': 'v1/chat',\n    'tools': 'v1/tools',")
    write_library(library, {"0.17.1": [make_patch(scratch, tree, {PARSER: streamed})]}, name="one")
    two = [
        make_patch(scratch, tree, {ROUTER: routed}),
        make_patch(scratch, tree, {CONFIG: config_py.replace("10", "64")}),
    ]
    write_library(library, {"0.17.1": two}, name="two")
    (library / "library.toml").write_text('order = ["one", "two"]\n')
    return tree, library


CONFIG = "vllm/config/limits.py"


def test_an_unnamed_set_found_applied_with_an_edited_hunk_is_refused_not_left_patched(run, two_patch_set):
    """Review 13 M1: a record naming only `one`; `two` applied with no record, then a line of its
    second patch edited: revert said "reverted", exit 0, and left ROUTER and CONFIG patched."""
    tree, library = two_patch_set
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    shutil.rmtree(tree / ".patchkit")
    assert run("apply", "--target", tree, "--patches", library, "--set", "one").exit_code == 0
    (tree / CONFIG).write_text((tree / CONFIG).read_text().replace("LIMIT = 64", "LIMIT = 65"))
    edited = snapshot(tree)
    done = run("revert", "--target", tree, "--patches", library)
    assert done.exit_code == 1, done.output
    assert "cannot reverse the series; nothing was written" in done.output and CONFIG in done.output
    assert f"0.17.1 --dest {tree} --force` puts the stock files back" in " ".join(done.output.split()), done.output
    assert snapshot(tree) == edited


def test_an_edited_hunk_of_an_unnamed_set_found_nowhere_is_left_and_said(run, two_patch_set):
    """The same edit where `two` was never applied: nothing tells what to undo there; the recorded
    set is reverted, and the file is named, not passed over in silence."""
    tree, library = two_patch_set
    assert run("apply", "--target", tree, "--patches", library, "--set", "one").exit_code == 0
    (tree / CONFIG).write_text((tree / CONFIG).read_text().replace("LIMIT = 10", "LIMIT = 11"))
    done = run("revert", "--target", tree, "--patches", library)
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    assert f"{CONFIG}: neither the stock text nor the change of a set the record does not name" in said, done.output
    assert (tree / PARSER).read_text() == PARSER_PY and "LIMIT = 11" in (tree / CONFIG).read_text()


def test_apply_on_a_lost_record_refuses_an_edit_away_from_the_hunks_and_its_fix_gives_stock(
    run, stock, tmp_path, monkeypatch
):
    """Review 14 L1': the record lost, a line added to a patched file away from its hunks: apply
    recorded the edit as patchkit's original, and a later revert said "restored to stock" while the
    file kept the edit. vLLM's RECORD says the series reversed is not stock: refused, nothing written."""
    tree, library = stock
    before = snapshot(tree)
    Releases(tmp_path / "index", monkeypatch).add("0.17.1", {PARSER: PARSER_PY, ROUTER: ROUTER_PY})
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    shutil.rmtree(tree / ".patchkit")
    (tree / ROUTER).write_text("# tuned by hand\n" + (tree / ROUTER).read_text())
    edited = snapshot(tree)

    refused = run("apply", "--target", tree, "--patches", library)
    said = " ".join(refused.output.split())
    assert refused.exit_code == 1, refused.output
    assert f"{ROUTER} differs from stock vLLM 0.17.1 beyond the set's change" in said, said
    assert "cannot record it as its own; nothing was written" in said, said
    # record28: the run recorded parsers first, so "nothing was written" is said of routes alone
    assert "nothing was written for routes" in said and "parsers, found applied, is recorded now" in said, said
    assert (tree / ROUTER).read_bytes() == edited[ROUTER]  # the set before it is recorded, as found
    assert [e.set_name for e in read_state(tree).entries] == ["parsers"]
    fix = re.search(
        r"`patchkit (revert [^`]*--force)` \(keeps a copy of the edits\), then `patchkit (apply [^`]*)`", said
    )
    assert fix, said
    for command in fix.groups():
        done = run(*command.split())
        assert done.exit_code == 0, done.output
    assert [e.set_name for e in read_state(tree).entries] == ["parsers", "routes"]  # the fix applies both
    assert run("status", "--target", tree, "--patches", library).exit_code == 0
    assert run("revert", "--target", tree, "--patches", library).exit_code == 0
    assert {path: data for path, data in snapshot(tree).items() if not path.startswith(".patchkit")} == before


def test_status_on_a_lost_record_with_an_edit_away_from_the_hunks_says_what_apply_will(
    run, stock, tmp_path, monkeypatch
):
    """record28: on that tree (record lost, a patched file edited away from its hunks) status said
    "applied", exit 0, and its guard note that `apply` records the tree as it is; apply refuses it.
    status names the file and apply's own fix; a lost record with no edit still passes."""
    tree, library = stock
    Releases(tmp_path / "index", monkeypatch).add("0.17.1", {PARSER: PARSER_PY, ROUTER: ROUTER_PY})
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    shutil.rmtree(tree / ".patchkit")
    assert run("status", "--target", tree, "--patches", library).exit_code == 0  # found applied, as it was
    (tree / ROUTER).write_text("# tuned by hand\n" + (tree / ROUTER).read_text())

    status = run("status", "--target", tree, "--patches", library)
    said = " ".join(status.output.split())
    assert status.exit_code == 1, status.output
    assert f"{ROUTER}: integrity: differs from stock vLLM 0.17.1 beyond the set's change" in said, said
    assert "routes: a file edited beyond the set's change (no record): apply refuses it" in said, said
    assert "records the tree as it is" not in said, said
    applied = run("apply", "--target", tree, "--patches", library)
    fix = re.search(
        r"fix: (`patchkit revert [^`]*--force` \(keeps a copy of the edits\), then `patchkit apply [^`]*`)", said
    )
    assert applied.exit_code == 1 and fix and fix.group(1) in " ".join(applied.output.split()), said
    document = json.loads(
        run("status", "--target", tree, "--patches", library, "--set", "routes", "--format", "json").output
    )
    assert document["found_not_stock"] == [ROUTER], document


def test_apply_on_a_lost_record_records_the_files_it_finds_patched_so_revert_gives_stock(run, two_patch_set):
    """Review 14 L1': the record lost and one of a set's files stock again: apply wrote that file and
    recorded it alone, so a revert said "restored to stock" and left the other file patched."""
    tree, library = two_patch_set
    before = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    shutil.rmtree(tree / ".patchkit")
    (tree / ROUTER).write_bytes(before[ROUTER])

    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    assert set(read_state(tree).entry("two").files) == {ROUTER, CONFIG}
    reverted = run("revert", "--target", tree, "--patches", library)
    assert reverted.exit_code == 0 and "reverted: 3 file(s) restored to stock" in reverted.output, reverted.output
    assert snapshot(tree) == before


def test_a_revert_force_whose_stock_fetch_fails_leaves_no_patchkit_directory(run, stock, tmp_path, monkeypatch):
    """Review 14 L3': on a tree with no .patchkit/, a `revert --force` that could fetch no stock file
    (index unreachable, nothing cached) failed before writing but left an empty .patchkit/lock."""
    tree, library = stock
    Releases(tmp_path / "index", monkeypatch)  # an index that holds no release
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    shutil.rmtree(tree / ".patchkit")
    (tree / PARSER).write_text((tree / PARSER).read_text() + "# mine\n")
    edited = snapshot(tree)

    failed = run("revert", "--target", tree, "--patches", library, "--force")
    assert failed.exit_code != 0 and "no stock original of" in failed.output, failed.output
    assert snapshot(tree) == edited and not (tree / ".patchkit").exists()


def _reverted_not_as_stock(run, *args: object) -> str:
    """`revert ARGS` passes without calling the files "restored to stock" (nothing proves them stock):
    what it said, on one line."""
    reverted = run("revert", *args)
    said = " ".join(reverted.output.split())
    assert reverted.exit_code == 0, reverted.output
    assert "restored to stock" not in said, said
    return said


def test_without_a_record_revert_says_it_reversed_the_hunks_and_keeps_the_files_as_they_were(run, tmp_path, scratch):
    """Revert27's note: a tree with no vLLM RECORD (a source tree, a checkout), the record lost and a
    line added away from the hunks: revert said "restored to stock" and the file kept the edit.
    Nothing proves stock there, nor that patchkit wrote the change (upstream's, or a hand's: upstream28,
    test_upstream_reached): revert says so and leaves the file as it was."""
    tree = write_tree(tmp_path / "checkout", "0.17.1", {PARSER: PARSER_PY, ROUTER: ROUTER_PY})
    library = scratch / "lib"
    streamed = PARSER_PY.replace("calls.append(line)", "calls.append(line.strip())")
    write_library(library, {"0.17.1": [make_patch(scratch, tree, {PARSER: streamed})]}, name="parsers")
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    shutil.rmtree(tree / ".patchkit")
    (tree / PARSER).write_text((tree / PARSER).read_text() + "# mine\n")
    as_it_was = (tree / PARSER).read_bytes()

    said = _reverted_not_as_stock(run, "--target", tree, "--patches", library)
    assert "already hold this set's change with no apply recorded: upstream, or applied by hand" in said, said
    assert "nothing to revert" in said, said
    assert (tree / PARSER).read_bytes() == as_it_was


def test_a_found_applied_patch_recorded_without_a_vllm_record_is_reverted_as_hunks_reversed(run, tmp_path, scratch):
    """record28: on a tree with no vLLM RECORD, a `--patch` found applied with its record lost is
    recorded with the original its hunks reversed give; a later revert said "restored to stock",
    which nothing proved. The record marks the file found, and revert words it (and keeps a copy)
    as the unrecorded revert does."""
    tree = write_tree(tmp_path / "checkout", "0.17.1", {PARSER: PARSER_PY, ROUTER: ROUTER_PY})
    patch = scratch / "strip.patch"
    patch.write_bytes(make_patch(scratch, tree, {PARSER: PARSER_PY.replace("append(line)", "append(line.strip())")}))
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    shutil.rmtree(tree / ".patchkit")
    found = run("apply", "--target", tree, "--patch", patch)
    assert found.exit_code == 0 and "already applied, with no record of it; recorded" in found.output, found.output
    patched = (tree / PARSER).read_bytes()

    said = _reverted_not_as_stock(run, "--target", tree, "--patch", patch)
    assert "reverted: 1 file(s) with the series' hunks reversed (no vLLM RECORD proves them stock)" in said, said
    assert (tree / PARSER).read_text() == PARSER_PY
    assert [p.read_bytes() for p in (tree / ".patchkit/saved").rglob("toolcall.py")] == [patched]


@pytest.mark.parametrize("fmt", ["text", "json", "junit"])
def test_verify_of_a_partial_tree_fails_as_status_does_and_says_it_passes_once_applied(run, two_patch_set, fmt):
    """audit23 F5: the first patch of a two-patch set applied by hand (RECORD: not upstream's), the
    second not: status said partial, exit 1; verify said `ok`, exit 0, JSON ok:true (a CI gate passed a
    half-patched tree). verify now fails it too, its words and its document agreeing."""
    tree, library = two_patch_set
    (tree / ROUTER).write_text(ROUTER_PY.replace("'chat': 'v1/chat',", "'chat': 'v1/chat',\n    'tools': 'v1/tools',"))
    on_tree = ("--target", tree, "--patches", library, "--set", "two")
    assert run("status", *on_tree).exit_code == 1
    done = run("verify", *on_tree, "--format", fmt)
    assert done.exit_code == 1, done.output
    if fmt == "json":
        document = json.loads(done.output)
        assert (document["ok"], document["state"], document["exit_code"]) == (False, "partial", 1), document
        assert f"patchkit apply --target {tree}" in document["hint"]
    elif fmt == "junit":
        assert '<testcase classname="patchkit.two" name="partial"' in done.output, done.output
        assert "1 of 2 patches applied; the others are not" in done.output
    else:
        last = done.output.strip().splitlines()[-1]
        assert last.startswith("verify: FAILED: partial: 1 of 2 patches applied; ok if applied: "), last
    assert run("apply", *on_tree).exit_code == 0
    assert run("verify", *on_tree).exit_code == 0


def test_preflight_and_run_on_a_lost_record_with_an_edit_away_from_the_hunks_say_what_status_says(
    run, stock, tmp_path, monkeypatch
):
    """launch30 item 2: status fails that tree (record lost, a patched file edited away from its
    hunks: apply refuses to record it), but preflight said "applied, no drift" and run launched it.
    Both fail it now, in status's words and with its fix; a lost record with no edit still launches."""
    tree, library = stock
    Releases(tmp_path / "index", monkeypatch).add("0.17.1", {PARSER: PARSER_PY, ROUTER: ROUTER_PY})
    model = write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    stand_in = tmp_path / "vllm"
    stand_in.write_text("#!/bin/sh\nexit 7\n")
    stand_in.chmod(0o755)
    launch = ["--", str(stand_in), "serve", str(model)]
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    shutil.rmtree(tree / ".patchkit")
    assert run_cli("run", "--target", tree, "--patches", library, *launch).returncode == 7  # found applied
    (tree / ROUTER).write_text("# tuned by hand\n" + (tree / ROUTER).read_text())

    status = " ".join(run("status", "--target", tree, "--patches", library).output.split())
    said = run("preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", *launch)
    assert said.exit_code == 1, said.output
    (finding,) = [f for f in json.loads(said.output)["findings"] if not f["ok"]]
    message = f"{ROUTER} differs from stock vLLM 0.17.1 beyond the set's change (your edit?): the tree records no apply"
    assert finding["check"] == "tree-state" and finding["message"].startswith(message), finding
    assert finding["message"].endswith("of routes, so patchkit cannot record it as its own: apply refuses it"), finding
    fix = re.search(
        r"fix: (`patchkit revert [^`]*--force` \(keeps a copy of the edits\), then `patchkit apply [^`]*`)", status
    )
    assert fix and finding["fix"] == f"run {fix.group(1)}", (finding, status)
    ran = run_cli("run", "--target", tree, "--patches", library, *launch)
    assert ran.returncode == 1 and "not launched" in ran.stderr, ran.stdout + ran.stderr
    assert "beyond the set's change" in " ".join(ran.stdout.split()), ran.stdout
