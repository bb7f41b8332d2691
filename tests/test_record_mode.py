"""The record is readable by the user vLLM runs as, whatever the umask of patchkit's last write
(review 5 H2: a write under umask 077 left state.json 0600, and the guard refused every launch of
another user while status said ok)."""

from __future__ import annotations

import json
import os
import stat

from helpers import MODEL_PY, SPEC_PY, make_patch, run_cli_read_only, run_cli_writing, write_library, write_tree

from patchkit.engine import guard


def test_a_write_under_umask_077_leaves_the_record_readable_by_others(run, tmp_path, scratch):
    tree = write_tree(tmp_path / "site")
    first = scratch / "first.diff"
    first.write_bytes(make_patch(scratch, tree, {"vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"kimi"')}))
    assert run("apply", "--target", tree, "--patch", first).exit_code == 0
    second = scratch / "second.diff"
    second.write_bytes(make_patch(scratch, tree, {"vllm/added.py": "ADDED = 1\n"}))
    old = os.umask(0o077)
    try:
        result = run("apply", "--target", tree, "--patch", second)
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(os.stat(tree / ".patchkit" / "state.json").st_mode) == 0o644


def readable_by_others(path) -> bool:
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    return bool(mode & 0o004) and (not path.is_dir() or bool(mode & 0o001))


def test_an_apply_under_umask_077_adds_only_files_and_directories_others_can_read(run, tmp_path, scratch):
    """The guard's module and dist-info, a created package and .patchkit/ itself are read by the user
    vLLM runs as (review 5 M2: under umask 077 they were 0600/0700, so that user's vLLM never loaded
    the guard while status said ok)."""
    tree = write_tree(tmp_path / "site")
    before = {p for p in tree.rglob("*")}
    patch = scratch / "adds.diff"
    patch.write_bytes(make_patch(scratch, tree, {"vllm/newpkg/sub/mod.py": "VALUE = 1\n"}))
    old = os.umask(0o077)
    try:
        result = run("apply", "--target", tree, "--patch", patch)
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    added = {p for p in tree.rglob("*") if p not in before and "objects" not in p.parts and p.name != "lock"}
    names = {p.relative_to(tree).as_posix() for p in added}
    assert {"vllm/newpkg/sub/mod.py", "patchkit_guard.py", ".patchkit/state.json"} <= names, names
    assert any(n.startswith("patchkit_guard-") and n.endswith(".dist-info") for n in names), names
    unreadable = sorted(p.relative_to(tree).as_posix() for p in added if not readable_by_others(p))
    assert unreadable == []


def _closed(path) -> None:
    os.chmod(path, 0o600)  # as an editor or `cp` under umask 077 leaves it


def test_an_apply_that_patches_a_0600_file_leaves_it_readable_and_status_ok(run, tmp_path, scratch):
    """Review 6 M2: the patched file kept the 0600 of the file it replaced, so the apply exited 0
    and its own status failed (the guard refused every other user) until a second apply."""
    tree = write_tree(tmp_path / "site")
    patch = scratch / "spec.diff"
    patch.write_bytes(make_patch(scratch, tree, {"vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"kimi"')}))
    _closed(tree / "vllm/config/spec.py")
    done = run("apply", "--target", tree, "--patch", patch)
    assert done.exit_code == 0, done.output
    assert readable_by_others(tree / "vllm/config/spec.py")
    assert done.output.count("readable by other users") == 1, done.output
    status = run("status", "--target", tree, "--patch", patch)
    assert status.exit_code == 0, status.output


def test_a_several_set_apply_opens_every_sets_0600_file(run, tmp_path, scratch):
    """Each set of a several-set apply opens its own files: the last set's too (review 6 M2)."""
    tree = write_tree(tmp_path / "site")
    library = scratch / "lib"
    spec, model = "vllm/config/spec.py", "vllm/models/model.py"
    write_library(library, {"0.16.0": [make_patch(scratch, tree, {spec: SPEC_PY + "# one\n"})]}, name="one")
    write_library(library, {"0.16.0": [make_patch(scratch, tree, {model: MODEL_PY + "# two\n"})]}, name="two")
    (library / "library.toml").write_text('order = ["one", "two"]\n')
    _closed(tree / spec)
    _closed(tree / model)
    done = run("apply", "--target", tree, "--patches", library, "--no-import")
    assert done.exit_code == 0, done.output
    assert readable_by_others(tree / spec) and readable_by_others(tree / model), done.output
    status = run("status", "--target", tree, "--patches", library)
    assert status.exit_code == 0, status.output


def test_revert_gives_back_the_mode_of_a_0600_file_apply_made_readable(run, tmp_path, scratch):
    """Review 6 L5: revert gave the stock bytes back but kept the o+r apply added."""
    tree = write_tree(tmp_path / "site")
    spec = tree / "vllm/config/spec.py"
    patch = scratch / "spec.diff"
    patch.write_bytes(make_patch(scratch, tree, {"vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"kimi"')}))
    _closed(spec)
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    assert readable_by_others(spec)
    done = run("revert", "--target", tree, "--patch", patch)
    assert done.exit_code == 0, done.output
    assert spec.read_text() == SPEC_PY and stat.S_IMODE(os.stat(spec).st_mode) == 0o600


def test_a_recorded_mode_beyond_permission_bits_is_refused(run, tmp_path, scratch):
    """The recorded mode is read back from the tree: a setuid bit (or no number) is a damaged record."""
    tree = write_tree(tmp_path / "site")
    patch = scratch / "spec.diff"
    patch.write_bytes(make_patch(scratch, tree, {"vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"kimi"')}))
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    path = tree / ".patchkit/state.json"
    for bad in (0o4755, -1, "0644", True):
        state = json.loads(path.read_text())
        state["entries"][0]["files"]["vllm/config/spec.py"]["mode"] = bad
        path.write_text(json.dumps(state))
        done = run("revert", "--target", tree, "--patch", patch)
        assert done.exit_code == 2 and "is not a file's permission bits" in done.output, (bad, done.output)
    assert stat.S_IMODE(os.stat(tree / "vllm/config/spec.py").st_mode) & 0o7000 == 0


def test_each_directory_on_the_way_to_the_recorded_files_is_judged_once(run, tmp_path, scratch, monkeypatch):
    """unreadable_by_others (once or twice a set in every apply, dry run and launch check) judges each
    directory the recorded files share once, not once per file under it; it finds what it found."""
    tree = write_tree(tmp_path / "site")
    spec, model = "vllm/config/spec.py", "vllm/models/model.py"
    patch = scratch / "two.diff"
    patch.write_bytes(make_patch(scratch, tree, {spec: SPEC_PY + "# one\n", model: MODEL_PY + "# two\n"}))
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    _closed(tree / spec)
    os.chmod(tree / "vllm/models", 0o700)
    judged = []
    real = os.lstat
    monkeypatch.setattr(os, "lstat", lambda path, *a, **k: judged.append(str(path)) or real(path, *a, **k))
    assert [rel for rel, _mode in guard.unreadable_by_others(tree)] == [spec, "vllm/models"]
    monkeypatch.undo()
    assert str(tree / "vllm") in judged and len(judged) == len(set(judged)), judged
    os.chmod(tree / "vllm/models", 0o755)


def test_a_patched_file_closed_to_other_users_says_their_launch_is_refused_not_this_users(tmp_path, scratch):
    """A patched file 0600 (or 0000 as root): this user's guard reads it and passes, another user's
    launch is refused. status said "the launch guard refuses this tree", which this user's launch
    shows untrue; it says whose launch is refused, and its fix (apply) works."""
    tree = write_tree(tmp_path / "site")
    patch = scratch / "spec.diff"
    patch.write_bytes(make_patch(scratch, tree, {"vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"kimi"')}))
    assert run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import").returncode == 0
    _closed(tree / "vllm/config/spec.py")
    [only] = guard.launch_verdict_of(tree).problems  # the closed file alone: this user's guard reads it
    assert only.startswith(guard.OTHERS_CANNOT_READ), only
    status = run_cli_read_only("status", "--target", tree, "--patch", patch)
    said = " ".join((status.stdout + status.stderr).split())
    assert status.returncode == 1, said
    assert "another user's launch is refused: other users (a vLLM they launch) cannot read vllm/config/spec.py" in said
    assert "launch guard refuses" not in said, said
    assert run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import").returncode == 0
    assert run_cli_read_only("status", "--target", tree, "--patch", patch).returncode == 0


def test_a_recorded_mode_patchkit_never_records_is_refused_and_never_written(run, tmp_path, scratch):
    """review45b L-C: a planted mode of 0 (no one but root reads the file) or 0o777 (every local user
    writes it) was written by revert, and status then said ok."""
    tree = write_tree(tmp_path / "site")
    patch = scratch / "spec.diff"
    patch.write_bytes(make_patch(scratch, tree, {"vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"kimi"')}))
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    path = tree / ".patchkit/state.json"
    for bad in (0, 0o777, 0o200, 0o646):
        state = json.loads(path.read_text())
        state["entries"][0]["files"]["vllm/config/spec.py"]["mode"] = bad
        path.write_text(json.dumps(state))
        done = run("revert", "--target", tree, "--patch", patch)
        assert done.exit_code == 2 and "is not a mode patchkit records" in done.output, (bad, done.output)
        assert run("status", "--target", tree, "--patch", patch).exit_code == 2
    assert stat.S_IMODE(os.stat(tree / "vllm/config/spec.py").st_mode) == 0o644


def test_an_original_every_user_may_write_is_recorded_as_patchkit_writes_it(run, tmp_path, scratch):
    """The mode apply records is one its reader takes: never other-writable (revert refused it)."""
    tree = write_tree(tmp_path / "site")
    spec = tree / "vllm/config/spec.py"
    spec.chmod(0o666)
    patch = scratch / "spec.diff"
    patch.write_bytes(make_patch(scratch, tree, {"vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"kimi"')}))
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    assert (
        json.loads((tree / ".patchkit/state.json").read_text())["entries"][0]["files"]["vllm/config/spec.py"]["mode"]
        == 0o664
    )
    assert run("revert", "--target", tree, "--patch", patch).exit_code == 0
    assert stat.S_IMODE(os.stat(spec).st_mode) == 0o664
