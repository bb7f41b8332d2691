"""An editable install of a vLLM checkout (`pip install -e`, setuptools' PEP 660 finder: the checkout
is not on sys.path), found through --python: patched in place, but no launch guard can load from
the checkout, and apply, status and verify say so instead of claiming one (audit23 W2, M3)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import SPEC, make_patch, make_venv, patched_spec, write_library, write_tree

PYPROJECT = textwrap.dedent("""\
    [build-system]
    requires = ["setuptools>=64"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "vllm"
    version = "0.16.0"

    [tool.setuptools]
    packages = ["vllm", "vllm.config", "vllm.models"]
    """)

PLUGINS = (
    "import importlib.metadata as m, importlib.util as u; "
    "print(len(m.entry_points(group='vllm.general_plugins')), u.find_spec('patchkit_guard') is not None)"
)


@pytest.fixture
def editable(tmp_path) -> tuple[Path, Path]:
    """(the checkout, the venv's python): a small fake vLLM checkout installed with `pip install -e`."""
    checkout = write_tree(tmp_path / "checkout")
    for package in ("config", "models"):
        (checkout / "vllm" / package / "__init__.py").write_text("")
    for dist in checkout.glob("vllm-*.dist-info"):  # a checkout has no dist-info: pip writes one
        for path in dist.iterdir():
            path.unlink()
        dist.rmdir()
    (checkout / "pyproject.toml").write_text(PYPROJECT)
    venv = tmp_path / "venv"
    # no pip of its own (ensurepip was half the fixture's CPU): this pip installs into it through --python
    make_venv(venv)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "-e", checkout]
    subprocess.run(install, check=True, capture_output=True, cwd=tmp_path)  # setuptools from the index
    return checkout, python


def test_apply_through_python_on_an_editable_install_claims_no_guard_that_cannot_load(run, editable, scratch):
    checkout, python = editable
    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, checkout, {SPEC: patched_spec()})]})

    applied = run("apply", "--python", python, "--patches", library)
    assert applied.exit_code == 0, applied.output
    assert (checkout / SPEC).read_text() == patched_spec()  # the checkout's own file, patched in place
    assert "launch guard installed" not in applied.output
    assert "no launch guard" in applied.output and "editable install" in applied.output
    seen = subprocess.run([python, "-c", PLUGINS], capture_output=True, text=True, check=True, cwd="/")
    assert seen.stdout.split() == ["0", "False"]  # what vLLM would load: nothing, as said

    for command in ("status", "verify"):
        said = run(command, "--python", python, "--patches", library)
        assert "no launch guard" in said.output, said.output
