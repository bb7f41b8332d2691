"""pytest plugin (tests/conftest.py loads it): under `--dist loadgroup`, the tests that share a module's
set-up run on one worker, so that set-up is made once a run, not once a worker."""

from __future__ import annotations

from collections.abc import Generator

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Generator[None, None, None]:
    """Groups the tests before xdist's hook reads the groups, and writes them into the node ids after it."""
    for item in items:
        group = shared_set_up(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    yield
    if getattr(config.option, "loadgroup", False):  # set on xdist's workers
        for item in items:
            _group_in_node_id(item)


def shared_set_up(item: pytest.Item) -> str | None:
    """The group of the tests `item` shares its set-up with: its module's fixtures wider than a test it
    uses (tests/test_x.py::scenario,steps), else its module for the release and Ray tiers; None: alone
    or in the group the test names itself (an xdist_group mark: its parts spread over the workers).
    No `]` in a name: xdist takes a node id's group only from after the last `]` (a parameter's own `@`)."""
    if item.get_closest_marker("xdist_group") is not None:
        return None
    module = item.nodeid.split("::")[0]
    fixtures = getattr(item, "_fixtureinfo", None)
    definitions = fixtures.name2fixturedefs.items() if fixtures is not None else []
    shared = sorted(
        name for name, defs in definitions if any(d.scope != "function" and d.baseid == module for d in defs)
    )
    if shared:
        return f"{module}::{','.join(shared)}"
    if item.get_closest_marker("release") or item.get_closest_marker("ray"):
        return module
    return None


def _group_in_node_id(item: pytest.Item) -> None:
    """xdist's scheduler reads a test's group from its node id (`id@group`). xdist 3.8 writes it to
    `item._nodeid`, which pytest 9.2 no longer reads (pytest-dev/pytest-xdist#1386): written here where
    it did not take, as xdist names it."""
    marks = item.iter_markers("xdist_group")
    names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default")) for mark in marks})
    suffix = "@" + "_".join(names)
    if names and not item.nodeid.endswith(suffix):
        item._id = type(item._id).parse(item.nodeid + suffix)  # pytest >= 9.2
