"""A site-packages reached through a symlinked directory (`/opt/venv -> /data/venv`, macOS's /tmp):
under a pycache prefix Python keys a module's bytecode by its path as the import path names it,
symlinks kept, and the guard judges it there. status, preflight and run judge the same path: the
one the user named (--target) or the interpreter imports vllm from (--python), not only the real one."""

from __future__ import annotations

import sys

import pytest
from helpers import (
    MODEL_PY,
    load_plugins_like_vllm,
    make_patch,
    make_venv,
    purelib,
    run_cli_judged,
    run_cli_writing,
    stale_pyc_under_prefix,
    warm_pycache_prefix,
    write_tree,
)
from launch_fixtures import (
    DEEPSEEK,
    DEEPSEEK_V3,
    DRAFTER,
    KIMI,
    findings,
    patchkit_run,
    serve,
    stale_under_a_prefix,
    stand_in_launch,
    write_eagle3_setup,
    write_model,
)

from patchkit.tree import target

MODEL = "vllm/models/model.py"


@pytest.fixture
def linked(tmp_path, scratch):
    """(the site as a symlink names it, the patch): applied with the guard, through its real path."""
    site = write_tree(tmp_path / "real" / "site")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    assert run_cli_writing("apply", "--target", site, "--patch", diff).returncode == 0
    link = tmp_path / "venv-link"
    link.symlink_to(site, target_is_directory=True)
    return link, diff


def test_status_through_a_symlinked_target_judges_the_prefix_where_the_launch_reads_it(linked, tmp_path):
    link, diff = linked
    prefix = warm_pycache_prefix(tmp_path / "pfx")
    pyc = stale_pyc_under_prefix(prefix, link, MODEL)
    env = {"PYTHONPYCACHEPREFIX": str(prefix)}
    assert load_plugins_like_vllm(link, **env).returncode != 0  # the guard refuses: the stock .pyc would run
    done = run_cli_judged("status", "--target", link, "--patch", diff, env=env)
    said = " ".join(done.stdout.split())
    assert done.returncode != 0 and f"{pyc} (under the pycache prefix) is unchecked-hash" in said, done.stdout
    assert f"run `rm -f -- {pyc}`" in said, said
    pyc.unlink()
    assert load_plugins_like_vllm(link, **env).returncode == 0
    assert run_cli_judged("status", "--target", link, "--patch", diff, env=env).returncode == 0


def test_status_through_an_interpreter_importing_from_a_symlinked_path_judges_that_path(linked, tmp_path):
    """--python: the probe's vllm location as the interpreter's sys.path gives it (a .pth line here,
    which patchkit's own process does not read)."""
    link, diff = linked
    venv = tmp_path / "venv"
    make_venv(venv)
    (purelib(venv / "bin" / "python") / "site-link.pth").write_text(f"{link}\n")
    prefix = warm_pycache_prefix(tmp_path / "pfx")
    pyc = stale_pyc_under_prefix(prefix, link, MODEL)
    env = {"PYTHONPYCACHEPREFIX": str(prefix)}
    done = run_cli_judged("status", "--python", venv / "bin" / "python", "--patch", diff, env=env)
    assert done.returncode != 0 and f"{pyc} (under the pycache prefix)" in " ".join(done.stdout.split()), done.stdout


def test_apply_through_a_symlinked_target_removes_the_stale_bytecode_the_launch_would_read(linked, tmp_path):
    """apply fixes what the guard refuses: the stale .pyc under the prefix at the path named."""
    link, diff = linked
    prefix = warm_pycache_prefix(tmp_path / "pfx")
    pyc = stale_pyc_under_prefix(prefix, link, MODEL)
    env = {"PYTHONPYCACHEPREFIX": str(prefix)}
    done = run_cli_writing("apply", "--target", link, "--patch", diff, env=env)
    assert done.returncode == 0 and not pyc.exists(), done.stdout + done.stderr
    assert load_plugins_like_vllm(link, **env).returncode == 0


def test_preflight_through_a_symlinked_target_fails_where_the_guard_refuses(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    link = tmp_path / "site-link"
    link.symlink_to(tree, target_is_directory=True)
    prefix = tmp_path / "pfx"
    pyc = stale_pyc_under_prefix(prefix, link, DEEPSEEK)
    command = serve(write_model(tmp_path / "ds", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    launch = ["env", f"PYTHONPYCACHEPREFIX={prefix}", *command]
    args = ("preflight", "--target", link, "--patches", library, "--format", "json", "--no-import", "--")
    done = run_cli_judged(*args, *launch)
    assert done.returncode == 1, done.stdout + done.stderr
    tree_state = findings(done)["tree-state"]
    assert f"{pyc} (under the pycache prefix)" in tree_state["message"], tree_state
    assert tree_state["fix"] == f"run `rm -f -- {pyc}` (Python compiles the source again)"
    pyc.unlink()
    assert run_cli_judged(*args, *launch).returncode == 0


def test_run_through_a_symlinked_target_does_not_launch_what_the_guard_refuses(tmp_path):
    tree, library, command, env, marker = stand_in_launch(tmp_path)
    env = {**env, "PATCHKIT_CACHE_DIR": str(tmp_path / "own-cache")}
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    link = tmp_path / "site-link"
    link.symlink_to(tree, target_is_directory=True)
    prefixed, pyc, done = stale_under_a_prefix(link, library, command, env, marker, tmp_path / "pfx", KIMI)
    said = " ".join(done.stdout.split())
    assert done.returncode == 1 and not marker.exists(), said + done.stderr
    assert f"{pyc} (under the pycache prefix) is unchecked-hash bytecode" in said, said
    pyc.unlink()
    assert patchkit_run(link, library, prefixed, env)[1].returncode == 7


def test_a_launchs_pycache_prefix_is_its_start_ups_else_its_own_else_this_processs(monkeypatch, tmp_path):
    """tree.target.launch_prefix, the one answer the guard's judging, apply and preflight take: the
    prefix the tree's interpreter sets at its start-up wins over the one the launch gives (-X, the
    variable); without either, none (""); a launch from this environment gives this process's."""
    root = tmp_path / "site"
    here, given = (target.Launch(None, {}, [], str(tmp_path), None, False, p) for p in (None, "/given"))
    monkeypatch.setattr(sys, "pycache_prefix", "/this-process")
    assert target.launch_prefix(root, here) == ""
    assert target.launch_prefix(root, given) == "/given"
    assert target.launch_prefix(root) == "/this-process"
    monkeypatch.setitem(target._STARTUP_PREFIX, root, "/at-start-up")
    assert target.launch_prefix(root, given) == "/at-start-up"
    assert target.launch_prefix(root) == "/at-start-up"
    monkeypatch.setitem(target._STARTUP_PREFIX, root, "")  # the start-up clears it
    assert target.launch_prefix(root, given) == ""
