"""Launch findings of review41a left open after session 31: a Ray launch's other nodes (F2), ..."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli_read_only
from launch_fixtures import DEEPSEEK_V3, DRAFTER, applied, serve, write_eagle3_setup, write_model


def preflight_notes(tree: Path, lib: Path, *launch: str) -> tuple[int, list[str], list[str]]:
    """(exit code, the JSON "notes", the text's note lines) of a --no-import preflight of `launch`."""
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--format", "json", "--no-import", "--", *launch
    )
    said = run_cli_read_only("preflight", "--target", tree, "--patches", lib, "--no-import", "--", *launch)
    assert said.returncode == done.returncode, said.stdout + said.stderr
    lines = (said.stdout + said.stderr).splitlines()
    text = [line.removeprefix("note: ") for line in lines if line.startswith("note: ")]
    return done.returncode, json.loads(done.stdout)["notes"], text


@pytest.mark.parametrize(
    ("words", "named"),
    [
        (["--distributed-executor-backend", "ray"], "--distributed-executor-backend ray"),
        (["--distributed-executor-backend=ray"], "--distributed-executor-backend ray"),
        (["-dpb", "ray", "-dp", "2"], "--data-parallel-backend ray"),
        (["--distributed-executor-backend", "mp"], None),
        ([], None),
    ],
)
def test_a_ray_launch_says_the_other_nodes_trees_are_not_judged_here(tmp_path, words, named):
    """F2: Ray starts workers on other nodes, each importing its own tree: the note names the
    command that judges them, in text and JSON alike."""
    tree, lib = write_eagle3_setup(tmp_path)
    applied(tree, lib)
    launch = serve(write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER), *words)
    _code, notes, text = preflight_notes(tree, lib, *launch)
    ray = [note for note in notes if "Ray" in note]
    assert [note for note in text if "Ray" in note] == ray
    if named is None:
        assert ray == []
    else:
        assert len(ray) == 1 and ray[0].startswith(f"{named}: "), notes
        assert "patchkit fleet verify" in ray[0] and "not judge" in ray[0]
