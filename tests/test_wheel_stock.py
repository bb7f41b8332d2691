"""patchkit.wheel.stock: the whole stock wheel of a release, chosen as pip would, downloaded into the
cache against the index's sha256 and re-checked on every reuse (a local index serves real wheels)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

import pytest
from packaging import tags

from patchkit.base.errors import BadInput, FetchError
from patchkit.base.fsutil import file_identity
from patchkit.fetch import net, pipconfig
from patchkit.wheel import stock
from patchkit.wheel.stock import stock_wheel, tag_priority, wheel_priority

from index_server import IndexServer, build_wheel, isolate_cache, no_network, use_index  # isort: skip

VERSION = "0.2.0"
# A wheel for the tag pip prefers most here, a pure-Python one, one for a platform this is not.
HERE = next(iter(tags.sys_tags()))
NATIVE = f"vllm-{VERSION}-{HERE.interpreter}-{HERE.abi}-{HERE.platform}.whl"
PURE = f"vllm-{VERSION}-py3-none-any.whl"
FOREIGN = f"vllm-{VERSION}-cp38-abi3-win_arm64.whl"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    return isolate_cache(tmp_path, monkeypatch)


@pytest.fixture
def published(server, cache, monkeypatch) -> dict[str, bytes]:
    wheels = {name: build_wheel(version=VERSION, blob_size=4096) for name in (FOREIGN, PURE, NATIVE)}
    for name, data in wheels.items():
        server.publish(name, data)
    use_index(monkeypatch, server.index())
    return wheels


def downloads(server) -> list[str]:
    return [path for _cmd, path, _range in server.log if "/files/" in path]


def test_the_wheel_pip_would_install_here_is_downloaded_and_checked(server, cache, published):
    seen: list[tuple[int, int]] = []
    path = stock_wheel(VERSION, on_bytes=lambda done, total: seen.append((done, total)))
    assert path == cache / "wheels" / VERSION / NATIVE
    assert path.read_bytes() == published[NATIVE]
    sidecar = json.loads((path.parent / f"{NATIVE}.json").read_text())
    assert sidecar["sha256"] == hashlib.sha256(published[NATIVE]).hexdigest()
    assert seen[-1] == (len(published[NATIVE]), len(published[NATIVE]))
    assert downloads(server) == [f"/range/files/{NATIVE}"]


def test_platform_chooses_among_the_index_files(server, cache, published):
    path = stock_wheel(VERSION, platform="win_arm64")
    assert path.name == FOREIGN and path.read_bytes() == published[FOREIGN]
    # pip's --platform: exactly that platform tag, else the pure-Python wheel
    assert stock_wheel(VERSION, platform="macosx_11_0_arm64").name == PURE


def test_no_wheel_for_the_platform_names_it(server, cache, monkeypatch):
    server.publish(FOREIGN, build_wheel(version=VERSION, blob_size=0))
    use_index(monkeypatch, server.index())
    with pytest.raises(FetchError, match=r"no vllm 0\.2\.0 wheel installable on this machine") as caught:
        stock_wheel(VERSION)
    assert "--platform" in (caught.value.hint or "")


def test_reuse_needs_no_network_and_is_rechecked(server, cache, published, monkeypatch):
    first = stock_wheel(VERSION)
    with monkeypatch.context() as offline:
        no_network(offline)
        assert stock_wheel(VERSION) == first
    # A byte flipped in the cache: said, removed, downloaded again.
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF
    first.write_bytes(bytes(data))
    warnings: list[str] = []
    again = stock_wheel(VERSION, warn=warnings.append)
    assert again.read_bytes() == published[NATIVE]
    assert any("damaged" in w for w in warnings)
    assert downloads(server) == [f"/range/files/{NATIVE}"] * 2


def test_a_planted_symlink_is_never_followed(server, cache, published, tmp_path):
    first = stock_wheel(VERSION)
    outside = tmp_path / "outside.whl"
    outside.write_bytes(published[NATIVE])
    first.unlink()
    first.symlink_to(outside)
    assert stock_wheel(VERSION).read_bytes() == published[NATIVE]
    assert not first.is_symlink()
    assert outside.read_bytes() == published[NATIVE]


def test_an_edited_sidecar_is_not_believed_the_index_is(server, cache, published, monkeypatch):
    first = stock_wheel(VERSION)
    sidecar = first.parent / f"{NATIVE}.json"
    record = json.loads(sidecar.read_text())
    record["sha256"] = "0" * 64
    sidecar.write_text(json.dumps(record))
    warnings: list[str] = []
    assert stock_wheel(VERSION, warn=warnings.append).read_bytes() == published[NATIVE]
    assert any("not sealed" in w for w in warnings)
    assert len(downloads(server)) == 1  # the wheel has the index's sha256: kept, its record sealed again
    with monkeypatch.context() as offline:
        no_network(offline)
        assert stock_wheel(VERSION) == first


@pytest.mark.parametrize("damage", ["truncated", "unsealed"])
def test_a_sidecar_not_believed_is_warned_about_once(server, cache, published, damage):
    # review 5 L1: the cache is read before the lock and again under it, and each reading warned
    sidecar = stock_wheel(VERSION).parent / f"{NATIVE}.json"
    record = json.loads(sidecar.read_text())
    record.pop("seal")
    sidecar.write_text(sidecar.read_text()[:40] if damage == "truncated" else json.dumps(record))
    warnings: list[str] = []
    assert stock_wheel(VERSION, warn=warnings.append).read_bytes() == published[NATIVE]
    assert len(warnings) == 1 and "checking the wheel against the index" in warnings[0], warnings


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_sidecar_that_is_no_file_costs_the_intact_wheel_nothing(server, cache, published, tmp_path, kind):
    first = stock_wheel(VERSION)
    sidecar = first.parent / f"{NATIVE}.json"
    outside = tmp_path / "outside.json"
    outside.write_bytes(sidecar.read_bytes())
    sidecar.unlink()
    {"fifo": os.mkfifo, "symlink": lambda p: p.symlink_to(outside), "directory": os.mkdir}[kind](sidecar)
    warnings: list[str] = []
    assert stock_wheel(VERSION, warn=warnings.append).read_bytes() == published[NATIVE]
    assert any("checking the wheel against the index" in w for w in warnings), warnings
    assert all(w.count(f"{NATIVE}.json") == 1 for w in warnings), warnings  # review 6 L7: named twice
    assert len(downloads(server)) == 1 and sidecar.is_file() and not sidecar.is_symlink()
    assert outside.read_bytes() != b""  # a symlink's target is never touched


@pytest.mark.parametrize("seal", [None, "0" * 64])
def test_a_wheel_swapped_in_with_a_forged_sidecar_is_replaced_by_the_index_one(server, cache, published, seal):
    """Whoever writes the cache (a CI cache restored from another run) pairs any wheel with its sha256."""
    first = stock_wheel(VERSION)
    evil = build_wheel(version=VERSION, blob_size=64)
    first.write_bytes(evil)
    sidecar = first.parent / f"{NATIVE}.json"
    record = {**json.loads(sidecar.read_text()), "sha256": hashlib.sha256(evil).hexdigest(), "seal": seal}
    sidecar.write_text(json.dumps(record))
    (first.parent / f"{NATIVE}.seal").unlink(missing_ok=True)
    assert stock_wheel(VERSION).read_bytes() == published[NATIVE]
    assert len(downloads(server)) == 2


def test_an_unsealed_sidecar_asks_the_index(server, cache, published, monkeypatch):
    first = stock_wheel(VERSION)
    sidecar = first.parent / f"{NATIVE}.json"
    sidecar.write_text(json.dumps({k: v for k, v in json.loads(sidecar.read_text()).items() if k != "seal"}))
    no_network(monkeypatch)
    with pytest.raises(AssertionError, match="network/index used"):
        stock_wheel(VERSION)


def test_a_symlinked_cache_directory_is_removed_not_followed(server, cache, published, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / VERSION).symlink_to(elsewhere)
    path = stock_wheel(VERSION)
    assert not path.parent.is_symlink() and list(elsewhere.iterdir()) == []


def test_the_index_sha256_is_enforced(server, cache, monkeypatch):
    server.publish(NATIVE, build_wheel(version=VERSION, blob_size=0), sha256="1" * 64)
    use_index(monkeypatch, server.index())
    with pytest.raises(FetchError, match="sha256"):
        stock_wheel(VERSION)
    assert sorted(os.listdir(cache / "wheels" / VERSION)) == [".lock"]


def test_priority_follows_sys_tags():
    priority = tag_priority(None)
    assert wheel_priority(NATIVE, VERSION, priority) == 0
    assert wheel_priority(PURE, VERSION, priority) > 0
    assert wheel_priority(FOREIGN, VERSION, priority) is None
    assert wheel_priority(f"vllm-{VERSION}.1-py3-none-any.whl", VERSION, priority) is None
    assert wheel_priority("not a wheel name", VERSION, priority) is None


def test_the_index_is_asked_through_pip_settings(server, cache, published, monkeypatch):
    asked = []
    real = net.pip_settings
    monkeypatch.setattr(net, "pip_settings", lambda: asked.append(1) or real())
    stock_wheel(VERSION)
    assert asked == [1]


def run_in_terminal(args: list[str], env: dict[str, str]) -> str:
    """A command's stdout and stderr as a terminal shows them (both on a pseudo-terminal)."""
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    done = subprocess.Popen([sys.executable, "-m", "patchkit", *args], stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    done.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.parametrize("terminal", [True, False])
def test_patchkit_wheel_shows_a_download_bar_in_a_terminal_only(server, cache, published, tmp_path, terminal):
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    diff = tmp_path / "0001-x.patch"  # a --patch file: no set has a series for this version, and a set's is asked first
    diff.write_text("--- /dev/null\n+++ b/vllm/x.py\n@@ -0,0 +1 @@\n+X = 1\n")
    args = ["wheel", VERSION, "--out", str(tmp_path / "out"), "--patch", str(diff)]
    if terminal:
        shown = run_in_terminal(args, env)
    else:
        done = subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True, text=True, env=env)
        shown = done.stdout + done.stderr
    size_kb = f"{len(published[NATIVE]) / 1000:.1f} kB"
    assert (f"/{size_kb}" in shown) is terminal, shown  # rich's DownloadColumn: done/total
    assert (cache / "wheels" / VERSION / NATIVE).is_file()


# --------------------------------------------------------------------------- the seal: no re-hash while unchanged


@pytest.fixture
def hashes(monkeypatch) -> list[int]:
    """Each whole-file sha256 patchkit computes (hashlib.file_digest, what every hash of a cached
    wheel goes through), counted; a seal is written for a file of any age."""
    import hashlib as hashlib_module

    from patchkit.wheel import stock

    monkeypatch.setattr(stock, "SEAL_AFTER_NS", -1, raising=False)
    counted: list[int] = []
    real = hashlib_module.file_digest

    def counting(fileobj, digest):
        counted.append(1)
        return real(fileobj, digest)

    monkeypatch.setattr(hashlib_module, "file_digest", counting)
    return counted


def test_an_unchanged_cached_wheel_is_not_hashed_again(server, cache, published, hashes, monkeypatch):
    first = stock_wheel(VERSION)
    stock_wheel(VERSION)  # hashed once, and sealed
    hashes.clear()
    with monkeypatch.context() as offline:
        no_network(offline)
        for _ in range(3):
            assert stock_wheel(VERSION) == first
    assert hashes == []
    assert downloads(server) == [f"/range/files/{NATIVE}"]


def _same_size_same_mtime(path, data: bytes) -> None:
    """`data` (of the file's size) in place of the file's bytes, its mtime set back: only the ctime
    tells."""
    before = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize("how", ["in place", "renamed over", "chmod and back"])
def test_a_sealed_wheel_that_changed_is_hashed_and_caught(server, cache, published, hashes, how, tmp_path):
    first = stock_wheel(VERSION)
    stock_wheel(VERSION)  # sealed
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF
    if how == "in place":
        _same_size_same_mtime(first, bytes(data))
    elif how == "renamed over":
        planted = first.with_name("planted")
        planted.write_bytes(bytes(data))
        os.utime(planted, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns))
        os.replace(planted, first)
    else:
        _same_size_same_mtime(first, bytes(data))
        os.chmod(first, 0o600)
        os.chmod(first, 0o644)
    warnings: list[str] = []
    assert stock_wheel(VERSION, warn=warnings.append).read_bytes() == published[NATIVE]
    assert any("damaged" in w for w in warnings)
    assert len(downloads(server)) == 2


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_seal_that_is_no_file_is_replaced_by_one(server, cache, published, hashes, kind):
    # review 6 L3: a directory at .seal stayed, and every run hashed the whole wheel again
    first = stock_wheel(VERSION)
    sealed = first.with_name(f"{NATIVE}.seal")
    sealed.unlink(missing_ok=True)
    {"directory": os.mkdir, "fifo": os.mkfifo}[kind](sealed)
    stock_wheel(VERSION)  # hashed, and sealed
    assert sealed.is_file() and not sealed.is_symlink()
    hashes.clear()
    assert stock_wheel(VERSION) == first
    assert hashes == []


@pytest.mark.parametrize("forge", ["another key", "another identity", "not json"])
def test_a_seal_patchkit_did_not_make_is_only_a_hash(server, cache, published, hashes, forge):
    from patchkit.base import seal

    first = stock_wheel(VERSION)
    stock_wheel(VERSION)
    sealed = first.with_name(f"{NATIVE}.seal")
    entry = json.loads(sealed.read_text())
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF
    _same_size_same_mtime(first, bytes(data))
    st = first.stat()
    now = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    if forge == "another key":  # what a seal made elsewhere (a restored CI cache) is
        sha = json.loads(first.with_name(f"{NATIVE}.json").read_text())["sha256"]
        message = f"stock-wheel\0{VERSION}/{NATIVE}\0".encode() + seal.canonical({"sha256": sha, "identity": now})
        entry = {"identity": now, "seal": hmac.new(b"k" * 32, message, hashlib.sha256).hexdigest()}
    elif forge == "another identity":
        entry["identity"] = now  # the tampered file's identity, the old seal
    sealed.write_text("{" if forge == "not json" else json.dumps(entry))
    hashes.clear()
    assert stock_wheel(VERSION).read_bytes() == published[NATIVE]
    assert hashes  # hashed, caught, downloaded again
    assert len(downloads(server)) == 2


@pytest.fixture
def file_hashes(monkeypatch) -> list[int]:
    """Each whole-file sha256 `wheel FILE` computes to hold a file to its release, counted."""
    from patchkit.wheel import published as holding

    counted: list[int] = []
    real = holding.file_sha256

    def counting(fd: int) -> str:
        counted.append(fd)
        return real(fd)

    monkeypatch.setattr(holding, "file_sha256", counting)
    return counted


def _held(path: Path):
    from patchkit.wheel.published import held_to_release

    fd = os.open(path, os.O_RDONLY)
    try:
        return held_to_release(VERSION, NATIVE, fd, NATIVE)
    finally:
        os.close(fd)


def test_wheel_file_of_the_sealed_cached_wheel_is_not_hashed_again(
    server, cache, published, hashes, file_hashes, monkeypatch
):
    # issue 20: `wheel FILE` of the cache's own file hashed its 0.5 GB again on every run
    first = stock_wheel(VERSION)
    stock_wheel(VERSION)  # sealed
    with monkeypatch.context() as offline:
        no_network(offline)
        assert _held(first).same
    assert file_hashes == []


@pytest.mark.parametrize("how", ["a copy", "changed in place", "changed, its seal forged"])
def test_wheel_file_of_a_file_the_seal_does_not_name_is_hashed(
    server, cache, published, hashes, file_hashes, tmp_path, how
):
    from patchkit.base import seal

    first = stock_wheel(VERSION)
    stock_wheel(VERSION)  # sealed
    target = first
    if how == "a copy":
        target = tmp_path / NATIVE
        target.write_bytes(first.read_bytes())
    else:
        data = bytearray(first.read_bytes())
        data[len(data) // 2] ^= 0xFF
        _same_size_same_mtime(first, bytes(data))
    if how == "changed, its seal forged":  # the changed file's identity, sealed with another key
        st = first.stat()
        now = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        sha = json.loads(first.with_name(f"{NATIVE}.json").read_text())["sha256"]
        message = f"stock-wheel\0{VERSION}/{NATIVE}\0".encode() + seal.canonical({"sha256": sha, "identity": now})
        entry = {"identity": now, "seal": hmac.new(b"k" * 32, message, hashlib.sha256).hexdigest()}
        first.with_name(f"{NATIVE}.seal").write_text(json.dumps(entry))
    assert _held(target).same is (how == "a copy")
    assert len(file_hashes) == 1


def test_a_cached_wheel_replaced_after_its_check_is_not_built_from(server, cache, published, tmp_path):
    from patchkit.base.errors import FetchError
    from patchkit.base.options import Options
    from patchkit.wheel.build import build_patched_wheel
    from patchkit.wheel.stock import checked_stock_wheel

    path, checked = checked_stock_wheel(VERSION)
    planted = path.with_name("planted")
    planted.write_bytes(path.read_bytes())
    os.replace(planted, path)  # the same bytes, another file: not the one checked
    with pytest.raises(FetchError, match="changed after it was checked"):
        build_patched_wheel(path, tmp_path / "out", Options(), label=None, expect_identity=checked)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("cached", [False, True], ids=["downloaded", "cached, unsealed"])
def test_a_wheel_swapped_in_as_its_record_is_written_is_not_the_checked_one(
    server, cache, published, monkeypatch, cached
):
    """The identity a download or the index's sha256 vouched for is the one held, not the path's
    identity after the record is written."""
    if cached:
        path = stock_wheel(VERSION)
        (path.parent / f"{NATIVE}.json").unlink()  # the index's sha256 decides again
    real_write = stock.write_cached

    def swap_then_write(where, data):
        wheel = where.with_name(where.name.removesuffix(".json"))
        planted = wheel.with_name("planted")
        planted.write_bytes(build_wheel({"vllm/backdoor.py": b"x = 1\n"}, version=VERSION, blob_size=4096))
        os.replace(planted, wheel)
        real_write(where, data)

    monkeypatch.setattr(stock, "write_cached", swap_then_write)
    path, checked = stock.checked_stock_wheel(VERSION)
    assert checked != file_identity(os.stat(path))


@pytest.fixture
def other_index():
    index = IndexServer()
    yield index
    index.stop()


def _two_indexes(server, other_index) -> bytes:
    """The same wheel on two indexes (a mirror)."""
    wheel = build_wheel(version=VERSION, blob_size=3000)
    server.publish(NATIVE, wheel)
    other_index.publish(NATIVE, wheel)
    return wheel


def test_a_wheel_cached_from_another_index_is_not_taken_for_the_configured_ones(
    server, other_index, cache, monkeypatch
):
    # review 5 M3: after PIP_INDEX_URL changed, the first index's wheel was used, and nothing said
    wheel = _two_indexes(server, other_index)
    use_index(monkeypatch, server.index())
    assert stock_wheel(VERSION).read_bytes() == wheel
    use_index(monkeypatch, other_index.index())
    warnings: list[str] = []
    assert stock_wheel(VERSION, warn=warnings.append).read_bytes() == wheel  # that index's page said so
    assert any(server.index() in w and other_index.index() in w for w in warnings), warnings
    with monkeypatch.context() as offline:
        no_network(offline)
        assert stock_wheel(VERSION).read_bytes() == wheel  # its index recorded: no need to ask pip
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no index to take it from: the cached one, said
    warnings.clear()
    assert stock_wheel(VERSION, warn=warnings.append).read_bytes() == wheel
    assert any("no index patchkit reads" in w and other_index.index() in w for w in warnings), warnings


def test_an_index_serving_another_file_under_a_recorded_name_is_refused(server, other_index, cache, monkeypatch):
    # review 8 M1: a mirror's file under the published name replaced the cached one, and was built
    genuine, other = build_wheel(version=VERSION, blob_size=3000), build_wheel(version=VERSION, blob_size=5000)
    server.publish(NATIVE, genuine)
    other_index.publish(NATIVE, other)
    use_index(monkeypatch, server.index())
    cached = stock_wheel(VERSION)
    use_index(monkeypatch, other_index.index())
    with pytest.raises(BadInput) as refused:
        stock_wheel(VERSION)
    said = f"{refused.value.message} {refused.value.hint}"
    assert other_index.index() in said and server.index() in said, said
    assert hashlib.sha256(other).hexdigest()[:16] in said and hashlib.sha256(genuine).hexdigest()[:16] in said
    assert f"{cached.name}.json" in said  # what to remove to take the other index's file instead
    assert cached.read_bytes() == genuine  # the cache's file is kept, not replaced by the other
    Path(f"{cached}.json").unlink()  # the hint followed: the record forgotten, the other index's file taken
    assert stock_wheel(VERSION).read_bytes() == other


def test_one_index_named_with_and_without_credentials_is_one_index(server, cache, monkeypatch):
    # review 6 L2: "came from http://***@HOST/simple/; pip is configured with http://HOST/simple/"
    first = build_wheel(version=VERSION, blob_size=3000)
    server.publish(NATIVE, first)
    use_index(monkeypatch, server.index().replace("http://", "http://alice:tok@", 1))
    assert stock_wheel(VERSION).read_bytes() == first
    use_index(monkeypatch, server.index())
    warnings: list[str] = []
    said: list[str] = []
    assert stock_wheel(VERSION, say=said.append, warn=warnings.append).read_bytes() == first
    assert warnings == []
    assert any("an index pip is configured with" in line for line in said), said


def test_an_index_changed_in_pip_conf_is_seen_and_a_change_beside_it_costs_one_question(
    server, other_index, cache, monkeypatch, tmp_path
):
    first = second = _two_indexes(server, other_index)
    conf = tmp_path / "pip.conf"
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    conf.write_text(f"[global]\nindex-url = {server.index()}\n")
    assert stock_wheel(VERSION).read_bytes() == first
    conf.write_text(f"[global]\nindex-url = {server.index()}\ntimeout = 61\n")
    pipconfig.forget_settings()  # a new command asks pip again
    said: list[str] = []
    assert stock_wheel(VERSION, say=said.append).read_bytes() == first
    assert any("an index pip is configured with" in line for line in said), said
    assert len([p for _c, p, _r in server.log if "/files/" in p]) == 1  # the same index: kept
    with monkeypatch.context() as offline:
        no_network(offline)
        assert stock_wheel(VERSION).read_bytes() == first  # recorded again: pip is not asked
    conf.write_text(f"[global]\nindex-url = {other_index.index()}\n")
    pipconfig.forget_settings()
    assert stock_wheel(VERSION).read_bytes() == second


def _held_at(path: Path):
    from patchkit.wheel.published import held_to_release

    fd = os.open(path, os.O_RDONLY)
    try:
        return held_to_release(VERSION, NATIVE, fd, NATIVE, path.absolute())
    finally:
        os.close(fd)


def test_wheel_file_outside_the_cache_is_hashed_once_while_unchanged(
    server, cache, published, hashes, file_hashes, tmp_path, monkeypatch
):
    """issue 20 (low29 item 10): `wheel FILE` of a wheel outside the cache hashed its 0.5 GB on
    every run. Its sha256 is sealed in the cache by its path and identity (device, inode, size,
    mtime, ctime): an unchanged file is not hashed again; a changed one, or an entry this user's
    patchkit did not seal (another key, a symlink, not JSON), is only a hash."""
    from patchkit.wheel import stock

    monkeypatch.setattr(stock, "SEAL_AFTER_NS", -1)  # the file was just written: sealed all the same
    copy = tmp_path / "wheels" / NATIVE
    copy.parent.mkdir()
    copy.write_bytes(stock_wheel(VERSION).read_bytes())
    assert _held_at(copy).same and len(file_hashes) == 1
    with monkeypatch.context() as offline:
        no_network(offline)
        assert _held_at(copy).same and len(file_hashes) == 1  # not hashed again
    (entry,) = (cache / stock.WHEEL_FILES).iterdir()

    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    _same_size_same_mtime(copy, bytes(data))
    assert not _held_at(copy).same and len(file_hashes) == 2  # changed in place: hashed, and caught

    copy.write_bytes(published[NATIVE])
    assert _held_at(copy).same and len(file_hashes) == 3
    sealed = json.loads(entry.read_text())
    forged = {**sealed, "seal": hmac.new(b"k" * 32, b"anything", hashlib.sha256).hexdigest()}
    for planted in (json.dumps(forged), "{"):
        entry.write_text(planted)
        assert _held_at(copy).same
    assert len(file_hashes) == 5
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps(sealed))
    entry.unlink()
    entry.symlink_to(elsewhere)
    assert _held_at(copy).same and len(file_hashes) == 6  # never read through a link
    assert _held_at(copy).same and len(file_hashes) == 6  # sealed again, as a file
    assert entry.is_file() and not entry.is_symlink()
