"""Tests of patchkit.fetch: unit tests against a local HTTP server, release tests against the real index."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import examples, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit import fetch
from patchkit.base import seal
from patchkit.base.errors import BadInput, FetchError, IndexNotRead, TargetError
from patchkit.cli.ui.notes import show_notes
from patchkit.distinfo.record import parse_record, record_hash
from patchkit.fetch import cache as fetch_cache
from patchkit.fetch import net
from patchkit.fetch.cache import STATE_FILE, safe_dest
from patchkit.fetch.pipconfig import parse_config_list, settings_from_items
from patchkit.fetch.ranges import TAIL_BYTES, coalesce
from patchkit.fetch.zipread import member_from_run

from index_server import (  # isort: skip
    BLOB,
    FILES,
    IndexServer,
    OTHER_WHEEL,
    VERSION,
    WHEEL,
    build_wheel,
    isolate_cache,
    no_network,
    state_of,
    use_index,
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    return isolate_cache(tmp_path, monkeypatch)


# --------------------------------------------------------------------------- unit tests


def test_cache_dir_honours_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "c"))
    assert fetch.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("PATCHKIT_CACHE_DIR")
    assert fetch.cache_dir().name == "patchkit"


def test_fetch_members_verified_and_cached(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    msgs: list[str] = []
    tree = fetch.release_tree(
        VERSION, ["vllm/config/speculative.py", "vllm/model_executor/models/kimi_k25.py"], progress=msgs.append
    )

    assert tree == cache / "releases" / VERSION / "tree"
    assert (tree / "vllm/config/speculative.py").read_bytes() == FILES["vllm/config/speculative.py"]
    assert not (tree / "vllm/model_executor/models/kimi_k25.py").exists()
    assert (tree / f"vllm-{VERSION}.dist-info/METADATA").read_bytes().startswith(b"Metadata-Version")
    assert (tree / f"vllm-{VERSION}.dist-info/RECORD").is_file()
    assert not (tree / "vllm/__init__.py").exists()  # only what was asked for

    st_ = state_of(cache)
    assert st_["wheel"] == WHEEL
    assert st_["sha256"] == hashlib.sha256(server.files[WHEEL]).hexdigest()
    assert st_["url"].endswith(f"/range/files/{WHEEL}")
    assert "vllm/model_executor/models/kimi_k25.py" in st_["absent"]
    assert "vllm/config/speculative.py" in st_["present"]
    assert BLOB in st_["members"]
    # Range requests only; the big blob was never transferred.
    wheel_gets = [e for e in server.log if "/files/" in e[1]]
    assert wheel_gets and all(e[2] for e in wheel_gets if e[0] == "GET")
    assert server.range_bytes < len(server.files[WHEEL]) // 2
    assert fetch.last_fetch_stats.range_requests == len([e for e in wheel_gets if e[0] == "GET"])
    assert any("verified against RECORD" in m for m in msgs)

    # Second call, same files: no network at all (server gone, index lookup forbidden).
    server.stop()
    no_network(monkeypatch)
    again = fetch.release_tree(VERSION, ["vllm/config/speculative.py", "vllm/model_executor/models/kimi_k25.py"])
    assert again == tree
    assert fetch.last_fetch_stats.requests == 0


def test_member_not_in_wheel_decided_offline(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    fetch.release_tree(VERSION, ["vllm/config/speculative.py"])
    server.stop()
    no_network(monkeypatch)
    # The central-directory member list is cached: a path the wheel lacks needs no network.
    tree = fetch.release_tree(VERSION, ["vllm/config/speculative.py", "vllm/not_there.py"])
    assert not (tree / "vllm/not_there.py").exists()
    assert "vllm/not_there.py" in state_of(cache)["absent"]


def test_new_member_later_reuses_url_without_index(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    fetch.release_tree(VERSION, ["vllm/config/speculative.py"])
    server.pages.clear()  # the index is gone; the wheel URL is remembered
    n = len(server.log)
    tree = fetch.release_tree(VERSION, ["vllm/v1/spec_decode/eagle.py"])
    assert (tree / "vllm/v1/spec_decode/eagle.py").read_bytes() == FILES["vllm/v1/spec_decode/eagle.py"]
    assert not any("/simple/" in e[1] for e in server.log[n:])


def test_members_in_the_tail_cost_no_extra_request(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    # eagle.py sits after the big blob, in the last TAIL_BYTES with the central directory and RECORD.
    tree = fetch.release_tree(VERSION, ["vllm/v1/spec_decode/eagle.py"])
    assert (tree / "vllm/v1/spec_decode/eagle.py").read_bytes() == FILES["vllm/v1/spec_decode/eagle.py"]
    gets = [e for e in server.log if e[0] == "GET" and "/files/" in e[1]]
    assert [e[2] for e in gets] == [f"bytes=-{TAIL_BYTES}"]


def test_all_python_coalesces(server, cache, monkeypatch):
    extra = {f"vllm/pkg{i}/mod{j}.py": f"x = {i * 100 + j}\n".encode() * 20 for i in range(5) for j in range(20)}
    files = {**FILES, **extra}
    server.publish(WHEEL, build_wheel(files))
    use_index(monkeypatch, server.index())
    tree = fetch.release_tree(VERSION, all_python=True)
    for name, data in files.items():
        assert (tree / name).read_bytes() == data
    assert not (tree / BLOB).exists()
    gets = [e for e in server.log if e[0] == "GET" and "/files/" in e[1]]
    # 104 members + dist-info: the central directory, and two runs split by the big blob.
    assert len(gets) <= 4, gets
    assert server.range_bytes < len(server.files[WHEEL]) // 2
    server.stop()
    no_network(monkeypatch)
    assert fetch.release_tree(VERSION, all_python=True) == tree


def test_record_mismatch_is_fetch_error(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel(corrupt="vllm/config/speculative.py"))
    use_index(monkeypatch, server.index())
    with pytest.raises(FetchError, match="RECORD"):
        fetch.release_tree(VERSION, ["vllm/config/speculative.py"])
    tree = cache / "releases" / VERSION / "tree"
    assert not (tree / "vllm/config/speculative.py").exists()
    # Other members still verify fine.
    fetch.release_tree(VERSION, ["vllm/v1/spec_decode/eagle.py"])
    assert (tree / "vllm/v1/spec_decode/eagle.py").is_file()


def test_member_missing_from_record_is_fetch_error(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel(unlisted=("vllm/__init__.py",)))
    use_index(monkeypatch, server.index())
    with pytest.raises(FetchError, match="not listed"):
        fetch.release_tree(VERSION, ["vllm/__init__.py"])


@pytest.mark.parametrize("evil", ["vllm/../../evil.py", "vllm/a\\..\\..\\evil.py", "vllm//evil.py"])
def test_zip_slip_member_refused(server, cache, monkeypatch, tmp_path, evil):
    data = b"print('pwned')\n"
    wheel = build_wheel(extra_members={evil: data})
    server.publish(WHEEL, wheel)
    use_index(monkeypatch, server.index())
    with pytest.raises(FetchError, match="unsafe member"):
        fetch.release_tree(VERSION, all_python=True)
    assert not list(tmp_path.rglob("evil.py"))


def test_absolute_member_refused_via_safe_dest(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ["/etc/passwd", "C:/x.py", "../x.py", "a/./b.py", ""]:
        with pytest.raises(FetchError):
            safe_dest(tree, name)
    (tree / "vllm").symlink_to(tmp_path)  # a symlink escaping the tree is caught too
    with pytest.raises(FetchError, match="outside"):
        safe_dest(tree, "vllm/x.py")


@pytest.mark.parametrize("bad", ["../vllm/x.py", "/abs/x.py", "vllm\\x.py", "vllm/../x.py", ""])
def test_unsafe_requested_path_refused(cache, bad):
    with pytest.raises(BadInput):
        fetch.release_tree(VERSION, [bad])


def test_bad_version_refused(cache):
    with pytest.raises(BadInput):
        fetch.release_tree("not a version", [])


@settings(max_examples=examples(200), deadline=None)
@given(st.text(alphabet="ab./\\:C\x00", max_size=12))
def test_accepted_names_stay_in_tree(tmp_path_factory, name):
    tree = tmp_path_factory.mktemp("t")
    try:
        dest = safe_dest(tree, name)
    except FetchError:
        return
    assert dest.resolve().is_relative_to(tree.resolve()) and dest.resolve() != tree.resolve()


def test_fallback_download_when_ranges_ignored(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel(), prefix="norange")
    use_index(monkeypatch, server.index("norange"))
    msgs: list[str] = []
    tree = fetch.release_tree(VERSION, ["vllm/config/speculative.py", "vllm/nope.py"], progress=msgs.append)
    assert (tree / "vllm/config/speculative.py").read_bytes() == FILES["vllm/config/speculative.py"]
    local = cache / "releases" / VERSION / WHEEL
    assert local.read_bytes() == server.files[WHEEL]
    assert fetch.last_fetch_stats.full_download
    assert any("downloading" in m for m in msgs)
    assert "vllm/nope.py" in state_of(cache)["absent"]
    # Later requests for more members use the kept wheel: no network.
    server.stop()
    no_network(monkeypatch)
    tree = fetch.release_tree(VERSION, ["vllm/v1/spec_decode/eagle.py"])
    assert (tree / "vllm/v1/spec_decode/eagle.py").read_bytes() == FILES["vllm/v1/spec_decode/eagle.py"]


def test_fallback_when_ranges_stop_working_mid_way(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel(), prefix="tailonly")
    use_index(monkeypatch, server.index("tailonly"))
    msgs: list[str] = []
    tree = fetch.release_tree(VERSION, ["vllm/config/speculative.py"], progress=msgs.append)
    assert (tree / "vllm/config/speculative.py").read_bytes() == FILES["vllm/config/speculative.py"]
    assert fetch.last_fetch_stats.full_download
    assert any("mid-way" in m for m in msgs)


def test_fallback_download_sha256_mismatch(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel(), prefix="norange", sha256="0" * 64)
    use_index(monkeypatch, server.index("norange"))
    with pytest.raises(FetchError, match="sha256"):
        fetch.release_tree(VERSION, ["vllm/config/speculative.py"])
    rel = cache / "releases" / VERSION
    assert not (rel / WHEEL).exists() and not list(rel.glob("*.part"))
    assert not (rel / "tree" / "vllm/config/speculative.py").exists()


def test_prefers_manylinux_x86_64_and_skips_bad_indexes(server, cache, monkeypatch, tmp_path):
    server.publish(OTHER_WHEEL, build_wheel(), prefix="range")
    server.publish(WHEEL, build_wheel(), prefix="range")
    server.publish(f"vllm-{VERSION}-py3-none-manylinux_2_17_aarch64.whl", build_wheel(), prefix="range")
    # The primary index lacks vllm (404), a file:// index is skipped; pip.conf is read through pip.
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\n"
        f"index-url = {server.index('empty')}\n"
        f"extra-index-url = file:///nonexistent/simple\n    {server.index('range')}\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    tree = fetch.release_tree(VERSION, ["vllm/__init__.py"])
    assert state_of(cache)["wheel"] == WHEEL
    assert (tree / "vllm/__init__.py").is_file()


@pytest.mark.parametrize("via", ["in-process", "subprocess"])
def test_pip_settings_read_through_pip(cache, monkeypatch, tmp_path, via):
    from patchkit.fetch import pipconfig

    if via == "subprocess":
        monkeypatch.setattr(pipconfig, "_pip_items_in_process", lambda: None)
    monkeypatch.setattr(pipconfig, "_CACHE", {})
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://file.invalid/simple\nextra-index-url = file:///x/simple https://b.invalid/simple\ncert = /tmp/ca.pem\n"
        "[install]\nindex-url = https://install.invalid/simple\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    s = pipconfig.pip_settings()
    assert s.index_urls == ["https://install.invalid/simple", "file:///x/simple", "https://b.invalid/simple"]
    assert s.cert == "/tmp/ca.pem"
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.invalid/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    assert pipconfig.pip_settings().index_urls == ["https://env.invalid/simple"]


@pytest.mark.parametrize("via", ["in-process", "subprocess"])
@pytest.mark.parametrize("winner", ["PIP_CONFIG_FILE", "user"])
def test_the_pip_file_that_wins_is_pips_not_the_one_whose_path_sorts_last(cache, monkeypatch, tmp_path, via, winner):
    # pip >= 25's `pip config list` prints each file's values sorted by the file's path: the site-wide file
    # here (zz/) sorts after the one pip reads last, and patchkit took its cert and index from it
    from patchkit.fetch import pipconfig

    if via == "subprocess":
        monkeypatch.setattr(pipconfig, "_pip_items_in_process", lambda: None)
    monkeypatch.setattr(pipconfig, "_CACHE", {})
    site_wide = tmp_path / "zz" / "pip" / "pip.conf"
    site_wide.parent.mkdir(parents=True)
    site_wide.write_text("[global]\ncert = /site-wide/ca.pem\nindex-url = https://site-wide.invalid/simple\n")
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "zz"))
    mine = tmp_path / "a" / "pip" / "pip.conf"
    mine.parent.mkdir(parents=True)
    mine.write_text(
        "[global]\ncert = /mine/ca.pem\nindex-url = https://mine.invalid/simple\n"
        "extra-index-url =\n    https://one.invalid/simple\n    https://two.invalid/simple\n"
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "a"))
    if winner == "PIP_CONFIG_FILE":
        monkeypatch.setenv("PIP_CONFIG_FILE", str(mine))
    else:
        monkeypatch.delenv("PIP_CONFIG_FILE")
    s = pipconfig.pip_settings()
    assert s.cert == "/mine/ca.pem"
    assert s.index_urls == ["https://mine.invalid/simple", "https://one.invalid/simple", "https://two.invalid/simple"]


def test_env_overrides_pip_conf(server, cache, monkeypatch, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {server.index('empty')}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index("range"))
    fetch.release_tree(VERSION)
    assert state_of(cache)["index"] == server.index("range")


def test_no_index_has_vllm(server, cache, monkeypatch):
    use_index(monkeypatch, server.index("empty"), "file:///opt/nothing/simple")
    with pytest.raises(FetchError, match="no package index had vllm") as ei:
        fetch.release_tree(VERSION)
    assert ei.value.hint


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"PIP_INDEX_URL": "file:///srv/mirror/simple/"}, "the index file:///srv/mirror/simple/"),
        ({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/srv/wheels"}, "find-links /srv/wheels"),
    ],
)
def test_a_pip_source_patchkit_does_not_read_is_named_as_such(cache, monkeypatch, environ, named):
    # review 5 wheel M5: "skipped (not http/https)" or "unset PIP_NO_INDEX", where no index can be unset
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(FetchError, match=f"pip is configured with {named}, which patchkit does not read") as ei:
        fetch.release_tree(VERSION)
    assert "http(s) index in PIP_INDEX_URL" in str(ei.value.hint)
    assert ("PIP_NO_INDEX= (empty)" in str(ei.value.hint)) == ("PIP_NO_INDEX" in environ)


@pytest.mark.parametrize(
    "unread",
    [{"PIP_FIND_LINKS": "/srv/wheels"}, {"PIP_EXTRA_INDEX_URL": "file:///srv/mirror/simple/"}],
)
def test_an_http_index_that_fails_beside_an_unread_source_gets_the_index_hint(cache, monkeypatch, unread):
    # review 6 M2: "name an http(s) index in PIP_INDEX_URL", which is what was set (and is down)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:1/simple/")
    for name, value in unread.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(FetchError, match=r"no package index had vllm \(http://127\.0\.0\.1:1/simple/: ") as ei:
        fetch.release_tree(VERSION)
    assert not isinstance(ei.value, IndexNotRead)  # `wheel VERSION` gives no pip-download hint: pip fails alike
    assert "which patchkit does not read" in ei.value.message
    assert "PIP_INDEX_URL" not in str(ei.value.hint) and "check that index and the network" in str(ei.value.hint)


def test_a_release_cached_from_another_index_is_fetched_again_from_the_configured_one(server, cache, monkeypatch):
    from helpers import assert_clean_failure, run_cli

    # review 6 M1: fetch --dest laid out a vendor index's files after pip was pointed elsewhere, unsaid;
    # review 9 M1: nor is the sealed record replaced by the other file: refused until it is removed
    spec = "vllm/config/speculative.py"
    other = IndexServer()
    try:
        server.publish(WHEEL, build_wheel({**FILES, spec: b"VENDOR = True\n"}))
        other.publish(WHEEL, build_wheel())
        use_index(monkeypatch, server.index())
        assert (fetch.release_tree(VERSION, [spec], recheck_index=True) / spec).read_bytes() == b"VENDOR = True\n"
        use_index(monkeypatch, other.index())
        with monkeypatch.context() as offline:  # the hot path (integrity's reference) asks no index
            no_network(offline)
            assert (fetch.release_tree(VERSION, [spec]) / spec).read_bytes() == b"VENDOR = True\n"
        dest = cache / "laid-out"
        refused = run_cli("fetch", VERSION, "--all", "--dest", dest)  # the command a user runs
        assert_clean_failure(refused, 2)
        assert server.index() in refused.stderr and other.index() in refused.stderr, refused.stderr
        assert not (dest / spec).exists()
        (cache / "releases" / VERSION / STATE_FILE).unlink()  # the hint followed
        done = run_cli("fetch", VERSION, "--all", "--dest", dest)
        assert done.returncode == 0, done.stderr
        assert (dest / spec).read_bytes() == FILES[spec]
        said: list[str] = []
        with monkeypatch.context() as offline:  # settings unchanged since: no question to pip
            no_network(offline)
            fetch.release_tree(VERSION, [spec], progress=said.append, recheck_index=True)
        assert f"the cached vLLM {VERSION} came from {other.index()}" in said, said
        monkeypatch.setenv("PIP_NO_INDEX", "1")  # no index to take it from: the cached one, said
        warnings: list[str] = []
        assert (fetch.release_tree(VERSION, [spec], warn=warnings.append, recheck_index=True) / spec).exists()
        assert any("no index patchkit reads" in w and other.index() in w for w in warnings), warnings
    finally:
        other.stop()


def test_unknown_version(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    with pytest.raises(FetchError, match=r"no vllm 9\.9\.9 wheel"):
        fetch.release_tree("9.9.9")
    assert fetch.release_tree("0.1") == fetch.release_tree("0.1.0")  # 0.1 is release 0.1.0 (issue 20, review 4)
    with pytest.raises(FetchError, match=r"no vllm 0.1.0\+cu129 wheel") as ei:
        fetch.release_tree("0.1.0+cu129")
    assert "0.1.0" in ei.value.hint


def test_available_versions(server, cache, monkeypatch):
    for v in ("0.0.9", "0.1.0", "0.2.0rc1", "0.10.0"):
        server.publish(f"vllm-{v}-py3-none-any.whl", b"x")
    server.pages[("range", "vllm")] = server.pages[("range", "vllm")].replace(
        "</body>", f'<a href="{server.url}/range/files/vllm-0.3.0.tar.gz">vllm-0.3.0.tar.gz</a></body>'
    )
    use_index(monkeypatch, server.index())
    assert [str(v) for v in fetch.available_versions()] == ["0.0.9", "0.1.0", "0.3.0", "0.10.0"]


def test_concurrent_fetches_do_not_collide(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    errors, trees = [], []

    def work():
        try:
            trees.append(fetch.release_tree(VERSION, ["vllm/config/speculative.py", "vllm/__init__.py"]))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(trees)) == 1
    assert (trees[0] / "vllm/__init__.py").read_bytes() == FILES["vllm/__init__.py"]
    # Only one of them went to the index.
    assert sum(1 for e in server.log if "/simple/" in e[1]) == 1


def test_deleted_file_is_refetched(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    tree = fetch.release_tree(VERSION, ["vllm/__init__.py"])
    (tree / "vllm/__init__.py").unlink()
    fetch.release_tree(VERSION, ["vllm/__init__.py"])
    assert (tree / "vllm/__init__.py").read_bytes() == FILES["vllm/__init__.py"]


def test_cached_files_are_readable_by_all_whatever_the_umask(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    old = os.umask(0o077)
    try:
        tree = fetch.release_tree(VERSION, ["vllm/__init__.py"])
    finally:
        os.umask(old)
    for path in (tree / "vllm/__init__.py", cache / "releases" / VERSION / STATE_FILE):
        assert path.stat().st_mode & 0o777 == 0o644, path


def test_member_from_run_checks_the_local_header_and_the_crc():
    data = build_wheel(blob_size=0)
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo("vllm/__init__.py")
    assert member_from_run(data, 0, info) == FILES["vllm/__init__.py"]
    assert member_from_run(data[info.header_offset :], info.header_offset, info) == FILES["vllm/__init__.py"]
    wrong_sig = bytearray(data)
    wrong_sig[info.header_offset] ^= 0xFF
    with pytest.raises(FetchError, match="bad local header"):
        member_from_run(bytes(wrong_sig), 0, info)
    with pytest.raises(FetchError, match="truncated"):
        member_from_run(data[: info.header_offset + 30 + len(info.filename) + 1], 0, info)
    other = zipfile.ZipFile(io.BytesIO(data)).getinfo("vllm/config/speculative.py")
    info.CRC = other.CRC
    with pytest.raises(FetchError, match="CRC/size"):
        member_from_run(data, 0, info)


def test_coalesce():
    spans = [(0, 10, "a"), (10, 20, "b"), (5000, 5010, "c"), (30, 40, "d")]
    assert coalesce(spans, gap=100) == [(0, 40, ["a", "b", "d"]), (5000, 5010, ["c"])]
    assert len(coalesce(spans, gap=1)) == 3
    assert len(coalesce(spans, gap=10_000, max_run=30)) == 3


def test_pip_config_parsing():
    out = (
        ":env:.index-url='https://env.example/simple'\n"
        "global.index-url='https://file.example/simple'\n"
        "global.extra-index-url='file:///opt/pypi/simple https://extra.example/simple'\n"
        "global.cert='/etc/ssl/ca.pem'\n"
        ":env:.default-timeout='180'\n"
    )
    s = settings_from_items(parse_config_list(out))
    assert s.index_urls == ["https://env.example/simple", "file:///opt/pypi/simple", "https://extra.example/simple"]
    assert s.cert == "/etc/ssl/ca.pem" and s.timeout == 180
    assert settings_from_items({}).index_urls == ["https://pypi.org/simple/"]
    assert settings_from_items({"install.no-index": "true"}).index_urls == []


def test_session_honours_pip_cert_and_ca_bundle(monkeypatch):
    from patchkit.fetch.pipconfig import PipSettings

    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/env/bundle.pem")
    with_cert = net.make_session(PipSettings(cert="/pip/ca.pem"), None)
    assert with_cert.merge_environment_settings("https://x.invalid/", {}, False, None, None)["verify"] == "/pip/ca.pem"
    plain = net.make_session(PipSettings(), None)
    assert plain.merge_environment_settings("https://x.invalid/", {}, False, None, None)["verify"] == "/env/bundle.pem"
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    assert plain.merge_environment_settings("https://x.invalid/", {}, False, None, None)["verify"] is True


def test_import_is_cheap():
    code = "import sys, patchkit.fetch; print(sorted(m for m in ('requests', 'remotezip', 'pypi_simple', 'urllib3', 'rich') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1]
    )
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- real index


@pytest.fixture(scope="module")
def real_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("release-cache")


@pytest.fixture
def real_env(real_cache, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(real_cache))
    return real_cache


@pytest.mark.release
def test_release_0_16_0_default_fetch(real_env):
    paths = ["vllm/config/speculative.py", "vllm/v1/spec_decode/eagle.py", "vllm/model_executor/models/llama_eagle3.py"]
    tree = fetch.release_tree("0.16.0", paths)
    stats = fetch.last_fetch_stats
    for p in paths:
        assert (tree / p).is_file()
    assert (tree / "vllm-0.16.0.dist-info/METADATA").read_text().find("Version: 0.16.0") > 0
    record = parse_record((tree / "vllm-0.16.0.dist-info/RECORD").read_bytes())
    for p in paths:
        assert record_hash((tree / p).read_bytes()) == record[p][0]
    assert stats.bytes <= 5_000_000 and not stats.full_download
    st_ = json.loads((real_env / "releases/0.16.0" / STATE_FILE).read_text())
    assert re.fullmatch(r"vllm-0\.16\.0-.*manylinux.*x86_64\.whl", st_["wheel"]) and len(st_["sha256"]) == 64
    fetch.release_tree("0.16.0", paths)
    assert fetch.last_fetch_stats.requests == 0


@pytest.mark.release
@pytest.mark.parametrize("version,present", [("0.14.0", False), ("0.15.0", True)])
def test_release_kimi_k25_presence(real_env, version, present):
    p = "vllm/model_executor/models/kimi_k25.py"
    tree = fetch.release_tree(version, [p])
    assert (tree / p).is_file() is present
    st_ = json.loads((real_env / "releases" / version / STATE_FILE).read_text())
    assert (p in st_["present"]) is present and (p in st_["absent"]) is not present


@pytest.mark.release
def test_release_available_versions():
    versions = [str(v) for v in fetch.available_versions()]
    assert {"0.14.0", "0.15.0", "0.16.0"} <= set(versions)
    assert not any(re.search(r"(rc|a|b|dev)\d", v) for v in versions)


@pytest.mark.release
@pytest.mark.slow
def test_release_0_16_0_all_python(real_env):
    tree = fetch.release_tree("0.16.0", all_python=True)
    stats = fetch.last_fetch_stats
    pys = list((tree / "vllm").rglob("*.py"))
    assert len(pys) > 1000
    assert stats.range_requests < 50 and not stats.full_download


@pytest.mark.parametrize("reused", [False, True])
def test_verify_asks_the_index_for_its_page_once(server, cache, monkeypatch, reused):
    """verify --all lists the releases, then fetches each: with reuse_index_pages() the index
    page is fetched once, not once more per release."""
    other = "0.1.1"
    server.publish(WHEEL, build_wheel())
    server.publish(WHEEL.replace(VERSION, other), build_wheel(version=other))
    use_index(monkeypatch, server.index())
    with fetch.reuse_index_pages() if reused else contextlib.nullcontext():
        assert [str(v) for v in fetch.available_versions()] == [VERSION, other]
        fetch.release_tree(VERSION, ["vllm/config/speculative.py"])
        fetch.release_tree(other, ["vllm/config/speculative.py"])
    page_gets = [e for e in server.log if e[0] == "GET" and "/simple/" in e[1]]
    assert len(page_gets) == (1 if reused else 3)


# --------------------------------------------------------------------------- hygiene and --dest (issues 10, 14)


def _spec_library(tmp_path: Path) -> Path:
    """A library whose series for VERSION touches vllm/config/speculative.py."""
    from helpers import make_patch, write_library, write_tree

    spec = "vllm/config/speculative.py"
    stock = write_tree(tmp_path / "stock", VERSION, {spec: FILES[spec]})
    patch = make_patch(tmp_path, stock, {spec: FILES[spec] + b"# patched\n"})
    return write_library(tmp_path / "lib", {VERSION: [patch]}, supported=None, upstream=None)


@pytest.mark.parametrize("option", [("--set", "nonesuch"), ("--patches", "/nonexistent/library")])
def test_fetch_with_a_bad_set_or_library_is_exit_2(server, cache, monkeypatch, tmp_path, option):
    from helpers import assert_clean_failure, run_cli

    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    if option[0] == "--set":
        option = ("--patches", str(_spec_library(tmp_path)), *option)
    done = run_cli("fetch", VERSION, *option, "--dest", tmp_path / "site")
    assert_clean_failure(done, 2)
    assert option[-1] in done.stderr
    assert not (tmp_path / "site").exists()


def writes_failing_at(monkeypatch, module, nth: int, error: BaseException) -> Callable[[], None]:
    """`module.atomic_write` raising `error` at its `nth` write, the earlier ones written (a disk that
    fills up, a Ctrl-C); returns what puts the real one back."""
    real_write, writes = module.atomic_write, []

    def failing(path, data, **kwargs):
        writes.append(path)
        if len(writes) == nth:
            raise error
        real_write(path, data, **kwargs)

    monkeypatch.setattr(module, "atomic_write", failing)
    return lambda: monkeypatch.setattr(module, "atomic_write", real_write)


def test_a_full_disk_mid_fetch_says_so_and_leaves_no_partial_entry(server, cache, monkeypatch):
    import errno

    from patchkit.fetch import cache as fetch_cache

    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    room_again = writes_failing_at(monkeypatch, fetch_cache, 3, OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(FetchError, match="no space left") as caught:
        fetch.release_tree(VERSION, ["vllm/v1/spec_decode/eagle.py", "vllm/__init__.py"])
    assert "PATCHKIT_CACHE_DIR" in caught.value.hint and "space" in caught.value.hint
    entry = cache / "releases" / VERSION
    assert not entry.exists() or not [p for p in entry.rglob("*") if p.is_file()], list(entry.rglob("*"))

    room_again()  # a clean fetch
    tree = fetch.release_tree(VERSION, ["vllm/v1/spec_decode/eagle.py", "vllm/__init__.py"])
    assert (tree / "vllm/__init__.py").read_bytes() == FILES["vllm/__init__.py"]


def test_a_full_disk_when_adding_files_keeps_the_entry_and_drops_the_part(server, cache, monkeypatch):
    import errno

    from patchkit.fetch import cache as fetch_cache

    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    tree = fetch.release_tree(VERSION, ["vllm/__init__.py"])
    before = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    real_write = fetch_cache.atomic_write

    def full_for_python(path, data, **kwargs):
        if path.name.endswith(".py") and "spec_decode" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(path, data, **kwargs)

    monkeypatch.setattr(fetch_cache, "atomic_write", full_for_python)
    with pytest.raises(FetchError, match="no space left"):
        fetch.release_tree(VERSION, ["vllm/config/speculative.py", "vllm/v1/spec_decode/eagle.py"])
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()) == before
    assert "vllm/config/speculative.py" not in state_of(cache)["present"]


def test_a_version_the_index_lacks_leaves_nothing_behind(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    with pytest.raises(FetchError, match=r"no vllm 7\.7\.7 wheel"):
        fetch.release_tree("7.7.7", ["vllm/__init__.py"])
    assert not (cache / "releases" / "7.7.7").exists()


def test_a_version_with_spaces_is_the_release(server, cache, monkeypatch, tmp_path):
    from helpers import run_cli

    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    done = run_cli("fetch", f"  {VERSION}\t", "--patches", _spec_library(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"vllm {VERSION}: " in done.stdout
    assert [p.name for p in (cache / "releases").iterdir()] == [VERSION]


def test_a_damaged_kept_wheel_is_downloaded_again(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel(), prefix="norange")
    use_index(monkeypatch, server.index("norange"))
    fetch.release_tree(VERSION, ["vllm/__init__.py"])
    kept = cache / "releases" / VERSION / WHEEL
    data = bytearray(kept.read_bytes())
    data[100] ^= 0xFF
    kept.write_bytes(bytes(data))
    warnings: list[str] = []
    tree = fetch.release_tree(VERSION, ["vllm/v1/spec_decode/eagle.py"], warn=warnings.append)
    assert any("kept wheel" in w for w in warnings), warnings
    assert kept.read_bytes() == server.files[WHEEL]
    assert (tree / "vllm/v1/spec_decode/eagle.py").read_bytes() == FILES["vllm/v1/spec_decode/eagle.py"]


def test_the_default_warning_goes_to_stderr(server, cache, monkeypatch, capsys):
    # the CLI routes the "patchkit" logger to stderr once per process; a test run in a fresh worker
    # has had no command yet, so it routes them itself, as every command does
    show_notes()
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    tree = fetch.release_tree(VERSION, ["vllm/__init__.py"])
    (tree / "vllm/__init__.py").write_bytes(b"__version__ = '6.6.6'\n")
    fetch.release_tree(VERSION, ["vllm/__init__.py"])  # as `verify --vllm-version` calls it
    assert "vllm/__init__.py" in capsys.readouterr().err
    assert (tree / "vllm/__init__.py").read_bytes() == FILES["vllm/__init__.py"]


@pytest.fixture
def fetched(server, cache, monkeypatch, tmp_path):
    """run(dest, *options): `patchkit fetch VERSION --dest dest` for a library patching speculative.py."""
    from helpers import run_cli

    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    library = _spec_library(tmp_path)
    return lambda dest, *options: run_cli("fetch", VERSION, "--patches", library, "--dest", dest, *options)


def test_fetch_dest_never_writes_through_a_symlink(fetched, tmp_path):
    from helpers import assert_clean_failure, fingerprint

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mine.py").write_text("my own file\n")
    dest = tmp_path / "site"
    (dest / "vllm" / "config").mkdir(parents=True)
    (dest / "vllm" / "config" / "speculative.py").symlink_to(outside / "mine.py")
    before = fingerprint(outside)
    for options in [(), ("--force",)]:
        done = fetched(dest, *options)
        assert_clean_failure(done, 2)
        assert "vllm/config/speculative.py" in done.stderr
        assert fingerprint(outside) == before
    (dest / "vllm" / "config" / "speculative.py").unlink()
    (dest / "vllm" / "config").rmdir()
    (dest / "vllm" / "config").symlink_to(outside)  # a symlinked directory on the way
    done = fetched(dest, "--force")
    assert_clean_failure(done, 2)
    assert "vllm/config" in done.stderr and fingerprint(outside) == before


def test_fetch_dest_refuses_other_contents_unless_forced(fetched, tmp_path):
    from helpers import assert_clean_failure

    dest = tmp_path / "site"
    assert fetched(dest).returncode == 0
    assert fetched(dest).returncode == 0  # the same files again: nothing to refuse
    spec = dest / "vllm/config/speculative.py"
    spec.write_bytes(FILES["vllm/config/speculative.py"] + b"# my edit\n")
    done = fetched(dest)
    assert_clean_failure(done, 2)
    assert "vllm/config/speculative.py" in done.stderr and "--force" in done.stderr
    assert spec.read_bytes().endswith(b"# my edit\n")
    assert fetched(dest, "--force").returncode == 0
    assert spec.read_bytes() == FILES["vllm/config/speculative.py"]


def test_cached_record_only_when_intact(server, cache, monkeypatch):
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    assert fetch.cached_record(VERSION) is None  # nothing cached
    tree = fetch.release_tree(VERSION, ["vllm/__init__.py"])
    record = tree / f"vllm-{VERSION}.dist-info/RECORD"
    assert fetch.cached_record(VERSION) == record.read_bytes()
    record.write_bytes(record.read_bytes().replace(b"vllm/__init__.py,sha256=", b"vllm/__init__.py,sha256=A"))
    assert fetch.cached_record(VERSION) is None


def test_cached_record_checks_release_json_once_while_its_bytes_are_the_same(server, cache, monkeypatch):
    """Each set's integrity check asks for the release's RECORD: release.json (~0.2 MB for vLLM, ~2 ms
    to parse and check) is checked once while its bytes are the same, and again once they change."""
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    tree = fetch.release_tree(VERSION, ["vllm/__init__.py"])
    checked = []
    real = fetch_cache.load_json_text
    monkeypatch.setattr(fetch_cache, "load_json_text", lambda raw: checked.append(1) or real(raw))
    fetch_cache._record_of.cache_clear()  # what an earlier test kept
    fetch_cache._SOUND_STATES.clear()  # and the fetch above: these bytes were checked there
    record = (tree / f"vllm-{VERSION}.dist-info/RECORD").read_bytes()
    assert [fetch.cached_record(VERSION) for _ in range(3)] == [record] * 3 and len(checked) == 1
    state = fetch_cache.release_root(VERSION) / STATE_FILE
    state.write_text(json.dumps({**json.loads(state.read_text()), "record_sha256": "0" * 64}))
    assert fetch.cached_record(VERSION) is None and len(checked) == 2  # read again: it no longer matches


def test_a_fetch_answered_by_the_cache_checks_release_json_once_while_its_bytes_are_the_same(
    server, cache, monkeypatch
):
    """`verify --all` asks for each release once per set (with recheck_index): its release.json (~0.3 MB
    for vLLM: thousands of member paths, and a seal) is checked once while its bytes are the same,
    again once they change; a verdict is the seal key's (another key: not sealed)."""
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    fetch.release_tree(VERSION, ["vllm/__init__.py"])
    checked = []
    real = fetch_cache._shape_problem
    monkeypatch.setattr(fetch_cache, "_shape_problem", lambda data, ver: checked.append(ver) or real(data, ver))
    for _ in range(3):
        fetch.release_tree(VERSION, ["vllm/__init__.py"], recheck_index=True)
    assert checked == []  # checked when the fetch wrote it
    state = fetch_cache.release_root(VERSION) / STATE_FILE
    state.write_text(json.dumps(json.loads(state.read_text()), indent=2))  # other bytes, the same record
    for _ in range(3):
        fetch.release_tree(VERSION, ["vllm/__init__.py"], recheck_index=True)
    assert checked == [VERSION]
    root = fetch_cache.release_root(VERSION)
    assert fetch_cache.load_state(root, VERSION)["seal"] is not None
    monkeypatch.setattr(seal, "_key", lambda: b"k" * seal.KEY_BYTES)  # another user's key
    assert fetch_cache.load_state(root, VERSION)["seal"] is None and checked == [VERSION] * 2


def test_a_full_disk_while_downloading_the_wheel_says_so(server, cache, monkeypatch):
    import errno

    from patchkit.fetch import download

    server.publish(WHEEL, build_wheel(), prefix="norange")
    use_index(monkeypatch, server.index("norange"))

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(download, "_copy", full)
    with pytest.raises(FetchError, match="no space left"):
        fetch.release_tree(VERSION, ["vllm/__init__.py"])
    assert not (cache / "releases" / VERSION).exists()


def test_no_wheel_for_the_platform_asked_names_the_platforms_the_index_has():
    """A release with wheels has an sdist too: the hint is the other platforms', not "only an sdist"."""
    from types import SimpleNamespace

    from patchkit.fetch.wheel_choice import _no_wheel_error

    files = ["vllm-0.16.0.tar.gz", "vllm-0.16.0-cp38-abi3-manylinux_2_31_x86_64.whl"]
    page = SimpleNamespace(packages=[SimpleNamespace(version="0.16.0", filename=name) for name in files])
    error = _no_wheel_error("0.16.0", [("https://pypi.org/simple", page)], "for win_amd64")
    assert (
        error.hint
        == "the index has wheels of this version for other platforms (manylinux_2_31_x86_64): pass --platform TAG"
    )
    sdist_only = SimpleNamespace(packages=page.packages[:1])
    assert "only an sdist" in _no_wheel_error("0.16.0", [("https://pypi.org/simple", sdist_only)], "").hint


def test_fetch_into_a_tree_of_another_release_is_refused_even_with_force(fetched, tmp_path):
    """New-user trial 14, item 19: fetch 0.17.1 into a 0.16.0 tree said its files "may be your
    edits" and offered --force, which laid 0.17.1 over it: two dist-infos, a tree every command
    then refuses. The cause is said, and --force does not lay one release over another."""
    dest = tmp_path / "site"
    assert fetched(dest).returncode == 0
    (dest / f"vllm-{VERSION}.dist-info").rename(dest / "vllm-0.0.9.dist-info")
    for force in ([], ["--force"]):
        done = fetched(dest, *force)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"{dest} holds another vLLM release (vllm-0.0.9.dist-info)" in done.stderr, done.stderr
        assert "your edits" not in done.stderr
    assert not (dest / f"vllm-{VERSION}.dist-info").exists()


def test_fetch_dest_says_what_it_laid_out_and_what_it_kept(fetched, tmp_path):
    """new-user s12 item 7: into a tree that already holds the files (or patchkit's patch of one)
    fetch said "laid out N file(s)" and wrote none."""
    from helpers import run_cli

    dest = tmp_path / "site"
    first = fetched(dest)
    assert first.returncode == 0 and "holds these" not in first.stdout, first.stdout
    again = fetched(dest)
    assert again.returncode == 0, again.stdout + again.stderr
    # new-user 14 item 23d: "nothing laid out" read as a failure
    assert re.search(rf"{re.escape(str(dest))} holds these \d+ file\(s\) already", again.stdout), again.stdout
    assert "nothing laid out" not in again.stdout and "laid out 0" not in again.stdout, again.stdout
    library = _spec_library(tmp_path)
    applied = run_cli("apply", "--target", dest, "--patches", library, "--no-guard")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    kept = fetched(dest)  # the patched speculative.py is kept, and said to be
    assert kept.returncode == 0 and "holds these" in kept.stdout, kept.stdout
    assert "kept 1 file(s) as patchkit patched them" in kept.stdout, kept.stdout


def test_a_full_disk_in_dest_leaves_no_release_that_looks_whole_and_the_same_command_completes_it(
    server, cache, monkeypatch, tmp_path
):
    """review 12a M4: `fetch --all --dest` on a disk that fills up wrote the dist-info first and said
    only "cannot write …", and status took the third of a tree for a partly applied release."""
    import errno

    from patchkit.releases import files as release_files

    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    tree = fetch.release_tree(VERSION, all_python=True)
    # the lay-out's mark, a file, then the disk is full
    freed = writes_failing_at(monkeypatch, release_files, 3, OSError(errno.ENOSPC, "No space left on device"))
    dest = tmp_path / "small" / "t"
    with pytest.raises(TargetError, match="no space left on the device holding") as caught:
        release_files.lay_out_said(tree, dest)
    assert "no command takes it for one yet" in caught.value.message
    assert "free at least" in caught.value.hint and "same command again" in caught.value.hint
    assert not list(dest.glob("*.dist-info")), sorted(p.name for p in dest.iterdir())
    assert not (dest / "vllm/__init__.py").exists() and not (dest / "vllm/_version.py").exists()
    assert [p for p in dest.rglob("*") if p.is_file()], "the file written before the disk filled is kept"

    freed()  # the same lay-out completes it
    laid, written, _kept, resumed, _replaced, _saved = release_files.lay_out_said(tree, dest)
    assert len(written) == len(laid) - 1 and resumed == f"{VERSION} --all"
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == laid
    for rel in laid:
        assert (dest / rel).read_bytes() == (tree / rel).read_bytes(), rel


def _lay_out_cut_short(monkeypatch, tree: Path, dest: Path) -> Path:
    """`dest` as a `fetch --dest` lay-out of `tree` leaves it when killed at its 3rd write (no handler
    runs, the files written stay)."""
    from patchkit.releases import files as release_files

    put_back = writes_failing_at(monkeypatch, release_files, 3, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        release_files.lay_out_said(tree, dest)
    put_back()
    return dest


def test_a_lay_out_killed_part_way_is_named_by_status_and_the_fetch_it_names_finishes_it(
    fetched, monkeypatch, tmp_path
):
    """state26: a `fetch --dest` killed mid-write said nothing on the next run, and status told the
    tree it left to "pass --vllm-version", which cannot help: the tree lacks files."""
    from helpers import run_cli

    tree = fetch.release_tree(VERSION, all_python=True)
    dest = _lay_out_cut_short(monkeypatch, tree, tmp_path / "cut")

    status = run_cli("status", "--target", dest)
    assert status.returncode == 4, status.stdout + status.stderr
    assert "was cut short" in status.stderr and "--vllm-version" not in status.stderr, status.stderr
    fix = re.search(r"hint: run `patchkit (fetch [^`]*)`", status.stderr)
    assert fix is not None and fix.group(1) == f"fetch {VERSION} --all --dest {dest}", status.stderr
    again = run_cli(*fix.group(1).split())
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"held a lay-out of vllm {VERSION} cut short" in again.stderr, again.stderr
    laid = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert laid == sorted(
        p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file() and ".patchkit" not in p.parts
    )
    assert all((dest / rel).read_bytes() == (tree / rel).read_bytes() for rel in laid)


def test_a_tree_cut_short_without_a_mark_is_told_what_is_missing_not_to_pass_a_version(tmp_path):
    """A tree with vllm/ files but no vllm/__init__.py and no dist-info (cut short by an older
    patchkit, or a copy of part of one): the hint was "pass --vllm-version"."""
    from helpers import run_cli

    (tmp_path / "cut" / "vllm" / "config").mkdir(parents=True)
    (tmp_path / "cut" / "vllm" / "config" / "speculative.py").write_text("X = 1\n")
    status = run_cli("status", "--target", tmp_path / "cut")
    assert status.returncode == 4, status.stdout + status.stderr
    assert "has no __init__.py, and there is no vllm-*.dist-info beside it" in status.stderr, status.stderr
    assert "--vllm-version" not in status.stderr and "fetch VERSION --dest" in status.stderr, status.stderr


def test_an_interrupt_while_laying_out_says_files_are_written_and_the_fetch_that_finishes_them(
    fetched, monkeypatch, tmp_path, run
):
    """New-user 21, 1: a Ctrl-C during `fetch --dest` after files were written there said
    "interrupted before any change was made to the target"."""
    from patchkit.releases import files as release_files

    fetch.release_tree(VERSION, all_python=True)  # in the cache: only the lay-out is interrupted
    writes_failing_at(monkeypatch, release_files, 3, KeyboardInterrupt())
    dest = tmp_path / "cut"
    done = run("fetch", VERSION, "--all", "--dest", dest)
    said = " ".join(done.output.split())
    assert done.exit_code == 130, done.output
    assert f"interrupted while laying out vllm {VERSION} --all in {dest}: some files are written, not all" in said
    assert f"run `patchkit fetch {VERSION} --all --dest {dest}` again: it writes only the missing files" in said
    assert "before any change" not in said


def test_a_narrower_fetch_over_a_cut_short_all_lay_out_says_what_it_leaves_missing(fetched, monkeypatch, tmp_path):
    """New-user 21, 2: after a cut-short `fetch --all --dest`, a fetch without --all said "its
    missing files are written now" and wrote only the sets' files: most of the release stayed missing."""

    tree = fetch.release_tree(VERSION, all_python=True)
    dest = _lay_out_cut_short(monkeypatch, tree, tmp_path / "cut")
    narrower = fetched(dest)  # the library's files only
    said = " ".join(narrower.stderr.split())
    assert "its missing files are written now" not in said, said
    assert (
        f"the files this fetch lays out are written now; `patchkit fetch {VERSION} --all --dest {dest}` writes the rest"
        in said
    )


def test_a_lay_out_for_another_command_leaves_its_interrupt_report_alone(fetched, tmp_path):
    """Only `fetch --dest` lays out into its target: verify of releases (a scratch site) and workspace
    must not say "interrupted while laying out … run `patchkit fetch` again" for their own work."""
    from patchkit.base import signals
    from patchkit.releases import files as release_files

    tree = fetch.release_tree(VERSION, all_python=True)
    signals.new_run()
    release_files.lay_out(tree, tmp_path / "scratch")
    assert signals.interrupted_report()[0] == "interrupted before any change was made to the target"


def test_fetch_dest_force_keeps_a_copy_of_what_it_replaces_a_recorded_patch_over_a_hotfix_too(fetched, tmp_path):
    """A set applied with --force over a site hotfix: the tree-state fix's `fetch --dest --force`
    replaced that patched file (hotfix and patch) by the stock file, no copy kept, nothing said.
    Every file --force replaces is copied first, and said, the recorded set's file by its set."""
    from helpers import run_cli

    dest = tmp_path / "site"
    assert fetched(dest).returncode == 0
    spec = dest / "vllm/config/speculative.py"
    spec.write_bytes(b"# SITE HOTFIX: keep me\n" + FILES["vllm/config/speculative.py"])
    applied = run_cli("apply", "--target", dest, "--patches", _spec_library(tmp_path), "--no-guard", "--force")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    patched = spec.read_bytes()
    assert patched.startswith(b"# SITE HOTFIX") and b"# patched\n" in patched
    done = fetched(dest, "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    assert spec.read_bytes() == FILES["vllm/config/speculative.py"]
    (copy,) = (dest / ".patchkit" / "saved").glob("*/vllm/config/speculative.py")
    assert copy.read_bytes() == patched
    said = " ".join(done.stderr.split())
    assert "vllm/config/speculative.py is recorded as set demo's patched file" in said, done.stderr
    assert f"`cp -a -- {copy.parent.parent.parent}/. {dest.resolve()}/` puts it back" in said, done.stderr
    # an edit in a tree no apply recorded (no .patchkit/ yet): kept and said too
    other = tmp_path / "other"
    assert fetched(other).returncode == 0
    (other / "vllm/config/speculative.py").write_bytes(FILES["vllm/config/speculative.py"] + b"# my edit\n")
    again = fetched(other, "--force")
    assert again.returncode == 0 and "recorded as" not in again.stderr, again.stderr
    (copy,) = (other / ".patchkit" / "saved").glob("*/vllm/config/speculative.py")
    assert copy.read_bytes().endswith(b"# my edit\n")
    assert "--force replaced 1 file(s) that held other contents (vllm/config/speculative.py)" in again.stderr


def test_fetch_dest_over_a_symlinked_vllm_names_the_link_and_the_way_round_it(fetched, tmp_path):
    """review32 L1: `fetch --dest` over a `vllm` that is a symlink to a directory (vllm/ moved to
    another volume) said "vllm is not a plain directory (Not a directory)". It names the link and
    where it leads, writes nothing through it, and its fix, run, puts the files there."""
    import re
    import shlex
    import subprocess

    from helpers import assert_clean_failure, fingerprint

    moved = tmp_path / "volume" / "vllm-pkg"
    moved.mkdir(parents=True)
    (moved / "__init__.py").write_text("# moved here\n")
    dest = tmp_path / "site"
    dest.mkdir()
    (dest / "vllm").symlink_to(moved, target_is_directory=True)
    before = fingerprint(moved)
    for options in [(), ("--force",)]:
        done = fetched(dest, *options)
        assert_clean_failure(done, 2)
        text = " ".join(done.stderr.split())
        assert f"vllm is a symlink to {moved}" in text and "Not a directory" not in text, text
        assert fingerprint(moved) == before
    copy = re.search(r"then `([^`]*)` copies them into", text)
    assert copy and "--dest NEW" in text, text
    assert fetched(tmp_path / "new").returncode == 0
    subprocess.run(shlex.split(copy[1].replace("NEW", str(tmp_path / "new"))), check=True)
    assert (moved / "config" / "speculative.py").read_bytes() == FILES["vllm/config/speculative.py"]


def test_a_dest_out_of_inodes_is_said_as_such_and_the_same_command_completes_it(
    server, cache, monkeypatch, inode_tmpfs
):
    """The lay-out's full disk by inodes (a tmpfs with megabytes free and three inodes to spare) said
    "no space left ...: free at least 0.1 MB there". It names inodes, and once there are more, the
    same lay-out completes the tree."""
    from patchkit.releases import files as release_files

    mount, remount = inode_tmpfs
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    tree = fetch.release_tree(VERSION, all_python=True)
    dest = mount / "t"
    remount(3)
    with pytest.raises(TargetError, match="no free inode") as caught:
        release_files.lay_out_said(tree, dest)
    assert "df -i" in caught.value.hint and "free at least" not in caught.value.hint, caught.value.hint
    assert "same command again" in caught.value.hint
    remount(64)
    laid = release_files.lay_out_said(tree, dest)[0]
    assert all((dest / rel).read_bytes() == (tree / rel).read_bytes() for rel in laid)


def test_a_range_body_cut_mid_way_falls_back_to_the_whole_wheel(server, cache, monkeypatch):
    # urllib3's ProtocolError from a raw body read escaped every handler: exit 70, "a patchkit bug" (review40b M3)
    server.publish(WHEEL, build_wheel(), prefix="cut")
    use_index(monkeypatch, server.index("cut"))
    msgs: list[str] = []
    tree = fetch.release_tree(
        VERSION, ["vllm/config/speculative.py", "vllm/v1/spec_decode/eagle.py"], progress=msgs.append
    )
    assert (tree / "vllm/config/speculative.py").read_bytes() == FILES["vllm/config/speculative.py"]
    assert (tree / "vllm/v1/spec_decode/eagle.py").read_bytes() == FILES["vllm/v1/spec_decode/eagle.py"]
    assert fetch.last_fetch_stats.full_download
    assert (cache / "releases" / VERSION / WHEEL).read_bytes() == server.files[WHEEL]


def test_a_connection_that_breaks_every_time_is_a_network_failure_exit_4(server, cache, monkeypatch, tmp_path):
    server.publish(WHEEL, build_wheel(), prefix="cutall")
    use_index(monkeypatch, server.index("cutall"))
    with pytest.raises(FetchError, match=f"cannot download {WHEEL}") as raised:
        fetch.release_tree(VERSION, ["vllm/config/speculative.py"])
    assert raised.value.exit_code == 4
    rel = cache / "releases" / VERSION
    assert not (rel / WHEEL).exists() and not list(rel.glob("*.part"))
    done = run_cli(
        "fetch", VERSION, "--all", "--dest", tmp_path / "tree", env={"PIP_INDEX_URL": server.index("cutall")}
    )
    assert done.returncode == 4, done.stderr
    assert "patchkit bug" not in done.stderr and "check the network" in done.stderr, done.stderr
