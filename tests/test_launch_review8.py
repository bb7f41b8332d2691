"""Review 8 of the launch and the guard: each finding's regression test, on inputs of its own.

M1: `run` and `preflight --no-import` name the general plugins vLLM loads, found as importlib.metadata
finds them (vLLM calls `entry_points(group=...)`): a dist-info whose name is not lower case, an
entry on an indented line, an entry_points.txt that is a symlink or over 1 MiB, the user's
site-packages when the launch's Python adds it."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import examples, run_cli_judged
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from importable_vllm import PLAIN_CLASS, VLLMS_OWN, write_plugin
from launch_fixtures import (
    WARNING,
    applied,
    patchkit_run,
    plain_launch,  # noqa: F401  (the fixture `launch`)
    warnings,
)

from patchkit.distinfo.entry_points import group_entry_points
from patchkit.launch.command import frame
from patchkit.launch.engine import import_path, user_site

GROUP = "vllm.general_plugins"


def _own(module: str) -> bool:
    return module.split(".")[0] == "vllm"


# --- M1: the spellings importlib.metadata reads ---------------------------------------------------


def spelled(where: Path, name: str, directory: str, entry_points: str) -> Path:
    """write_plugin's package, its dist-info named `directory` and its entry_points.txt `entry_points`."""
    write_plugin(where, name, PLAIN_CLASS.format(name=name))
    info = where / f"{name}-1.0.dist-info"
    (info / "entry_points.txt").write_text(entry_points)
    return info.rename(where / directory)


OWN_FIRST = "[vllm.general_plugins]\nlora = vllm.plugins.lora:register\n"


def test_run_names_each_plugin_importlib_finds_however_it_is_spelled(request, tmp_path):
    tree, library, command, env, marker = request.getfixturevalue("launch")
    applied(tree, library)
    spelled(tmp_path / "a", "upper", "UPPER-1.0.DIST-INFO", f"[{GROUP}]\nupper = upper_mod:register\n")
    spelled(tmp_path / "a", "mixed", "Mixed-1.0.Egg-Info", f"[{GROUP}]\nmixed = mixed_mod:register\n")
    # indented, after an entry of vLLM's own code: configparser reads it as that value's continuation
    spelled(tmp_path / "a", "indented", "indented-1.0.dist-info", f"{OWN_FIRST}    indented = indented_mod:register\n")
    linked = spelled(tmp_path / "a", "linked", "linked-1.0.dist-info", "")
    (tmp_path / "store.txt").write_text(f"[{GROUP}]\nlinked = linked_mod:register\n")
    (linked / "entry_points.txt").unlink()
    (linked / "entry_points.txt").symlink_to(tmp_path / "store.txt")
    many = "".join(f"tool{i:05d} = large_mod:register_{i:05d}_with_a_long_name\n" for i in range(30000))
    spelled(
        tmp_path / "a", "large", "large-1.0.dist-info", f"[console_scripts]\n{many}[{GROUP}]\nlarge = large_mod:r\n"
    )
    assert (tmp_path / "a" / "large-1.0.dist-info" / "entry_points.txt").stat().st_size > 1 << 20

    everyone = ["indented", "large", "linked", "mixed", "upper"]
    assert _importlib_names([str(tmp_path / "a")]) == everyone  # what vLLM loads
    _, done = patchkit_run(tree, library, ["env", f"PYTHONPATH={tmp_path / 'a'}", *command], env)
    assert done.returncode == 7 and marker.exists(), done.stderr
    assert warnings(done.stderr) == [f"{WARNING}{', '.join(everyone)}"], done.stderr


def test_an_entry_points_file_importlib_would_hang_on_or_fail_on_is_named(tmp_path):
    """A fifo hangs vLLM's plugin loading, a file that is not UTF-8 makes it raise: named, never read."""
    fifo = spelled(tmp_path, "piped", "piped-1.0.dist-info", "")
    (fifo / "entry_points.txt").unlink()
    os.mkfifo(fifo / "entry_points.txt")
    latin = spelled(tmp_path, "latin", "latin-1.0.dist-info", "")
    (latin / "entry_points.txt").write_bytes(b"[vllm.general_plugins]\nl\xe9 = latin_mod:register\n")
    found = group_entry_points([str(tmp_path)], GROUP, _own)
    assert found.names == []
    assert sorted(Path(path).parent.name for path, _what in found.unreadable) == [latin.name, fifo.name]


def test_the_first_distribution_of_a_name_on_the_path_is_the_one_read(tmp_path):
    """importlib.metadata.entry_points() reads one distribution per normalized name, the first."""
    spelled(tmp_path / "first", "dup", "Dup-2.0.dist-info", f"[{GROUP}]\nfrom_first = dup_mod:register\n")
    spelled(tmp_path / "second", "dup", "dup-1.0.dist-info", f"[{GROUP}]\nfrom_second = dup_mod:register\n")
    places = [str(tmp_path / "first"), str(tmp_path / "second")]
    assert group_entry_points(places, GROUP, _own).names == _importlib_names(places) == ["from_first"]


# --- the property: patchkit's list is importlib.metadata's -----------------------------------------

_SUFFIXES = [".dist-info", ".DIST-INFO", ".Dist-Info", ".egg-info", ".EGG-INFO", ".dist-infO"]
_NAMES = ["plug", "Plug", "other_one", "other-one", "vllm"]
_VALUES = [
    "plug_mod:register",
    "vllm.plugins.x:register",
    "vllm:go",
    "other.mod : fn [extra]",
    "pkg.sub",
    "not a module",
    "patchkit_guard:check",
    "vllm_thing:go",
]
_SECTIONS = [GROUP, "console_scripts", f" {GROUP} ", "vllm.general_plugin", "VLLM.general_plugins"]


@st.composite
def entry_line(draw: st.DrawFn) -> str:
    indent = draw(st.sampled_from(["", " ", "    ", "\t"]))
    kind = draw(st.sampled_from(["entry", "entry", "entry", "section", "comment", "blank", "bare", "semi"]))
    if kind == "section":
        return f"{indent}[{draw(st.sampled_from(_SECTIONS))}]"
    if kind == "comment":
        return f"{indent}# x = y:z"
    if kind == "blank":
        return indent
    if kind == "bare":  # no `=`: importlib raises on it
        return f"{indent}just_words"
    name = draw(st.sampled_from(["a", "b_c", "d.e", "f-g", " h "]))
    sep = draw(st.sampled_from(["=", " = ", "= ", " =", "=="]))
    return f"{indent}{name}{sep}{draw(st.sampled_from(_VALUES))}{'  ' if kind == 'semi' else ''}"


@st.composite
def distribution(draw: st.DrawFn) -> tuple[str, str, bool]:
    """(its directory's name, its entry_points.txt, whether that is a symlink)."""
    name = draw(st.sampled_from(_NAMES))
    directory = f"{name}{draw(st.sampled_from(['-1.0', '-2.0', '', '_x-1']))}{draw(st.sampled_from(_SUFFIXES))}"
    lines = draw(st.lists(entry_line(), max_size=8))
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    return directory, ending.join(lines) + ending, draw(st.booleans())


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(distribution(), min_size=1, max_size=5), st.lists(distribution(), max_size=3))
def test_patchkit_finds_the_entry_points_importlib_metadata_finds(first, second):
    with tempfile.TemporaryDirectory() as work:
        places = []
        for index, dists in enumerate((first, second)):
            place = Path(work) / f"p{index}"
            place.mkdir()
            places.append(str(place))
            for directory, text, linked in dists:
                info = place / directory
                if info.exists():
                    continue
                info.mkdir()
                (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {directory.split('-')[0]}\n")
                target = Path(work) / f"{index}-{directory}.txt" if linked else info / "entry_points.txt"
                target.write_bytes(text.encode())
                if linked:
                    (info / "entry_points.txt").symlink_to(target)
        found = group_entry_points(places, GROUP, _own)
        try:
            expected = _importlib_names(places)
        except (ValueError, TypeError):  # importlib raises on some file: vLLM loads no plugin
            assert found.unreadable, found
            return
        assert (sorted(found.names), found.unreadable) == (expected, [])


def _importlib_names(places: list[str]) -> list[str]:
    """importlib.metadata.entry_points(group=...) with `places` as sys.path, vLLM's own left out."""
    saved = sys.path[:]
    sys.path[:] = places
    try:
        importlib.invalidate_caches()
        points = importlib.metadata.entry_points(group=GROUP)
        return sorted(p.name for p in points if _valid(p) and not _own(p.module))
    finally:
        sys.path[:] = saved


def _valid(point: importlib.metadata.EntryPoint) -> bool:
    try:
        point.module  # noqa: B018  (a value naming no module: vLLM's load of it fails, it runs nothing)
    except AttributeError:
        return False
    return True


# --- M1: the user's site-packages --------------------------------------------------------------------


@pytest.fixture
def user_python(tmp_path):
    """(a `vllm` script run by a Python that is no venv's, the environment naming a home whose
    site-packages for that Python's version exists, that site-packages)."""
    bin_dir = tmp_path / "py" / "bin"
    bin_dir.mkdir(parents=True)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    python = bin_dir / f"python{version}"
    python.symlink_to(os.path.realpath(sys.executable))
    script = bin_dir / "vllm"
    script.write_text(f"#!{python}\nprint('launched')\n")
    script.chmod(0o755)
    site = tmp_path / "home" / ".local" / "lib" / f"python{version}" / "site-packages"
    site.mkdir(parents=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    return script, python, env, site


def _path_of(argv: list[str], root: Path) -> list[str]:
    return import_path(frame(argv), root)


def _user_site(argv: list[str], root: Path) -> str | None:
    command = frame(argv)
    python, options = command.launch_python()
    return user_site(python, "".join(options), command.environ, root)


def test_the_user_site_is_read_when_the_launchs_python_adds_it(user_python, tmp_path):
    script, python, env, site = user_python
    write_plugin(site, "homeplug", "def register():\n    pass\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), str(script), "serve", "m"]
    assert _user_site(argv, tree) == str(site)
    assert _path_of(argv, tree).index(str(site)) < _path_of(argv, tree).index(str(tree))  # before site-packages
    found = group_entry_points(_path_of(argv, tree), GROUP, _own)
    assert found.names == ["homeplug"]

    # not added: PYTHONNOUSERSITE, another user base, -s on the #! line, a venv without system packages
    assert _user_site([*argv[:2], "PYTHONNOUSERSITE=1", *argv[2:]], tree) is None
    assert _user_site([*argv[:2], f"PYTHONUSERBASE={tmp_path}", *argv[2:]], tree) is None
    script.write_text(f"#!{python} -s\n")
    assert _user_site(argv, tree) is None
    script.write_text(f"#!{python}\n")
    (script.parent.parent / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    assert _user_site(argv, tree) is None
    (script.parent.parent / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = true\n")
    assert _user_site(argv, tree) == str(site)


ONLY_OWN = """
import json, sys
from patchkit.distinfo.entry_points import group_entry_points
found = group_entry_points(sys.argv[1:], "vllm.general_plugins", lambda m: m.split(".")[0] == "vllm")
print(json.dumps([found.names, "importlib.metadata" in sys.modules]))
"""


def test_importlib_metadata_loads_only_for_a_file_that_may_declare_a_plugin(tmp_path):
    """`run`'s fast path reads vLLM's own entry_points.txt (its LoRA resolvers) at every launch:
    importlib.metadata (8 ms of CPU with the email package) loads only for a file it must parse."""
    own = tmp_path / "site" / "vllm-0.16.0.dist-info"
    own.mkdir(parents=True)
    (own / "entry_points.txt").write_text(VLLMS_OWN)
    (tmp_path / "site" / "tool-1.0.dist-info").mkdir()
    (tmp_path / "site" / "tool-1.0.dist-info" / "entry_points.txt").write_text("[console_scripts]\ntool = t:main\n")
    asked = [sys.executable, "-c", ONLY_OWN, str(tmp_path / "site")]
    assert json.loads(subprocess.run(asked, capture_output=True, text=True, check=True).stdout) == [[], False]
    write_plugin(tmp_path / "site", "plug", "def register():\n    pass\n")
    assert json.loads(subprocess.run(asked, capture_output=True, text=True, check=True).stdout) == [["plug"], True]


# --- L4: a guard module that is not this patchkit's is said so, not "refuses" ------------------------


def test_a_replaced_guard_module_is_said_to_be_not_patchkits_not_to_refuse(request, tmp_path):
    tree, library, command, env, marker = request.getfixturevalue("launch")
    applied(tree, library)
    (tree / "patchkit_guard.py").write_text("def check():\n    pass\n")  # passes every launch
    status = run_cli_judged("status", "--target", tree, "--patches", library)
    assert status.returncode != 0 and "the installed launch guard is not this patchkit's" in status.stdout
    assert "refuses" not in status.stdout + status.stderr, status.stdout
    _, done = patchkit_run(tree, library, command, env)
    assert done.returncode == 1 and not marker.exists(), done.stderr
    assert "the installed launch guard is not this patchkit's" in done.stdout + done.stderr
    assert "refuses" not in done.stdout + done.stderr
