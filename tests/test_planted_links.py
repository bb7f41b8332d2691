"""A record naming files reached through symlinks planted in the tree (review36 N14-b: each symlink led
into a directory 1,000 levels deep, and resolving one recorded path looked at every directory of its
expansion, again for each file: status and the guard took 0.1-0.35 s a file). A symlink on the way is
a refusal, so where it leads is never resolved: each recorded path is walked from the tree, one lstat
a directory, and the walk stops at the first symlink. Counted, not timed: the paths given to os.lstat,
os.stat, os.open and os.path.realpath are counted. bench/bench.py's `planted-links` row measures the time."""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import record_created, run_cli_in_process
from launch_fixtures import write_model

import patchkit._target.guard as target_guard
import patchkit.launch.shortcut as shortcut
import patchkit.store.state as state_module

DEEP = 200  # the levels of the directory the planted symlinks lead to (review36's was 1,000)
FILES = 30
LINK = "vllm/s"  # the planted symlink, into the deep directory; a and b inside it lead there again


def planted(tree: Path, outside: Path, files: int = FILES) -> tuple[Path, list[str]]:
    """vllm/s, a symlink to a directory DEEP levels down outside the tree, where a and b are symlinks to
    that directory again; `files` recorded paths through them (vllm/s/a/b/b/a/.../x3.py, 14 parts)."""
    deep = outside / "deep" / ("x/" * DEEP)
    deep.mkdir(parents=True)
    for name in "ab":
        (deep / name).symlink_to(deep)
    (tree / LINK).symlink_to(deep)
    rng = random.Random(1)
    paths = [f"{LINK}/{'/'.join(rng.choice('ab') for _ in range(11))}/x{i}.py" for i in range(files)]
    for rel in paths[:3]:  # a few of them there (through the links), the rest absent
        (tree / rel).write_text("x = 1\n")
    record_created(tree, paths)
    return deep, paths


@pytest.fixture
def applied(run, tree, open_library) -> Path:
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    return tree


def counting(monkeypatch, resolved: list[str] | None = None) -> list[str]:
    """The path of each os.lstat, os.stat, os.open and os.path.realpath call (relative to the directory
    it was given with, when one was); `resolved`: os.path.realpath's alone, too."""
    calls: list[str] = []
    for module, name in ((os, "lstat"), (os, "stat"), (os, "open"), (os.path, "realpath")):
        real = getattr(module, name)

        def counted(path, *args, _real=real, _name=name, **kwargs):
            said = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
            calls.append(said)
            if _name == "realpath" and resolved is not None:
                resolved.append(said)
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls


def through(calls: list[str], tree: Path, deep: Path) -> list[str]:
    """The calls that name a path through the planted symlink, or inside where it leads."""
    beyond = (f"{LINK}/", f"{tree}/{LINK}/", str(deep.parent.parent))
    return [path for path in calls if path.startswith(beyond) or str(deep.parent.parent) in path]


def test_the_guard_refuses_files_through_a_planted_symlink_without_looking_where_it_leads(
    applied, tmp_path, monkeypatch
):
    deep, paths = planted(applied, tmp_path / "outside")
    calls = counting(monkeypatch)
    problems = target_guard.find_problems(str(applied))
    monkeypatch.undo()
    for rel in paths:
        assert f"{rel} is a symlink, or under one: not the file patchkit wrote" in problems, problems[:3]
    assert through(calls, applied, deep) == [], through(calls, applied, deep)[:5]
    assert len([path for path in calls if path.endswith(LINK)]) <= 1, "the symlink looked at again"


def test_status_names_the_planted_symlink_without_looking_where_it_leads(applied, open_library, tmp_path, monkeypatch):
    """The commands' own reads of a recorded file open it by its path (the kernel follows the symlinks on
    the way, a bounded walk of its own): a few a file, never a resolving of each directory of it."""
    deep, _ = planted(applied, tmp_path / "outside")
    resolved: list[str] = []
    calls = counting(monkeypatch, resolved)
    done = run_cli_in_process("status", "--target", applied, "--patches", open_library)
    monkeypatch.undo()
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1, said
    assert f"replace the symlink {applied / LINK} with a real directory holding a copy of what it points to" in said
    assert through(resolved, applied, deep) == [], through(resolved, applied, deep)[:5]
    assert len(through(calls, applied, deep)) <= 5 * FILES, len(through(calls, applied, deep))


def test_the_guard_reaches_each_recorded_file_once_and_resolves_none(applied, monkeypatch):
    """review36 N14-b: each recorded file was resolved two or three times (os.path.realpath, each a
    look at every directory on its way); one open of it, from its directory, is enough."""
    recorded = sorted(json.loads((applied / ".patchkit/state.json").read_text())["entries"][0]["files"])
    calls = counting(monkeypatch)
    assert target_guard.find_problems(str(applied)) == []
    monkeypatch.undo()
    for rel in recorded:
        named = [path for path in calls if path == rel or path.endswith("/" + rel)]
        assert len(named) <= 2, (rel, named)  # its lstat on the way (the record's walk), its open
    assert not [path for path in calls if path.startswith("vllm/") and calls.count(path) > 2], calls
    resolved = [path for path in calls if "/vllm/" in path or path.startswith("vllm/")]
    assert all(calls.count(path) <= 2 for path in resolved), resolved


def test_a_moved_vllm_holding_a_planted_symlink_is_walked_from_the_directory_it_names(applied, tmp_path, monkeypatch):
    """vllm/ moved to another volume, a symlink in its place (judged from the directory it names), with
    the planted symlink under it: the same refusal, and nothing through the planted one looked at."""
    deep, paths = planted(applied, tmp_path / "outside")
    os.rename(applied / "vllm", tmp_path / "volume")
    (applied / "vllm").symlink_to(tmp_path / "volume")
    calls = counting(monkeypatch)
    problems = target_guard.find_problems(str(applied))
    monkeypatch.undo()
    assert all(f"{rel} is a symlink, or under one: not the file patchkit wrote" in problems for rel in paths)
    assert [path for path in calls if path.startswith("s/") or str(deep.parent.parent) in path] == []
    assert through(calls, applied, deep) == [], through(calls, applied, deep)[:5]


def test_a_recorded_file_a_symlink_names_it_and_hashes_nothing_where_it_leads(applied, tmp_path):
    """The recorded file itself a symlink out of the tree (review30 L2): the file there, not the record,
    is refused; what it points to is never read."""
    secret = tmp_path / "secret.py"
    secret.write_text("outside\n")
    recorded = sorted(json.loads((applied / ".patchkit/state.json").read_text())["entries"][0]["files"])
    rel = recorded[0]
    (applied / rel).unlink()
    (applied / rel).symlink_to(secret)
    state = json.loads((applied / ".patchkit/state.json").read_text())
    state["entries"][0]["files"][rel]["after"] = hashlib.sha256(b"outside\n").hexdigest()
    (applied / ".patchkit/state.json").write_text(json.dumps(state))
    problems = target_guard.find_problems(str(applied))
    assert f"{rel} is a symlink, or under one: not the file patchkit wrote" in problems, problems


# ------------------------------------------------------------------ review36 N14-c: hard links, sparse files

LINKS = 20
SIZE = 2 * 1024 * 1024


def hard_links(tree: Path, count: int = LINKS, size: int = SIZE) -> list[str]:
    """`count` recorded files, each a hard link to one file of `size` random bytes (recorded with
    another hash: changed after apply, as review36's were)."""
    paths = [f"vllm/zz/b{i}.py" for i in range(count)]
    (tree / "vllm/zz").mkdir()
    (tree / paths[0]).write_bytes(random.Random(2).randbytes(size))
    for rel in paths[1:]:
        os.link(tree / paths[0], tree / rel)
    record_created(tree, paths)
    return paths


def distinct(tree: Path, count: int, size: int) -> list[str]:
    """`count` recorded files of `size` bytes each, no two alike (sparse ones cost no disk as well)."""
    paths = [f"vllm/zz/s{i}.py" for i in range(count)]
    (tree / "vllm/zz").mkdir()
    for i, rel in enumerate(paths):
        (tree / rel).write_bytes(i.to_bytes(4, "little") * (size // 4))
    record_created(tree, paths)
    return paths


def hashed_by_the_guard(monkeypatch) -> list[int]:
    """The size of each content the guard hashes."""
    sizes: list[int] = []
    real = target_guard.hashlib.sha256

    class Counting:  # one hash: the bytes given at its start and in pieces after
        def __init__(self, data: bytes) -> None:
            self.inner, self.index = real(data), len(sizes)
            sizes.append(len(data))

        def update(self, piece: bytes) -> None:
            sizes[self.index] += len(piece)
            self.inner.update(piece)

        def hexdigest(self) -> str:
            return self.inner.hexdigest()

        def digest(self) -> bytes:
            return self.inner.digest()

    class Counted:
        @staticmethod
        def sha256(data=b""):
            return Counting(data)

    monkeypatch.setattr(target_guard, "hashlib", Counted)
    return sizes


def read_by_the_commands(monkeypatch) -> list[int]:
    """The size of each os.read's bytes (the commands read the tree's files so)."""
    sizes: list[int] = []
    real = os.read

    def counted(fd, n):
        data = real(fd, n)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counted)
    return sizes


def test_the_guard_hashes_a_file_hard_linked_to_many_recorded_paths_once(applied, monkeypatch):
    paths = hard_links(applied)
    sizes = hashed_by_the_guard(monkeypatch)
    problems = target_guard.find_problems(str(applied))
    monkeypatch.undo()
    assert all(f"{rel} was changed after patchkit patched it" in problems for rel in paths), problems[:3]
    assert sizes.count(SIZE) == 1 and sum(sizes) < SIZE + 1024 * 1024, (sizes.count(SIZE), sum(sizes))


def test_the_guard_hashes_at_most_its_budget_and_refuses_past_it(applied, monkeypatch):
    distinct(applied, 10, 200 * 1024)  # 2 MB together, over a budget of 1 MiB
    monkeypatch.setattr(target_guard, "MAX_JUDGED_BYTES", 1024 * 1024)
    sizes = hashed_by_the_guard(monkeypatch)
    problems = target_guard.find_problems(str(applied))
    monkeypatch.undo()
    assert problems == [target_guard.TOO_LARGE_TOGETHER], problems
    assert sum(sizes) <= 1024 * 1024, sum(sizes)


def test_status_reads_a_file_hard_linked_to_many_recorded_paths_a_few_times(applied, open_library, monkeypatch):
    paths = hard_links(applied)
    sizes = read_by_the_commands(monkeypatch)
    done = run_cli_in_process("status", "--target", applied, "--patches", open_library)
    monkeypatch.undo()
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and f"{len(paths)} files drifted" in said, said
    assert sum(sizes) < 3 * SIZE, f"{sum(sizes):,} bytes read for {LINKS} links to one file of {SIZE:,}"


def test_a_record_naming_more_bytes_than_the_budget_is_damaged_and_the_fix_clears_it(
    run, applied, open_library, monkeypatch
):
    distinct(applied, 10, 200 * 1024)
    monkeypatch.setattr(state_module, "MAX_HASHED_BYTES", 1024 * 1024)
    sizes = read_by_the_commands(monkeypatch)
    done = run_cli_in_process("status", "--target", applied, "--patches", open_library)
    monkeypatch.undo()
    said = " ".join(done.stderr.split())
    state = applied / ".patchkit/state.json"
    assert done.returncode == 2, said
    assert f"{state} is damaged (the files it names hold over 1 MiB together); patchkit wrote nothing" in said
    assert f"move it aside (mv {state} {state}.damaged); then `patchkit revert" in said, said
    assert sum(sizes) < 2 * 1024 * 1024, sum(sizes)
    state.rename(f"{state}.damaged")
    assert run("revert", "--target", applied, "--patches", open_library).exit_code == 0
    assert run("status", "--target", applied, "--patches", open_library).exit_code in (0, 3)
    assert target_guard.find_problems(str(applied)) == []


def test_runs_check_of_the_record_neither_resolves_a_planted_path_nor_hashes_a_link_twice(
    applied, tmp_path, monkeypatch
):
    """run's shortcut (launch.shortcut.as_written: every recorded file as written?) resolved each
    recorded file's directory (Path.resolve) and hashed each path's bytes: the same two costs."""
    paths = hard_links(applied)
    data = (applied / paths[0]).read_bytes()
    state_file = applied / ".patchkit/state.json"
    record = json.loads(state_file.read_text())
    for rel in paths:  # as written: the record names the bytes there
        record["entries"][0]["files"][rel]["after"] = hashlib.sha256(data).hexdigest()
    state_file.write_text(json.dumps(record))
    sizes = read_by_the_commands(monkeypatch)
    assert shortcut.as_written(applied, state_module.read_state(applied)) is True
    monkeypatch.undo()
    assert sum(sizes) < 2 * SIZE, f"{sum(sizes):,} bytes read for {LINKS} links to one file of {SIZE:,}"
    deep, _ = planted(applied, tmp_path / "outside")
    resolved: list[str] = []
    counting(monkeypatch, resolved)
    assert shortcut.as_written(applied, state_module.read_state(applied)) is False
    monkeypatch.undo()
    assert through(resolved, applied, deep) == [], through(resolved, applied, deep)[:5]


# ------------------------------------------------------------------ review37: the commands' half of N14-b


def test_status_and_preflight_open_no_recorded_path_through_a_planted_symlink(
    applied, open_library, tmp_path, monkeypatch
):
    """review37 (N14-b, status half): the drift check opened each recorded file by its path, twice, and
    each open made the kernel expand the planted symlinks (~12 ms a file). Each recorded path is walked
    from the tree (one lstat a directory, each once a command) and one through a symlink is never opened:
    the guard's refusal says it, with the repair."""
    deep, paths = planted(applied, tmp_path / "outside")
    model = write_model(tmp_path / "model", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    calls = counting(monkeypatch)
    done = run_cli_in_process("status", "--target", applied, "--patches", open_library)
    launch = ["--no-import", "--", "vllm", "serve", str(model)]
    checked = run_cli_in_process("preflight", "--target", applied, "--patches", open_library, *launch)
    monkeypatch.undo()
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1, said
    assert f"replace the symlink {applied / LINK} with a real directory holding a copy of what it points to" in said
    assert "drifted" not in said and "revert --force" not in said, said  # revert refuses to write through it
    assert checked.returncode == 1 and str(applied / LINK) in " ".join(checked.stdout.split()), checked.stdout
    assert through(calls, applied, deep) == [], through(calls, applied, deep)[:5]
    assert len([path for path in calls if path.endswith(LINK)]) < FILES / 2, "the symlink looked at for each file"
    assert all(
        rel in json.loads((applied / ".patchkit/state.json").read_text())["entries"][0]["files"] for rel in paths
    )


def test_runs_check_of_the_record_opens_nothing_through_a_planted_symlink(applied, tmp_path, monkeypatch):
    deep, _ = planted(applied, tmp_path / "outside")
    calls = counting(monkeypatch)
    assert shortcut.as_written(applied, state_module.read_state(applied)) is False
    monkeypatch.undo()
    assert through(calls, applied, deep) == [], through(calls, applied, deep)[:5]


def test_without_a_guard_a_recorded_file_under_a_symlink_is_said_with_the_repair(run, applied, open_library, tmp_path):
    """No guard refuses it (uninstalled): status says the file itself, with the hand repair (revert
    --force refuses to write through the symlink); once made, status passes."""
    extra = applied / "vllm/extra"
    (tmp_path / "extra_real").mkdir()
    (tmp_path / "extra_real/x.py").write_text("x = 1\n")
    extra.symlink_to(tmp_path / "extra_real", target_is_directory=True)
    record_created(applied, ["vllm/extra/x.py"], their_bytes=True)
    state = json.loads((applied / ".patchkit/state.json").read_text())
    state["guard"] = {}
    (applied / ".patchkit/state.json").write_text(json.dumps(state))
    for guard in [*applied.glob("patchkit_guard*")]:
        shutil.rmtree(guard) if guard.is_dir() else guard.unlink()
    done = run_cli_in_process("status", "--target", applied, "--patches", open_library)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1, said
    assert "vllm/extra/x.py: drifted: is a symlink, or under one: not the file patchkit wrote" in said, said
    assert f"fix: replace the symlink {extra} with a real directory holding a copy of what it points to" in said
    assert "revert --force" not in said, said
    extra.unlink()
    shutil.copytree(tmp_path / "extra_real", extra)
    assert run("status", "--target", applied, "--patches", open_library).exit_code == 0


def test_status_reads_each_recorded_file_once_for_the_record(applied, open_library, monkeypatch):
    """The drift check and the check of what the series makes of each file (vouched) read each recorded
    file once between them (they read it twice, and hashed it twice); the plan and the guard read it
    once each: about twice its size in all, was four times."""
    recorded = json.loads((applied / ".patchkit/state.json").read_text())["entries"][0]["files"]
    read: dict[str, int] = dict.fromkeys(recorded, 0)
    opened: dict[int, str] = {}
    real_open, real_read, real_close = os.open, os.read, os.close

    def counted_open(path, *args, **kwargs):
        fd = real_open(path, *args, **kwargs)
        said = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
        rel = said.removeprefix(f"{applied}/")
        if rel in read:
            opened[fd] = rel
        return fd

    def counted_read(fd, n):
        data = real_read(fd, n)
        if fd in opened:
            read[opened[fd]] += len(data)
        return data

    def counted_close(fd):
        opened.pop(fd, None)
        return real_close(fd)

    for name, counted in (("open", counted_open), ("read", counted_read), ("close", counted_close)):
        monkeypatch.setattr(os, name, counted)
    done = run_cli_in_process("status", "--target", applied, "--patches", open_library)
    monkeypatch.undo()
    assert done.returncode == 0, done.stdout + done.stderr
    sizes = {rel: (applied / rel).stat().st_size for rel in recorded}
    assert all(read[rel] < 3 * sizes[rel] for rel in recorded), {rel: read[rel] / sizes[rel] for rel in recorded}


def test_without_a_guard_status_looks_nowhere_through_a_planted_symlink(applied, open_library, tmp_path, monkeypatch):
    """No guard installed: status judged each recorded file's bytecode itself (unguarded_stale), listing
    its __pycache__ through the planted symlinks; the files under it are said with the repair instead."""
    deep, paths = planted(applied, tmp_path / "outside")
    for guard in [*applied.glob("patchkit_guard*")]:
        shutil.rmtree(guard) if guard.is_dir() else guard.unlink()
    calls = counting(monkeypatch)
    done = run_cli_in_process("status", "--target", applied, "--patches", open_library)
    monkeypatch.undo()
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1, said
    assert f"drifted: is a symlink, or under one: not the file patchkit wrote ({len(paths)} files:" in said, said
    assert f"fix: replace the symlink {applied / LINK} with a real directory" in said, said
    assert through(calls, applied, deep) == [], through(calls, applied, deep)[:5]


# ------------------------------------------------------------------ review37 follow-up: the guard's bytecode walk

MANY = 200


def kept_in_one_directory(tree: Path, outside: Path) -> list[str]:
    """MANY recorded files in vllm/zz, hard links to one small file recorded with its bytes (the guard
    keeps them: their bytecode and what shadows them are judged), vllm/zz/__pycache__ a planted symlink."""
    paths = [f"vllm/zz/x{i}.py" for i in range(MANY)]
    (tree / "vllm/zz").mkdir()
    (tree / paths[0]).write_text("X = 1\n")
    for rel in paths[1:]:
        os.link(tree / paths[0], tree / rel)
    outside.mkdir()
    (tree / "vllm/zz/__pycache__").symlink_to(outside)
    record_created(tree, paths, their_bytes=True)
    return paths


def listing(monkeypatch) -> list[str]:
    """The path of each os.scandir call."""
    listed: list[str] = []
    real = os.scandir

    def counted(path=".", *args, **kwargs):
        listed.append(os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", counted)
    return listed


def test_the_guard_refuses_a_planted_pycache_symlink_without_listing_it(applied, open_library, tmp_path, monkeypatch):
    """A planted __pycache__ symlink (into a directory 1,000 levels deep, through more links) was listed
    through, and so expanded, for each recorded file of its directory: 1,000 files, 34 s of every launch;
    then once a judging, each .pyc in it still opened through it. Python never makes __pycache__ a
    symlink: the guard refuses it, one lstat, neither listed nor opened; status names its removal."""
    kept_in_one_directory(applied, tmp_path / "outside")
    listed = listing(monkeypatch)
    calls = counting(monkeypatch)
    problems = target_guard.find_problems(str(applied))
    monkeypatch.undo()
    cache = str(applied / "vllm/zz/__pycache__")
    assert listed.count(cache) == 0 and [path for path in calls if path.startswith(cache + "/")] == []
    assert problems == [
        "vllm/zz/__pycache__ is a symlink, which Python never writes there: the guard does not follow it"
    ]
    done = run_cli_in_process("status", "--target", applied, "--patches", open_library)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and f"run `rm -f -- {cache}` (Python then compiles the source)" in said, said
    os.unlink(cache)
    assert target_guard.find_problems(str(applied)) == []


def test_the_guard_follows_no_symlinked_pyc_of_a_recorded_file_and_status_names_their_removal(
    applied, open_library, tmp_path, monkeypatch
):
    """gate29 (status28's "left"): a .pyc of each recorded file planted as a symlink into a deep chain
    was opened through it, two or three expansions each (~10 ms a file: 10,000 files ~100 s of every
    launch). Python never writes a symlinked .pyc: the guard refuses them, from the listing's file
    types (nothing followed, one line however many), with and without the guard installed (status
    judges a tree without one the same: no exit 70), and status names one command that removes all."""
    paths = kept_in_one_directory(applied, tmp_path / "outside")
    os.unlink(applied / "vllm/zz/__pycache__")
    (applied / "vllm/zz/__pycache__").mkdir()
    deep = tmp_path / "elsewhere" / ("x/" * DEEP)
    deep.mkdir(parents=True)
    for name in "ab":
        (deep / name).symlink_to(deep)
    tag = sys.implementation.cache_tag
    (deep / f"real.{tag}.pyc").write_bytes(b"\0" * 16)
    for i in range(len(paths)):
        (applied / f"vllm/zz/__pycache__/x{i}.{tag}.pyc").symlink_to(deep / "a/b/a/b/a" / f"real.{tag}.pyc")
    calls = counting(monkeypatch)
    problems = target_guard.find_problems(str(applied))
    monkeypatch.undo()
    first = f"vllm/zz/__pycache__/x0.{tag}.pyc"
    assert [path for path in calls if "elsewhere" in path or f".{tag}.pyc" in path] == []
    assert problems == [
        f"{first} is a symlink, which Python never writes there: the guard does not follow it ({MANY - 1} more of "
        "the recorded files' bytecode are symlinks too)"
    ], problems
    fix = f"run `find {applied} -type l \\( -name __pycache__ -o -name '*.pyc' \\) -delete` (Python then compiles the sources)"
    for guarded in (True, False):
        if not guarded:  # uninstalled: status judges the bytecode itself (engine.guard.unguarded_stale)
            state = json.loads((applied / ".patchkit/state.json").read_text())
            state["guard"], state["no_guard"] = {}, True
            (applied / ".patchkit/state.json").write_text(json.dumps(state))
            for guard in [*applied.glob("patchkit_guard*")]:
                shutil.rmtree(guard) if guard.is_dir() else guard.unlink()
        done = run_cli_in_process("status", "--target", applied, "--patches", open_library)
        said = " ".join((done.stdout + done.stderr).split())
        assert done.returncode == 1 and f"{first} is a symlink, which Python never" in said and fix in said, (
            guarded,
            said,
        )
    subprocess.run(
        ["find", str(applied), "-type", "l", "(", "-name", "__pycache__", "-o", "-name", "*.pyc", ")", "-delete"],
        check=True,
    )
    assert run_cli_in_process("status", "--target", applied, "--patches", open_library).returncode == 0


def test_the_guard_looks_up_what_shadows_each_recorded_file_by_its_name(applied, tmp_path, monkeypatch):
    """What may shadow a recorded file (a package or an extension module of its name) was found by testing
    every name of its directory for each recorded file there: names x files (10,000 files: 10^8 tests)."""
    kept_in_one_directory(applied, tmp_path / "outside")
    os.unlink(applied / "vllm/zz/__pycache__")  # refused (the test above): not what this one judges
    split: list[str] = []
    real = target_guard._split

    def counted(name: str, stem: str):
        split.append(name)
        return real(name, stem)

    monkeypatch.setattr(target_guard, "_split", counted)
    assert target_guard.find_problems(str(applied)) == []
    monkeypatch.undo()
    assert len(split) < 3 * MANY, len(split)
    (applied / f"vllm/zz/x7{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    assert any(problem.startswith("vllm/zz/x7.") for problem in target_guard.find_problems(str(applied)))
