"""Stock integrity: the files to patch are checked against the distribution's RECORD before writing."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from helpers import MODEL_PY, SPEC_PY, examples, lay_out_release, make_patch, snapshot, write_library, write_tree
from hypothesis import example, given, settings
from hypothesis import strategies as st

from patchkit.base.errors import FetchError
from patchkit.checks import ERROR, WARNING
from patchkit.distinfo.record import parse_record, record_hash

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
PATCHED_SPEC = SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "deepseek",\n')
PATCHED_MODEL = MODEL_PY.replace("return x", "return x + 1")


@pytest.fixture(autouse=True)
def empty_fetch_cache(request, tmp_path, monkeypatch):
    """No cached release from other runs: the published wheel's RECORD only where a test puts one."""
    if request.node.get_closest_marker("release"):
        return None  # real releases come from the real cache
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def record_for(root: Path, paths: list[str]) -> bytes:
    rows = [f"{p},{record_hash((root / p).read_bytes())},{(root / p).stat().st_size}" for p in paths]
    return ("\n".join(rows) + "\n").encode()


def write_record(root: Path, version: str = "0.16.0", paths: list[str] | None = None) -> Path:
    """A RECORD as pip writes it, for the tree as it is now (by default every file under vllm/)."""
    paths = (
        paths
        if paths is not None
        else sorted(p.relative_to(root).as_posix() for p in (root / "vllm").rglob("*") if p.is_file())
    )
    record = root / f"vllm-{version}.dist-info" / "RECORD"
    record.write_bytes(record_for(root, paths) + f"vllm-{version}.dist-info/RECORD,,\n".encode())
    return record


@pytest.fixture
def library(tmp_path, tree, scratch):
    patches = [
        make_patch(scratch, tree, {SPEC: PATCHED_SPEC}, "Description: accept deepseek\n"),
        make_patch(scratch, tree, {MODEL: PATCHED_MODEL}, "Description: model\n"),
    ]
    return write_library(tmp_path / "lib", {"0.16.0": patches})


def apply(run, tree, library, *extra):
    where = ["--patches", library] if library else []  # None: the project's own library
    result = run("apply", "--target", tree, *where, "--format", "json", *extra)
    return result, (json.loads(result.stdout) if result.stdout.strip() else None)


def integrity_rows(checks: list[dict]) -> dict[str, tuple[bool, str, str]]:
    return {c["path"]: (c["ok"], c["level"], c["message"]) for c in checks if c["check"] == "integrity"}


def test_stock_files_pass_and_stay_verified_once_patched(run, tree, library):
    write_record(tree)
    result, data = apply(run, tree, library)
    assert result.exit_code == 0, result.output
    rows = integrity_rows(data["checks"])
    assert rows == {
        SPEC: (True, ERROR, "stock: matches vllm-0.16.0.dist-info/RECORD"),
        MODEL: (True, ERROR, "stock: matches vllm-0.16.0.dist-info/RECORD"),
    }

    verified = run("verify", "--target", tree, "--patches", library, "--format", "json")
    assert verified.exit_code == 0, verified.output
    rows = integrity_rows(json.loads(verified.stdout)["checks"])
    assert all(ok and "once the series' patches already in place are undone" in msg for ok, _, msg in rows.values())


def test_an_edited_stock_file_is_refused_and_accepted_with_force(run, tree, library):
    write_record(tree)
    with (tree / SPEC).open("a") as f:
        f.write("# local tweak\n")  # outside the hunks: the series still applies
    before = snapshot(tree)

    for extra in ((), ("--dry-run",)):
        result, data = apply(run, tree, library, *extra)
        assert result.exit_code == 1
        assert f"{SPEC}: differs from the stock file in vllm-0.16.0.dist-info/RECORD" in result.output
        assert "a local edit" in result.output and "--force" in result.output
        assert integrity_rows(data["checks"])[SPEC][:2] == (False, ERROR)
        assert integrity_rows(data["checks"])[MODEL][0] is True
        assert snapshot(tree) == before and not (tree / ".patchkit" / "state.json").exists()

    result, data = apply(run, tree, library, "--force")
    assert result.exit_code == 0, result.output
    assert data["result"] == "applied" and '"deepseek"' in (tree / SPEC).read_text()
    ok, level, message = integrity_rows(data["checks"])[SPEC]
    assert (ok, level) == (False, WARNING) and message.endswith("(accepted with --force)")

    # Afterwards the file is as patchkit wrote it, over a file that was not stock: said, not failed.
    verified = run("verify", "--target", tree, "--patches", library, "--format", "json")
    assert verified.exit_code == 0, verified.output
    ok, level, message = integrity_rows(json.loads(verified.stdout)["checks"])[SPEC]
    assert (ok, level) == (False, WARNING) and "applied with --force" in message


def test_verify_fails_on_an_edited_stock_file_even_when_the_series_conflicts(run, tree, library):
    write_record(tree)
    (tree / SPEC).write_text(SPEC_PY.replace('"qwen"', '"qwen2"'))  # inside a hunk: conflict
    before = snapshot(tree)
    result = run("verify", "--target", tree, "--patches", library, "--format", "json")
    assert result.exit_code == 1
    rows = integrity_rows(json.loads(result.stdout)["checks"])
    assert rows[SPEC][:2] == (False, ERROR) and "a local edit" in rows[SPEC][2]
    assert rows[MODEL][0] is True
    assert snapshot(tree) == before


def test_a_tree_without_record_warns_and_applies(run, tree, library):
    result, data = apply(run, tree, library)
    assert result.exit_code == 0, result.output
    rows = integrity_rows(data["checks"])
    assert {path: row[:2] for path, row in rows.items()} == {SPEC: (False, WARNING), MODEL: (False, WARNING)}
    assert all(row[2].startswith("not verifiable: no vllm-*.dist-info/RECORD") for row in rows.values())


def test_a_file_record_does_not_list_is_not_verifiable(run, tree, library):
    write_record(tree, paths=[SPEC])
    (tree / MODEL).write_text(MODEL_PY + "# not stock, but nobody can tell\n")
    result, data = apply(run, tree, library)
    assert result.exit_code == 0, result.output
    rows = integrity_rows(data["checks"])
    assert rows[MODEL] == (False, WARNING, "not verifiable: not listed in vllm-0.16.0.dist-info/RECORD")
    assert rows[SPEC][0] is True


@pytest.mark.parametrize("algo", ["md5", "sha1"])
def test_a_record_hash_wheels_do_not_allow_is_not_trusted(run, tree, library, algo):
    """An md5/sha1 entry is not evidence: not even a file that does match it passes as stock."""
    record = write_record(tree)
    weak = base64.urlsafe_b64encode(hashlib.new(algo, (tree / MODEL).read_bytes()).digest()).rstrip(b"=").decode()
    rows = record.read_text().splitlines()
    record.write_text(
        "\n".join(f"{MODEL},{algo}={weak},{r.split(',')[2]}" if r.startswith(MODEL + ",") else r for r in rows) + "\n"
    )
    result, data = apply(run, tree, library)
    assert result.exit_code == 0, result.output
    rows_by_path = integrity_rows(data["checks"])
    ok, level, message = rows_by_path[MODEL]
    assert (ok, level) == (False, WARNING)
    assert message.startswith(f"not verifiable: vllm-0.16.0.dist-info/RECORD gives it a {algo} hash")
    assert "sha256 or stronger" in message and "not trusted" in message
    assert rows_by_path[SPEC] == (True, ERROR, "stock: matches vllm-0.16.0.dist-info/RECORD")


@pytest.mark.parametrize("bogus_first", [False, True])
def test_a_file_an_installed_record_lists_twice_with_two_hashes_is_not_verifiable(run, tree, library, bogus_first):
    # the class of review 5 wheel L2: the last row won, so one order passed and the other blamed the file
    record = write_record(tree)
    bogus = f"{MODEL},{record_hash(b'another file')},12\n"
    text = record.read_text()
    record.write_text(bogus + text if bogus_first else text + bogus)
    result, data = apply(run, tree, library)
    assert result.exit_code == 0, result.output
    rows = integrity_rows(data["checks"])
    assert rows[MODEL] == (
        False,
        WARNING,
        "not verifiable: vllm-0.16.0.dist-info/RECORD lists it twice, with different hashes: neither is evidence",
    )
    assert rows[SPEC] == (True, ERROR, "stock: matches vllm-0.16.0.dist-info/RECORD")


def test_a_row_without_a_hash_after_one_with_it_is_the_pip_pyc_row_not_a_conflict():
    record = b"p/m.pyc,sha256=AAAA,3\np/m.pyc,,\nq.pyc,,\nq.pyc,sha256=BBBB,4\nr.py,sha256=C,1\nr.py,sha256=C,1\n"
    assert parse_record(record) == {
        "p/m.pyc": ("sha256=AAAA", "3"),
        "q.pyc": ("sha256=BBBB", "4"),
        "r.py": ("sha256=C", "1"),
    }


@pytest.mark.parametrize("algo", ["md5", "sha1", "sha224", "not-a-hash"])
def test_record_hash_refuses_algorithms_wheels_do_not_allow(algo):
    with pytest.raises(ValueError, match="sha256 or stronger"):
        record_hash(b"data", algo)
    assert record_hash(b"data", "sha512").startswith("sha512=")


def test_a_file_patched_by_hand_with_this_series_passes(run, tree, library):
    write_record(tree)
    (tree / SPEC).write_text(PATCHED_SPEC)  # the first patch, applied by hand
    result, data = apply(run, tree, library)
    assert result.exit_code == 0, result.output
    ok, _, message = integrity_rows(data["checks"])[SPEC]
    assert ok and "once the series' patches already in place are undone" in message
    assert (tree / MODEL).read_text() == PATCHED_MODEL


def test_a_file_patched_by_hand_and_edited_besides_is_refused(run, tree, library):
    write_record(tree)
    (tree / SPEC).write_text(PATCHED_SPEC + "# mine\n")  # the series' change plus a local edit
    before = snapshot(tree)
    result, _data = apply(run, tree, library)
    # refused where the found series is reversed, before the checks (a3d5d97): the original it gives is
    # not RECORD's stock file, so the patched file is no apply of patchkit's to record
    assert result.exit_code == 1, result.output
    assert f"{SPEC} differs from stock vLLM 0.16.0 beyond the set's change" in result.output
    assert "--force" in result.output and "nothing was written" in result.output
    assert snapshot(tree) == before


def publish_in_cache(cache: Path, version: str, stock: dict[str, str]) -> None:
    """What `patchkit fetch` leaves in the cache: releases/<v>/tree/vllm-<v>.dist-info/RECORD, bound by
    its sha256 in releases/<v>/release.json."""
    import hashlib

    from patchkit.fetch.cache import new_state, save_state

    wheel = write_tree(cache / "releases" / version / "tree", version, stock)
    write_record(wheel, version, sorted(stock))
    dist_info = f"vllm-{version}.dist-info"
    members = sorted(p.relative_to(wheel).as_posix() for p in wheel.rglob("*") if p.is_file())
    state = new_state(version) | {
        "wheel": f"vllm-{version}-py3-none-any.whl",
        "url": "https://example.invalid/vllm.whl",
        "dist_info": dist_info,
        "members": members,
        "present": members,
        "record_sha256": hashlib.sha256((wheel / dist_info / "RECORD").read_bytes()).hexdigest(),
    }
    save_state(cache / "releases" / version, state)


def test_the_published_wheels_record_from_the_fetch_cache_is_used_too(run, tmp_path, tree, library, empty_fetch_cache):
    publish_in_cache(empty_fetch_cache, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY + "# vendor build\n"})

    # No RECORD in the tree: the published one vouches for spec.py; model.py differs: a warning only.
    result, data = apply(run, tree, library, "--dry-run")
    assert result.exit_code == 0, result.output
    rows = integrity_rows(data["checks"])
    assert rows[SPEC][0] and "the published wheel's RECORD (fetch cache, vllm 0.16.0)" in rows[SPEC][2]
    assert rows[MODEL][:2] == (False, WARNING) and "differs from the stock file in the published" in rows[MODEL][2]

    # With its own RECORD, the tree is the reference; a disagreement with the published wheel is reported.
    write_record(tree)
    result, data = apply(run, tree, library)
    assert result.exit_code == 0, result.output
    model_rows = [c for c in data["checks"] if c["check"] == "integrity" and c["path"] == MODEL]
    assert [(c["ok"], c["level"]) for c in model_rows] == [(True, ERROR), (False, WARNING)]
    assert "the installed build is not the published wheel" in model_rows[1]["message"]


def test_a_cached_record_the_fetch_did_not_take_from_the_wheel_is_no_evidence(
    run, tmp_path, tree, library, empty_fetch_cache
):
    """The fetch cache is untrusted: a RECORD edited after the fetch (here: vouching for a vendor build of
    model.py) is ignored, so it cannot vouch for anything."""
    publish_in_cache(empty_fetch_cache, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    record = empty_fetch_cache / "releases" / "0.16.0" / "tree" / "vllm-0.16.0.dist-info" / "RECORD"
    record.write_bytes(record.read_bytes() + b"vllm/extra.py,sha256=AAAA,1\n")
    result, data = apply(run, tree, library, "--dry-run")
    assert result.exit_code == 0, result.output
    assert all("published wheel" not in row[2] for row in integrity_rows(data["checks"]).values())


DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"


@pytest.mark.release
def test_real_0_16_0_files_pass_on_stock_and_fail_after_a_one_byte_edit(run, tmp_path):
    from patchkit.releases.files import files_for

    paths = files_for("0.16.0", None, "eagle3")  # the eagle3 set's rows, as the library holds three sets
    target = tmp_path / "site"
    lay_out_release("0.16.0", paths, target)

    result = run("verify", "--target", target, "--set", "eagle3", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = integrity_rows(json.loads(result.stdout)["checks"])
    assert sorted(rows) == paths
    assert all(ok and msg.startswith("stock: matches vllm-0.16.0.dist-info/RECORD") for ok, _, msg in rows.values())

    data = bytearray((target / DEEPSEEK).read_bytes())
    assert data.startswith(b"# SPDX-License-Identifier")
    data[2] = ord("s")  # one byte, in a comment: the series still applies, the file is no longer stock
    (target / DEEPSEEK).write_bytes(bytes(data))
    before = snapshot(target)

    result, out = apply(run, target, None, "--set", "eagle3")
    assert result.exit_code == 1 and f"{DEEPSEEK}: differs from the stock file" in result.output
    assert integrity_rows(out["checks"])[DEEPSEEK][:2] == (False, ERROR)
    assert snapshot(target) == before and not (target / ".patchkit" / "state.json").exists()

    result = run("verify", "--target", target, "--set", "eagle3", "--format", "json")
    assert result.exit_code == 1
    rows = integrity_rows(json.loads(result.stdout)["checks"])
    assert rows[DEEPSEEK][:2] == (False, ERROR)
    assert all(rows[p][0] for p in paths if p != DEEPSEEK)


# RECORD texts with what csv reads specially: quotes, commas inside quotes, CR, CRLF, NUL, blank lines.
_RECORD_PIECES = st.sampled_from(
    [
        "vllm/a.py",
        "vllm/b,c.py",
        '"vllm/b,c.py"',
        "vllm/\u00e9.py",
        ",",
        "sha256=AbC",
        "12",
        '"',
        "\r",
        "\r\n",
        "\n",
        "\0",
        " ",
    ]
)


@settings(max_examples=examples(300), deadline=None)
@given(
    pieces=st.lists(_RECORD_PIECES, max_size=30),
    wanted=st.sets(st.sampled_from(["vllm/a.py", "vllm/b,c.py", "vllm/\u00e9.py", "12", ""])),
)
@example(
    pieces=["vllm/a.py,sha256=AbC,12\r\n", "vllm/\u00e9.py,sha256=AbC\r\n"], wanted={"vllm/a.py", "vllm/\u00e9.py"}
)
@example(
    pieces=['"vllm/b,c.py",sha256=AbC,12\n', "vllm/a.py,sha256=AbC,1\rvllm/\u00e9.py,x,2\n"],
    wanted={"vllm/b,c.py", "vllm/\u00e9.py"},
)
def test_the_rows_of_a_few_paths_are_those_of_the_whole_record(pieces, wanted):
    """parse_record(data, only) reads just the rows it needs: what it gives is the whole parse's rows
    for those paths, or the same error."""
    data = "".join(pieces).encode()
    try:
        whole = {path: row for path, row in parse_record(data).items() if path in wanted}
    except FetchError:
        with pytest.raises(FetchError):
            parse_record(data, wanted)
        return
    assert parse_record(data, wanted) == whole


def test_a_record_as_pip_writes_it_crlf_and_quoted_vouches_for_the_touched_files_only(run, tree, library):
    """pip writes RECORD with CRLF line ends and quotes a path with a comma: the touched files' rows
    are read as csv reads them, and a tampered file is still refused."""
    record = write_record(tree)
    lines = record.read_text().splitlines()
    odd = '"vllm/odd,name.py",sha256=xyz,3'
    record.write_bytes(("\r\n".join([*lines, odd]) + "\r\n").encode())
    result, data = apply(run, tree, library, "--dry-run")
    assert result.exit_code == 0, result.output
    assert {path: row[0] for path, row in integrity_rows(data["checks"]).items()} == {SPEC: True, MODEL: True}

    (tree / MODEL).write_text(MODEL_PY + "# tampered\n")
    result, data = apply(run, tree, library, "--dry-run")
    assert result.exit_code == 1
    assert integrity_rows(data["checks"])[MODEL][:2] == (False, ERROR)


def test_a_recorded_original_unlike_vllms_file_is_written_back_only_with_a_copy_of_what_it_replaces(run, tree, library):
    """Review 17 H3: a planted record (an original's digest changed) and object made revert overwrite a
    file vLLM's RECORD lists with other bytes, keeping nothing. Now plain revert refuses (nothing
    written, --force named); with --force the file it replaces is kept aside."""

    write_record(tree)
    result, _data = apply(run, tree, library)
    assert result.exit_code == 0, result.output
    patched = (tree / SPEC).read_bytes()
    planted = b"import os  # not vLLM's\n"
    digest = hashlib.sha256(planted).hexdigest()
    (tree / ".patchkit/objects" / digest).write_bytes(planted)
    state_file = tree / ".patchkit/state.json"
    state = json.loads(state_file.read_text())
    state["entries"][0]["files"][SPEC]["before"] = digest
    state_file.write_text(json.dumps(state))
    refused = run("revert", "--target", tree)
    assert refused.exit_code == 1 and "--force" in refused.output, refused.output
    assert (tree / SPEC).read_bytes() == patched and not (tree / ".patchkit/saved").exists()
    done = run("revert", "--target", tree, "--force")
    assert done.exit_code == 0, done.output
    assert f"not stock: {SPEC}" in " ".join(done.output.split()), done.output
    kept = [p.read_bytes() for p in (tree / ".patchkit/saved").rglob("*") if p.is_file()]
    assert patched in kept, done.output


PLANTED = b"precious = 666  # not what the file held\n"


def _plant(tree: Path, set_name: str, path: str, patches: list | None = None) -> dict:
    """Review 17 H3's planted record: an entry of `set_name` saying `path` held PLANTED before the
    apply and holds its present bytes now, with PLANTED in the object store. The record as planted."""
    digest = hashlib.sha256(PLANTED).hexdigest()
    (tree / ".patchkit/objects").mkdir(parents=True, exist_ok=True)
    (tree / ".patchkit/objects" / digest).write_bytes(PLANTED)
    state_file = tree / ".patchkit/state.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"format": 1, "entries": []}
    entry = next((e for e in state["entries"] if e["set"] == set_name), None)
    if entry is None:
        entry = {"set": set_name, "vllm_version": "0.16.0", "files": {}, "patches": patches or []}
        state["entries"].append(entry)
    now = hashlib.sha256((tree / path).read_bytes()).hexdigest()
    entry["files"][path] = {"before": digest, "after": now}
    state_file.write_text(json.dumps(state))
    return state


@pytest.mark.parametrize("path", ["mypkg/notes.py", "vllm/__init__.py"])
@pytest.mark.parametrize("applied", [True, False])
def test_a_sets_record_naming_a_file_its_patches_do_not_change_is_acted_on_by_no_command(
    run, tree, library, path, applied
):
    """Review 17 H3 (a): a planted entry of a library set naming a file none of its patches changes
    (another package's, or vLLM's own) made revert write the planted bytes there, no copy kept, and
    apply carry the entry into its new record. status, revert and apply refuse it; nothing is written."""
    write_record(tree)
    (tree / "mypkg").mkdir()
    (tree / "mypkg/notes.py").write_text("precious = 3\n")
    if applied:
        assert apply(run, tree, library)[0].exit_code == 0
    planted = _plant(tree, "demo", path)
    before = snapshot(tree)
    for command in ("status", "revert", "apply"):
        done = run(command, "--target", tree, "--patches", library)
        said = " ".join(done.output.split())
        assert done.exit_code == 2, (command, said)
        assert f"records {path} for set demo, but none of its patches changes it" in said, (command, said)
        assert "state.json.damaged" in said, said
    assert snapshot(tree) == before
    assert json.loads((tree / ".patchkit/state.json").read_text()) == planted


def test_a_patch_applys_record_naming_a_file_outside_vllm_is_damaged(run, tree):
    """Review 17 H3 (c): a planted --patch entry naming another package's file (its patch file gone)
    made a plain revert overwrite it and remove .patchkit/, leaving no trace. A --patch file changes
    only vllm/: such a record is damaged, and every command says so."""
    (tree / "mypkg").mkdir()
    (tree / "mypkg/notes.py").write_text("precious = 3\n")
    gone = [{"name": "x.patch", "path": "/nonexistent/x.patch", "sha256": "0" * 64}]
    _plant(tree, "adhoc-0123456789ab", "mypkg/notes.py", gone)
    before = snapshot(tree)
    for command in ("status", "revert"):
        done = run(command, "--target", tree)
        said = " ".join(done.output.split())
        assert done.exit_code == 2 and "state.json is damaged" in said, said
        assert "names 'mypkg/notes.py', outside vllm/" in said, said
    assert snapshot(tree) == before


def test_a_recorded_original_nothing_vouches_for_is_written_back_only_with_a_copy_of_what_it_replaces(
    run, tree, library
):
    """Review 17 H3 (b): with no vLLM RECORD (a source tree), a planted original of a file the set does
    patch was written back with no copy of the file it replaced. The patches reversed do not give it,
    so the file is kept, and the summary says the record alone vouches for it."""
    assert apply(run, tree, library)[0].exit_code == 0
    patched = (tree / SPEC).read_bytes()
    _plant(tree, "demo", SPEC)
    done = run("revert", "--target", tree, "--patches", library, "--force")  # words30 item 2: --force
    said = " ".join(done.output.split())
    assert done.exit_code == 0, said
    assert f"1 as only the record says: {SPEC}" in said, said
    kept = [p.read_bytes() for p in (tree / ".patchkit/saved").rglob("*") if p.is_file()]
    assert kept == [patched], said


def test_an_honest_record_of_a_tree_without_vllms_record_is_reverted_with_no_copy(run, tree, library):
    """The other side of H3 (b): an honest record on a source tree (no RECORD) is reverted as before:
    the series reversed gives each original, so nothing is kept aside."""
    stock = snapshot(tree)
    assert apply(run, tree, library)[0].exit_code == 0
    done = run("revert", "--target", tree, "--patches", library)
    assert done.exit_code == 0, done.output
    assert "only the record" not in done.output and not (tree / ".patchkit").exists()
    assert snapshot(tree) == stock


def test_a_record_of_patches_the_library_no_longer_holds_is_still_reverted(run, tree, library, scratch):
    """The other side of H3 (a): after an upgrade of the library (a patch dropped, another rewritten),
    the record names files the set's series no longer changes. Nothing at hand says what those patches
    changed, so vLLM's own files are taken on the record's word, as before: status and revert work."""
    stock = snapshot(tree)
    assert apply(run, tree, library)[0].exit_code == 0
    newer = make_patch(scratch, tree, {SPEC: PATCHED_SPEC + "# reworded\n"}, "Description: accept deepseek\n")
    library = write_library(library.parent / "newer", {"0.16.0": [newer]})
    assert run("status", "--target", tree, "--patches", library).exit_code != 2
    done = run("revert", "--target", tree, "--patches", library)
    assert done.exit_code == 0, done.output
    assert snapshot(tree) == stock
