"""The hostile-state catalogue (issue 10): every file patchkit reads back from a tree is untrusted
input, exactly like a diff. For each one (the journal, the state, the objects, saved/, the lock,
.patchkit/ itself, __pycache__, a workspace's metadata) a hostile version is planted: a path
outside, a symlink, a wrong type, truncated, huge. Each command then runs as a user runs it
(a subprocess) and must leave a sentinel directory beside the tree exactly as it was, with no
traceback and never the internal-error exit: a clean refusal, or a clean success.

Every row runs with one command in the fast tier (the commands taken in turn, so each is covered);
the full product, every row with every command, is `slow` (`make test` runs it).
"""

from __future__ import annotations

import hashlib
import json
import py_compile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import (
    SPEC_PY,
    cli_runner,
    fingerprint,
    make_patch,
    patched_spec,
    pip_install,
    run_cli,
    run_cli_judged,
    run_cli_read_only,
    run_cli_writing,
    write_library,
    write_tree,
)

from patchkit.engine.guard import GUARD_GONE, is_installed

SPEC = "vllm/config/spec.py"
VICTIM = "victim.py"
VICTIM_TEXT = "# a file outside the tree: nothing may read it into, or write it from, the tree\n"
COMMANDS: dict[str, tuple[str, ...]] = {
    "status": ("status",),
    "apply": ("apply",),
    "revert": ("revert",),
    "revert --force": ("revert", "--force"),
    "verify": ("verify",),
    "recover": ("recover",),
}
REFUSED = 2  # a hostile record is bad input: exit 2, whatever the command


def digest(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@dataclass
class Scene:
    """A target tree (patched, unless the command is `apply`), its patch, and a sentinel directory
    beside it holding what an attacker would like patchkit to read, overwrite or delete."""

    tree: Path
    patch: Path
    sentinel: Path

    @property
    def meta(self) -> Path:
        return self.tree / ".patchkit"

    @property
    def victim(self) -> Path:
        return self.sentinel / VICTIM

    def outside(self, name: str = VICTIM) -> str:
        """The sentinel's file as a path relative to the tree: `../sentinel/NAME`."""
        return f"../{self.sentinel.name}/{name}"

    def state(self) -> dict:
        return json.loads((self.meta / "state.json").read_text())

    def write_json(self, name: str, data: object) -> None:
        (self.meta / name).write_text(json.dumps(data))


def _scene(tmp_path: Path, *, applied: bool) -> Scene:
    tree = write_tree(tmp_path / "site")
    patch = tmp_path / "change.diff"
    patch.write_bytes(make_patch(tmp_path, tree, {SPEC: patched_spec()}))
    sentinel = tmp_path / "sentinel"
    (sentinel / "empty").mkdir(parents=True)
    (sentinel / "store").mkdir()
    (sentinel / "store" / "keep-me").write_text("an attacker's guess at a pruned object\n")
    (sentinel / VICTIM).write_text(VICTIM_TEXT)
    scene = Scene(tree, patch, sentinel)
    done = cli_runner()("apply", "--target", tree, "--patch", patch)
    assert done.exit_code == 0, done.output
    if not applied:  # apply's scene: stock files, with the record of an earlier apply kept for planting
        (tree / SPEC).write_text(SPEC_PY)
    return scene


# -- the hostile versions, one function per row --------------------------------------------------


def _journal(scene: Scene, files: list[dict], previous_state: str | None = None) -> None:
    scene.write_json("journal.json", {"id": "c0ffee", "previous_state": previous_state, "files": files})


def _journal_entry(path: str, **fields) -> dict:
    return {"path": path, "before": digest(SPEC_PY), "after": digest(patched_spec())} | {
        "staged": None,
        "mode": 0o644,
        "created_dirs": [],
        **fields,
    }


def journal_path_outside(scene: Scene) -> None:
    _journal(scene, [_journal_entry(scene.outside(), after=digest(VICTIM_TEXT))])


def journal_absolute_staged(scene: Scene) -> None:
    _journal(scene, [_journal_entry(SPEC, staged=str(scene.victim))])


def journal_created_dir_outside(scene: Scene) -> None:
    _journal(scene, [_journal_entry("vllm/new/file.py", before=None, created_dirs=[scene.outside("empty")])])


def journal_previous_state_outside(scene: Scene) -> None:
    state = scene.state()
    state["entries"][0]["files"] = {scene.outside(): {"before": None, "after": digest(VICTIM_TEXT)}}
    _journal(scene, [], previous_state=json.dumps(state))


def journal_symlink(scene: Scene) -> None:
    (scene.sentinel / "journal.json").write_text(json.dumps({"id": "c0ffee", "previous_state": None, "files": []}))
    (scene.meta / "journal.json").symlink_to(scene.sentinel / "journal.json")


def journal_wrong_type(scene: Scene) -> None:
    scene.write_json("journal.json", {"id": "c0ffee", "files": {SPEC: "restore"}})


def journal_entry_wrong_type(scene: Scene) -> None:
    _journal(scene, [_journal_entry(SPEC, mode="rwx", before=7)])


def journal_path_lone_surrogate(scene: Scene) -> None:
    _journal(scene, [_journal_entry("vllm/config/spec\ud800.py", before=None)])


def journal_previous_state_lone_surrogate(scene: Scene) -> None:
    state = scene.state()
    state["entries"][0]["set"] = "demo\udfff"
    _journal(scene, [], previous_state=json.dumps(state))


def journal_truncated(scene: Scene) -> None:
    _journal(scene, [_journal_entry(SPEC)])
    text = (scene.meta / "journal.json").read_text()
    (scene.meta / "journal.json").write_text(text[: len(text) // 2])


def journal_huge(scene: Scene) -> None:
    (scene.meta / "journal.json").write_text('{"id": "c0ffee", "files": [' + " " * (20 << 20) + "]}")


def state_path_outside(scene: Scene) -> None:
    state = scene.state()
    state["entries"][0]["files"][scene.outside()] = {"before": digest(SPEC_PY), "after": digest("other")}
    scene.write_json("state.json", state)


def state_absolute_path(scene: Scene) -> None:
    state = scene.state()
    state["entries"][0]["files"] = {str(scene.victim): {"before": None, "after": digest("x")}}
    scene.write_json("state.json", state)


def state_path_lone_surrogate(scene: Scene) -> None:
    state = scene.state()
    state["entries"][0]["files"]["vllm/config/spec\ud800.py"] = state["entries"][0]["files"].pop(SPEC)
    scene.write_json("state.json", state)


def state_guard_key_lone_surrogate(scene: Scene) -> None:
    state = scene.state()
    state["guard"] = {"patchkit_guard\udc80.py": digest("x")}
    scene.write_json("state.json", state)


def state_patch_name_outside(scene: Scene) -> None:
    """A recorded patch named as a path (review32 L1 s_pname): no patch file's name, damaged."""
    state = scene.state()
    state["entries"][0]["patches"][0]["name"] = scene.outside()
    scene.write_json("state.json", state)


def state_symlink(scene: Scene) -> None:
    (scene.sentinel / "state.json").write_text((scene.meta / "state.json").read_text())
    (scene.meta / "state.json").unlink()
    (scene.meta / "state.json").symlink_to(scene.sentinel / "state.json")


def state_files_a_list(scene: Scene) -> None:
    state = scene.state()
    state["entries"][0]["files"] = [SPEC]
    scene.write_json("state.json", state)


def state_bad_digest(scene: Scene) -> None:
    state = scene.state()
    state["entries"][0]["files"][SPEC]["before"] = "../../sentinel/victim.py"
    scene.write_json("state.json", state)


def state_truncated(scene: Scene) -> None:
    text = (scene.meta / "state.json").read_text()
    (scene.meta / "state.json").write_text(text[:-9])


def state_huge(scene: Scene) -> None:
    (scene.meta / "state.json").write_text('{"format": 1, "entries": [' + " " * (20 << 20) + "]}")


def objects_symlink(scene: Scene) -> None:
    store = scene.meta / "objects"
    for obj in store.iterdir():
        (scene.sentinel / "store" / obj.name).write_bytes(obj.read_bytes())
        obj.unlink()
    store.rmdir()
    store.symlink_to(scene.sentinel / "store")


def object_symlink(scene: Scene) -> None:
    obj = scene.meta / "objects" / digest(SPEC_PY)
    obj.unlink()
    obj.symlink_to(scene.victim)


def object_wrong_type(scene: Scene) -> None:
    obj = scene.meta / "objects" / digest(SPEC_PY)
    obj.unlink()
    obj.mkdir()


def object_truncated(scene: Scene) -> None:
    obj = scene.meta / "objects" / digest(SPEC_PY)
    obj.write_bytes(obj.read_bytes()[:20])


def saved_symlink(scene: Scene) -> None:
    (scene.tree / SPEC).write_text(patched_spec() + "# my edit\n")  # revert --force keeps a copy
    (scene.meta / "saved").symlink_to(scene.sentinel / "empty")


def saved_wrong_type(scene: Scene) -> None:
    (scene.tree / SPEC).write_text(patched_spec() + "# my edit\n")
    (scene.meta / "saved").write_text("not a directory\n")


def saved_copies_symlinked(scene: Scene) -> None:
    """saved/<second> names are predictable: the next minutes' names planted as symlinks."""
    from datetime import datetime, timedelta

    (scene.tree / SPEC).write_text(patched_spec() + "# my edit\n")
    saved = scene.meta / "saved"
    saved.mkdir()
    now = datetime.now()
    for second in range(300):
        name = (now + timedelta(seconds=second)).strftime("%Y%m%dT%H%M%S")
        (saved / name).symlink_to(scene.sentinel / "empty")


def lock_symlink(scene: Scene) -> None:
    (scene.meta / "lock").unlink(missing_ok=True)
    (scene.meta / "lock").symlink_to(scene.victim)  # filelock opens with O_TRUNC: it would empty the victim


def lock_wrong_type(scene: Scene) -> None:
    (scene.meta / "lock").unlink(missing_ok=True)
    (scene.meta / "lock").mkdir()


def meta_symlink(scene: Scene) -> None:
    moved = scene.sentinel / "meta"
    scene.meta.rename(moved)
    scene.meta.symlink_to(moved)


def meta_wrong_type(scene: Scene) -> None:
    import shutil

    shutil.rmtree(scene.meta)
    scene.meta.write_text("not a directory\n")


def pycache_symlink(scene: Scene) -> None:
    """vllm/config/__pycache__ -> the sentinel, holding bytecode of spec.py: the bytecode step
    rebuilds ours and removes other interpreters' (unchecked-hash pycs), here outside the tree."""
    elsewhere = scene.sentinel / "pycache"
    elsewhere.mkdir()
    ours = py_compile.compile(
        str(scene.tree / SPEC), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    Path(ours).rename(elsewhere / Path(ours).name)
    (elsewhere / "spec.cpython-39.pyc").write_bytes((elsewhere / Path(ours).name).read_bytes())
    (scene.tree / "vllm" / "config" / "__pycache__").rmdir()
    (scene.tree / "vllm" / "config" / "__pycache__").symlink_to(elsewhere)


# -- the guard's record, and trees pip changed under patchkit (issue 20) -----------------------------

GUARD_MODULE = "patchkit_guard.py"


def _guard_record(scene: Scene, guard: object) -> None:
    state = scene.state()
    state["guard"] = guard
    scene.write_json("state.json", state)


def guard_names_a_package_file(scene: Scene) -> None:
    """A package directory that leads to the sentinel, and the guard record naming a file in it
    with that file's very hash: removing "the guard" would delete it."""
    (scene.tree / "helperpkg").symlink_to(scene.sentinel)
    _guard_record(scene, {**scene.state().get("guard", {}), "helperpkg/victim.py": digest(VICTIM_TEXT)})


def guard_names_a_path_outside(scene: Scene) -> None:
    _guard_record(scene, {scene.outside(): digest(VICTIM_TEXT)})


def guard_names_a_dist_info_file(scene: Scene) -> None:
    _guard_record(
        scene, {"vllm-0.16.0.dist-info/METADATA": digest((scene.tree / "vllm-0.16.0.dist-info/METADATA").read_text())}
    )


def guard_record_a_list(scene: Scene) -> None:
    _guard_record(scene, [GUARD_MODULE])


def guard_bad_digest(scene: Scene) -> None:
    _guard_record(scene, {GUARD_MODULE: scene.outside()})


def no_guard_not_a_flag(scene: Scene) -> None:
    state = scene.state()
    state["no_guard"] = "yes"
    scene.write_json("state.json", state)


def guarded_wheel_not_a_version(scene: Scene) -> None:
    state = scene.state()
    state["wheel"] = scene.outside()
    scene.write_json("state.json", state)


def guarded_wheel_an_object(scene: Scene) -> None:
    state = scene.state()
    state["wheel"] = {"version": "0.16.0+patchkit.adhoc"}
    scene.write_json("state.json", state)


def guard_module_symlinked_out(scene: Scene) -> None:
    """The guard's module swapped for a symlink to the sentinel, recorded with the target's hash."""
    (scene.tree / GUARD_MODULE).unlink(missing_ok=True)
    (scene.tree / GUARD_MODULE).symlink_to(scene.victim)
    _guard_record(scene, {**scene.state().get("guard", {}), GUARD_MODULE: digest(VICTIM_TEXT)})


def pip_upgraded_vllm(scene: Scene) -> None:
    """`pip install vllm==0.17.0` over the tree: the new release's files and dist-info, a true RECORD."""
    pip_install(scene.tree, "0.17.0", {SPEC: SPEC_PY + "# 0.17.0\n"})


def pip_reinstalled_another_build(scene: Scene) -> None:
    """Another build of the same release (a vendor's spec.py, which its RECORD lists) installed by
    pip over the applied tree (review32 F6): pip's file, no edit."""
    pip_install(scene.tree, "0.16.0", {SPEC: "# acme build 3\n" + SPEC_PY})


def pip_installed_patched_wheel(scene: Scene) -> None:
    """A wheel `patchkit wheel` built, installed over the applied tree (no provenance: a hand-made label)."""
    pip_install(scene.tree, "0.16.0+patchkit.adhoc", {SPEC: patched_spec()})


def pip_replaced_a_guarded_patched_wheel(scene: Scene) -> None:
    """The guard installed on a patched wheel (no entry, the wheel's version recorded), then pip
    put the stock release back: the record names a wheel no longer installed."""
    state = scene.state()
    state["entries"], state["wheel"] = [], "0.16.0+patchkit.adhoc"
    scene.write_json("state.json", state)
    (scene.tree / SPEC).write_text(SPEC_PY)


def pip_uninstalled_guard(scene: Scene) -> None:
    """`pip uninstall patchkit-guard`: the files its RECORD lists; .patchkit/ still records them."""
    import shutil

    (scene.tree / GUARD_MODULE).unlink(missing_ok=True)
    for info in scene.tree.glob("patchkit_guard-*.dist-info"):
        shutil.rmtree(info)


PYCACHE_BRANCH = "fixed on the bytecode branch (issue 10 defect 4: a symlinked __pycache__)"
SAVED_BRANCH = "fixed on the revert --force branch (issue 10 defect 5: never overwrite a saved copy)"


@dataclass(frozen=True)
class Row:
    plant: Callable[[Scene], None]
    exit_code: int | None = REFUSED  # None: any clean outcome (0, 1, 2, 4)
    xfail: dict[str, str] | None = None  # command -> reason, for rows another branch fixes
    says: dict[str, str] | None = None  # command -> what its output must hold

    @property
    def name(self) -> str:
        return self.plant.__name__


ROWS = [
    Row(journal_path_lone_surrogate),
    Row(journal_previous_state_lone_surrogate),
    Row(state_path_lone_surrogate),
    Row(state_guard_key_lone_surrogate),
    Row(journal_path_outside),
    Row(journal_absolute_staged),
    Row(journal_created_dir_outside),
    Row(journal_previous_state_outside),
    Row(journal_symlink),
    Row(journal_wrong_type),
    Row(journal_entry_wrong_type),
    Row(journal_truncated),
    Row(journal_huge),
    Row(state_path_outside),
    Row(state_absolute_path),
    Row(state_patch_name_outside),
    Row(state_symlink),
    Row(state_files_a_list),
    Row(state_bad_digest),
    Row(state_truncated),
    Row(state_huge),
    Row(objects_symlink),
    Row(object_symlink, exit_code=None),  # only revert reads it: refused there, unused elsewhere
    Row(object_wrong_type, exit_code=None),
    Row(object_truncated, exit_code=None),
    Row(saved_symlink),
    Row(saved_wrong_type),
    Row(saved_copies_symlinked, exit_code=None),
    Row(lock_symlink),
    Row(lock_wrong_type, exit_code=None),  # a lock that cannot be made: writers exit 4 (test_locks), readers read
    Row(meta_symlink),
    Row(meta_wrong_type),
    Row(pycache_symlink, exit_code=None),
    Row(guard_names_a_package_file),
    Row(guard_names_a_path_outside),
    Row(guard_names_a_dist_info_file),
    Row(guard_record_a_list),
    Row(guard_bad_digest),
    Row(no_guard_not_a_flag),
    Row(guarded_wheel_not_a_version),
    Row(guarded_wheel_an_object),
    Row(guard_module_symlinked_out, exit_code=None),  # never followed: kept as a changed guard file
    Row(pip_upgraded_vllm, exit_code=None),
    Row(pip_installed_patched_wheel, exit_code=None),
    Row(pip_reinstalled_another_build, exit_code=None, says={"status": "its RECORD lists their bytes"}),
    # the tree stays patched, the launch unchecked: status says so with the fix, apply puts it back
    Row(pip_uninstalled_guard, exit_code=0, says={"status": GUARD_GONE, "verify": GUARD_GONE}),
    Row(pip_replaced_a_guarded_patched_wheel, exit_code=None),
]


def _cases():
    names = list(COMMANDS)
    for i, row in enumerate(ROWS):
        for j, command in enumerate(names):
            marks = []
            if j != i % len(names):
                marks.append(pytest.mark.slow)
            if row.xfail and command in row.xfail:
                marks.append(pytest.mark.xfail(strict=True, reason=row.xfail[command]))
            yield pytest.param(row, command, marks=marks, id=f"{row.name}-{command.replace(' --', '-')}")


def assert_clean(done, exit_code: int | None) -> None:
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "internal error" not in output, output
    if exit_code is None:
        assert done.returncode in (0, 1, 2, 4), output
    else:
        assert done.returncode == exit_code, output


@pytest.mark.parametrize("row, command", list(_cases()))
def test_hostile_record_changes_nothing_outside_the_tree(tmp_path, row: Row, command: str):
    scene = _scene(tmp_path, applied=command != "apply")
    row.plant(scene)
    before = fingerprint(scene.sentinel)
    target = ("--target", scene.tree) + (() if command == "recover" else ("--patch", scene.patch))
    done = run_cli_judged(*COMMANDS[command], *target)
    assert fingerprint(scene.sentinel) == before, done.stdout + done.stderr
    assert_clean(done, row.exit_code)
    assert (row.says or {}).get(command, "") in done.stdout + done.stderr, done.stdout + done.stderr
    if row.plant is pip_uninstalled_guard and command == "apply":  # the fix status names
        assert is_installed(scene.tree) and GUARD_GONE not in run_cli_read_only("status", *target).stdout


def run_damaged(tmp_path: Path, plant: Callable[[Scene], None], command: str):
    """`command` on an applied scene whose record `plant` damaged (preflight and run given a launch)."""
    scene = _scene(tmp_path, applied=True)
    plant(scene)
    launch = ("--", "vllm", "serve", str(tmp_path)) if command in ("preflight", "run") else ()
    launch = ("--no-import", *launch) if command == "preflight" else launch
    patch = () if command == "recover" else ("--patch", scene.patch)
    return run_cli_judged(command, "--target", scene.tree, *patch, *launch)


@pytest.mark.parametrize("plant", [state_path_lone_surrogate, journal_path_lone_surrogate], ids=lambda p: p.__name__)
@pytest.mark.parametrize("command", ["status", "verify", "apply", "revert", "recover", "preflight", "run"])
def test_a_lone_surrogate_in_a_record_is_damage_for_every_command(tmp_path, plant, command):
    """A string no file name can hold ("\\ud800") read from state.json or journal.json is refused
    as damage (exit 2) naming the file, by the launch commands too; it was exit 70."""
    done = run_damaged(tmp_path, plant, command)
    output = done.stdout + done.stderr
    assert done.returncode == REFUSED and "lone surrogate" in output and "Traceback" not in output, output


def state_nan(scene: Scene) -> None:
    state = scene.state()
    state["entries"][0]["took"] = float("nan")  # a field no command reads: the file is still no JSON
    scene.write_json("state.json", state)


def journal_infinity(scene: Scene) -> None:
    _journal(scene, [_journal_entry(SPEC, size=float("-inf"))])


@pytest.mark.parametrize("plant", [state_nan, journal_infinity], ids=lambda p: p.__name__)
@pytest.mark.parametrize("command", ["status", "verify", "apply", "revert", "recover", "preflight", "run"])
def test_nan_or_infinity_in_a_record_is_damage_for_every_command(tmp_path, plant, command):
    """json.loads takes NaN and Infinity (JSON has neither, patchkit never writes one): read back
    from state.json or journal.json they are damage (exit 2) naming the file, as other malformed JSON."""
    done = run_damaged(tmp_path, plant, command)
    output = done.stdout + done.stderr
    assert done.returncode == REFUSED and "is no JSON number" in output and "Traceback" not in output, output
    assert ("state.json" if plant is state_nan else "journal.json") in done.stderr


# -- a workspace's metadata (refresh reads it) ------------------------------------------------------

WS_META = ".patchkit-workspace.json"


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    """A workspace of a one-patch library, made in-process with the release source faked."""
    stock = write_tree(tmp_path / "stock", "0.16.0")

    def release_tree(version, paths=(), *, all_python=False, progress=None):
        return stock

    monkeypatch.setattr("patchkit.fetch.release_tree", release_tree)
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, stock, {SPEC: patched_spec()})]})
    ws = tmp_path / "ws"
    result = cli_runner()("workspace", "0.16.0", ws, "--patches", library)
    assert result.exit_code == 0, result.output
    (ws / SPEC).write_text(patched_spec() + "# an edit refresh writes back\n")
    return ws


def ws_patch_name_outside(ws: Path, sentinel: Path) -> None:
    meta = json.loads((ws / WS_META).read_text())
    meta["patches"][0]["name"] = f"../../../{sentinel.name}/{VICTIM}"
    (ws / WS_META).write_text(json.dumps(meta))


def ws_series_dir_outside(ws: Path, sentinel: Path) -> None:
    meta = json.loads((ws / WS_META).read_text())
    meta["series_dir"] = str(sentinel / "empty")
    (ws / WS_META).write_text(json.dumps(meta))


def ws_symlink(ws: Path, sentinel: Path) -> None:
    (sentinel / WS_META).write_text((ws / WS_META).read_text())
    (ws / WS_META).unlink()
    (ws / WS_META).symlink_to(sentinel / WS_META)


def ws_wrong_type(ws: Path, sentinel: Path) -> None:
    meta = json.loads((ws / WS_META).read_text())
    meta["patches"] = {"0001-change.patch": "spec"}
    (ws / WS_META).write_text(json.dumps(meta))


def ws_truncated(ws: Path, sentinel: Path) -> None:
    text = (ws / WS_META).read_text()
    (ws / WS_META).write_text(text[: len(text) // 3])


def ws_huge(ws: Path, sentinel: Path) -> None:
    (ws / WS_META).write_text("[" + " " * (20 << 20) + "]")


WORKSPACE_BRANCH = "fixed on the refresh branch (issue 14 defect 1: refresh trusts .patchkit-workspace.json)"


@pytest.mark.parametrize(
    "plant",
    [
        ws_patch_name_outside,
        ws_series_dir_outside,
        ws_symlink,
        ws_wrong_type,
        ws_truncated,
        ws_huge,
    ],
)
def test_hostile_workspace_metadata_changes_nothing_outside(tmp_path, workspace, plant):
    sentinel = tmp_path / "sentinel"
    (sentinel / "empty").mkdir(parents=True)
    (sentinel / VICTIM).write_text(VICTIM_TEXT)
    plant(workspace, sentinel)
    before = fingerprint(sentinel)
    done = run_cli("refresh", workspace)
    assert fingerprint(sentinel) == before, done.stdout + done.stderr
    assert_clean(done, None)


# -- a huge (sparse) file wherever patchkit reads one ------------------------------------------------

HUGE = 40 << 30  # sparse: no disk used; read whole it is a MemoryError (exit 70)


def _huge_at(scene: Scene, relative: str) -> Path:
    path = scene.tree / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as fh:
        fh.truncate(HUGE)
    return path


def _guard_file(scene: Scene, name: str) -> str:
    return (
        name
        if name == GUARD_MODULE
        else next(scene.tree.glob(f"patchkit_guard-*.dist-info/{name}")).relative_to(scene.tree).as_posix()
    )


@pytest.mark.parametrize(
    "where",
    [SPEC, "object", GUARD_MODULE, "RECORD", "entry_points.txt", "vllm/_version.py"],
)
@pytest.mark.parametrize("command", ["status", "verify", "apply", "revert", "revert --force", "recover"])
def test_a_huge_file_anywhere_patchkit_reads_is_refused_not_read(tmp_path, where, command):
    """A patched file, a saved original, a guard file or vLLM's _version.py of 40 GB (sparse) is
    never read whole: each command exits cleanly (a tree file or patchkit's own: 2, naming it)."""
    scene = _scene(tmp_path, applied=True)
    pip_install(scene.tree, "0.16.0", {SPEC: patched_spec()})  # a dist-info with a RECORD: the guard goes in
    assert run_cli_writing("apply", "--target", scene.tree, "--patch", scene.patch).returncode == 0
    assert (scene.tree / GUARD_MODULE).exists()
    if where == "object":
        where = f".patchkit/objects/{digest(SPEC_PY)}"
    elif where in ("RECORD", "entry_points.txt"):
        where = _guard_file(scene, where)
    _huge_at(scene, where)
    target = ("--target", scene.tree) + (() if command == "recover" else ("--patch", scene.patch))
    done = run_cli_judged(*COMMANDS[command], *target)
    assert_clean(done, None)
    if done.returncode == REFUSED:
        assert where in done.stdout + done.stderr


def test_a_long_run_of_lone_surrogates_is_quoted_bounded(tmp_path):
    """review36 L5: 200,000 lone surrogate escapes in one recorded string were quoted whole (1.2 MB
    of stderr); the damage message quotes their head and says how long the run is."""
    scene = _scene(tmp_path, applied=True)
    state = scene.state()
    state["entries"][0]["files"]["vllm/config/spec" + "\udcff" * 200_000 + ".py"] = state["entries"][0]["files"].pop(
        SPEC
    )
    scene.write_json("state.json", state)
    done = run_cli_judged("status", "--target", scene.tree, "--patch", scene.patch)
    assert done.returncode == REFUSED and "lone surrogate" in done.stderr, done.stderr[:2000]
    assert len(done.stdout + done.stderr) < 4000, len(done.stdout + done.stderr)
    assert "(\\udcff\\udcff\\udcff\\udcff... (200,000 in a row))" in done.stderr, done.stderr[:2000]
