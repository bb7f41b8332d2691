"""The fetch cache is untrusted input (issue 14): every file patchkit reads back from
``<cache>/releases/<v>/`` (release.json, the files of tree/, the RECORD, a kept wheel) is planted in
a hostile form: a flipped byte, a truncation, a symlink out of the cache, the wrong type, a huge
file. `patchkit fetch --dest` must then serve the true files (fetched again from the local index,
with a warning), write nothing outside the cache and the destination, and print no traceback."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import assert_clean_failure, fingerprint, make_patch, run_cli, write_library, write_tree

from patchkit import fetch
from patchkit.base.signals import Interrupted
from patchkit.cli.main import cli
from patchkit.fetch import cache
from patchkit.maintainer import stock

from index_server import FILES, VERSION, WHEEL, IndexServer, build_wheel, isolate_cache, use_index  # isort: skip

SPEC = "vllm/config/speculative.py"
EAGLE = "vllm/v1/spec_decode/eagle.py"
DIST = f"vllm-{VERSION}.dist-info"


@pytest.fixture
def index(tmp_path, monkeypatch):
    isolate_cache(tmp_path, monkeypatch)
    server = IndexServer()
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    yield server
    server.stop()


@pytest.fixture
def library(tmp_path) -> Path:
    """A library whose series for VERSION touches SPEC and EAGLE: the files `fetch` asks for."""
    stock = write_tree(tmp_path / "stock", VERSION, {SPEC: FILES[SPEC], EAGLE: FILES[EAGLE]})
    patch = make_patch(tmp_path, stock, {SPEC: FILES[SPEC] + b"# patched\n", EAGLE: FILES[EAGLE] + b"# patched\n"})
    return write_library(tmp_path / "lib", {VERSION: [patch]}, supported=None, upstream=None)


@pytest.fixture
def sentinel(tmp_path) -> Path:
    """A directory outside the cache that hostile links point into: it must never change."""
    root = tmp_path / "sentinel"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hostname").write_bytes(b"sentinel-host\n")
    (root / "speculative.py").write_bytes(b"# not vLLM's\n")
    return root


def entry(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "releases" / VERSION


def fetch_dest(library: Path, dest: Path, *extra: str):
    """`patchkit fetch --dest` as a user runs it (a subprocess)."""
    return run_cli("fetch", VERSION, "--patches", library, "--dest", dest, *extra)


def fetch_dest_in_process(library: Path, dest: Path):
    """The same command in this process (the catalogue's many rows): an exception escaping the
    CLI's error handling fails the test, as a traceback would."""
    result = CliRunner().invoke(cli, ["fetch", VERSION, "--patches", str(library), "--dest", str(dest)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess([], result.exit_code, result.stdout, result.stderr)


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def replace_with(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink()
    make(path)


def mkfifo(path: Path) -> None:
    os.mkfifo(path)


def directory_with_a_file(path: Path) -> None:
    path.mkdir()
    (path / "inner.py").write_text("x = 1\n")


def edit_state(tmp_path: Path, change: Callable[[dict], object]) -> None:
    state_file = entry(tmp_path) / "release.json"
    state = json.loads(state_file.read_text())
    state = change(state) or state
    state_file.write_text(json.dumps(state))


# name -> what is done to the cache (tmp_path, sentinel) after a first, clean fetch
HOSTILE: dict[str, Callable[[Path, Path], None]] = {
    "tree file: a flipped byte": lambda t, s: flip_a_byte(entry(t) / "tree" / SPEC),
    "tree file: truncated": lambda t, s: (entry(t) / "tree" / SPEC).write_bytes(FILES[SPEC][:7]),
    "tree file: empty": lambda t, s: (entry(t) / "tree" / EAGLE).write_bytes(b""),
    "tree file: a symlink out of the cache": lambda t, s: replace_with(
        entry(t) / "tree" / SPEC, lambda p: p.symlink_to(s / "etc" / "hostname")
    ),
    "tree file: a directory": lambda t, s: replace_with(entry(t) / "tree" / SPEC, directory_with_a_file),
    "tree file: a fifo": lambda t, s: replace_with(entry(t) / "tree" / EAGLE, mkfifo),
    "tree directory: a symlink out of the cache": lambda t, s: (
        __import__("shutil").rmtree(entry(t) / "tree" / "vllm" / "config"),
        (entry(t) / "tree" / "vllm" / "config").symlink_to(s),
    ),
    "tree/ itself: a symlink out of the cache": lambda t, s: (
        __import__("shutil").rmtree(entry(t) / "tree"),
        (entry(t) / "tree").symlink_to(s),
    ),
    "RECORD: a flipped byte": lambda t, s: flip_a_byte(entry(t) / "tree" / DIST / "RECORD"),
    "RECORD: a symlink out of the cache": lambda t, s: replace_with(
        entry(t) / "tree" / DIST / "RECORD", lambda p: p.symlink_to(s / "etc" / "hostname")
    ),
    "release.json: not JSON": lambda t, s: (entry(t) / "release.json").write_text("{not json"),
    "release.json: a list": lambda t, s: (entry(t) / "release.json").write_text("[1, 2]"),
    "release.json: members a string": lambda t, s: edit_state(t, lambda st: st.update(members="vllm")),
    "release.json: a present path outside": lambda t, s: edit_state(
        t, lambda st: st["present"].append("../../../sentinel/etc/hostname")
    ),
    "release.json: another version": lambda t, s: edit_state(t, lambda st: st.update(version="0.2.0")),
    "release.json: huge": lambda t, s: (entry(t) / "release.json").write_bytes(b" " * (17 << 20) + b"{}"),
    "release.json: a symlink out of the cache": lambda t, s: replace_with(
        entry(t) / "release.json", lambda p: p.symlink_to(s / "etc" / "hostname")
    ),
    "release.json: a directory": lambda t, s: replace_with(entry(t) / "release.json", directory_with_a_file),
    "the lock: a symlink out of the cache": lambda t, s: replace_with(
        entry(t) / ".lock", lambda p: p.symlink_to(s / "etc" / "hostname")
    ),
    "release entry: a symlink out of the cache": lambda t, s: (
        __import__("shutil").rmtree(entry(t)),
        entry(t).symlink_to(s),
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_fetch_cache_is_fetched_again_and_the_true_files_served(index, library, sentinel, tmp_path, name):
    fetch.release_tree(VERSION, [SPEC, EAGLE])  # what `fetch` asks for, cached cleanly first
    HOSTILE[name](tmp_path, sentinel)
    before = fingerprint(sentinel)

    done = fetch_dest_in_process(library, tmp_path / "dest")

    assert_clean_failure(done, 0)
    assert "warning" in done.stderr, done.stderr  # said, not silent
    for rel in (SPEC, EAGLE):
        assert (tmp_path / "dest" / rel).read_bytes() == FILES[rel], rel
        assert (entry(tmp_path) / "tree" / rel).read_bytes() == FILES[rel], rel
    assert fingerprint(sentinel) == before
    warnings: list[str] = []
    fetch.release_tree(VERSION, [SPEC, EAGLE], warn=warnings.append)
    assert not warnings  # repaired: nothing to say the second time


def test_a_symlink_in_the_cache_as_a_user_meets_it(index, library, sentinel, tmp_path):
    fetch.release_tree(VERSION, [SPEC, EAGLE])
    HOSTILE["tree file: a symlink out of the cache"](tmp_path, sentinel)
    before = fingerprint(sentinel)
    done = fetch_dest(library, tmp_path / "dest")
    assert_clean_failure(done, 0)
    assert "warning:" in done.stderr and SPEC in done.stderr
    assert (tmp_path / "dest" / SPEC).read_bytes() == FILES[SPEC]
    assert fingerprint(sentinel) == before


def test_a_consistent_cache_is_not_fetched_again(index, library, tmp_path):
    assert fetch_dest(library, tmp_path / "first").returncode == 0
    index.stop()  # a cache hit needs no index: the check costs reading a few files
    done = fetch_dest(library, tmp_path / "dest")
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    assert (tmp_path / "dest" / SPEC).read_bytes() == FILES[SPEC]


def test_a_damaged_cache_without_an_index_is_a_clean_failure(index, library, sentinel, tmp_path):
    assert fetch_dest(library, tmp_path / "first").returncode == 0
    (entry(tmp_path) / "tree" / SPEC).unlink()
    (entry(tmp_path) / "tree" / SPEC).symlink_to(sentinel / "speculative.py")
    index.files.clear()  # the wheel is gone from the index
    before = fingerprint(sentinel)
    done = fetch_dest(library, tmp_path / "dest")
    assert_clean_failure(done, 4)
    assert "warning" in done.stderr
    assert not (tmp_path / "dest" / SPEC).exists()
    assert fingerprint(sentinel) == before


def test_a_planted_part_download_is_never_written_through(tmp_path, monkeypatch, sentinel):
    isolate_cache(tmp_path, monkeypatch)
    server = IndexServer()
    try:
        server.publish(WHEEL, build_wheel(), prefix="norange")
        use_index(monkeypatch, server.index("norange"))
        entry(tmp_path).mkdir(parents=True)
        (entry(tmp_path) / f"{WHEEL}.part").symlink_to(sentinel / "speculative.py")
        before = fingerprint(sentinel)
        tree = fetch.release_tree(VERSION, [SPEC])
    finally:
        server.stop()
    assert (tree / SPEC).read_bytes() == FILES[SPEC]
    assert (entry(tmp_path) / WHEEL).read_bytes() == server.files[WHEEL]
    assert fingerprint(sentinel) == before


def test_files_a_damaged_release_json_vouched_for_are_never_served(index, library, tmp_path):
    init = "vllm/__init__.py"
    fetch.release_tree(VERSION, [SPEC, EAGLE, init])  # __init__.py: cached, but not what `fetch` asks for
    (entry(tmp_path) / "tree" / init).write_bytes(b"import os; os.system('true')\n")
    (entry(tmp_path) / "release.json").write_text('{"schema": 2}')
    done = fetch_dest_in_process(library, tmp_path / "dest")
    assert_clean_failure(done, 0)
    assert not (tmp_path / "dest" / init).exists() or (tmp_path / "dest" / init).read_bytes() == FILES[init]
    assert (tmp_path / "dest" / SPEC).read_bytes() == FILES[SPEC]


def test_a_directory_at_the_part_downloads_name_is_replaced(tmp_path, monkeypatch):
    isolate_cache(tmp_path, monkeypatch)
    server = IndexServer()
    try:
        server.publish(WHEEL, build_wheel(), prefix="norange")
        use_index(monkeypatch, server.index("norange"))
        (entry(tmp_path) / f"{WHEEL}.part" / "x").mkdir(parents=True)  # a crashed tool's, a restored CI cache's
        tree = fetch.release_tree(VERSION, [SPEC])
    finally:
        server.stop()
    assert (tree / SPEC).read_bytes() == FILES[SPEC]
    assert (entry(tmp_path) / WHEEL).read_bytes() == server.files[WHEEL]
    assert not (entry(tmp_path) / f"{WHEEL}.part").exists()


# -- review 10b H2 / review 11 L1: a forged record under a stale seal -------------------------------------


def forge_under_a_stale_seal(tmp_path: Path, name: str, tail: bytes) -> bytes:
    """A cached file, its RECORD row and release.json's record_sha256 changed to agree with each
    other, the old seal kept (it no longer verifies): review 10b H2's forgery. Returns the forged bytes."""
    forged = FILES[name] + tail
    (entry(tmp_path) / "tree" / name).write_bytes(forged)
    digest = base64.urlsafe_b64encode(hashlib.sha256(forged).digest()).rstrip(b"=").decode()
    record = entry(tmp_path) / "tree" / DIST / "RECORD"
    rows = [
        f"{name},sha256={digest},{len(forged)}" if row.startswith(f"{name},") else row
        for row in record.read_text().splitlines()
    ]
    record.write_text("\n".join(rows) + "\n")
    edit_state(tmp_path, lambda st: st.update(record_sha256=hashlib.sha256(record.read_bytes()).hexdigest()))
    return forged


def test_a_forged_record_under_a_stale_seal_is_fetched_again_never_sealed_nor_laid_out(index, library, tmp_path):
    """Review 10b H2: once the index confirmed the wheel's sha256, the whole record was sealed again,
    the forged file with it, and `fetch --dest` laid it out. The index vouches for the wheel alone."""
    assert fetch_dest(library, tmp_path / "first").returncode == 0
    forged = forge_under_a_stale_seal(tmp_path, EAGLE, b"import os  # planted\n")

    done = fetch_dest(library, tmp_path / "dest")

    assert done.returncode == 0, done.stderr
    assert (tmp_path / "dest" / EAGLE).read_bytes() == FILES[EAGLE]
    assert (entry(tmp_path) / "tree" / EAGLE).read_bytes() == FILES[EAGLE]
    state = json.loads((entry(tmp_path) / "release.json").read_text())
    record = (entry(tmp_path) / "tree" / DIST / "RECORD").read_bytes()
    assert hashlib.sha256(record).hexdigest() == state["record_sha256"]
    assert hashlib.sha256(forged).hexdigest() not in str(record) and fetch.cached_record(VERSION) == record


def test_a_forged_record_under_a_stale_seal_is_refused_with_no_index_to_fetch_it_again(index, library, tmp_path):
    """Offline, an unsealed record was still laid out, held only to its own RECORD: refused now, the fix said."""
    assert fetch_dest(library, tmp_path / "first").returncode == 0
    forge_under_a_stale_seal(tmp_path, SPEC, b"# planted offline\n")
    kept = (entry(tmp_path) / "release.json").read_bytes()
    index.stop()

    done = fetch_dest(library, tmp_path / "dest")

    assert_clean_failure(done, 4)
    assert "not sealed by this user's patchkit" in done.stderr and "hint: " in done.stderr, done.stderr
    assert not (tmp_path / "dest" / SPEC).exists()
    assert (entry(tmp_path) / "release.json").read_bytes() == kept  # not sealed over, not removed


def test_every_reader_of_the_release_cache_refuses_a_forged_record(index, tmp_path):
    """Review 11 L1: workspace, refresh, port, serve_spec and maintainer stock ask release_tree without
    recheck_index, and the integrity checks read cached_record: each took a forged, unsealed record
    as stock. Online, the release is fetched again; until then its RECORD is no evidence."""
    fetch.release_tree(VERSION, [SPEC, EAGLE])
    forge_under_a_stale_seal(tmp_path, SPEC, b"# planted for a workspace\n")

    assert fetch.cached_record(VERSION) is None
    tree, contents = stock.release_contents(VERSION, [SPEC], None)  # the maintainer commands' reader
    assert contents[SPEC] == (tree / SPEC).read_bytes() == FILES[SPEC]
    assert fetch.cached_record(VERSION) == (tree / DIST / "RECORD").read_bytes()


# A reader of the cache in a process of its own: it asks for the release (a cache hit), says so, waits
# for a line, then reads the files of the tree it was given.
READ_LATER = """
import hashlib, sys
from patchkit import fetch
version, wanted = sys.argv[1], dict(a.split("=") for a in sys.argv[2:])
tree = fetch.release_tree(version, list(wanted))
print("ready", flush=True)
sys.stdin.readline()
for name, digest in wanted.items():
    assert hashlib.sha256((tree / name).read_bytes()).hexdigest() == digest, name
print("read", flush=True)
"""
REPLACE = "import sys; from patchkit import fetch; fetch.release_tree(sys.argv[1], sys.argv[2:], recheck_index=True)"


def test_a_release_replaced_by_one_process_while_another_reads_it(index, tmp_path):
    """A process whose seal key differs (another user's state directory, a test of its own) takes the
    cached release.json for an unsealed one and fetches the release again while this user's process
    reads it. Session 15's fix removed the tree and its record first: the reader's files were gone
    (FileNotFoundError, exit 70). Now each file is replaced by a rename and the tree stays."""
    fetch.release_tree(VERSION, [SPEC, EAGLE])
    sealed = json.loads((entry(tmp_path) / "release.json").read_text())["seal"]
    wanted = [f"{name}={hashlib.sha256(FILES[name]).hexdigest()}" for name in (SPEC, EAGLE)]
    reader = subprocess.Popen(
        [sys.executable, "-c", READ_LATER, VERSION, *wanted],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert reader.stdout is not None and reader.stdin is not None
    assert reader.stdout.readline() == "ready\n"
    replaced = subprocess.run(
        [sys.executable, "-c", REPLACE, VERSION, SPEC],
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "another-key")},
        capture_output=True,
        text=True,
    )
    said, _ = reader.communicate("go on\n", timeout=120)
    assert replaced.returncode == 0, replaced.stderr
    assert reader.returncode == 0 and said == "read\n", said
    assert json.loads((entry(tmp_path) / "release.json").read_text())["seal"] != sealed  # it was replaced


def test_an_interrupt_as_a_cached_file_s_directory_closes_stays_the_interrupt(tmp_path, monkeypatch):
    """New-user 22, W2: a Ctrl-C that lands just after the walk closed a directory it left must reach
    the user as the interrupt, not as EBADF from closing that directory a second time."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.py").write_bytes(b"x = 1\n")
    real_close, calls = os.close, []

    def close_then_interrupted(fd):
        real_close(fd)
        calls.append(fd)
        if len(calls) == 1:  # the signal handler runs right after the first close took effect
            raise Interrupted()

    monkeypatch.setattr(cache.os, "close", close_then_interrupted)
    with pytest.raises(Interrupted):
        cache.read_regular(tmp_path, "a/b/f.py")
    monkeypatch.undo()
    assert len(calls) == len(set(calls)), "a descriptor was closed twice"
    assert cache.read_regular(tmp_path, "a/b/f.py") == b"x = 1\n"
