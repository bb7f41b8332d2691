"""What an adversarial review found: untrusted input (a cache directory, an installed RECORD, a
patch library, an over-long path in a diff) never drives a write outside, never hangs, never
exhausts memory, never ends in an internal error."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    Releases,
    assert_clean_failure,
    fingerprint,
    make_patch,
    patched_spec,
    release_of,
    run_cli,
    run_cli_judged,
    run_cli_writing,
    snapshot,
    verify,
    write_library,
    write_tree,
)

from patchkit.base import usercache
from patchkit.checks import names
from patchkit.distinfo import record
from patchkit.distinfo.record import record_hash

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
HEX = "ab" * 32
LONG_AGO = time.time() - 90 * 86400


def age(path: Path) -> None:
    os.utime(path, (LONG_AGO, LONG_AGO), follow_symlinks=False)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(names, "_SEEN", {})
    monkeypatch.setattr(usercache, "_NOTED", set(), raising=False)
    return tmp_path / "cache"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A directory outside the cache holding old files with the very names patchkit's entries have."""
    root = tmp_path / "outside"
    (root / "deep").mkdir(parents=True)
    for path in (root / f"{HEX}.json", root / "deep" / f"{'cd' * 32}.json", root / "report.txt"):
        path.write_text("keep me\n")
        age(path)
    return root


@pytest.fixture
def library(tmp_path, monkeypatch) -> Path:
    releases = Releases(tmp_path / "index", monkeypatch)
    stock = releases.add("0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    patch = make_patch(tmp_path, stock, {SPEC: patched_spec()})
    return write_library(tmp_path / "lib", {"0.16.0": [patch]}, supported=">=0.16.0")


def pyflakes_key_dir(cache: Path) -> Path:
    (key,) = [p for p in (cache / "pyflakes").iterdir() if p.is_dir()]
    return key


# --------------------------------------------------------------------------- 1: symlinked cache dirs


@pytest.mark.parametrize("placement", ["verify-results", "pyflakes", "pyflakes-key"])
def test_a_symlinked_cache_directory_is_never_written_or_pruned_through(
    library, cache, outside, monkeypatch, placement
):
    assert release_of(verify(library, "0.16.0"))["outcome"] == "patched"  # fills the caches
    link = pyflakes_key_dir(cache) if placement == "pyflakes-key" else cache / placement

    shutil.rmtree(link)
    link.symlink_to(outside, target_is_directory=True)
    if placement != "verify-results":
        shutil.rmtree(cache / "verify-results")  # so that the names check runs again
    for marker in (cache / "verify-results" / ".pruned", cache / "pyflakes" / ".pruned"):
        if marker.is_file() and not marker.parent.is_symlink():
            age(marker)  # due for pruning
    before = fingerprint(outside)

    monkeypatch.setattr(names, "_SEEN", {})
    result = verify(library, "0.16.0")
    assert result.exit_code == 0, result.output
    assert release_of(result)["outcome"] == "patched"
    assert fingerprint(outside) == before
    assert "is a symlink inside patchkit's cache: the cache is not used" in result.stderr, result.stderr


def test_prune_removes_only_its_own_old_entries_and_never_follows_a_symlink(tmp_path, outside):
    directory = tmp_path / "verify-results"
    (directory / "sub").mkdir(parents=True)
    own, tmp = directory / f"{'ef' * 32}.json", directory / f".{'ef' * 32}.json.patchkit-0a1b2c3d.tmp"
    foreign = [directory / "notes.json", directory / "sub" / "keep.txt", directory / f"{'ef' * 32}.JSON"]
    for path in (own, tmp, *foreign):
        path.write_text("{}")
        age(path)
    (directory / f"{'01' * 32}.json").symlink_to(outside / f"{HEX}.json")
    (directory / "linked").symlink_to(outside, target_is_directory=True)
    (directory / ".pruned").symlink_to(outside / "report.txt")
    before = fingerprint(outside)

    assert usercache.prune(directory) == 2
    assert not own.exists() and not tmp.exists()
    assert all(path.exists() for path in foreign)
    assert fingerprint(outside) == before


def test_prune_of_a_symlinked_directory_does_nothing(tmp_path, outside):
    link = tmp_path / "pyflakes"
    link.symlink_to(outside, target_is_directory=True)
    before = fingerprint(outside)
    assert usercache.prune(link) == 0
    assert fingerprint(outside) == before


# --------------------------------------------------------------------------- 2: the installed RECORD


def record_tree(tmp_path: Path, hostile: str, outside: Path) -> Path:
    site = write_tree(tmp_path / "site", "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    record_file = site / "vllm-0.16.0.dist-info" / "RECORD"
    if hostile == "fifo":
        os.mkfifo(record_file)
    elif hostile == "zero":
        record_file.symlink_to("/dev/zero")
    elif hostile == "symlink-out":
        # a RECORD outside that vouches for this very (edited) spec.py: never evidence
        (site / SPEC).write_text(SPEC_PY + "# edited\n")
        (outside / "RECORD").write_text(f"{SPEC},{record_hash((site / SPEC).read_bytes())},1\n")
        record_file.symlink_to(outside / "RECORD")
    elif hostile == "dist-info-symlink":
        shutil.rmtree(site / "vllm-0.16.0.dist-info")
        (outside / "dist").mkdir()
        (outside / "dist" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n")
        (outside / "dist" / "RECORD").write_text(f"{SPEC},{record_hash(SPEC_PY.encode())},1\n")
        (site / "vllm-0.16.0.dist-info").symlink_to(outside / "dist", target_is_directory=True)
    else:  # too large: a sparse file over the limit
        with record_file.open("wb") as handle:
            handle.truncate(record.RECORD_LIMIT + 1)
    return site


RECORD_REFUSALS = {
    "fifo": "not a regular file",
    "zero": "not a regular file",
    "symlink-out": "not a regular file",
    "dist-info-symlink": "not a plain directory",
    "huge": "larger than",
}


@pytest.mark.parametrize("hostile", list(RECORD_REFUSALS))
@pytest.mark.parametrize("command", [("apply", "--dry-run"), ("verify", "--no-import")])
def test_a_record_that_is_not_a_regular_file_is_not_verifiable(tmp_path, outside, cache, hostile, command):
    site = record_tree(tmp_path, hostile, outside)
    patch = tmp_path / "p.patch"
    patch.write_bytes(make_patch(tmp_path, site, {SPEC: patched_spec()}))
    before = fingerprint(outside)
    args = ("--target", site, "--vllm-version", "0.16.0", "--patch", patch, "--format", "json")
    done = run_cli_judged(*command, *args, env={"PATCHKIT_CACHE_DIR": str(cache)})
    assert_clean_failure(done, 0)
    (row,) = [c for c in json.loads(done.stdout)["checks"] if c["check"] == "integrity"]
    assert row["ok"] is False and row["message"].startswith("not verifiable: "), row
    assert "vllm-0.16.0.dist-info" in row["message"] and RECORD_REFUSALS[hostile] in row["message"], row
    assert fingerprint(outside) == before


# --------------------------------------------------------------------------- 3: an untrusted library


@pytest.fixture
def own_library(tmp_path) -> Path:
    """A library the tests spoil: set `demo`, one patch for 0.16.0, and the site it applies to."""
    site = write_tree(tmp_path / "site", "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    patch = make_patch(tmp_path, site, {MODEL: MODEL_PY + "# tuned\n"})
    return write_library(tmp_path / "lib", {"0.16.0": [patch]})


def spoil_library(library: Path, outside: Path, hostile: str) -> None:
    release = library / "demo" / "0.16.0"
    patch = release / "0001-change.patch"
    if hostile == "fifo":
        patch.unlink()
        os.mkfifo(patch)
    elif hostile == "symlink":
        (outside / "0001-change.patch").write_bytes(patch.read_bytes())
        patch.unlink()
        patch.symlink_to(outside / "0001-change.patch")
    elif hostile == "series-outside":
        (outside / "a.patch").write_bytes(patch.read_bytes())
        (release / "series").write_text(f"../../../outside/a.patch sha256:{'0' * 64}\n")
    else:  # "series-absolute"
        (release / "series").write_text(f"{outside / 'a.patch'}\n")


LIBRARY_REFUSALS = {
    "fifo": "not a regular file",
    "symlink": "not a regular file (a symlink)",
    "series-outside": "contains '..'",
    "series-absolute": "is absolute",
}


@pytest.mark.parametrize("hostile", list(LIBRARY_REFUSALS))
@pytest.mark.parametrize("command", [("list",), ("apply", "--dry-run"), ("verify", "--no-import")])
def test_an_untrusted_library_is_never_followed_outside_nor_blocks(tmp_path, own_library, outside, hostile, command):
    spoil_library(own_library, outside, hostile)
    site = tmp_path / "site"
    where = () if command == ("list",) else ("--target", site, "--vllm-version", "0.16.0")
    done = run_cli_judged(*command, "--patches", own_library, *where)
    output = done.stdout + done.stderr
    if command == ("list",) and hostile in ("fifo", "symlink"):
        assert_clean_failure(done, 1)  # `list` shows a damaged patch, exit 1
        assert "damaged" in output.lower()
    else:
        assert_clean_failure(done, 2)
    assert LIBRARY_REFUSALS[hostile] in output, output
    assert (site / MODEL).read_text() == MODEL_PY


def test_the_library_s_own_series_names_are_accepted(tmp_path):
    lib = Path(__file__).resolve().parent.parent / "patches"
    done = run_cli("list", "--patches", lib)
    assert_clean_failure(done, 0)


@pytest.mark.parametrize("hostile", ["fifo", "zero"])
def test_a_patch_named_on_the_command_line_is_read_bounded(tmp_path, hostile):
    site = write_tree(tmp_path / "site", "0.16.0")
    patch = tmp_path / "p.patch"
    if hostile == "fifo":
        os.mkfifo(patch)
    else:
        patch.symlink_to("/dev/zero")
    done = run_cli_writing("apply", "--dry-run", "--target", site, "--patch", patch, "--format", "json")
    assert_clean_failure(done, 2)
    assert "not a regular file" in json.loads(done.stdout)["error"]


def test_a_symlinked_patch_named_on_the_command_line_is_still_read(tmp_path):
    site = write_tree(tmp_path / "site", "0.16.0")
    real = tmp_path / "real.patch"
    real.write_bytes(make_patch(tmp_path, site, {SPEC: patched_spec()}))
    (tmp_path / "link.patch").symlink_to(real)
    done = run_cli_writing("apply", "--dry-run", "--target", site, "--patch", tmp_path / "link.patch")
    assert_clean_failure(done, 0)


# --------------------------------------------------------------------------- 4: paths no file can have


def creating(path: str) -> bytes:
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+VALUE = 1\n".encode()


UNREACHABLE = {
    "long-name": ("vllm/" + "y" * 260 + ".py", "too long"),
    "over-path-max": ("vllm/" + "/".join(["e" * 250] * 20) + "/m.py", "too long"),
    "through-a-file": ("vllm/__init__.py/inner.py", "not a directory"),
}


@pytest.mark.parametrize("case", list(UNREACHABLE))
@pytest.mark.parametrize("command", [("apply", "--dry-run"), ("apply",), ("verify", "--no-import"), ("status",)])
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_path_no_file_can_have_is_bad_input(tmp_path, case, command, fmt):
    site = write_tree(tmp_path / "site", "0.16.0")
    path, why = UNREACHABLE[case]
    patch = tmp_path / "p.patch"
    patch.write_bytes(creating(path))
    before = snapshot(site)
    done = run_cli_judged(*command, "--target", site, "--patch", patch, "--format", fmt)
    assert_clean_failure(done, 2)
    message = json.loads(done.stdout)["error"] if fmt == "json" else done.stderr
    assert path[:40] in message and why in message, message
    assert snapshot(site) == before
