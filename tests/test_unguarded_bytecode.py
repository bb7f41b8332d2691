"""A tree applied without the launch guard: nothing refuses a launch at start-up, so status and verify
judge the bytecode the launch loads themselves, under the pycache prefix its interpreter's start-up
sets (a .pth line), where Python reads it instead of __pycache__."""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import sys
from pathlib import Path

from helpers import (
    MODEL,
    MODEL_PY,
    SPEC,
    SPEC_PY,
    make_venv,
    patched_spec,
    pip_install,
    purelib,
    run_cli_read_only,
    run_cli_writing,
    spec_library,
    stale_pyc_under_prefix,
    write_tree,
)
from launch_fixtures import write_model


def _venv_applied_without_guard(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """(python, site, library, prefix): a venv's vLLM applied with --no-guard, whose start-up sets a
    pycache prefix through a .pth file; nothing under the prefix yet."""
    make_venv(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    site = purelib(python)
    pip_install(site, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    library = spec_library(tmp_path / "scratch")
    prefix = tmp_path / "pfx"
    (site / "zz_startup.pth").write_text(f"import sys; sys.pycache_prefix = {str(prefix)!r}\n")
    done = run_cli_writing("apply", "--no-guard", "--no-import", "--python", python, "--patches", library)
    assert done.returncode == 0 and not (site / "patchkit_guard.py").exists(), done.stdout + done.stderr
    assert (site / SPEC).read_text() == patched_spec()
    return python, site, library, prefix


def test_status_and_verify_fail_on_stale_bytecode_under_the_startup_prefix_without_a_guard(tmp_path):
    python, site, library, prefix = _venv_applied_without_guard(tmp_path)
    own = ("--python", python, "--patches", library)
    clean = run_cli_read_only("status", *own)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    pyc = stale_pyc_under_prefix(prefix, site, SPEC)  # what the launch's Python loads for spec.py
    status = run_cli_read_only("status", *own)
    assert status.returncode == 1, status.stdout + status.stderr
    said = status.stdout + status.stderr
    assert "no launch guard runs" in said and str(pyc) in said, said
    assert "the launch guard refuses" not in said, said  # no guard is installed to refuse it
    document = json.loads(run_cli_read_only("status", "--format", "json", *own).stdout)
    fix = json.dumps(document)
    assert str(pyc) in fix and "rm -f" in fix, fix
    verify = run_cli_read_only("verify", "--no-import", *own)
    assert verify.returncode == 1 and str(pyc) in verify.stdout + verify.stderr, verify.stdout + verify.stderr
    pyc.unlink()  # the fix said: Python compiles the source again
    assert run_cli_read_only("status", *own).returncode == 0
    assert run_cli_read_only("verify", "--no-import", *own).returncode == 0


def _unchecked_pyc_in_pycache(site: Path) -> Path:
    """An unchecked-hash .pyc of other bytes than SPEC's where Python reads it without a prefix."""
    cache = site / "vllm" / "config" / "__pycache__"
    cache.mkdir(exist_ok=True)
    other = site.parent / "other.py"
    other.write_text("STOCK = True\n")
    pyc = cache / f"spec.{sys.implementation.cache_tag}.pyc"
    mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
    return Path(py_compile.compile(str(other), cfile=str(pyc), doraise=True, invalidation_mode=mode))


def test_without_a_guard_stale_bytecode_in_pycache_fails_status_and_preflight_and_apply_fixes_it(tmp_path):
    """No prefix: the launch reads __pycache__, and a stale unchecked-hash .pyc there runs in place of
    the patched source; status said "applied" and preflight passed."""
    python, site, library, _prefix = _venv_applied_without_guard(tmp_path)
    (site / "zz_startup.pth").unlink()  # no prefix: __pycache__ is where the launch reads bytecode
    own = ("--python", python, "--patches", library)
    pyc = _unchecked_pyc_in_pycache(site)
    status = run_cli_read_only("status", *own)
    said = status.stdout + status.stderr
    assert status.returncode == 1 and "no launch guard runs" in said and pyc.name in said, said
    write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    launch = run_cli_read_only(
        "preflight", *own, "--no-import", "--", python.parent / "vllm", "serve", tmp_path / "model"
    )
    said = launch.stdout + launch.stderr
    assert launch.returncode == 1 and "tree-state" in said and pyc.name in said, said
    fixed = run_cli_writing("apply", "--no-import", *own)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert run_cli_read_only("status", *own).returncode == 0


def test_without_a_guard_bytecode_the_guard_refuses_to_judge_fails_status_with_its_fix_never_exit_70(tmp_path):
    """gate29: status judges an unguarded tree's bytecode with the guard's code, outside the guard's
    own catch (engine.guard.unguarded_stale): a __pycache__ no Python wrote (over 65,536 entries, or a
    symlink) raised out of it as an internal error, exit 70. Now it fails (exit 1) as what it is, with
    no word of a guard refusing (none is installed) and the fix; removed, status passes."""
    tree = tmp_path / "site"
    write_tree(tree)
    library = spec_library(tmp_path / "scratch")
    own = ("--target", tree, "--patches", library)
    assert run_cli_writing("apply", "--no-guard", "--no-import", *own).returncode == 0
    cache = tree / "vllm/config/__pycache__"
    cache.mkdir()
    for index in range(65_537):
        os.mknod(f"{cache}/x{index}")
    status = run_cli_read_only("status", *own)
    said = " ".join((status.stdout + status.stderr).split())
    assert status.returncode == 1 and "holds more than 65536 files: not what Python writes" in said, said
    assert "no launch guard runs, and the bytecode a launch may load cannot be judged" in said, said
    assert "the launch guard refuses" not in said and f"fix: remove {cache}" in said, said
    shutil.rmtree(cache)
    (tmp_path / "elsewhere").mkdir()
    cache.symlink_to(tmp_path / "elsewhere")
    status = run_cli_read_only("status", *own)
    said = " ".join((status.stdout + status.stderr).split())
    assert status.returncode == 1 and f"run `rm -f -- {cache}`" in said, said
    cache.unlink()
    assert run_cli_read_only("status", *own).returncode == 0
