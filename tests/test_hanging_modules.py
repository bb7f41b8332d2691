"""A fifo or a device (a symlink to /dev/zero) as the bytecode of one of vLLM's modules (or the
guard's): the launch's `import vllm` opens it and waits, before the guard ever runs (a fifo named as a
source is passed over by the import: no hang). status, verify and preflight say so, naming the file
and its removal, and never hang themselves; nor does a fifo as the METADATA the --python probe reads. Every command runs under a timeout: a hang fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_server import run_patchkit
from helpers import MODEL_PY, make_patch, make_venv, write_tree
from launch_fixtures import (
    DEEPSEEK_V3,
    DRAFTER,
    applied,
    findings,
    serve,
    stand_in_launch,
    write_eagle3_setup,
    write_model,
)

from patchkit.tree.modules import MOST_JUDGED, hanging_modules, scanned_once

LIMIT = 60  # seconds: every command here answers in a few


def _patchkit(*args: object, cwd=None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PATCHKIT_DEBUG"}
    return run_patchkit([str(a) for a in args], env, cwd, LIMIT)


def _hangs(site, code: str) -> bool:
    """Whether `code`, run by a Python importing from `site`, is still waiting after 3 s."""
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=3, check=False)
    except subprocess.TimeoutExpired:
        return True
    return False


@pytest.fixture
def site(tmp_path, scratch):
    """A venv-shaped site-packages whose vllm/__init__.py imports vllm/_version.py (neither recorded),
    and whose model.py carries a patch applied with the guard; and the patch."""
    site = write_tree(tmp_path / "env" / "lib" / f"python3.{sys.version_info[1]}" / "site-packages")
    (site / "vllm/__init__.py").write_text("from vllm._version import __version__\n")
    (site / "vllm/_version.py").write_text("__version__ = '0.16.0'\n")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {"vllm/models/model.py": MODEL_PY.replace("return x", "return x * 2")}))
    assert _patchkit("apply", "--target", site, "--patch", diff).returncode == 0
    return site, diff


def _stand_in(path, kind: str) -> None:
    path.unlink(missing_ok=True)
    path.parent.mkdir(exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(os.devnull.replace("null", "zero"))


TAG = sys.implementation.cache_tag


def _pyc(site, source: str) -> Path:
    module = site / source
    return module.parent / "__pycache__" / f"{module.stem}.{TAG}.pyc"


@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("module", ["vllm/_version.py", "vllm/__init__.py"])
def test_bytecode_that_hangs_the_import_fails_status_and_verify_naming_its_removal(site, module, kind):
    site, diff = site
    assert _patchkit("status", "--target", site, "--patch", diff).returncode == 0
    pyc = _pyc(site, module)
    _stand_in(pyc, kind)
    if kind == "fifo":  # the truth: the launch's import waits on it (a device: it reads without end)
        assert _hangs(site, "import vllm")
    said = f"{pyc.relative_to(site)} is a fifo or a device, not bytecode: importing its module opens it"
    for verb in ("status", "verify"):
        done = _patchkit(verb, "--target", site, "--patch", diff)
        assert done.returncode == 1, done.stdout + done.stderr
        assert said in done.stdout, done.stdout
        assert f"fix: run `rm -f -- {pyc}` (Python writes its bytecode again)" in done.stdout, done.stdout
    assert "the launch hangs in its import" in done.stdout.splitlines()[-1]
    pyc.unlink()
    assert not _hangs(site, "import vllm")
    assert _patchkit("status", "--target", site, "--patch", diff).returncode == 0


def test_the_guards_own_bytecode_as_a_fifo_fails_status(site):
    site, diff = site
    pyc = site / "__pycache__" / f"patchkit_guard.{TAG}.pyc"
    _stand_in(pyc, "fifo")
    assert _hangs(site, "import patchkit_guard")
    done = _patchkit("status", "--target", site, "--patch", diff)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"__pycache__/patchkit_guard.{TAG}.pyc is a fifo or a device, not bytecode" in done.stdout, done.stdout


def test_only_what_the_import_opens_counts(site):
    """A fifo named as a source is passed over by the import (no hang: the module is missing to it);
    a fifo .pyc of another Python's tag, or of no source, is never opened; a dangling symlink fails
    at once: none is a hang."""
    site, _diff = site
    other = f"cpython-3{sys.version_info[1] + 1}"
    _stand_in(site / "vllm/_version.py", "fifo")
    assert not _hangs(site, "import vllm")  # ImportError at once: not this check's
    _stand_in(site / "vllm" / "__pycache__" / f"__init__.{other}.pyc", "fifo")
    _stand_in(site / "vllm" / "__pycache__" / f"gone.{TAG}.pyc", "fifo")
    (site / "vllm" / "__pycache__" / f"spec.{TAG}.pyc").symlink_to(site / "nowhere")
    assert hanging_modules(site, [TAG]).paths == []
    _stand_in(_pyc(site, "vllm/config/spec.py"), "fifo")
    assert hanging_modules(site, [TAG]).paths == [f"vllm/config/__pycache__/spec.{TAG}.pyc"]
    assert hanging_modules(site, [other]).paths == [f"vllm/__pycache__/__init__.{other}.pyc"]  # that Python's


def test_preflight_refuses_the_launch_and_asks_vllm_nothing(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    applied(tree, library)
    launch = serve(write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json"]
    assert _patchkit(*base, "--no-import", "--", *launch).returncode == 0
    pyc = _pyc(tree, "vllm/__init__.py")
    _stand_in(pyc, "fifo")
    for extra in (["--no-import"], []):
        done = _patchkit(*base, *extra, "--", *launch)
        assert done.returncode == 1, done.stdout + done.stderr
        failed = [f for f in json.loads(done.stdout)["findings"] if not f["ok"]]
        assert [f["check"] for f in failed] == ["tree-state"], failed
        assert failed[0]["message"].startswith(f"{pyc.relative_to(tree)} is a fifo or a device"), failed
    assert findings(done)["vllm-validation"]["message"] == (
        f"cannot judge: not run: importing vLLM would hang on {pyc.relative_to(tree)}"
    )


def test_a_fifo_metadata_never_hangs_the_probe_of_python(site, tmp_path):
    """status --python asks that Python where vllm is and its version: importlib.metadata would
    open METADATA and wait; the probe looks at it first, and status says what it is."""
    site, diff = site
    venv = tmp_path / "venv"
    make_venv(venv)
    [venv_site] = venv.glob("lib/python*/site-packages")
    (venv_site / "tree.pth").write_text(f"{site}\n")
    metadata = site / "vllm-0.16.0.dist-info" / "METADATA"
    _stand_in(metadata, "fifo")
    assert _hangs(site, "import importlib.metadata as m; m.version('vllm')")  # what the probe did
    done = _patchkit("status", "--python", venv / "bin" / "python", "--patch", diff)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "vllm-0.16.0.dist-info/METADATA is not a regular file" in done.stderr, done.stderr


def test_run_does_not_launch_over_it_on_its_fast_path(tmp_path):
    tree, library, command, env, marker = stand_in_launch(tmp_path)
    applied(tree, library)
    args = ["run", "--target", tree, "--patches", library, "--", *command]
    assert run_patchkit([str(a) for a in args], env, None, LIMIT).returncode == 7 and marker.exists()  # launched
    marker.unlink()
    _stand_in(_pyc(tree, "vllm/__init__.py"), "fifo")
    done = run_patchkit([str(a) for a in args], env, None, LIMIT)
    assert done.returncode == 1 and not marker.exists(), done.stdout + done.stderr
    assert "is a fifo or a device, not bytecode" in done.stdout + done.stderr


def test_within_one_command_a_trees_scan_is_told_again_and_after_it_made_anew(tmp_path):
    """scanned_once: each call in it answers from the one scan of the tree (the sources left out
    are each call's own); after it, a call scans the tree as it is now."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm/a.py").write_text("")
    pyc = _pyc(tmp_path, "vllm/a.py")
    _stand_in(pyc, "fifo")
    found = [str(pyc.relative_to(tmp_path))]
    with scanned_once():
        assert hanging_modules(tmp_path, [TAG]).paths == found
        assert hanging_modules(tmp_path, [TAG], ["vllm/a.py"]).paths == []
        pyc.unlink()
        assert hanging_modules(tmp_path, [TAG]).paths == found  # once a command: patchkit removes none
    assert hanging_modules(tmp_path, [TAG]).paths == []


def _linked_modules(site: Path, count: int, target: Path) -> list[Path]:
    """`count` modules vllm/zz/xN.py more, each .pyc a symlink to `target` (Python writes none such)."""
    (site / "vllm/zz").mkdir(parents=True, exist_ok=True)
    pycs = []
    for index in range(count):
        (site / f"vllm/zz/x{index}.py").write_text("X = 1\n")
        pyc = _pyc(site, f"vllm/zz/x{index}.py")
        pyc.parent.mkdir(exist_ok=True)
        pyc.symlink_to(target)
        pycs.append(pyc)
    return pycs


def test_past_the_bytecode_it_looks_through_status_says_the_rest_unjudged_and_never_passes(site, tmp_path):
    """Each .pyc that is not a regular file is looked through (a stat following its links: a planted
    chain made 3,000 of them 13 s of status): past MOST_JUDGED the rest are not, and status fails saying
    so, with the removal that ends it, even where the one that hangs is among those not looked at."""
    site, diff = site
    real = tmp_path / "real.pyc"
    real.write_bytes(b"\0" * 16)
    pycs = _linked_modules(site, MOST_JUDGED + 40, real)
    with scanned_once():
        scan = hanging_modules(site, [TAG])
    assert scan.paths == [] and len(scan.unjudged) == 40, scan.unjudged
    for last in (False, True):
        if last:  # every link now leads to /dev/zero: the import hangs on the first it opens
            for pyc in pycs:
                pyc.unlink()
                _stand_in(pyc, "zero")
        done = _patchkit("status", "--target", site, "--patch", diff)
        assert done.returncode == 1, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert (
            f"and 39 more .pyc are not regular files, which Python never writes: patchkit looked through {MOST_JUDGED}"
            in done.stdout
        ), done.stdout
        removal = f"`find {site / 'vllm'} -path '*/__pycache__/*.pyc' ! -type f ! -type d -delete`"
        assert f"fix: run {removal} (Python writes its bytecode again)" in done.stdout, done.stdout
        assert "the launch " + ("hangs" if last else "may hang") + " in its import" in lines[-1], lines[-1]
    subprocess.run(
        ["find", site / "vllm", "-path", "*/__pycache__/*.pyc", "!", "-type", "f", "!", "-type", "d", "-delete"],
        check=True,
    )
    assert _patchkit("status", "--target", site, "--patch", diff).returncode == 0


def test_the_scan_follows_at_most_its_bound_of_links_and_none_of_a_recorded_source(tmp_path, monkeypatch):
    """The work is bounded by what is looked through, not by what a tree holds: os.stat (which follows a
    link) is called for at most MOST_JUDGED .pyc, and for none whose source the guard judges (recorded)."""
    (tmp_path / "vllm").mkdir()
    real = tmp_path / "real.pyc"
    real.write_bytes(b"\0" * 16)
    pycs = _linked_modules(tmp_path, 500, real)
    followed = []
    stat = os.stat

    def counted(path, *args, **kwargs):
        if str(path).endswith(".pyc"):
            followed.append(str(path))
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counted)
    assert len(hanging_modules(tmp_path, [TAG]).unjudged) == 500 - MOST_JUDGED
    assert len(followed) == MOST_JUDGED, len(followed)
    followed.clear()
    recorded = [f"vllm/zz/x{index}.py" for index in range(len(pycs))]
    assert not hanging_modules(tmp_path, [TAG], recorded)
    assert followed == []
