"""A record's patch names are read back from the tree (review32 L1 s_pname): one that is no patch
file's name (`../../../etc/passwd`, a '/') is damaged, to the commands and the guard; a plain name
that is not the set's patch of that sha256 is judged by the set's real patches (by their bytes),
and a revert never warns that files it wrote are "edited since", its other sets' files least of all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import (
    MODEL,
    MODEL_PY,
    SPEC,
    SPEC_PY,
    load_plugins_like_vllm,
    make_patch,
    pip_install,
    run_cli_judged,
    run_cli_read_only,
    run_cli_writing,
    write_library,
)

SETS = {
    "spec": {SPEC: SPEC_PY.replace('"qwen",\n', '"qwen",\n    "gemma",\n')},
    "model": {MODEL: MODEL_PY + "# eagle\n"},
}


def _applied(tmp_path: Path) -> tuple[Path, Path]:
    stock = {SPEC: SPEC_PY, MODEL: MODEL_PY}
    site, library = tmp_path / "site", tmp_path / "lib"
    pip_install(site, "0.16.0", stock)
    for name, edits in SETS.items():
        write_library(library, {"0.16.0": [make_patch(tmp_path, site, edits)]}, name=name)
    done = run_cli_writing("apply", "--no-import", "--target", site, "--patches", library)
    assert done.returncode == 0, done.stdout + done.stderr
    return site, library


def _renamed(site: Path, name: str) -> None:
    state = site / ".patchkit/state.json"
    data = json.loads(state.read_text())
    entry = next(e for e in data["entries"] if e["set"] == "spec")
    entry["patches"][0]["name"] = name
    state.write_text(json.dumps(data))


@pytest.mark.parametrize("name", ["../../../etc/passwd", "sub/0001-change.patch", "..", ""])
def test_a_recorded_patch_name_no_patch_file_has_is_damaged_to_the_commands_and_the_guard(tmp_path, name):
    site, library = _applied(tmp_path)
    _renamed(site, name)
    for command in ("status", "revert"):
        done = run_cli_judged(command, "--target", site, "--patches", library)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "damaged" in done.stderr and "patch" in done.stderr and "mv " in done.stderr, done.stderr
    assert load_plugins_like_vllm(site).returncode != 0
    assert (site / SPEC).read_text() == SETS["spec"][SPEC]  # nothing written


def test_a_renamed_patch_of_the_sets_bytes_is_judged_by_the_set_and_revert_warns_of_nothing(tmp_path):
    site, library = _applied(tmp_path)
    _renamed(site, "0001-renamed.patch")
    status = run_cli_read_only("status", "--target", site, "--patches", library)
    assert status.returncode == 0, status.stdout + status.stderr
    done = run_cli_writing("revert", "--target", site, "--patches", library)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "edited since" not in done.stderr and "copy" not in done.stderr, done.stderr
    assert (site / SPEC).read_text() == SPEC_PY and (site / MODEL).read_text() == MODEL_PY


def test_a_record_whose_patches_are_not_at_hand_says_so_for_its_own_files_only(tmp_path):
    """A set's recorded patch (by its bytes) no library at hand holds: only that set's files are
    kept as copies, said as what is true (its patches are not at hand), never "edited since"."""
    site, library = _applied(tmp_path)
    state = site / ".patchkit/state.json"
    data = json.loads(state.read_text())
    next(e for e in data["entries"] if e["set"] == "spec")["patches"][0]["sha256"] = "ab" * 32
    state.write_text(json.dumps(data))
    done = run_cli_writing("revert", "--force", "--target", site, "--patches", library)
    assert done.returncode == 0, done.stdout + done.stderr
    assert MODEL not in done.stderr and "edited since" not in done.stderr, done.stderr
    assert (site / SPEC).read_text() == SPEC_PY and (site / MODEL).read_text() == MODEL_PY
