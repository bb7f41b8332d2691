"""Fixtures only; the helpers the tests share are in helpers.py."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import helpers
import platformdirs
import pytest
from helpers import FAST_PROFILE, cli_runner, forget_behaviour_stand_ins, write_tree
from hypothesis import settings
from index_server import IndexServer

pytest_plugins = ("xdist_groups",)

# `make test-fast` runs with --hypothesis-profile=fast: helpers.examples gives each property a share of its
# examples there. Registered here, before Hypothesis' plugin loads the profile it is given.
settings.register_profile(FAST_PROFILE)

# patchkit.base.seal keeps its key in the user's state directory and caches it for the process: the
# tests' own directory (never the user's key), set before any fixture seals a cache entry, and the
# same for every xdist worker and every run, as the release tier's cache (the user's) is: with a key
# per worker, each took the others' cached releases for unsealed ones and fetched them again while
# they read them. A test that needs a key of its own takes a cache directory of its own too.
SESSION_STATE = Path(platformdirs.user_state_dir("patchkit-tests"))
os.environ["XDG_STATE_HOME"] = str(SESSION_STATE)

# A shell starts a background job (`make test &`, nohup, some CI runners) with SIGINT ignored, and every
# process the tests start inherits that: Python then never raises KeyboardInterrupt, and the tests that
# send a real Ctrl-C to patchkit failed. The tests model a person at a terminal: SIGINT as Python sets it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The modules that take longest (pytest --durations on this 2-core machine): started first, so that
# the workers end together rather than one of them running the longest module last.
LONGEST_FIRST = (
    "tests/test_sigkill.py",  # ~400 s of wall time at load 5
    "tests/test_crash_safety.py",  # ~330 s, most of it the random and aimed sweep
    "tests/test_fleet.py",  # ~200 s: the Ray cluster and its nodes
    "tests/test_fuzz.py",
    "tests/test_package.py",
    "tests/test_workflow.py",
    "tests/test_docs.py",
    "tests/test_wheel_installed_release.py",
)


# Where PYTHONDONTWRITEBYTECODE is set (this machine), pytest rewrote every test module's asserts again
# in each xdist worker on each run: ~5 s of CPU a worker, most of its collection. Its rewritten modules
# are cached (tests/__pycache__, atomic writes) while collecting; the tests run with the setting as it was.
_DONT_WRITE_BYTECODE = sys.dont_write_bytecode
sys.dont_write_bytecode = False


def pytest_collection_finish(session: pytest.Session) -> None:
    sys.dont_write_bytecode = _DONT_WRITE_BYTECODE


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # xdist: keep the order below, not biggest group first
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup` (make test), the tests that share a module's set-up run on one worker
    (xdist_groups.py); every other test goes wherever a worker is free, LONGEST_FIRST first."""
    rank = {module: place for place, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: else as collected


@pytest.fixture(scope="session", autouse=True)
def _a_pycache_template_of_the_session(tmp_path_factory) -> None:
    """helpers.warm_pycache_prefix's template: in the session's temporary root, made once for all its workers."""
    base = tmp_path_factory.getbasetemp()
    helpers.PYCACHE_TEMPLATE = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "pycache-template"


@pytest.fixture
def tree(tmp_path) -> Path:
    return write_tree(tmp_path / "site")


@pytest.fixture
def open_tmp_path() -> Iterator[Path]:
    """A temporary directory another user can reach: 0711 in the system's temp directory (1777).
    tmp_path lies under pytest-of-<user>/, which every pytest session starting on the machine makes
    0700 again, so a test that opened it for another user failed whenever one started meanwhile."""
    path = Path(tempfile.mkdtemp(prefix="patchkit-open-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def scratch(tmp_path) -> Path:
    path = tmp_path / "scratch"
    path.mkdir()
    return path


@pytest.fixture
def open_library(tree, scratch) -> Path:
    """A library of one open-ended set (helpers.open_ended_library) made on `tree`."""
    return helpers.open_ended_library(tree, scratch)


@pytest.fixture
def diff_applied(run, tree, tmp_path) -> tuple[Path, Path]:
    """(tree, patch): `tree` with spec.py patched by one diff (`apply --patch`), and the diff."""
    patch = tmp_path / "deepseek.diff"
    patch.write_bytes(helpers.make_patch(tmp_path, tree, {helpers.SPEC: helpers.patched_spec()}))
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    return tree, patch


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
        # each test's own: the wheels it writes are published there (helpers.write_wheel)
        cache = tmp_path_factory.mktemp("cache")
        monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(cache))
        monkeypatch.setattr(helpers, "TEST_CACHE", cache)
    else:
        monkeypatch.setattr(helpers, "TEST_CACHE", None)


@pytest.fixture(autouse=True)
def _the_installed_library_unless_a_test_says_otherwise(monkeypatch):
    """A PATCHKIT_LIBRARY exported in the developer's shell must not change which library the tests read."""
    monkeypatch.delenv("PATCHKIT_LIBRARY", raising=False)


@pytest.fixture(autouse=True)
def _a_cache_seal_key_of_the_test_session(monkeypatch):
    """patchkit.base.seal keeps its key in the user's state directory: the tests' key is the session's
    own, the same for every test (a test that changes XDG_STATE_HOME gets it back here)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(SESSION_STATE))


@pytest.fixture(autouse=True)
def _no_behaviour_stand_ins_left():
    """A behaviour harness serves vllm.* with stand-ins in this process: not to the tests after it."""
    meta_path, dont_write_bytecode = list(sys.meta_path), sys.dont_write_bytecode
    yield
    forget_behaviour_stand_ins(meta_path, dont_write_bytecode)


@pytest.fixture
def no_thread_left() -> Iterator[None]:
    """Every thread the test started (a fleet agent's among them) has ended by the end of its teardown:
    one left running acts later, inside another test."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 10
    left = [thread for thread in threading.enumerate() if thread not in before]
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    running = [thread.name for thread in left if thread.is_alive()]
    assert not running, f"threads this test left running: {running}"


@pytest.fixture
def inode_tmpfs(tmp_path):
    """remount(n): a tmpfs (64 MiB, root only) with room for `n` more inodes than it holds now."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "mnt"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=4096", "tmpfs", mount]).returncode:
        pytest.skip("cannot mount a tmpfs here")

    def remount(more: int) -> None:
        st = os.statvfs(mount)
        subprocess.run(["mount", "-o", f"remount,nr_inodes={st.f_files - st.f_ffree + more}", mount], check=True)

    yield mount, remount
    subprocess.run(["umount", mount], check=True)
