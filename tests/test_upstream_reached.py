"""Upstream's change reaching a tree patchkit did not write it into: by an upgrade of vLLM over a
patched tree, in a checkout with no RECORD, or only in some of a set's files (audit23b R1, R2, R3).
patchkit never records, or reverses, a change it did not write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import EAGLE_MODEL, MODEL, MODEL_PY, SPEC, SPEC_PY, make_patch, patched_spec, pip_install, write_library

from patchkit.store.state import read_state


@pytest.fixture
def library(tree, scratch) -> Path:
    """One open-ended set: 0001 adds "deepseek" to the spec list, 0002 patches the model file."""
    patches = [make_patch(scratch, tree, {SPEC: patched_spec()}), make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]
    return write_library(scratch / "lib", {"0.16.0": patches}, versions={"0.16.0": ">=0.16.0"}, upstream=None)


FIXED = {SPEC: patched_spec(), MODEL: EAGLE_MODEL}


def files_of(site: Path) -> dict[str, bytes]:
    return {path: (site / path).read_bytes() for path in (SPEC, MODEL)}


def state_of(run, site: Path, library: Path) -> str:
    status = run("status", "--target", site, "--patches", library, "--format", "json")
    return json.loads(status.stdout)["state"]


def test_an_upgrade_onto_a_release_holding_the_change_is_upstream_and_revert_keeps_it(run, tmp_path, library):
    """Patched on 0.16.0, then `pip install -U` to a 0.17.0 whose own files hold the change (R1)."""
    site = tmp_path / "up"
    pip_install(site, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    assert run("apply", "--target", site, "--patches", library).exit_code == 0
    pip_install(site, "0.17.0", FIXED)  # .patchkit/ and the guard stay, as pip leaves them
    upgraded = files_of(site)

    assert state_of(run, site, library) == "upstream"
    applied = run("apply", "--target", site, "--patches", library)
    assert applied.exit_code == 0, applied.output
    assert "no record of it" not in applied.output
    assert "already hold this set's change" in applied.output
    assert not read_state(site).entries and files_of(site) == upgraded

    reverted = run("revert", "--target", site, "--patches", library)
    assert reverted.exit_code == 0, reverted.output
    assert files_of(site) == upgraded  # upstream's change, as the release ships it


def checkout(root: Path, files: dict[str, str], version: str = "0.17.1.dev3+gabc1234") -> Path:
    """A vLLM source checkout: vllm/ and its _version.py, no dist-info and so no RECORD."""
    for rel, content in {"vllm/__init__.py": "", "vllm/_version.py": f'__version__ = "{version}"\n', **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return root


def test_a_checkout_holding_the_change_is_not_recorded_nor_reversed(run, tmp_path, library):
    """No RECORD proves stock (R2): files that already hold the change are upstream, or applied by
    hand; apply records nothing, revert leaves them."""
    co = checkout(tmp_path / "co", FIXED)
    status = run("status", "--target", co, "--patches", library, "--format", "json")
    assert json.loads(status.stdout)["state"] == "upstream", status.output
    assert "upstream, or applied by hand" in run("status", "--target", co, "--patches", library).output

    applied = run("apply", "--target", co, "--patches", library)
    assert applied.exit_code == 0, applied.output
    assert "no record of it" not in applied.output
    assert not read_state(co).entries and files_of(co) == {p: c.encode() for p, c in FIXED.items()}

    reverted = run("revert", "--target", co, "--patches", library)
    assert reverted.exit_code == 0, reverted.output
    assert files_of(co) == {p: c.encode() for p, c in FIXED.items()}


def test_a_checkout_patchkit_patched_still_reverts(run, tmp_path, library):
    """The other side: what patchkit applied (and recorded) on a checkout it reverses byte for byte."""
    co = checkout(tmp_path / "co", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    assert run("apply", "--target", co, "--patches", library).exit_code == 0
    assert state_of(run, co, library) == "applied"
    assert run("revert", "--target", co, "--patches", library).exit_code == 0
    assert files_of(co) == {SPEC: SPEC_PY.encode(), MODEL: MODEL_PY.encode()}
