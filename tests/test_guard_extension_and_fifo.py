"""The guard and status judge a recorded file's neighbours as the launch's Python imports them: an
extension module of another Python (or a .pyd on Linux) beside a recorded source is never imported,
so it is no refusal; one of its own is. A fifo or a device named as a recorded file's bytecode is
opened by the import before the source and hangs it: refused, with the removal that fixes it."""

from __future__ import annotations

import _imp
import os
import sys

import pytest
from helpers import (
    MODEL_PY,
    load_plugins_like_vllm,
    make_patch,
    run_cli_read_only,
    run_cli_writing,
    write_tree,
)

MODEL = "vllm/models/model.py"
MINOR = sys.version_info[1]


@pytest.fixture
def site(tmp_path, scratch):
    """A venv-shaped site-packages (lib/python3.X/site-packages: only that Python imports from it)
    whose model.py carries a patch, applied with the guard; and the patch."""
    site = write_tree(tmp_path / "env" / "lib" / f"python3.{MINOR}" / "site-packages")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    assert run_cli_writing("apply", "--target", site, "--patch", diff).returncode == 0
    return site, diff


def _status(site, diff):
    return run_cli_read_only("status", "--target", site, "--patch", diff)


def test_an_extension_module_another_python_imports_is_no_refusal_and_its_own_is(site):
    site, diff = site
    other = (MINOR + 1) if MINOR < 13 else (MINOR - 1)
    own = _imp.extension_suffixes()[0]
    strays = [own.replace(f"cpython-3{MINOR}", f"cpython-3{other}", 1), ".pyd"]
    for suffix in strays:
        (site / "vllm/models" / f"model{suffix}").write_bytes(b"\x7fELF")
    assert load_plugins_like_vllm(site).returncode == 0, load_plugins_like_vllm(site).stderr[-600:]
    assert _status(site, diff).returncode == 0, _status(site, diff).stdout
    (site / "vllm/models" / f"model{own}").write_bytes(b"\x7fELF")
    refused = load_plugins_like_vllm(site)
    assert refused.returncode != 0 and f"vllm/models/model{own} is imported instead of {MODEL}" in refused.stderr
    assert _status(site, diff).returncode == 1


def test_a_fifo_as_a_recorded_files_bytecode_is_refused_and_the_named_removal_fixes_it(site):
    site, diff = site
    cache = site / "vllm/models/__pycache__"
    cache.mkdir(exist_ok=True)
    os.mkfifo(cache / f"model.cpython-3{MINOR - 1}.pyc")  # another Python's name: never opened here
    assert load_plugins_like_vllm(site).returncode == 0
    assert _status(site, diff).returncode == 0, _status(site, diff).stdout
    fifo = cache / f"model.{sys.implementation.cache_tag}.pyc"
    os.mkfifo(fifo)
    refused = load_plugins_like_vllm(site)
    said = f"vllm/models/__pycache__/{fifo.name} is a fifo or a device, not bytecode: importing {MODEL} opens it"
    assert refused.returncode != 0 and said in refused.stderr, refused.stderr[-800:]
    status = _status(site, diff)
    text = " ".join(status.stdout.split())
    assert status.returncode == 1 and said in text, text
    assert f"fix: run `rm -f -- {fifo}` (Python writes its bytecode again), then run `patchkit status" in text, text
    fifo.unlink()
    assert load_plugins_like_vllm(site).returncode == 0
    assert _status(site, diff).returncode == 0


def test_an_apply_that_fixes_stale_bytecode_says_so_not_nothing_to_do(site):
    """review30 L2: plain `apply` removed or rebuilt a stale unchecked-hash .pyc the guard refused, and
    said "already applied: nothing to do"."""
    import py_compile

    site, diff = site
    stock = site.parent / "stock-model.py"
    stock.write_text(MODEL_PY)
    pyc = site / "vllm/models/__pycache__" / f"model.{sys.implementation.cache_tag}.pyc"
    pyc.parent.mkdir(exist_ok=True)
    mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
    py_compile.compile(str(stock), cfile=str(pyc), invalidation_mode=mode, doraise=True)
    assert load_plugins_like_vllm(site).returncode != 0
    done = run_cli_writing("apply", "--target", site, "--patch", diff)
    said = " ".join(done.stdout.split())
    assert done.returncode == 0 and "nothing to do" not in said, said
    assert f"already applied; stale bytecode of {MODEL} fixed" in said, said
    assert load_plugins_like_vllm(site).returncode == 0


def test_an_apply_on_an_applied_tree_leaves_a_fresh_timestamp_pyc_and_says_nothing_to_do(site):
    """Review 41b L1: `apply` on an applied tree whose patched module someone else compiled (pip
    compiles an installed wheel; here py_compile, a timestamp .pyc that fits its source) said "stale
    bytecode of ... fixed" and rewrote it: the fixer's rule for a file this run just wrote (a pyc
    of its second and size may hold other bytes) was applied to a file this run did not write."""
    import py_compile

    site, diff = site
    pyc = site / "vllm/models/__pycache__" / f"model.{sys.implementation.cache_tag}.pyc"
    pyc.parent.mkdir(exist_ok=True)
    py_compile.compile(str(site / MODEL), cfile=str(pyc), doraise=True)  # timestamp: Python re-validates it
    before = pyc.read_bytes(), pyc.stat().st_ino, pyc.stat().st_mtime_ns
    assert load_plugins_like_vllm(site).returncode == 0
    done = run_cli_writing("apply", "--target", site, "--patch", diff)
    said = " ".join(done.stdout.split())
    assert done.returncode == 0 and "already applied: nothing to do" in said, said
    assert "stale" not in said, said
    assert (pyc.read_bytes(), pyc.stat().st_ino, pyc.stat().st_mtime_ns) == before
