"""`make test`'s `--dist loadgroup`: the tests that share a module's set-up run on one worker. If the
grouping stops working (a pytest or xdist upgrade), nothing fails but each worker builds the set-up again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

SHARED = """
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def built():
    with Path(os.environ["BUILDS"]).open("a") as builds:
        builds.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")


@pytest.mark.parametrize("n", range(8))
def test_shares(built, n):
    pass


@pytest.mark.parametrize("n", range(8))
def test_alone(n):
    pass
"""


def test_tests_that_share_a_module_fixture_build_it_once_under_loadgroup(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ("xdist_groups",)\n')
    (tmp_path / "test_shared.py").write_text(SHARED)
    builds = tmp_path / "builds"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # only xdist among the installed plugins (hypothesis' import was half of each process's CPU)
    env |= {"PYTHONPATH": str(TESTS), "BUILDS": str(builds), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    args = ["-q", "-p", "xdist", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert "16 passed" in done.stdout, done.stdout + done.stderr
    assert len(builds.read_text().splitlines()) == 1, builds.read_text()


GROUPS = """
def pytest_collection_finish(session):
    for item in session.items:
        names = sorted(str(mark.args[0]) for mark in item.iter_markers("xdist_group"))
        print("GROUPS", item.nodeid, ",".join(names))
"""


@pytest.fixture(scope="module")
def collected_groups(tmp_path_factory) -> dict[str, list[list[str]]]:
    """Each collected test's xdist groups, of the two modules whose sweeps are split: one collection."""
    plugin = tmp_path_factory.mktemp("groups")
    (plugin / "print_groups.py").write_text(GROUPS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin), str(TESTS)])}
    args = ["--collect-only", "-q", "-p", "print_groups", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "tests/test_sigkill.py", "tests/test_crash_safety.py"],
        cwd=TESTS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    groups = {line.split()[1]: line.split()[2:] for line in done.stdout.splitlines() if line.startswith("GROUPS ")}
    assert groups, done.stdout + done.stderr
    return groups


@pytest.mark.parametrize(
    ("module", "sweep", "parts"), [("test_sigkill.py", "", 4), ("test_crash_safety.py", "random_and_aimed", 2)]
)
def test_the_long_kill_sweeps_are_parts_each_in_a_group_of_its_own(collected_groups, module, sweep, parts):
    """make test's long poles were test_sigkill's 12 kills in one test and the crash sweep of apply
    and revert in one, each one worker's minutes: their parts each name a group of their own and are
    held in no group of their module's."""
    groups = [
        names for test, names in collected_groups.items() if test.startswith(f"tests/{module}::") and sweep in test
    ]
    assert len(groups) >= parts, collected_groups
    assert all(len(names) == 1 and "," not in names[0] for names in groups), groups
    assert len({names[0] for names in groups}) == len(groups), groups
