"""Stale bytecode: after apply and revert, no .pyc may keep running a changed module's old code."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import fingerprint, make_patch, snapshot, write_library, write_tree

from patchkit.checks import bytecode
from patchkit.engine.operations import fix_bytecode
from patchkit.tree.target import from_directory

FLAG = "vllm/flag.py"
STOCK = 'VALUE = "stock"\n'
PATCHED = 'VALUE = "patched"\n'
UNCHECKED = py_compile.PycInvalidationMode.UNCHECKED_HASH
CHECKED = py_compile.PycInvalidationMode.CHECKED_HASH
PY312 = Path("/root/.pyenv/versions/3.12.1/bin/python")


@pytest.fixture
def flag_tree(tmp_path) -> Path:
    return write_tree(tmp_path / "site", files={FLAG: STOCK})


@pytest.fixture
def library(tmp_path, flag_tree, scratch) -> Path:
    return write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, flag_tree, {FLAG: PATCHED})]})


def imported_value(root: Path, python: str | Path = sys.executable, options: tuple[str, ...] = ()) -> str:
    """vllm.flag.VALUE as a fresh interpreter imports it from `root` (writing no bytecode itself)."""
    code = f"import sys; sys.path.insert(0, {str(root)!r}); import vllm.flag as m; print(m.VALUE)"
    done = subprocess.run(
        [str(python), *options, "-c", code],
        capture_output=True,
        text=True,
        cwd=root.parent,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def compile_unchecked(root: Path, optimize: int = -1) -> Path:
    return Path(py_compile.compile(str(root / FLAG), doraise=True, optimize=optimize, invalidation_mode=UNCHECKED))


def header(pyc: Path) -> tuple[int, bytes]:
    data = pyc.read_bytes()
    return int.from_bytes(data[4:8], "little"), data[8:16]


def patched_by_hand_copy(tree: Path, dest: Path, content: str | None) -> Path:
    """A copy of the tree with the source changed behind the bytecode's back: what a plain patch does."""
    shutil.copytree(tree, dest)
    if content is None:
        (dest / FLAG).unlink()
    else:
        (dest / FLAG).write_text(content)
    return dest


def bytecode_rows(data: dict) -> list[dict]:
    return [c for c in data["checks"] if c["check"] == "bytecode"]


def test_unchecked_hash_pycs_are_rebuilt_after_apply_and_after_revert(run, tmp_path, flag_tree, library):
    pyc = compile_unchecked(flag_tree)
    pyc_opt = compile_unchecked(flag_tree, optimize=1)
    other = pyc.with_name("flag.cpython-39.pyc")  # another interpreter's image bytecode
    shutil.copy(pyc, other)
    legacy = flag_tree / "vllm" / "flag.pyc"
    shutil.copy(pyc, legacy)
    assert imported_value(flag_tree) == "stock"
    # The fault: with the source changed but the bytecode left, Python keeps running the stock code.
    assert imported_value(patched_by_hand_copy(flag_tree, tmp_path / "plain", PATCHED)) == "stock"

    result = run("apply", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert imported_value(flag_tree) == "patched"
    new_source = (flag_tree / FLAG).read_bytes()
    for compiled in (pyc, pyc_opt):  # still unchecked-hash, as the image built them, now of the new source
        assert header(compiled) == (1, importlib.util.source_hash(new_source))
    assert not other.exists() and not legacy.exists()
    [row] = bytecode_rows(json.loads(result.stdout))
    assert row["path"] == FLAG and row["ok"]
    assert f"__pycache__/{pyc.name}: unchecked-hash, stale: recompiled" in row["message"]
    assert "__pycache__/flag.cpython-39.pyc: unchecked-hash, compiled by another interpreter" in row["message"]
    assert "flag.pyc: unchecked-hash, legacy pyc beside the source" in row["message"]

    result = run("revert", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert imported_value(flag_tree) == "stock"
    assert header(pyc) == (1, importlib.util.source_hash(STOCK.encode()))
    [row] = bytecode_rows(json.loads(result.stdout))
    assert row["ok"] and "recompiled" in row["message"]


def test_verify_reports_a_stale_unchecked_pyc_and_leaves_it(run, tmp_path, flag_tree, library):
    stale = compile_unchecked(flag_tree).read_bytes()
    assert run("apply", "--target", flag_tree, "--patches", library).exit_code == 0
    pyc = compile_unchecked(flag_tree)
    assert run("verify", "--target", flag_tree, "--patches", library).exit_code == 0

    pyc.write_bytes(stale)  # e.g. an image layer rebuilt from stock on top of the patched sources
    assert imported_value(flag_tree) == "stock"
    result = run("verify", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 1
    [row] = bytecode_rows(json.loads(result.stdout))
    assert (row["path"], row["ok"], row["level"]) == (FLAG, False, "error")
    assert "unchecked-hash, stale: Python loads it without reading the source" in row["message"]
    assert pyc.read_bytes() == stale


def test_a_pyc_that_can_be_neither_rebuilt_nor_removed_is_exit_1_naming_the_file(run, monkeypatch, flag_tree, library):
    pyc = compile_unchecked(flag_tree)

    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    real_remove = os.remove

    def remove(path, *args, **kwargs):
        if str(path) == str(pyc):
            refuse()
        real_remove(path, *args, **kwargs)

    monkeypatch.setattr(py_compile, "compile", refuse)
    monkeypatch.setattr(os, "remove", remove)
    result = run("apply", "--target", flag_tree, "--patches", library)
    assert result.exit_code == 1
    assert FLAG in result.output and "could not recompile it" in result.output
    assert "Read-only file system" in result.output
    assert (flag_tree / FLAG).read_text() == PATCHED  # the change itself is in place


def test_a_stale_pyc_that_cannot_be_rebuilt_for_want_of_room_is_removed(run, monkeypatch, flag_tree, library):
    """A full disk: the rebuilt pyc is written beside the stale one, which stays; removing it needs no
    room, and Python then runs the patched source (review 41b L5: exit 1, the stale code kept)."""
    pyc = compile_unchecked(flag_tree)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(py_compile, "compile", full)
    result = run("apply", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert not pyc.exists() and imported_value(flag_tree) == "patched"
    [row] = bytecode_rows(json.loads(result.stdout))
    assert row["ok"] and "could not recompile it (No space left on device): removed" in row["message"]


def test_timestamp_pycs_are_left_to_python(run, flag_tree, library):
    source = str(flag_tree / FLAG)
    timestamp = Path(
        py_compile.compile(source, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    )
    before = timestamp.read_bytes()
    result = run("apply", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert timestamp.read_bytes() == before
    assert imported_value(flag_tree) == "patched"
    [row] = bytecode_rows(json.loads(result.stdout))
    assert "timestamp, no longer matches the source's mtime/size: Python recompiles it" in row["message"]


NEVER = ("--check-hash-based-pycs", "never")


def test_checked_hash_pycs_are_rebuilt_as_python_never_checking_them_would_run_the_stock_code(
    run, tmp_path, flag_tree, library
):
    """An image compiled with SOURCE_DATE_EPOCH set holds checked-hash pycs: under
    --check-hash-based-pycs never Python loads them without comparing the hash."""
    source = str(flag_tree / FLAG)
    checked = Path(py_compile.compile(source, doraise=True, invalidation_mode=CHECKED))
    checked_opt = Path(py_compile.compile(source, doraise=True, optimize=2, invalidation_mode=CHECKED))
    other = checked.with_name("flag.cpython-39.pyc")  # another interpreter's: cannot be rebuilt here
    shutil.copy(checked, other)
    assert imported_value(patched_by_hand_copy(flag_tree, tmp_path / "plain", PATCHED), options=NEVER) == "stock"

    result = run("apply", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert imported_value(flag_tree, options=NEVER) == "patched"
    for compiled in (checked, checked_opt):  # still checked-hash, now of the new source
        assert header(compiled) == (3, importlib.util.source_hash((flag_tree / FLAG).read_bytes()))
    assert not other.exists()
    [row] = bytecode_rows(json.loads(result.stdout))
    assert row["ok"] and f"__pycache__/{checked.name}: checked-hash, stale: recompiled" in row["message"]

    result = run("revert", "--target", flag_tree, "--patches", library)
    assert result.exit_code == 0, result.output
    assert imported_value(flag_tree, options=NEVER) == "stock"
    assert header(checked) == (3, importlib.util.source_hash(STOCK.encode()))


def test_an_up_to_date_checked_hash_pyc_is_left_alone_by_verify(run, flag_tree, library):
    assert run("apply", "--target", flag_tree, "--patches", library).exit_code == 0
    checked = Path(py_compile.compile(str(flag_tree / FLAG), doraise=True, invalidation_mode=CHECKED))
    before = checked.read_bytes()
    result = run("verify", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert checked.read_bytes() == before
    [row] = bytecode_rows(json.loads(result.stdout))
    assert "checked-hash: Python re-validates it against the source hash" in row["message"]


def test_a_timestamp_pyc_whose_header_still_fits_is_rebuilt(tmp_path):
    # Same size, same second: the header cannot tell the new source from the old one.
    root = write_tree(tmp_path / "site", files={FLAG: 'VALUE = "one"\n'})
    st = (root / FLAG).stat()
    py_compile.compile(str(root / FLAG), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    (root / FLAG).write_text('VALUE = "two"\n')
    os.utime(root / FLAG, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert imported_value(root) == "one"

    [row] = bytecode.fix(root, [FLAG], None)
    assert row.ok and "timestamp, stale: recompiled" in row.message
    assert imported_value(root) == "two"


def test_a_file_the_series_did_not_change_has_its_bytecode_fixed_only_where_status_judges_it_stale(tmp_path):
    """fix_bytecode's `others` (apply passes the guard's own module): a timestamp .pyc compiled from
    the file's own bytes this second is what the rules for a file just written call stale; of a file
    left alone it is up to date, and left so. An unchecked-hash one of other bytes is stale either way."""
    root = write_tree(tmp_path / "site", files={FLAG: STOCK})
    target = from_directory(root)
    pyc = Path(importlib.util.cache_from_source(str(root / FLAG)))
    py_compile.compile(str(root / FLAG), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    compiled = pyc.read_bytes()
    [row] = fix_bytecode(target, [], [FLAG])
    assert row.path is None and row.message == "no compiled bytecode for the changed files"
    assert pyc.read_bytes() == compiled
    [row] = fix_bytecode(target, [FLAG])
    assert "timestamp, stale: recompiled" in row.message  # as a file just written
    older = tmp_path / "older.py"
    older.write_text(PATCHED)
    py_compile.compile(str(older), cfile=str(pyc), doraise=True, invalidation_mode=UNCHECKED)
    [row] = fix_bytecode(target, [], [FLAG])
    assert row.ok and "unchecked-hash, stale: recompiled" in row.message, row.message
    assert imported_value(root) == "stock"


def test_a_legacy_pyc_of_a_deleted_module_is_removed(run, tmp_path, flag_tree, scratch):
    library = write_library(tmp_path / "lib2", {"0.16.0": [make_patch(scratch, flag_tree, {FLAG: None})]})
    legacy = Path(py_compile.compile(str(flag_tree / FLAG), cfile=str(flag_tree / "vllm" / "flag.pyc"), doraise=True))
    # The fault: once the source is gone, the legacy pyc is imported in its place.
    assert imported_value(patched_by_hand_copy(flag_tree, tmp_path / "plain", None)) == "stock"
    result = run("apply", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert not legacy.exists() and not (flag_tree / FLAG).exists()
    [row] = bytecode_rows(json.loads(result.stdout))
    assert "flag.pyc: timestamp, its source is gone: removed" in row["message"]


def test_scan_on_stock_bytecode_is_clean_and_writes_nothing(flag_tree):
    pyc = compile_unchecked(flag_tree)
    before = snapshot(flag_tree)
    [row] = bytecode.scan(flag_tree, [FLAG], None)
    assert row.ok and row.message == "__pycache__/" + pyc.name + ": unchecked-hash, up to date"
    assert snapshot(flag_tree) == before
    assert bytecode.scan(flag_tree, ["vllm/other.py"], None)[0].message == "no compiled bytecode for the changed files"


@pytest.mark.skipif(not PY312.exists(), reason="needs a second CPython (3.12) at " + str(PY312))
def test_the_target_interpreter_rebuilds_its_own_pycs_and_others_are_removed(run, tmp_path, flag_tree, library):
    subprocess.run(
        [
            str(PY312),
            "-c",
            "import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True, "
            "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)",
            str(flag_tree / FLAG),
        ],
        check=True,
    )
    ours = compile_unchecked(flag_tree)
    theirs = ours.with_name("flag.cpython-312.pyc")
    assert theirs.exists()
    assert imported_value(patched_by_hand_copy(flag_tree, tmp_path / "plain", PATCHED), PY312) == "stock"

    result = run(
        "apply", "--target", flag_tree, "--python", PY312, "--patches", library, "--no-import", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    assert imported_value(flag_tree, PY312) == "patched"
    assert header(theirs)[0] == 1 and not ours.exists()
    [row] = bytecode_rows(json.loads(result.stdout))
    assert "flag.cpython-312.pyc: unchecked-hash, stale: recompiled with cpython-312" in row["message"]


def test_after_a_rollback_the_bytecode_matches_the_restored_sources(run, monkeypatch, flag_tree, library):
    from patchkit.checks import CheckResult, registry

    pyc = compile_unchecked(flag_tree)
    real_run_checks = registry.run_checks

    def failing_on_disk(ctx, *args, **kwargs):  # the checks on the written files fail: apply rolls back
        results = real_run_checks(ctx, *args, **kwargs)
        return [*results, CheckResult("probe", FLAG, False, "planted failure")] if ctx.on_disk else results

    monkeypatch.setattr(registry, "run_checks", failing_on_disk)
    result = run("apply", "--target", flag_tree, "--patches", library)
    assert result.exit_code == 1 and "rolled back" in result.output and "planted failure" in result.output
    assert (flag_tree / FLAG).read_text() == STOCK
    # The pyc was rebuilt for the patched source, then again for the restored one.
    assert header(pyc) == (1, importlib.util.source_hash(STOCK.encode()))
    assert imported_value(flag_tree) == "stock"


def test_apply_on_an_applied_tree_repairs_stale_bytecode_left_behind(run, flag_tree, library):
    """A patched source with an unchecked-hash pyc of its stock code (an interrupted fix, or an
    image rebuilt with compileall after patching by hand): a second apply writes nothing but
    recompiles the stale pyc, so the patched code is what runs."""
    assert run("apply", "--target", flag_tree, "--patches", library).exit_code == 0
    (flag_tree / FLAG).write_text(STOCK)
    compile_unchecked(flag_tree)
    (flag_tree / FLAG).write_text(PATCHED)
    assert imported_value(flag_tree) == "stock"  # the stale pyc shadows the patched source
    assert run("verify", "--target", flag_tree, "--patches", library).exit_code == 1
    result = run("apply", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["result"] == "already-applied"
    assert imported_value(flag_tree) == "patched"
    assert run("verify", "--target", flag_tree, "--patches", library).exit_code == 0


def test_a_symlinked_pycache_is_named_and_nothing_through_it_changes(run, tmp_path, flag_tree, library):
    """__pycache__ a symlink to a directory elsewhere that holds a stale unchecked-hash pyc of the
    module (optimized, -OO) and another module's: apply names the link, exit 1, and the files it
    points at are neither rewritten nor removed; the change itself stays applied."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    compiled = compile_unchecked(flag_tree, optimize=2)
    shutil.move(compiled, elsewhere / compiled.name)
    (elsewhere / "other.cpython-311.pyc").write_bytes(b"not bytecode at all")
    shutil.rmtree(compiled.parent)
    (flag_tree / "vllm" / "__pycache__").symlink_to(elsewhere, target_is_directory=True)
    before = fingerprint(elsewhere)

    result = run("apply", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 1, result.output
    [row] = bytecode_rows(json.loads(result.stdout))
    assert (row["path"], row["ok"], row["level"]) == (FLAG, False, "error")
    assert row["message"].startswith("__pycache__/: a symlink: not followed")
    assert fingerprint(elsewhere) == before
    assert (flag_tree / FLAG).read_text() == PATCHED

    verified = run("verify", "--target", flag_tree, "--patches", library, "--format", "json")
    assert verified.exit_code == 1 and not bytecode_rows(json.loads(verified.stdout))[0]["ok"]
    assert run("revert", "--target", flag_tree, "--patches", library).exit_code == 1
    assert (flag_tree / FLAG).read_text() == STOCK
    assert fingerprint(elsewhere) == before


def test_a_symlinked_or_special_pyc_is_named_and_never_written_or_removed(run, tmp_path, flag_tree, library):
    """Inside a real __pycache__: one interpreter's pyc a symlink to a file elsewhere, another's a fifo;
    beside the source, a legacy flag.pyc symlink. Each is named; none is followed, read or removed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target_pyc = outside / "victim.pyc"
    shutil.copy(compile_unchecked(flag_tree), target_pyc)
    ours = Path(importlib.util.cache_from_source(str(flag_tree / FLAG)))
    ours.unlink()
    ours.symlink_to(target_pyc)
    os.mkfifo(ours.with_name("flag.cpython-39.pyc"))
    legacy = flag_tree / "vllm" / "flag.pyc"
    legacy.symlink_to(outside / "legacy-victim.pyc")  # dangling: must not be created either
    before = fingerprint(outside)

    result = run("apply", "--target", flag_tree, "--patches", library, "--format", "json")
    assert result.exit_code == 1, result.output
    [row] = bytecode_rows(json.loads(result.stdout))
    assert f"__pycache__/{ours.name}: a symlink: not followed" in row["message"]
    assert "__pycache__/flag.cpython-39.pyc: not a regular file: not followed" in row["message"]
    assert "flag.pyc: a symlink: not followed" in row["message"]
    assert fingerprint(outside) == before
    assert ours.is_symlink() and legacy.is_symlink()


def test_a_symlink_planted_as_the_roots_pycache_is_the_trees_to_fix_not_the_series(run, tmp_path, scratch):
    """review 12a L6: a `__pycache__` symlink beside the guard's module made revert's check block
    say "nothing is written (apply refuses this): fix the patch" (or "report the library's series")."""
    from helpers import MODEL_PY

    tree = write_tree(tmp_path / "site")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, tree, {"vllm/models/model.py": MODEL_PY + "# patched\n"}))
    assert run("apply", "--target", tree, "--patch", diff).exit_code == 0
    victim = tmp_path / "victim"
    victim.mkdir()
    (tree / "__pycache__").symlink_to(victim, target_is_directory=True)
    reverted = run("revert", "--target", tree, "--patch", diff)
    said = " ".join(reverted.output.split())
    assert reverted.exit_code == 1, reverted.output
    assert "__pycache__/: a symlink" in said, said
    assert "fix the patch" not in said and "report the" not in said and "apply refuses" not in said, said
    assert (
        said.count("remove what each line names (a .pyc file, or a symlink or special file where bytecode goes)") == 2
    )
    assert list(victim.iterdir()) == [] and (tree / "vllm/models/model.py").read_text() == MODEL_PY


def test_a_changed_files_directory_is_judged_inside_with_no_path_resolved_and_none_through_a_symlink_out(
    tmp_path, monkeypatch
):
    """compiled_files: a source with no symlink on its way inside the tree is looked at with no path resolved
    (resolving the tree and the directory for each changed file); one whose directory a symlink leads out of
    the tree is refused, its __pycache__ never listed; one through a symlink inside is looked at, resolved."""
    tag = sys.implementation.cache_tag
    outside = write_tree(tmp_path / "outside", "0.16.0", {"vllm/secret.py": "S = 1\n"}) / "vllm"
    site = write_tree(tmp_path / "site", "0.16.0", {"vllm/a.py": "A = 1\n", "vllm/sub/b.py": "B = 1\n"})
    for directory, stem in ((outside, "secret"), (site / "vllm", "a"), (site / "vllm/sub", "b")):
        (directory / "__pycache__").mkdir()
        (directory / f"__pycache__/{stem}.{tag}.pyc").write_bytes(b"\0" * 16)
    (site / "vllm/subout").symlink_to(outside)
    (site / "vllm/insub").symlink_to("sub")
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "vllm").symlink_to(site / "vllm")
    resolved = []
    resolve = Path.resolve
    monkeypatch.setattr(Path, "resolve", lambda path, strict=False: resolved.append(path) or resolve(path, strict))
    for tree in (site, moved):  # a tree, and one whose vllm/ was moved away (`vllm -> /data/vllm`)
        plain: set[str] = set()
        found = [item for rel in ("vllm/a.py", "vllm/sub/b.py") for item in bytecode.compiled_files(tree, rel, plain)]
        assert [item["name"] for item in found] == [f"__pycache__/a.{tag}.pyc", f"__pycache__/b.{tag}.pyc"], found
        assert not any("refused" in item for item in found) and resolved == [], "a plain path was resolved"
        for rel in ("vllm/subout/secret.py", "vllm/../../outside/vllm/secret.py"):
            assert bytecode.compiled_files(tree, rel, plain) == [
                {"path": rel, "name": str(Path(rel).parent) + "/", "refused": "leads outside the target"}
            ]
        inner = bytecode.compiled_files(tree, "vllm/insub/b.py", plain)
        assert [item["name"] for item in inner] == [f"__pycache__/b.{tag}.pyc"] and resolved, inner
        resolved.clear()
