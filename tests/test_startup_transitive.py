"""A launch whose PYTHONPATH shadows a module that the site's start-up code imports at any depth (a
.pth imports a site module, which imports one PYTHONPATH holds first): that module's code runs at
the launch's start-up and may set a pycache prefix, where Python then loads stale bytecode of a
patched file. patchkit does not follow import chains: where the launch's environment can change
what start-up runs (PYTHONPATH set, and the site runs start-up code), it asks the launch's
interpreter, run as the launch runs it, what prefix its start-up sets."""

from __future__ import annotations

from helpers import (
    MODEL,
    MODEL_PY,
    SPEC,
    SPEC_PY,
    make_venv,
    pip_install,
    purelib,
    run_cli,
    spec_library,
    stale_pyc_under_prefix,
)
from launch_fixtures import write_model


def applied_venv(tmp_path):
    """A venv holding vLLM 0.16.0's two files, the spec set applied without the guard, and a model
    beside it: (its python, its site-packages, the library)."""
    make_venv(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    site = purelib(python)
    pip_install(site, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    library = spec_library(tmp_path / "scratch")
    done = run_cli("apply", "--no-guard", "--no-import", "--python", python, "--patches", library)
    assert done.returncode == 0, done.stdout + done.stderr
    write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    return python, site, library


def test_a_prefix_set_by_a_module_the_sites_start_up_reaches_through_another_is_judged(tmp_path):
    python, site, library = applied_venv(tmp_path)
    # the site's start-up: a .pth imports corp_startup (in the site), which imports corp_helper
    (site / "corp.pth").write_text("import corp_startup\n")
    (site / "corp_startup.py").write_text("import corp_helper\n")
    (site / "corp_helper.py").write_text("")
    # the launch's PYTHONPATH holds another corp_helper first: it sets a pycache prefix
    prefix, shadow = tmp_path / "pfx", tmp_path / "pp"
    shadow.mkdir()
    (shadow / "corp_helper.py").write_text(f"import sys; sys.pycache_prefix = {str(prefix)!r}\n")
    pyc = stale_pyc_under_prefix(prefix, site, SPEC)  # what that launch's Python loads for spec.py
    launch = ["env", f"PYTHONPATH={shadow}", python, "-m", "vllm.entrypoints.openai.api_server"]
    launch += ["--model", tmp_path / "model"]
    own = ("--python", python, "--patches", library)

    done = run_cli("preflight", *own, "--no-import", "--", *launch)
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "tree-state" in said and str(pyc) in said, said
    done = run_cli("run", *own, "--", *launch)
    assert done.returncode == 1 and "not launched" in done.stderr, done.stdout + done.stderr
    # without that PYTHONPATH the launch reads __pycache__, where nothing is stale
    done = run_cli("preflight", *own, "--no-import", "--", *launch[2:])
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_prefix_the_sites_start_up_sets_from_a_variable_the_launch_gives_is_judged(tmp_path):
    """The site's sitecustomize sets the prefix from a variable, by a name no scan reads
    (setattr with a built attribute name): a launch that gives the variable is asked as it runs."""
    python, site, library = applied_venv(tmp_path)
    (site / "sitecustomize.py").write_text(
        "import os, sys\nif os.environ.get('CORP_PFX'):\n    setattr(sys, 'pycache_' + 'prefix', os.environ['CORP_PFX'])\n"
    )
    prefix = tmp_path / "pfx"
    pyc = stale_pyc_under_prefix(prefix, site, SPEC)
    launch = ["env", f"CORP_PFX={prefix}", python, "-m", "vllm.entrypoints.openai.api_server"]
    launch += ["--model", tmp_path / "model"]
    own = ("--python", python, "--patches", library)

    done = run_cli("preflight", *own, "--no-import", "--", *launch)
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "tree-state" in said and str(pyc) in said, said
    done = run_cli("preflight", *own, "--no-import", "--", *launch[2:])  # without the variable: __pycache__
    assert done.returncode == 0, done.stdout + done.stderr
