"""Issue 21: a command given one set (`--set NAME`) reads and checks that set alone; another set
of the library is known by its set.toml's `name` line and checked by the commands that use it.
What it finds is what loading the whole library finds. And a start-up compiles no regular
expression it does not use, nor builds a close-match search for `-q`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from helpers import MODEL, MODEL_PY, SPEC, SPEC_PY, make_patch, patched_spec, pip_install, write_library

from patchkit.base.errors import BadInput
from patchkit.base.patterns import LazyPattern
from patchkit.cli.commands import apply as apply_command
from patchkit.cli.main import ShortOptionsFirst
from patchkit.series import library


def _three_sets(tmp_path: Path) -> tuple[Path, Path]:
    """A stock 0.16.0 site, and a library of `alpha`, `demo` and `zeta`, each patching the spec."""
    site, scratch = tmp_path / "site", tmp_path / "scratch"
    pip_install(site, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    scratch.mkdir()
    patch = make_patch(scratch, site, {SPEC: patched_spec()})
    root = tmp_path / "lib"
    for name in ("alpha", "demo", "zeta"):
        write_library(root, {"0.16.0": [patch]}, name=name)
    (root / "library.toml").write_text('order = ["demo", "alpha", "zeta"]\n')
    return site, root


def test_a_dry_run_of_one_set_loads_that_set_alone(run, tmp_path, monkeypatch):
    site, root = _three_sets(tmp_path)
    loaded = []
    real = library.load_set
    monkeypatch.setattr(library, "load_set", lambda directory: loaded.append(directory.name) or real(directory))
    done = run("apply", "--dry-run", "-q", "--set", "demo", "--target", site, "--patches", root)
    assert done.exit_code == 0, done.output
    assert loaded == ["demo"]


def test_a_broken_other_set_is_reported_by_the_commands_that_use_it(run, tmp_path):
    site, root = _three_sets(tmp_path)
    manifest = root / "zeta" / "set.toml"
    manifest.write_text('behavior = "behaviour.py"\n' + manifest.read_text())
    assert run("apply", "--dry-run", "-q", "--set", "demo", "--target", site, "--patches", root).exit_code == 0
    said = f"manifest {manifest}: no field `behavior` (did you mean `behaviour`?)"
    for command in (
        ["apply", "--dry-run", "--target", site],
        ["apply", "--dry-run", "--set", "zeta", "--target", site],
    ):
        done = run(*command, "--patches", root)
        assert done.exit_code == 2 and said in " ".join(done.output.split()), done.output
    done = run("list", "--patches", root)
    assert done.exit_code == 2 and said in " ".join(done.output.split()), done.output


def _outcome(load):
    try:
        return load()
    except BadInput as exc:
        return exc.message


# set.toml texts of a library's other directory, each beside demo/ (demo's name line is plain)
LIBRARIES = {
    "the same name twice: the later directory wins": 'name = "demo"\ndescription = "the later one"\n',
    "a name after an array": 'roots = ["vllm"]\nname = "other"\n',
    "a name line inside a multi-line string": 'description = """\nname = "fake"\n"""\nname = "other"\n',
    "an escape in the name": 'name = "d\\u0065mo"\ndescription = "escaped"\n',
    "a comment, CRLF, spaces": '# the other set\r\n  name   =  "other"   # its name\r\n',
    "a quoted key": '"name" = "other"\n',
    "a broken manifest that names itself plainly": 'name = "other"\nbehavior = "x"\n',
    "a broken manifest whose name takes TOML": 'roots = ["vllm"]\nname = "other"\nbehavior = "x"\n',
    "unreadable TOML": 'name = "other"\nname = "again"\n',
    "no name line: TOML reads it, and finds none": 'description = "nameless"\n',
}


@pytest.mark.parametrize("manifest", LIBRARIES.values(), ids=list(LIBRARIES))
@pytest.mark.parametrize("order", [None, '["demo"]', '["other", "demo"]'])
def test_one_named_set_is_what_the_whole_library_gives_of_it(tmp_path, manifest, order):
    root = write_library(tmp_path / "lib", {"0.16.0": [b""]}, name="demo")
    (root / "zz-other").mkdir()
    releases = '\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n'
    (root / "zz-other" / "set.toml").write_bytes((manifest + releases).encode())
    if order:
        (root / "library.toml").write_text(f"order = {order}\n")
    whole = _outcome(lambda: library.load_library(root))
    for name in ("demo", "other", "fake", "ghost"):
        one = _outcome(lambda name=name: library.load_named(root, name))
        if isinstance(whole, str):  # the whole library is refused: so is the named set, or it is checked alone
            assert one == whole or isinstance(one, library.PatchSetDef), name
        else:
            assert one == _outcome(lambda name=name: library.choose_set(whole, name)), name


def test_the_name_line_is_read_only_where_it_alone_tells_the_name(tmp_path):
    manifest = tmp_path / "set.toml"
    for text, said in {
        'name = "eagle3"\n[[releases]]\n': "eagle3",
        'description = "x = y"\nname = "tools"  # the set\n': "tools",
        '[needed_by]\nname = "inner"\n': None,
        'name = "a\\"b"\n': None,
        'name = ""\n': None,
        "name = 'literal'\n": None,
        'description = """\nname = "fake"\n"""\n': None,
        'name = "x" trailing\n': None,
    }.items():
        manifest.write_text(text)
        assert library._name_line(manifest) == said, text


PATTERNS = (
    "[0-9a-f]{64}",
    "patchkit_guard\\.py|",
    "^GUARD_FORMAT",
    "holds more than",
    "( --all)?",
    "subprocess\\.",
    "^import\\s+",
)
COMPILED = """
import json, re, sys
import patchkit.store.state, patchkit.engine.guard, patchkit.tree.version, patchkit.tree.target
print(json.dumps([str(key[1]) for key in re._cache]))
"""


def test_importing_the_engine_compiles_none_of_its_patterns_before_they_are_used():
    done = subprocess.run([sys.executable, "-c", COMPILED], capture_output=True, text=True, check=True)
    compiled = json.loads(done.stdout)
    assert [p for p in compiled if any(part in p for part in PATTERNS)] == []


@pytest.mark.parametrize("text", ["a" * 64, "A" * 64, "0" * 63, "x" + "f" * 64, ""])
def test_a_lazy_pattern_finds_what_the_compiled_one_does(text):
    for pattern, flags in (("[0-9a-f]{64}", 0), ("^[0-9]+$", re.MULTILINE)):
        lazy, compiled = LazyPattern(pattern, flags), re.compile(pattern, flags)
        for method in ("search", "fullmatch", "findall"):
            for pos, endpos in ((0, len(text)), (1, len(text)), (0, 64)):
                found = getattr(lazy, method)(text, pos, endpos)
                expected = getattr(compiled, method)(text, pos, endpos)
                if method == "findall":
                    assert found == expected
                else:
                    assert (found and found.span()) == (expected and expected.span())
    assert LazyPattern(rb"^GUARD_FORMAT = ([0-9]+)$", re.MULTILINE).search(b"x\nGUARD_FORMAT = 11\n").group(1) == b"11"


ARGUMENTS = (
    ["--dry-run", "-q", "--set", "eagle3"],
    ["-q", "--dry-run"],
    ["--dry-run", "-Z"],
    ["--dry-rn"],
    ["--set=eagle3", "-q"],
    ["-q", "--", "-q"],
    ["-qq"],
    ["-", "-q"],
)


@pytest.mark.parametrize("arguments", ARGUMENTS, ids=" ".join)
def test_a_short_option_first_parser_reads_the_command_line_as_click_does(arguments):
    def parsed(cls):
        command = apply_command.command
        try:
            command.__class__ = cls
            with click.Context(command) as parent:
                return sorted(command.make_context("apply", list(arguments), parent=parent).params.items(), key=str)
        except click.UsageError as exc:
            return exc.format_message()
        finally:
            command.__class__ = click.Command

    assert parsed(ShortOptionsFirst) == parsed(click.Command)


def test_a_quiet_command_line_builds_no_close_match_search(tmp_path):
    """`-q` is a short option: matched as one at once, no NoSuchOption (and its difflib) is made."""
    probe = (
        "import sys, click.exceptions as e\n"
        "made = []\n"
        "real = e.NoSuchOption.__init__\n"
        "e.NoSuchOption.__init__ = lambda self, *a, **k: made.append(a) or real(self, *a, **k)\n"
        "from patchkit.cli.main import run_in_process\n"
        "run_in_process(['apply', '--dry-run', '-q', '--target', sys.argv[1]])\n"
        "print(made, 'difflib' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, check=False)
    assert done.stdout.strip().splitlines()[-1] == "[] False", done.stdout + done.stderr
