"""patchkit.fetch.sdist: a release's whole sdist (vLLM's own tests ship in it), from a local index."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from patchkit import fetch
from patchkit.base.errors import FetchError

from index_server import VERSION, isolate_cache, no_network, use_index  # isort: skip

SDIST = f"vllm-{VERSION}.tar.gz"


def build_sdist(test_text: bytes = b"def test_it():\n    assert True\n") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        member = tarfile.TarInfo(f"vllm-{VERSION}/tests/tool_parsers/test_x.py")
        member.size = len(test_text)
        archive.addfile(member, io.BytesIO(test_text))
    return buffer.getvalue()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    return isolate_cache(tmp_path, monkeypatch)


def test_the_sdist_is_fetched_checked_and_then_read_from_the_cache(server, cache, monkeypatch):
    data = build_sdist()
    server.publish(SDIST, data)
    use_index(monkeypatch, server.index())
    path = fetch.release_sdist(VERSION)
    assert path == cache / "sdists" / VERSION / SDIST and path.read_bytes() == data
    with tarfile.open(path) as archive:
        assert archive.getnames() == [f"vllm-{VERSION}/tests/tool_parsers/test_x.py"]
    no_network(monkeypatch)  # the second call is the cache's answer
    assert fetch.release_sdist(VERSION) == path


def test_a_damaged_cached_sdist_is_fetched_again(server, cache, monkeypatch):
    server.publish(SDIST, build_sdist())
    use_index(monkeypatch, server.index())
    path = fetch.release_sdist(VERSION)
    path.write_bytes(build_sdist(b"planted = True\n"))
    said: list[str] = []
    assert fetch.release_sdist(VERSION, warn=said.append).read_bytes() == server.files[SDIST]
    assert any("is damaged" in line for line in said)


def test_a_record_not_sealed_by_this_user_is_not_believed(server, cache, monkeypatch):
    """Whoever writes the cache could pair a planted sdist with its own sha256."""
    server.publish(SDIST, build_sdist())
    use_index(monkeypatch, server.index())
    path = fetch.release_sdist(VERSION)
    planted = build_sdist(b"planted = True\n")
    path.write_bytes(planted)
    record = path.with_name(SDIST + ".json")
    forged = json.loads(record.read_text())
    forged["sha256"] = hashlib.sha256(planted).hexdigest()
    record.write_text(json.dumps(forged))
    said: list[str] = []
    assert fetch.release_sdist(VERSION, warn=said.append).read_bytes() == server.files[SDIST]
    assert any("not written by this user's patchkit" in line for line in said)


def test_an_sdist_that_does_not_match_the_indexs_sha256_is_refused(server, cache, monkeypatch):
    server.publish(SDIST, build_sdist(), sha256="0" * 64)
    use_index(monkeypatch, server.index())
    with pytest.raises(FetchError, match="sha256"):
        fetch.release_sdist(VERSION)
    assert not list((cache / "sdists" / VERSION).glob("vllm-*"))


def test_a_release_the_index_has_no_sdist_of_is_named(server, cache, monkeypatch):
    server.publish(f"vllm-{VERSION}-py3-none-any.whl", b"not read")
    use_index(monkeypatch, server.index())
    with pytest.raises(FetchError, match=f"no {SDIST} on "):
        fetch.release_sdist(VERSION)


def test_an_unrecorded_cached_sdist_stays_until_a_new_download_passes_its_checks(server, cache, monkeypatch):
    """launch25 (wheel24's leftover): _download removed a cached sdist no record names before the
    new download was checked; a download that failed its sha256 then left nothing."""
    root = cache / "sdists" / VERSION
    root.mkdir(parents=True)
    kept = build_sdist(b"kept = True\n")
    (root / SDIST).write_bytes(kept)
    server.publish(SDIST, build_sdist(), sha256="1" * 64)
    use_index(monkeypatch, server.index())
    with pytest.raises(FetchError, match="sha256"):
        fetch.release_sdist(VERSION)
    assert (root / SDIST).read_bytes() == kept and not (root / f"{SDIST}.json").exists()
    assert not list(root.glob("*.part"))
    server.pages.clear()
    server.publish(SDIST, build_sdist())  # the index's true sha256 now
    assert fetch.release_sdist(VERSION).read_bytes() == server.files[SDIST]
    assert json.loads((root / f"{SDIST}.json").read_text())["sha256"] == hashlib.sha256(server.files[SDIST]).hexdigest()
