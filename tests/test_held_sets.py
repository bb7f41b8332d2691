"""A write that is no library set's own is held to the sets whose files it touches (engine/held.py).

The toy set `gated` is eagle3's shape: a whitelist (its gate, read when vLLM builds its config) and a
model class that must support what the whitelist admits. An ad-hoc diff that leaves the whitelist
admitting while the model class lacks its part (the library's whitelist patch applied alone, a site
diff undoing the model's part, a wheel of the whitelist patch) is refused, nothing written; so is a
`revert --patch` of a diff no record holds over a file another set's record names (review40b H1, M7).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import GATED_CONTRACT as CONTRACT
from helpers import GATED_EAGLE_MODEL as EAGLE_MODEL
from helpers import GATED_MODEL as MODEL
from helpers import GATED_SPEC as SPEC
from helpers import GATED_STOCK_MODEL as STOCK_MODEL
from helpers import GATED_STOCK_SPEC as STOCK_SPEC
from helpers import GATED_WIDE_SPEC as WIDE_SPEC
from helpers import make_patch, run_cli, run_cli_writing, snapshot, write_library, write_tree, write_wheel


@pytest.fixture
def toy(tmp_path: Path) -> dict[str, Path]:
    """A stock tree, the library of `gated` (0001 the whitelist, 0002 the model) and its patches."""
    stock = write_tree(tmp_path / "stock", files={SPEC: STOCK_SPEC, MODEL: STOCK_MODEL})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    whitelist = make_patch(scratch, stock, {SPEC: WIDE_SPEC})
    model = make_patch(scratch, stock, {MODEL: EAGLE_MODEL})
    lib = write_library(tmp_path / "lib", {"0.16.0": [whitelist, model]}, name="gated")
    set_toml = lib / "gated" / "set.toml"
    text = set_toml.read_text()
    head, releases = text.split("\n[[releases]]", 1)
    set_toml.write_text(f"{head}\n{CONTRACT}\n[[releases]]{releases}")
    patched = write_tree(tmp_path / "patched", files={SPEC: WIDE_SPEC, MODEL: EAGLE_MODEL})
    files = {"whitelist": lib / "gated" / "0.16.0" / "0001-change.patch", "lib": lib, "stock": stock}
    files["undo_model"] = tmp_path / "undo_model.patch"
    files["undo_model"].write_bytes(make_patch(scratch, patched, {MODEL: STOCK_MODEL}))
    files["tweak"] = tmp_path / "tweak.patch"
    files["tweak"].write_bytes(make_patch(scratch, patched, {SPEC: WIDE_SPEC + "# site tweak\n"}))
    files["model_only"] = tmp_path / "model_only.patch"
    files["model_only"].write_bytes(make_patch(scratch, stock, {MODEL: STOCK_MODEL + "# site tweak\n"}))
    return files


def tree_of(toy: dict[str, Path], where: Path) -> Path:
    return write_tree(where, files={SPEC: STOCK_SPEC, MODEL: STOCK_MODEL})


def apply(tree: Path, toy: dict[str, Path], *args: object):
    return run_cli_writing("apply", "--target", tree, "--patches", toy["lib"], "--no-import", *args)


def test_the_whitelist_patch_alone_is_refused_and_names_the_whole_set(tmp_path, toy):
    tree = tree_of(toy, tmp_path / "t")
    before = snapshot(tree)
    done = apply(tree, toy, "--patch", toy["whitelist"])
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "gate" in said and MODEL in said and "nothing was written" in said
    assert "--set gated" in said  # the fix: the whole set
    assert snapshot(tree) == before and not (tree / ".patchkit" / "state.json").exists()
    assert apply(tree, toy, "--set", "gated").returncode == 0  # the fix works
    assert snapshot(tree)[SPEC] == WIDE_SPEC.encode()


def test_a_site_diff_undoing_the_models_part_of_an_applied_set_is_refused(tmp_path, toy):
    tree = tree_of(toy, tmp_path / "t")
    assert apply(tree, toy, "--set", "gated").returncode == 0
    before, record = snapshot(tree), (tree / ".patchkit" / "state.json").read_bytes()
    done = apply(tree, toy, "--patch", toy["undo_model"])
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "SupportsEagle3" in said and "patchkit revert" in said and "--set gated" in said
    assert snapshot(tree) == before and (tree / ".patchkit" / "state.json").read_bytes() == record


def test_diffs_that_keep_the_set_whole_or_its_gate_stock_still_apply(tmp_path, toy):
    applied = tree_of(toy, tmp_path / "a")
    assert apply(applied, toy, "--set", "gated").returncode == 0
    done = apply(applied, toy, "--patch", toy["tweak"])  # the whitelist tweaked, the model still patched
    assert done.returncode == 0, done.stdout + done.stderr
    stock = tree_of(toy, tmp_path / "s")
    done = apply(stock, toy, "--patch", toy["model_only"])  # the gate stays stock: vLLM refuses at start
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wheel_of_the_whitelist_patch_alone_is_refused(tmp_path, toy):
    stock = write_wheel(tmp_path / "in", files={SPEC: STOCK_SPEC.encode(), MODEL: STOCK_MODEL.encode()})
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", toy["lib"], "--patch", toy["whitelist"])
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "gate" in said and "no wheel was written" in said and "--set gated" in said
    assert not list(out.glob("*.whl")) if out.exists() else True
    done = run_cli("wheel", stock, "--out", out, "--patches", toy["lib"], "--set", "gated")
    assert done.returncode == 0, done.stdout + done.stderr


def test_revert_of_an_unrecorded_diff_over_a_recorded_sets_file_is_refused(tmp_path, toy):
    tree = tree_of(toy, tmp_path / "t")
    assert apply(tree, toy, "--set", "gated").returncode == 0
    before, record = snapshot(tree), (tree / ".patchkit" / "state.json").read_bytes()
    model_patch = toy["lib"] / "gated" / "0.16.0" / "0002-change.patch"
    done = run_cli_writing("revert", "--target", tree, "--patches", toy["lib"], "--patch", model_patch)
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert MODEL in said and "gated" in said and "nothing was written" in said
    assert snapshot(tree) == before and (tree / ".patchkit" / "state.json").read_bytes() == record
