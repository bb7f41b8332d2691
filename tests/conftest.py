"""Fixtures only; the helpers the tests share are in helpers.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import cli_runner, forget_behaviour_stand_ins, write_tree
from index_server import IndexServer


@pytest.hookimpl(tryfirst=True)  # before xdist's, which names each test's group in its node id
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup` (make test), a module's tests run on one worker when they share more than
    the test: a module-scoped fixture (a Ray cluster, a built wheel, fetched releases: made once), or the
    release cache they fill in turn. Every other test goes wherever a worker is free."""
    for item in items:
        if _shares_its_module(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def _shares_its_module(item: pytest.Item) -> bool:
    if item.get_closest_marker("release") or item.get_closest_marker("ray"):
        return True
    module = item.nodeid.split("::")[0]
    fixtures = getattr(item, "_fixtureinfo", None)
    definitions = fixtures.name2fixturedefs.values() if fixtures is not None else []
    return any(d.scope != "function" and d.baseid == module for defs in definitions for d in defs)


@pytest.fixture
def tree(tmp_path) -> Path:
    return write_tree(tmp_path / "site")


@pytest.fixture
def scratch(tmp_path) -> Path:
    path = tmp_path / "scratch"
    path.mkdir()
    return path


@pytest.fixture
def server():
    """A local package index (index_server.py) that the fetcher's tests publish wheels on."""
    index = IndexServer()
    yield index
    index.stop()


@pytest.fixture
def run():
    return cli_runner()


@pytest.fixture(autouse=True)
def _unit_tests_see_no_fetched_releases(request, tmp_path_factory, monkeypatch):
    """Small trees claim real version numbers; the fetch cache must not hold the real releases' RECORDs
    for them. Tests marked `release` use the real cache."""
    if request.node.get_closest_marker("release") is None:
        monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "empty-cache"))


@pytest.fixture(autouse=True)
def _the_installed_library_unless_a_test_says_otherwise(monkeypatch):
    """A PATCHKIT_LIBRARY exported in the developer's shell must not change which library the tests read."""
    monkeypatch.delenv("PATCHKIT_LIBRARY", raising=False)


@pytest.fixture(autouse=True)
def _a_cache_seal_key_of_the_test_session(tmp_path_factory, monkeypatch):
    """patchkit.base.seal keeps its key in the user's state directory: the tests' key is the session's own."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.getbasetemp() / "state"))


@pytest.fixture(autouse=True)
def _no_behaviour_stand_ins_left():
    """A behaviour harness serves vllm.* with stand-ins in this process: not to the tests after it."""
    meta_path, dont_write_bytecode = list(sys.meta_path), sys.dont_write_bytecode
    yield
    forget_behaviour_stand_ins(meta_path, dont_write_bytecode)
