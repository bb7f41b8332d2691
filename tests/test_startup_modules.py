"""Issue 21: what each start-up path imports stays within a recorded list, so a stray import (a module
of the UI, a check, difflib, textwrap) is caught here rather than by a bench. The paths: `--help`,
the quiet dry run of every covering set on a stock tree, and `run`'s fast path (an applied tree,
findings kept). Each runs as the console script runs, in a fresh interpreter.

A module added on purpose is added to tests/startup_modules.json, with the start-up it costs
measured (bench/bench.py --only startup); one that no longer loads may be taken out of it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import pytest
from helpers import make_patch, run_cli, write_library
from launch_fixtures import stand_in_launch

RECORDED = Path(__file__).parent / "startup_modules.json"
TOOLS = "vllm/tool_parsers/stand_in_parser.py"

# The console script's run (patchkit/__main__ -> cli.start), its exec and its os._exit made a
# SystemExit, then every module loaded printed as the last line of stderr.
LOADED = """
import json, os, runpy, sys
os._exit = sys.exit
os.execvp = os.execv = lambda *_: sys.exit(0)
sys.argv = ["patchkit", *sys.argv[1:]]
try:
    runpy.run_module("patchkit", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

# Standard-library modules that cost start-up (their own import, or what they pull in): checked by
# name. The rest of the standard library is what any of these, or the interpreter, loads anyway.
HEAVY_STDLIB = (
    "argparse",
    "ast",
    "asyncio",
    "base64",
    "bz2",
    "concurrent",
    "csv",
    "dataclasses",
    "decimal",
    "difflib",
    "email",
    "fcntl",
    "fractions",
    "ftplib",
    "getpass",
    "gettext",
    "glob",
    "gzip",
    "hmac",
    "html",
    "http",
    "importlib.metadata",
    "importlib.resources",
    "inspect",
    "ipaddress",
    "logging",
    "lzma",
    "mimetypes",
    "mmap",
    "multiprocessing",
    "pickle",
    "pkgutil",
    "platform",
    "pprint",
    "queue",
    "random",
    "secrets",
    "selectors",
    "shlex",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "tokenize",
    "tomllib",
    "traceback",
    "typing",
    "unittest",
    "urllib",
    "uuid",
    "xml",
    "zipfile",
    "zlib",
)


# What the interpreter and this harness load before patchkit runs (a site's .pth files may import more).
BARE = "import json, os, runpy, sys; print(json.dumps(sorted(sys.modules)))"


def kept(modules: list[str], bare: Collection[str] = ()) -> dict[str, list[str]]:
    """patchkit's modules; the heavy standard-library ones; third-party packages by their top name.
    Those already loaded in a bare interpreter (`bare`) are not patchkit's start-up."""
    stdlib = sys.stdlib_module_names
    tops = {m.split(".")[0] for m in modules if m not in bare}
    modules = [m for m in modules if m not in bare]
    return {
        "patchkit": sorted(m for m in modules if m == "patchkit" or m.startswith("patchkit.")),
        "stdlib": sorted(m for m in HEAVY_STDLIB if m in modules),
        "third-party": sorted(t for t in tops if t not in stdlib and not t.startswith("_") and t != "patchkit"),
    }


def loaded(*args: object, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *map(str, args)], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Each path's modules: --help, the quiet dry run of two sets on a stock tree, run's fast path."""
    tmp = tmp_path_factory.mktemp("startup")
    tree, library, command, env, _ = stand_in_launch(tmp, "--port", "8123")
    env["PATCHKIT_CACHE_DIR"] = str(tmp / "cache")  # the module's own: not the user's, nor a test's
    (tree / TOOLS).parent.mkdir(parents=True)
    (tree / TOOLS).write_text("def parse(text):\n    return text\n")
    patch = make_patch(tmp, tree, {TOOLS: "def parse(text):\n    return text.strip()\n"})
    write_library(library, {"0.16.0": [patch]}, name="tools")
    (library / "library.toml").write_text('order = ["eagle3", "tools"]\n')
    where = ["--target", tree, "--patches", library]
    found = {"--help": loaded("--help", env=env), "dry run": loaded("apply", "--dry-run", "-q", *where, env=env)}
    assert "patchkit.series.plan" in found["dry run"]  # it planned
    assert run_cli("apply", *where, "--no-import", env=env).returncode == 0
    loaded("run", *where, "--", *command, env=env)  # cold: the findings are kept
    found["fast path"] = loaded("run", *where, "--", *command, env=env)
    assert "patchkit.launch.shortcut" in found["fast path"]  # it took the fast path
    return found


@pytest.fixture(scope="module")
def bare() -> set[str]:
    done = subprocess.run([sys.executable, "-c", BARE], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("path", ["--help", "dry run", "fast path"])
@pytest.mark.parametrize("kind", ["patchkit", "stdlib", "third-party"])
def test_a_start_up_path_loads_only_the_modules_recorded_for_it(
    paths: dict[str, list[str]], bare: set[str], path: str, kind: str
) -> None:
    recorded = json.loads(RECORDED.read_text())[path][kind]
    stray = sorted(set(kept(paths[path], bare)[kind]) - set(recorded))
    assert stray == [], f"{path} now loads {stray}: not in {RECORDED.name} (each module is start-up time)"


def test_the_recorded_lists_name_no_module_that_does_not_exist() -> None:
    """A list that names a module no start-up can load would hide nothing, but would mislead."""
    recorded = json.loads(RECORDED.read_text())
    for path, kinds in recorded.items():
        for name in kinds["patchkit"]:
            module = Path(__file__).parent.parent / Path(*name.split("."))
            assert module.with_suffix(".py").is_file() or (module / "__init__.py").is_file(), (path, name)
        assert set(kinds["stdlib"]) <= set(HEAVY_STDLIB), path


def test_a_dry_run_of_one_set_loads_neither_the_several_set_steps_nor_the_reports(tmp_path: Path) -> None:
    """`apply --dry-run -q --set eagle3` in a library of two sets: one set's steps, and no check table
    (it passed), so neither engine.several nor the reports (their findings and JUnit) load."""
    tree, library, _command, env, _ = stand_in_launch(tmp_path)
    env["PATCHKIT_CACHE_DIR"] = str(tmp_path / "cache")
    (tree / TOOLS).parent.mkdir(parents=True)
    (tree / TOOLS).write_text("def parse(text):\n    return text\n")
    patch = make_patch(tmp_path, tree, {TOOLS: "def parse(text):\n    return text.strip()\n"})
    write_library(library, {"0.16.0": [patch]}, name="tools")
    found = loaded("apply", "--dry-run", "-q", "--set", "eagle3", "--target", tree, "--patches", library, env=env)
    unwanted = (
        "patchkit.engine.several",
        "patchkit.cli.ui.reports",
        "patchkit.cli.ui.findings",
        "patchkit.cli.ui.junit",
        "patchkit._target.guard",  # a dry run judges no launch: the guard loads on first use
    )
    assert [m for m in unwanted if m in found] == []
    assert "patchkit.series.plan" in found and "patchkit.cli.ui.header" in found  # it planned, and said its set
