"""vllm/ moved to another volume, a symlink left in its place (`site-packages/vllm -> /data/vllm`):
patchkit judges and patches the tree the interpreter imports (its site-packages, with vLLM's
dist-info, the record and the guard), through that one symlink, as the guard judges it; never the
moved directory as a tree of its own (no dist-info: "not an installed vLLM", "applied by hand")."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers import (
    LOAD_LIKE_VLLM,
    SPEC,
    SPEC_PY,
    make_patch,
    make_venv,
    patched_spec,
    pip_install,
    purelib,
    run_cli_read_only,
    run_cli_writing,
    write_library,
)


def _venv(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the venv's python, its site-packages, a library whose set changes SPEC)."""
    make_venv(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    site = purelib(python)
    pip_install(site, "0.16.0", {SPEC: SPEC_PY})
    stock = tmp_path / "stock"
    pip_install(stock, "0.16.0", {SPEC: SPEC_PY})
    patch = make_patch(tmp_path, stock, {SPEC: patched_spec()})
    return python, site, write_library(tmp_path / "lib", {"0.16.0": [patch]}, name="demo")


def _move(site: Path, volume: Path) -> Path:
    volume.mkdir()
    (site / "vllm").rename(volume / "vllm")
    (site / "vllm").symlink_to(volume / "vllm", target_is_directory=True)
    return volume / "vllm"


def _guard(python: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", LOAD_LIKE_VLLM, site], capture_output=True, text=True, check=False)


def test_apply_through_a_moved_vllm_installs_the_guard_in_the_site_and_patches_the_moved_files(tmp_path):
    python, site, library = _venv(tmp_path)
    moved = _move(site, tmp_path / "volume")
    done = run_cli_writing("apply", "--python", python, "--patches", library, "--no-import")
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "launch guard installed" in said, said
    assert "not an installed vLLM" not in said and f"{site / 'vllm'}  (found by --python" in said, said
    assert (moved / SPEC.removeprefix("vllm/")).read_text() == patched_spec()
    assert (site / ".patchkit" / "state.json").is_file() and not (moved.parent / ".patchkit").exists()
    guard = _guard(python, site)
    assert guard.returncode == 0 and "patchkit_guard" in guard.stdout, guard.stderr[-600:]


def test_a_tree_applied_then_moved_is_applied_by_every_selection_and_apply_leaves_it(tmp_path):
    """Not "unrecorded: applied by hand", nor "upstream": the record beside the symlink is the tree's."""
    python, site, library = _venv(tmp_path)
    assert run_cli_writing("apply", "--python", python, "--patches", library, "--no-import").returncode == 0
    _move(site, tmp_path / "volume")
    for selection in (("--python", python), ("--target", site), ("--target", site / "vllm")):
        done = run_cli_read_only("status", *selection, "--patches", library)
        assert done.returncode == 0 and "state    applied" in done.stdout, (selection, done.stdout + done.stderr)
        assert f"vLLM     {site / 'vllm'}  " in done.stdout, done.stdout
    done = run_cli_writing("apply", "--python", python, "--patches", library, "--no-import")
    assert done.returncode == 0 and "already applied" in done.stdout and "upstream" not in done.stdout, done.stdout
