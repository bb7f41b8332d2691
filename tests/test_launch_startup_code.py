"""Which launches patchkit asks for the pycache prefix their interpreter's start-up sets: one whose
environment runs start-up code the site does not hold (a sitecustomize on its PYTHONPATH, a user
site's .pth) is asked in that environment; one that runs none, or only what asking in patchkit's
own environment ran already, starts no interpreter (run's fast path)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from patchkit.tree import target

VERSION = f"python{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture
def asked(monkeypatch):
    """Each interpreter asked (its env and directory), answering that its start-up set /pfx."""
    calls: list[tuple[dict[str, str] | None, str | None]] = []

    def probe(python, env=None, first_path=None, options=(), cwd=None):
        calls.append((env, cwd))
        return {
            "python": python,
            "package_dir": str(site / "vllm"),
            "pycache_prefix": "/pfx",
            "prefix_set_at_startup": True,
        }

    site = None

    def bind(root: Path) -> list:
        nonlocal site
        site = root
        return calls

    monkeypatch.setattr(target, "_probe", probe)
    monkeypatch.setattr(target, "_LAUNCH_PROBES", {})
    monkeypatch.setattr(target, "_STARTUP_PREFIX", {})
    monkeypatch.setattr(target, "_ASKED_HERE", {}, raising=False)
    return bind


def _venv(tmp_path: Path, *, system_site: bool = False) -> tuple[Path, str]:
    """A venv's layout: its site-packages holding vllm/, its bin/python (a stand-in file)."""
    env = tmp_path / "venv"
    site = env / "lib" / VERSION / "site-packages"
    (site / "vllm").mkdir(parents=True)
    (env / "bin").mkdir()
    (env / "bin" / "python").write_text("")
    (env / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = {str(system_site).lower()}\n")
    return site, str(env / "bin" / "python")


def _prefix(
    site: Path, python: str, env: dict[str, str], cwd: str = "/", *, changed: bool = True, options: list[str] = ()
) -> str | None:
    launch = target.Launch(python, env, list(options), cwd, None, changed, None)
    return target._launch_startup_prefix(site, launch)


def test_a_pythonpath_without_start_up_code_asks_nothing(tmp_path, asked):
    site, python = _venv(tmp_path)
    calls = asked(site)
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "helpers.py").write_text("import sys; sys.pycache_prefix = '/x'\n")  # never run at start-up
    assert _prefix(site, python, {"PYTHONPATH": str(tmp_path / "libs"), "HOME": str(tmp_path)}) is None
    assert calls == []


@pytest.mark.parametrize("name", ["sitecustomize.py", "sitecustomize", "usercustomize.pyc", "sitecustomize.abi3.so"])
def test_a_pythonpath_holding_start_up_code_is_asked_in_the_launchs_environment(tmp_path, asked, name):
    site, python = _venv(tmp_path)
    calls = asked(site)
    hooks = tmp_path / "work" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / name).mkdir() if "." not in name else (hooks / name).write_text("")
    env = {"PYTHONPATH": f"/nowhere{os.pathsep}hooks", "HOME": str(tmp_path)}
    assert _prefix(site, python, env, cwd=str(tmp_path / "work")) == "/pfx"
    assert calls == [(env, str(tmp_path / "work"))]


def test_a_module_the_sites_pth_imports_found_first_on_pythonpath_is_asked(tmp_path, asked):
    site, python = _venv(tmp_path)
    calls = asked(site)
    (site / "zz_hook.pth").write_text("import os, zz_tune as t; __import__('zz_other')\n")
    (tmp_path / "hooks").mkdir()
    env = {"PYTHONPATH": str(tmp_path / "hooks"), "HOME": str(tmp_path)}
    (tmp_path / "hooks" / "zz_other.py").write_text("")
    assert _prefix(site, python, env) == "/pfx" and len(calls) == 1


@pytest.mark.parametrize("start_up", ["zz_hook.pth", "sitecustomize.py"])
def test_any_pythonpath_is_asked_where_the_sites_start_up_runs_code(tmp_path, asked, start_up):
    """The site's start-up code may import, through a module of the site, one the PYTHONPATH holds
    first (review34 R5-a): no module on PYTHONPATH needs to bear a name the start-up files say."""
    site, python = _venv(tmp_path)
    calls = asked(site)
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "corp_helper.py").write_text("import sys; sys.pycache_prefix = '/pfx'\n")
    env = {"PYTHONPATH": str(tmp_path / "hooks"), "HOME": str(tmp_path)}
    (site / "paths.pth").write_text(f"{tmp_path / 'more'}\n")  # a path line runs no code: not asked
    assert _prefix(site, python, env) is None and calls == []
    (site / start_up).write_text("import corp_startup\n")
    target._LAUNCH_PROBES.clear()  # the next command: one command decides once
    assert _prefix(site, python, env) == "/pfx" and calls == [(env, "/")]


@pytest.mark.parametrize("system_site", [False, True])
def test_a_user_site_pth_is_asked_only_where_the_interpreter_has_a_user_site(tmp_path, asked, system_site):
    """A venv without the system site-packages loads no user site (site.venv()): nothing to ask."""
    site, python = _venv(tmp_path, system_site=system_site)
    calls = asked(site)
    user = tmp_path / "ub" / "lib" / VERSION / "site-packages"
    user.mkdir(parents=True)
    (user / "tune.pth").write_text("import sys\n")
    found = _prefix(site, python, {"PYTHONUSERBASE": str(tmp_path / "ub"), "HOME": str(tmp_path)})
    assert (found, len(calls)) == (("/pfx", 1) if system_site else (None, 0))
    off = {"PYTHONUSERBASE": str(tmp_path / "ub"), "PYTHONNOUSERSITE": "1", "HOME": str(tmp_path)}
    assert _prefix(site, python, off) is None and len(calls) == system_site  # no user site: not asked


def test_start_up_code_patchkits_own_asking_ran_is_not_asked_again(tmp_path, asked, monkeypatch):
    """PYTHONPATH in patchkit's own environment, the tree's interpreter asked there: the launch that
    keeps that environment runs the same start-up; one that moves it to another directory does not."""
    site, python = _venv(tmp_path)
    calls = asked(site)
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", "hooks")
    monkeypatch.setenv("HOME", str(tmp_path))
    target._asked_here(site, python, str(tmp_path))
    assert _prefix(site, python, dict(os.environ), str(tmp_path), changed=False) is None and calls == []
    (tmp_path / "elsewhere" / "hooks").mkdir(parents=True)
    (tmp_path / "elsewhere" / "hooks" / "sitecustomize.py").write_text("")
    assert _prefix(site, python, dict(os.environ), str(tmp_path / "elsewhere"), changed=True) == "/pfx"


@pytest.mark.parametrize(("options", "asked_too"), [(["-E"], False), (["-I"], False), (["-S"], False), (["-s"], True)])
def test_start_up_code_on_pythonpath_is_asked_only_where_the_launchs_options_let_python_read_it(
    tmp_path, asked, options, asked_too
):
    """-E and -I make Python ignore PYTHONPATH, -S imports no site (so no sitecustomize): nothing to
    ask; -s leaves PYTHONPATH read."""
    site, python = _venv(tmp_path)
    calls = asked(site)
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text("import sys; setattr(sys, 'pycache' + '_prefix', '/pfx')\n")
    env = {"PYTHONPATH": str(tmp_path / "hooks"), "HOME": str(tmp_path)}
    assert _prefix(site, python, env, options=options) == ("/pfx" if asked_too else None)
    assert len(calls) == asked_too


@pytest.mark.parametrize(
    ("start_up", "text"),
    [
        ("sitecustomize.py", "import os, sys\nsetattr(sys, 'pycache_' + 'prefix', os.environ.get('CORP_PFX'))\n"),
        ("corp.pth", "import corp_startup\n"),  # the site module it imports reads the variable
    ],
)
def test_a_variable_the_launch_gives_that_the_sites_start_up_names_is_asked(tmp_path, asked, start_up, text):
    """The site's start-up code reads a variable the launch's environment sets, and may set the
    prefix from it by code no scan of its text recognises: the launch's interpreter is asked."""
    site, python = _venv(tmp_path)
    calls = asked(site)
    (site / start_up).write_text(text)
    (site / "corp_startup.py").write_text(
        "import os, sys\nsetattr(sys, 'pycache_' + 'prefix', os.environ.get('CORP_PFX'))\n"
    )
    other = {**os.environ, "CORP_OTHER": "1"}  # a variable no start-up file names: not asked
    assert _prefix(site, python, other) is None and calls == []
    given = {**os.environ, "CORP_PFX": str(tmp_path / "pfx")}
    assert _prefix(site, python, given) == "/pfx" and calls == [(given, "/")]
    target._LAUNCH_PROBES.clear()
    assert _prefix(site, python, given, options=["-S"]) is None and len(calls) == 1  # -S: no site runs


def test_a_variable_the_launch_unsets_that_the_sites_start_up_names_is_asked(tmp_path, asked, monkeypatch):
    site, python = _venv(tmp_path)
    calls = asked(site)
    (site / "sitecustomize.py").write_text("import os\nif 'CORP_KEEP' not in os.environ: os.environ['X'] = '1'\n")
    monkeypatch.setenv("CORP_KEEP", "1")
    unset = {name: value for name, value in os.environ.items() if name != "CORP_KEEP"}
    assert _prefix(site, python, unset) == "/pfx" and calls == [(unset, "/")]


def test_the_sites_start_up_files_are_read_once_per_launch_question(tmp_path, asked, monkeypatch):
    """Whether the start-up names the prefix, and whether it names a variable the launch gives: both
    answered from one read of the site's start-up files (they were read twice)."""
    site, python = _venv(tmp_path)
    calls = asked(site)
    (site / "corp.pth").write_text("import corp_startup\n")
    (site / "corp_startup.py").write_text("import os\nLEVEL = os.environ.get('CORP_LEVEL')\n")
    reads = []
    read = target._startup_texts
    monkeypatch.setattr(target, "_startup_texts", lambda root: reads.append(root) or read(root))
    given = {**os.environ, "CORP_LEVEL": "3"}  # a variable the start-up names: asked
    assert _prefix(site, python, given) == "/pfx" and calls == [(given, "/")]
    assert reads == [site]
