"""A record naming files deep in existing directories (a hostile state.json; review35 N14: eight files in
chains of 1,000 directories took status 156 s). A recorded path deeper than any package's file is
damaged, to the commands and to the guard, and apply never writes one; at the bound, the check of what
other users can read looks at each directory once, from its parent (one lstat), instead of resolving
the whole path again for each directory on the way. Counted, not timed: os.lstat and os.path.realpath
calls are counted. bench/bench.py's `deep-record` row measures the time."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from helpers import (
    EAGLE_MODEL,
    MODEL,
    SPEC,
    make_patch,
    patched_spec,
    record_created,
    run_cli_judged,
    snapshot,
    write_library,
)

import patchkit._target.guard as target_guard
import patchkit.engine.inspection as inspection
from patchkit.base.fsutil import MAX_RECORDED_DEPTH, first_symlink, judged_inside, moved_package
from patchkit.engine import guard
from patchkit.store import journal
from patchkit.store.state import read_state, state_path

CHAINS = 40  # recorded files, each at the end of its own chain of directories
AT_BOUND = "vllm/" + "d/" * (MAX_RECORDED_DEPTH - 2) + "deep_{}.py"  # MAX_RECORDED_DEPTH components
OVER_BOUND = "vllm/" + "d/" * (MAX_RECORDED_DEPTH - 1) + "deep.py"


def chains(tree: Path, count: int = CHAINS) -> list[str]:
    """`count` files at the depth bound, each in its own chain of directories (c0/d/d/..., c1/d/...)."""
    paths = [AT_BOUND.replace("vllm/d/", f"vllm/c{i}/", 1).format(i) for i in range(count)]
    for rel in paths:
        (tree / rel).parent.mkdir(parents=True)
        (tree / rel).write_text("x = 1\n")
    return paths


@pytest.fixture
def applied(run, tree, open_library) -> Path:
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    return tree


def counting(monkeypatch) -> dict[str, list[str]]:
    """Each os.lstat, os.stat and os.path.realpath call, by the path it was given."""
    calls: dict[str, list[str]] = {"lstat": [], "stat": [], "realpath": []}
    lstat, realpath, stat_ = os.lstat, os.path.realpath, os.stat
    monkeypatch.setattr(os, "lstat", lambda path, *a, **k: calls["lstat"].append(str(path)) or lstat(path, *a, **k))
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: calls["stat"].append(str(path)) or stat_(path, *a, **k))
    monkeypatch.setattr(
        os.path, "realpath", lambda path, *a, **k: calls["realpath"].append(str(path)) or realpath(path, *a, **k)
    )
    return calls


def test_a_record_at_the_depth_bound_is_judged_with_one_lstat_a_directory(applied, monkeypatch):
    paths = chains(applied)
    closed_file, closed_dir = paths[3], str(Path(paths[7]).parent.parent)
    os.chmod(applied / closed_file, 0o600)
    os.chmod(applied / closed_dir, 0o700)
    record_created(applied, paths, their_bytes=True)
    state = read_state(applied)
    prefixes = {"/".join(p.split("/")[:n]) for p in paths for n in range(1, len(p.split("/")) + 1)}
    calls = counting(monkeypatch)
    found = dict(guard.unreadable_by_others(applied, state))
    monkeypatch.undo()
    os.chmod(applied / closed_dir, 0o755)
    assert set(found) == {closed_file, closed_dir}, found
    assert stat.S_IMODE(found[closed_file]) == 0o600 and stat.S_IMODE(found[closed_dir]) == 0o700
    walked = calls["lstat"]
    assert len(walked) == len(set(walked)), "a path looked at twice"
    assert len(walked) <= len(prefixes) + 20, f"{len(walked)} lstat calls for {len(prefixes)} directories and files"
    assert len(calls["realpath"]) <= 2, calls["realpath"][:5]


def test_status_of_a_record_at_the_depth_bound_reads_it_and_names_the_closed_file(run, applied, open_library):
    paths = chains(applied, 4)
    os.chmod(applied / paths[1], 0o600)
    record_created(applied, paths, their_bytes=True)
    done = run("status", "--target", applied, "--patches", open_library)
    said = " ".join(done.output.split())
    assert "damaged" not in said, said
    assert paths[1] in said and "cannot read" in said, said


@pytest.mark.parametrize("command", ["status", "verify", "apply", "revert"])
def test_a_recorded_path_over_the_depth_bound_is_damaged_to_every_command(applied, open_library, command):
    (applied / OVER_BOUND).parent.mkdir(parents=True)  # the directories exist: every one would be walked
    record_created(applied, [OVER_BOUND], their_bytes=True)
    before = snapshot(applied)
    done = run_cli_judged(command, "--target", applied, "--patches", open_library)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, said
    assert "state.json is damaged" in said and "directories deep, deeper than any file of a package" in said, said
    assert "move it aside" in said and "internal error" not in said, said
    assert snapshot(applied) == before
    problems = " ".join(target_guard.find_problems(str(applied)))
    assert "directories deep, deeper than any file of a package" in problems, problems  # the guard agrees


def test_a_record_over_the_depth_bound_is_refused_before_its_directories_are_looked_at(
    run, applied, open_library, monkeypatch
):
    (applied / OVER_BOUND).parent.mkdir(parents=True)
    record_created(applied, [OVER_BOUND], their_bytes=True)
    calls = counting(monkeypatch)
    done = run("status", "--target", applied, "--patches", open_library)
    monkeypatch.undo()
    assert done.exit_code == 2 and "damaged" in done.output, done.output
    assert not any("/d/d/" in path for path in calls["lstat"] + calls["realpath"])


def test_a_journal_naming_a_path_over_the_depth_bound_is_damaged(run, applied, open_library):
    entry = {"path": OVER_BOUND, "before": None, "after": "ab" * 32}
    (applied / ".patchkit" / "journal.json").write_text(json.dumps({"id": "a1", "files": [entry]}))
    done = run_cli_judged("status", "--target", applied, "--patches", open_library)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and "journal.json is damaged" in said and "directories deep" in said, said


def test_apply_never_writes_a_record_over_the_depth_bound(run, tree, scratch):
    deep = make_patch(scratch, tree, {OVER_BOUND: "x = 1\n"})
    library = write_library(scratch / "lib", {"0.16.0": [deep]})
    stock = snapshot(tree)
    for dry in ([], ["--dry-run"]):
        done = run("apply", "--target", tree, "--patches", library, *dry)
        said = " ".join(done.output.split())
        assert done.exit_code == 2 and "directories deep, deeper than any file of a package" in said, said
    assert snapshot(tree) == stock and not (tree / ".patchkit" / "state.json").exists()


def test_a_record_at_the_depth_bound_is_one_the_guard_reads(applied):
    record_created(applied, [AT_BOUND.format(0)], their_bytes=True)
    read_state(applied)  # no error: the commands read it
    assert not any("damaged" in p or "deeper" in p for p in target_guard.find_problems(str(applied)))


def nested(tree: Path) -> list[str]:
    """A file at every level of one chain of directories down to the depth bound (each shares the
    directories of the ones above it), with a temp file a killed write left beside each."""
    paths = [f"vllm/n/{'d/' * level}f{level}.py" for level in range(MAX_RECORDED_DEPTH - 2)]
    for rel in paths:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text("")
        (tree / rel).with_name(f".{Path(rel).name}.patchkit-abc123.tmp").write_text("")
    return paths


def test_the_temp_files_beside_nested_recorded_files_are_found_looking_at_each_directory_once(tree, monkeypatch):
    paths = nested(tree)
    calls = counting(monkeypatch)
    journal.remove_leftovers(tree, set(paths))
    monkeypatch.undo()
    walked = [path for path in calls["lstat"] + calls["stat"] if "/vllm/n" in path]
    assert len(walked) == len(set(walked)) == len(paths), walked  # vllm/n, vllm/n/d, ...: each directory once
    assert not list(tree.rglob("*.tmp"))  # and each temp file removed, as before


def test_the_symlink_on_the_way_to_nested_files_is_found_looking_at_each_directory_once(tree, monkeypatch):
    paths = nested(tree)
    link = f"vllm/n/{'d/' * 10}d"
    os.rename(tree / link, tree / "vllm" / "away")
    (tree / link).symlink_to(os.path.relpath(tree / "vllm" / "away", (tree / link).parent))
    plain: set[str] = set()
    calls = counting(monkeypatch)
    found = [first_symlink(tree, rel, plain) for rel in paths]
    monkeypatch.undo()
    assert found == [None] * 11 + [(tree / link, True)] * (len(paths) - 11), found
    walked = [path for path in calls["lstat"] + calls["stat"] if "/vllm/n" in path]
    assert len(walked) <= 2 * len(paths), walked  # each real directory once, the link once a path below it


def test_status_of_several_sets_looks_for_a_symlink_on_the_way_to_each_refused_file_once(
    run, tree, scratch, monkeypatch
):
    spec = make_patch(scratch, tree, {SPEC: patched_spec()})
    model = make_patch(scratch, tree, {MODEL: EAGLE_MODEL})
    library = write_library(scratch / "lib", {"0.16.0": [spec]}, name="first")
    write_library(library, {"0.16.0": [model]}, name="second")
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    paths = chains(tree, 10)
    for rel in paths:
        (tree / rel).unlink()  # gone: the guard refuses each, and each set's fix looks for a symlink on the way
    record_created(tree, paths, their_bytes=True)
    walked, asked, inside, lstat, real = [], [0], [False], os.lstat, inspection.first_symlink

    def counted(path, *args, **kwargs):
        if inside[0]:
            walked.append(str(path))
        return lstat(path, *args, **kwargs)

    def first_symlink_counted(*args):
        asked[0], inside[0] = asked[0] + 1, True
        try:
            return real(*args)
        finally:
            inside[0] = False

    monkeypatch.setattr(os, "lstat", counted)
    monkeypatch.setattr(inspection, "first_symlink", first_symlink_counted)
    done = run("status", "--target", tree, "--patches", library)
    monkeypatch.undo()
    assert done.exit_code == 1 and "set      first" in done.output and "set      second" in done.output, done.output
    assert asked[0] >= 2 * len(paths)  # each set's fix asks it of each refused file
    directories = [path for path in walked if not path.endswith(".py")]  # the files: gone, looked for again
    assert len(directories) == len(set(directories)), [p for p in directories if directories.count(p) > 1]


# ------------------------------------------------------------------ the walk agrees with realpath's


def by_realpath(root: Path, state) -> list[tuple[str, int]]:
    """unreadable_by_others as it was judged before, resolving each prefix with os.path.realpath."""
    recorded = [p for entry in state.entries for p, shas in entry.files.items() if shas["after"] is not None]
    paths = [guard.META_DIR, state_path(root).relative_to(root).as_posix(), guard.MODULE, *state.guard, *recorded]
    found: dict[str, int] = {}
    real_root = os.path.realpath(root)
    for rel in paths:
        parts = rel.split("/")
        for depth in range(1, len(parts) + 1):
            sub, directory = "/".join(parts[:depth]), depth < len(parts)
            base = judged_inside(root, sub)
            rest = sub.partition("/")[2]
            real = os.path.join(real_root, sub) if base == root else os.path.join(os.path.realpath(base), rest)
            if os.path.realpath(root / sub) != real:
                continue
            try:
                info = os.lstat(root / sub)
            except OSError:
                continue
            mode = info.st_mode
            kind = stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode) or stat.S_ISDIR(mode)
            bits = guard._DIR_BITS if stat.S_ISDIR(mode) else guard._FILE_BITS
            if kind and mode & bits != bits:
                found.setdefault(sub, mode)
    return sorted(found.items())


def first_symlink_by_realpath(root: Path, rel: str):
    """first_symlink as it was: os.path.islink and isdir of each prefix, from the root."""
    parts = rel.split("/")
    for depth in range(1, len(parts) + 1):
        path = Path(root, *parts[:depth])
        if depth == 1 < len(parts) and moved_package(root, parts[0]):
            continue
        if os.path.islink(path):
            return path, depth < len(parts)
        if not os.path.isdir(path):
            return None
    return None


# what stands at the third directory of a recorded path vllm/k/<it>/x/f.py
SHAPES = ["inside", "outside", "dangling", "loop", "file", "closed-dir", "open"]


def shaped(tree: Path, outside: Path, shape: str, at: str) -> None:
    """Make `at` (a directory path under tree) one of SHAPES, with a closed file below where it leads
    (inside the tree, and in `outside`)."""
    where = tree / at
    where.parent.mkdir(parents=True, exist_ok=True)
    target = tree / "vllm" / "elsewhere" / at.replace("/", "_")
    (target / "x").mkdir(parents=True)
    (target / "x" / "f.py").write_text("")
    os.chmod(target / "x" / "f.py", 0o600)
    (outside / shape / "x").mkdir(parents=True)
    (outside / shape / "x" / "f.py").write_text("")
    os.chmod(outside / shape / "x" / "f.py", 0o600)
    if shape == "inside":
        where.symlink_to(os.path.relpath(target, where.parent))  # a symlinked directory mid-path
    elif shape == "outside":
        where.symlink_to(outside / shape)
    elif shape == "dangling":
        where.symlink_to("nowhere")
    elif shape == "loop":
        where.symlink_to(where.name)
    elif shape == "file":
        where.write_text("")
    else:
        (where / "x").mkdir(parents=True)
        (where / "x" / "f.py").write_text("")
        os.chmod(where / "x" / "f.py", 0o600)
        os.chmod(where / "x", 0o700 if shape == "closed-dir" else 0o755)


@pytest.mark.parametrize("moved", [False, True], ids=["vllm", "moved-vllm"])
def test_the_walk_from_each_parent_finds_what_realpath_of_each_prefix_found(applied, tmp_path, moved):
    outside = tmp_path / "outside"
    recorded = []
    for i, shape in enumerate(SHAPES):
        for depth in (1, 2, 3):  # the shape at the first, second or third directory below vllm/
            at = "vllm/" + "/".join([f"k{i}_{depth}", *["m"] * (depth - 1)])
            shaped(applied, outside / str(depth), shape, at)
            recorded += [f"{at}/x/f.py", f"{at}/x", at]
    (applied / "vllm" / "link.py").symlink_to("k6_1/x/f.py")  # a recorded file that is a symlink
    recorded += ["vllm/link.py", "vllm/elsewhere/vllm_k0_1/x/f.py"]  # a symlink; what a link leads to, named directly
    if moved:  # vllm/ on another volume, a symlink left in its place
        os.rename(applied / "vllm", tmp_path / "volume")
        (applied / "vllm").symlink_to(tmp_path / "volume")
    record_created(applied, recorded, their_bytes=True)
    state = read_state(applied)
    found = guard.unreadable_by_others(applied, state)
    assert found == by_realpath(applied, state)
    assert ("vllm/k6_1/x", os.lstat(applied / "vllm/k6_1/x").st_mode) not in found  # open: not named
    assert {"vllm/k5_2/m/x", "vllm/elsewhere/vllm_k0_1/x/f.py"} <= {rel for rel, _ in found}, found  # closed: named
    assert not any(rel.startswith("vllm/k0_") for rel, _ in found), found  # the same file through a link: not
    plain: set[str] = set()
    for rel in [*recorded, "vllm"]:
        assert first_symlink(applied, rel, plain) == first_symlink_by_realpath(applied, rel), rel
        assert first_symlink(applied, rel) == first_symlink_by_realpath(applied, rel), rel
