"""Index credentials (PIP_INDEX_URL=http://user:token@host/simple/) never reach the fetch cache,
which CI saves and restores for other runs (docs/ci.md); a later fetch takes them from pip's
settings again."""

from __future__ import annotations

import base64
import json

import pytest
from packaging import tags

from patchkit import fetch
from patchkit.fetch import net
from patchkit.fetch.cache import without_userinfo
from patchkit.wheel.stock import stock_wheel

from index_server import VERSION, WHEEL, build_wheel, isolate_cache, state_of, use_index  # isort: skip

SECRET = "s3cr3t-token-of-the-test"
HERE = next(iter(tags.sys_tags()))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    return isolate_cache(tmp_path, monkeypatch)


def _with_credentials(server, monkeypatch, filename: str, version: str = VERSION) -> str:
    """Serve `filename` on a page whose link is relative (so its URL carries the index's
    user:password@, as pip's would), and point pip at the index with credentials."""
    server.publish(filename, build_wheel(version=version))
    page = server.pages[("range", "vllm")]
    server.pages[("range", "vllm")] = page.replace(f"{server.url}/", "../../../")
    index = server.index().replace("://", f"://alice:{SECRET}@", 1)
    use_index(monkeypatch, index)
    return index


def _files_holding_the_secret(cache) -> list[str]:
    return [str(p) for p in cache.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_the_release_entry_keeps_no_credentials_and_a_later_fetch_sends_them(server, cache, monkeypatch):
    _with_credentials(server, monkeypatch, WHEEL)
    fetch.release_tree(VERSION, ["vllm/config/speculative.py"])
    assert _files_holding_the_secret(cache) == []
    assert state_of(cache)["url"] == f"{server.url}/range/files/{WHEEL}"

    # a file not fetched yet: read from the remembered URL, with the credentials of pip's index
    seen = len(server.log)
    fetch.release_tree(VERSION, ["vllm/v1/spec_decode/eagle.py"])
    reads = [
        auth for (_cmd, path, _rng), auth in zip(server.log, server.authorizations, strict=True) if "/files/" in path
    ]
    assert len(server.log) > seen and reads[-1] == _basic("alice", SECRET)
    assert _files_holding_the_secret(cache) == []


def test_the_stock_wheels_record_keeps_no_credentials(server, cache, monkeypatch):
    version = "0.2.0"
    native = f"vllm-{version}-{HERE.interpreter}-{HERE.abi}-{HERE.platform}.whl"
    _with_credentials(server, monkeypatch, native, version)
    path = stock_wheel(version)
    sidecar = json.loads((path.parent / f"{native}.json").read_text())
    assert sidecar["url"] == f"{server.url}/range/files/{native}"
    assert server.authorizations[-1] == _basic("alice", SECRET)  # the download itself had them
    assert _files_holding_the_secret(cache) == []


@pytest.mark.parametrize(
    ("url", "indexes", "expected"),
    [
        ("http://h:81/f.whl", ["http://u:p@h:81/simple/"], "http://u:p@h:81/f.whl"),
        ("http://h:81/f.whl", ["http://u:p@h:82/simple/"], "http://h:81/f.whl"),  # another port: not sent
        ("https://h/f.whl", ["http://u:p@h/simple/"], "https://h/f.whl"),  # another scheme
        ("http://other/f.whl", ["http://u:p@h/simple/"], "http://other/f.whl"),
        ("http://v:q@h/f.whl", ["http://u:p@h/simple/"], "http://v:q@h/f.whl"),  # its own are kept
    ],
)
def test_credentials_go_only_to_their_index_host(url, indexes, expected):
    assert net.with_index_credentials(url, indexes) == expected
    assert without_userinfo(expected) == url.replace("v:q@", "")
