"""Each command loads the library once: whether it holds several sets, then the set (or sets) it
works on, from the same load (engine.resolve.library_sets passed down as `sets`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from launch_fixtures import write_eagle3_setup

from patchkit.cli.main import run_in_process
from patchkit.series import library
from patchkit.series.library import PatchSetDef

COMMANDS = (
    ("status",),
    ("diff",),
    ("verify", "--no-import"),
    ("revert", "--dry-run"),
    ("apply", "--dry-run"),
    ("preflight", "--no-import", "--", "vllm", "serve", "MODEL"),
)


def loads_by(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    counted = []
    load = library.load_library

    def counting(root: Path) -> dict[str, PatchSetDef]:
        counted.append(root)
        return load(root)

    monkeypatch.setattr(library, "load_library", counting)
    run_in_process(list(args))
    return len(counted)


def second_set(root: Path) -> None:
    """A second set beside eagle3, after it in library.toml's order."""
    shutil.copytree(root / "eagle3", root / "second")
    manifest = root / "second" / "set.toml"
    manifest.write_text(manifest.read_text().replace('name = "eagle3"', 'name = "second"'))
    (root / "library.toml").write_text('order = ["eagle3", "second"]\n')


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("sets", [1, 2])
def test_a_command_loads_the_library_once(tmp_path, monkeypatch, command, sets):
    tree, root = write_eagle3_setup(tmp_path)
    if sets == 2:
        second_set(root)
    verb, *rest = command
    assert loads_by(monkeypatch, verb, "--target", str(tree), "--patches", str(root), *rest) == 1
