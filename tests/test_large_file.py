"""A one-line patch to a large file: apply's peak memory is a small multiple of the file's size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from helpers import make_patch, write_tree

from patchkit.checks import LARGEST_PARSED

# Runs the CLI as its own child and reports that child's peak RSS (bytes): the test process's own
# children (git, earlier tests) do not count.
PEAK_RSS = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"code": done.returncode, "output": done.stdout + done.stderr, "peak": peak}))
"""


def apply_peak(target, patch) -> tuple[int, str, int]:
    command = [
        sys.executable,
        "-m",
        "patchkit",
        "apply",
        "-v",
        "--target",
        str(target),
        "--patch",
        str(patch),
    ]  # -v: each check, the skipped ones too
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *command], capture_output=True, text=True, check=True)
    answer = json.loads(done.stdout)
    return answer["code"], answer["output"], answer["peak"]


def numbered_module(lines: int) -> bytes:
    return b"".join(b"value_%07d = %d  # a line of a generated table\n" % (i, i * 7) for i in range(lines))


def test_peak_memory_of_a_one_line_patch_is_a_small_multiple_of_the_file(tmp_path):
    small = write_tree(tmp_path / "small", files={"vllm/table.py": numbered_module(100)})
    large = write_tree(tmp_path / "large", files={"vllm/table.py": numbered_module(450_000)})
    size = (large / "vllm/table.py").stat().st_size
    assert size > 2 * LARGEST_PARSED  # the checks that parse skip it, and say so

    def one_line_patch(tree, name):
        lines = (tree / "vllm/table.py").read_bytes().splitlines(True)
        lines.insert(len(lines) // 2, b"EXTRA = 'one more line'\n")
        patch = tmp_path / name
        patch.write_bytes(make_patch(tmp_path, tree, {"vllm/table.py": b"".join(lines)}))
        return patch

    code, output, baseline = apply_peak(small, one_line_patch(small, "small.patch"))
    assert code == 0, output
    code, output, peak = apply_peak(large, one_line_patch(large, "large.patch"))
    assert code == 0, output
    assert b"EXTRA = 'one more line'\n" in (large / "vllm/table.py").read_bytes()
    assert "not checked" in output and "MiB" in output
    # the interpreter and patchkit's imports are the baseline; the file adds its old and new content
    # (the checks after writing take the bytes written: no third copy read back)
    assert peak - baseline < 2.5 * size, f"peak {peak / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB"


# ----------------------------------------------------------------- the after-write checks


def _apply_with_a_writer_between(tmp_path, change_written_file):
    """apply_series on a small tree, with `change_written_file(path)` run between the commit and
    the after-write checks (where another process could write)."""
    from patchkit.base.options import Options
    from patchkit.engine import operations
    from patchkit.engine.operations import apply_series
    from patchkit.engine.resolve import resolve

    source = "def width(table):\n    return len(table)\n"
    tree = write_tree(tmp_path / "site", files={"vllm/layout.py": source})
    patch = tmp_path / "wider.patch"
    patch.write_bytes(make_patch(tmp_path, tree, {"vllm/layout.py": source.replace("len(table)", "len(table) + 1")}))
    real_fix = operations.fix_bytecode
    writes = [change_written_file]  # once: a rollback's own bytecode step comes after its write

    def fix_then_write(target, paths):
        if writes:
            writes.pop()(tree / "vllm/layout.py")
        return real_fix(target, paths)

    operations.fix_bytecode = fix_then_write
    try:
        result = apply_series(resolve(Options(target_dir=str(tree), adhoc=(str(patch),))), import_probe=False)
    finally:
        operations.fix_bytecode = real_fix
    return tree, source, result


def _replace_by_a_new_file(path):
    spare = path.with_name("spare.py")
    spare.write_bytes(b"def width(table:\n    return 0\n")
    os.replace(spare, path)


def _rewrite_in_place_longer(path):
    with open(path, "r+b") as fh:
        fh.write(b"def width(table:\n    return len(table) + 1  # and a longer line\n")


def _rewrite_in_place_same_size_mtime_put_back(path):
    """What `touch -r` after an edit leaves: size and mtime as written, the content not."""
    info = path.stat()
    written = path.read_bytes()
    broken = b"def width(table:" + written[len(b"def width(table):") :] + b" "
    with open(path, "r+b") as fh:
        fh.write(broken[: len(written)])
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


@pytest.mark.parametrize(
    "change", [_replace_by_a_new_file, _rewrite_in_place_longer, _rewrite_in_place_same_size_mtime_put_back]
)
def test_the_checks_after_writing_see_a_file_changed_since_it_was_written(tmp_path, change):
    """The after-write checks take the bytes patchkit wrote only while the file there is still the
    one it wrote (device, inode, size, mtime, ctime); a file replaced or rewritten since is read
    again, even one whose size and mtime were put back."""
    from patchkit.base.enums import Outcome

    tree, source, result = _apply_with_a_writer_between(tmp_path, change)
    assert result.outcome == Outcome.CHECK_FAILED and result.written, result.error
    assert [r.check for r in result.on_disk_checks if r.failed] == ["syntax"]
    assert "verification after writing failed" in str(result.error.message)
    assert (tree / "vllm/layout.py").read_text() == source  # rolled back


def test_the_checks_after_writing_pass_on_the_file_as_written(tmp_path):
    from patchkit.base.enums import Outcome

    tree, _source, result = _apply_with_a_writer_between(tmp_path, lambda path: None)
    assert result.outcome == Outcome.APPLIED, result.error
    assert {r.check for r in result.on_disk_checks} >= {"syntax", "names"}
    assert "len(table) + 1" in (tree / "vllm/layout.py").read_text()


# ----------------------------------------------------------------- hashing beside the main thread


def test_a_large_content_is_hashed_on_a_thread_while_the_caller_goes_on(monkeypatch):
    """hash_soon and joined return at once, the digests being made on threads; sha256 waits for them,
    and the new content's digest made from its pieces is the digest of the joined bytes."""
    import hashlib
    import threading
    from types import SimpleNamespace

    from patchkit.base import hashing

    release = threading.Event()

    def held(data=b""):  # a hash that cannot finish before the test lets it
        assert release.wait(20)
        return hashlib.sha256(data)

    original = os.urandom(3 << 20)
    pieces = [memoryview(original)[: 1 << 20], b"inserted line\n", memoryview(original)[1 << 20 :]]
    monkeypatch.setattr(hashing, "hashlib", SimpleNamespace(sha256=held))
    hashing.hash_soon(original)
    new = hashing.joined(pieces)
    assert new == original[: 1 << 20] + b"inserted line\n" + original[1 << 20 :]  # made while both wait
    release.set()
    assert hashing.sha256(original) == hashlib.sha256(original).hexdigest()
    assert hashing.sha256(new) == hashlib.sha256(new).hexdigest()


# ----------------------------------------------------------------- a large file written past the page cache


def _direct_io_works(directory) -> bool:
    try:
        fd = os.open(directory / "probe", os.O_WRONLY | os.O_CREAT | getattr(os, "O_DIRECT", 0))
    except OSError:
        return False
    os.close(fd)
    return hasattr(os, "O_DIRECT")


def _recording_writes(monkeypatch, misbehave=None):
    """os.write, recording whether each write went past the page cache; `misbehave(data)` may
    replace what a direct write does."""
    import fcntl

    real = os.write
    direct: list[bool] = []

    def write(fd, data):
        is_direct = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0))
        direct.append(is_direct)
        if is_direct and misbehave is not None:
            return misbehave(fd, data, real)
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    return direct


@pytest.mark.parametrize("size", [16 << 20, (16 << 20) + 4097, (25 << 20) + 1])
def test_a_large_file_is_written_past_the_page_cache_and_whole(tmp_path, monkeypatch, size):
    from patchkit.base.fsutil import Origin
    from patchkit.engine.transaction import _write_file

    if not _direct_io_works(tmp_path):
        pytest.skip("this file system takes no O_DIRECT")
    data = os.urandom(size)
    direct = _recording_writes(monkeypatch)
    written = _write_file(tmp_path / "table.py", data, 0o640)
    assert (tmp_path / "table.py").read_bytes() == data
    assert written == Origin.of(os.stat(tmp_path / "table.py"))
    assert os.stat(tmp_path / "table.py").st_mode & 0o777 == 0o640
    assert direct.count(True) == size // (8 << 20) + bool(size % (8 << 20) >= 4096)  # 8 MiB chunks
    assert direct[-1] is (size % 4096 == 0)  # a tail shorter than a block: through the page cache


def _refuse(fd, data, real):
    import errno

    raise OSError(errno.EINVAL, "direct I/O refused")


def _half(fd, data, real):
    return real(fd, memoryview(data)[: len(data) // 2 + 1])  # short, and off the block size


@pytest.mark.parametrize("misbehave", [_refuse, _half])
def test_a_large_file_a_direct_write_fails_is_written_through_the_page_cache(tmp_path, monkeypatch, misbehave):
    from patchkit.engine.transaction import _write_file

    if not _direct_io_works(tmp_path):
        pytest.skip("this file system takes no O_DIRECT")
    data = os.urandom((20 << 20) + 3)
    direct = _recording_writes(monkeypatch, misbehave)
    _write_file(tmp_path / "table.py", data, None)
    assert (tmp_path / "table.py").read_bytes() == data
    assert direct[0] and not any(direct[1:])  # the first direct write failed: the rest buffered


def test_a_new_content_hashes_the_prefix_it_shares_with_its_original_once(monkeypatch):
    """The original's hash keeps its state every 8 MiB; the new content's hash resumes from the last
    state within the prefix the two share (up to the first hunk), and gives the same digest."""
    import hashlib

    from patchkit.base import hashing

    updated = [0]

    class Counting:  # sha256, counting the bytes it is given
        def __init__(self, hasher=None):
            self.hasher = hasher or hashlib.sha256()

        def update(self, data):
            updated[0] += len(data)
            self.hasher.update(data)

        def copy(self):
            return Counting(self.hasher.copy())

        def hexdigest(self):
            return self.hasher.hexdigest()

    monkeypatch.setattr(hashing, "hashlib", SimpleNamespace(sha256=Counting))
    original = os.urandom(30 << 20)
    hashing.hash_soon(original)
    assert hashing.sha256(original) == hashlib.sha256(original).hexdigest()
    updated[0] = 0
    head, tail = memoryview(original)[: 20 << 20], memoryview(original)[(20 << 20) + 5 :]
    new = hashing.joined([head, b"a new line\n", tail], prefix_of=original)
    assert hashing.sha256(new) == hashlib.sha256(new).hexdigest()
    assert updated[0] == len(new) - (16 << 20)  # the first 16 MiB (two steps) not hashed again


def test_without_a_thread_to_hash_on_a_large_apply_hashes_in_line(tmp_path, monkeypatch):
    """A pids limit can refuse a new thread: the digests are made on the caller's thread instead."""
    import hashlib
    import threading

    from patchkit.base import hashing

    def refused(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    monkeypatch.setattr(hashing, "_digests", {})
    original = os.urandom(2 << 20)
    hashing.hash_soon(original)
    new = hashing.joined([memoryview(original)[:100], b"x", memoryview(original)[100:]])
    assert hashing.sha256(original) == hashlib.sha256(original).hexdigest()
    assert hashing.sha256(new) == hashlib.sha256(original[:100] + b"x" + original[100:]).hexdigest()
