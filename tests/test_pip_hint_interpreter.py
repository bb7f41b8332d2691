"""A pip hint where patchkit knows the tree's interpreter without --python (a venv's site-packages
given as --target, or the vLLM of the interpreter running patchkit) runs that interpreter: "python
-m pip … (with the Python of that environment)" named no path (issue 20 residuals, words30 item 7)."""

from __future__ import annotations

import json
import os
import re
import sys

from helpers import MODEL, MODEL_PY, SPEC, SPEC_PY, make_patch, patched_spec, pip_install, write_library

EDITED = SPEC_PY.replace('    "qwen",\n', '    "qwen", "mymodel",\n')


def _venv(root):
    """ENV/pyvenv.cfg, ENV/bin/python and vLLM 0.16.0 pip-installed in its site-packages, a file
    the series changes edited there."""
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    os.symlink(sys.executable, root / "bin" / "python")
    site = root / "lib" / "python3.11" / "site-packages"
    pip_install(site, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY}, {"INSTALLER": b"pip\n"})
    return site


def _hint(run, *args):
    done = run("status", *args, "--format", "json")
    return json.loads(done.stdout)["hint"]


def test_a_venvs_site_packages_gets_the_pip_of_its_own_python(run, tmp_path, scratch):
    site = _venv(tmp_path / "env")
    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, site, {SPEC: patched_spec()})]})
    (site / SPEC).write_text(EDITED)
    hint = _hint(run, "--target", site, "--patches", library)
    pip = f"{tmp_path}/env/bin/python -m pip install --force-reinstall --no-deps vllm==0.16.0"
    assert pip in hint and "with the Python of that environment" not in hint, hint
    assert re.search(r"`[^`]*" + re.escape(pip) + r" && patchkit apply --target ", hint), hint


def test_the_vllm_of_the_interpreter_running_patchkit_gets_its_pip(run, tmp_path, scratch, monkeypatch):
    site = tmp_path / "plain-site"
    pip_install(site, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY}, {"INSTALLER": b"pip\n"})
    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, site, {SPEC: patched_spec()})]})
    (site / SPEC).write_text(EDITED)
    monkeypatch.syspath_prepend(str(site))
    hint = _hint(run, "--patches", library)
    assert f"{sys.executable} -m pip install --force-reinstall --no-deps vllm==0.16.0" in hint, hint
    assert "with the Python of that environment" not in hint, hint


def test_a_directory_that_is_no_environment_still_says_which_python(run, tmp_path, scratch):
    site = tmp_path / "plain-site"
    pip_install(site, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY}, {"INSTALLER": b"pip\n"})
    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, site, {SPEC: patched_spec()})]})
    (site / SPEC).write_text(EDITED)
    hint = _hint(run, "--target", site, "--patches", library)
    assert "`python -m pip install --force-reinstall --no-deps vllm==0.16.0` (with the Python of that" in hint, hint
