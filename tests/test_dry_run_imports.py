"""What a dry run on a stock tree loads: only the modules its work needs (each module loaded is
start-up time, and a large dry run's budget is a few times `git apply --check`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import make_patch, patched_spec, write_tree

from patchkit.series import library

# Loaded only for what a stock tree's dry run never does: a vLLM installed from a patched wheel
# (its provenance), a fetch (the network, the zip reader), a table in a terminal, the set's
# behaviour test (verify's alone: patchkit.checks.registry).
NOT_FOR_A_STOCK_TREE = (
    "patchkit.checks.behaviour",
    "patchkit.distinfo.installed_wheel",
    "patchkit.distinfo.provenance",
    "patchkit.fetch.release",
    "patchkit.fetch.ranges",
    "patchkit.fetch.zipread",
    "rich",
)

DRY_RUN = """
import json, sys
from patchkit.cli.main import main
sys.argv = ["patchkit", "apply", "--dry-run", "-q", "--target", sys.argv[1], "--patch", sys.argv[2]]
try:
    main()
finally:
    print(json.dumps(sorted(m for m in sys.modules if m.startswith(("patchkit", "rich", "pyflakes", "logging")))), file=sys.stderr)
"""


def loaded_by_a_dry_run(tree, diff, exit_code: int = 0, env: dict | None = None) -> list[str]:
    code = [sys.executable, "-c", DRY_RUN, str(tree), str(diff)]
    done = subprocess.run(code, capture_output=True, text=True, env=env)
    assert done.returncode == exit_code, done.stderr
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_a_dry_run_on_a_stock_tree_loads_no_wheel_provenance_and_no_fetcher(tmp_path):
    tree = write_tree(tmp_path / "site", "0.17.1")
    diff = tmp_path / "change.diff"
    diff.write_bytes(make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()}))
    loaded = loaded_by_a_dry_run(tree, diff)
    assert "patchkit.series.plan" in loaded and "patchkit.checks.integrity" in loaded  # it did the work
    assert [m for m in loaded if m.startswith(NOT_FOR_A_STOCK_TREE)] == []


def test_a_tree_with_a_provenance_file_loads_the_installed_wheel_reader(tmp_path):
    tree = write_tree(tmp_path / "site", "0.17.1")
    diff = tmp_path / "change.diff"
    diff.write_bytes(make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()}))
    (tree / "vllm-0.17.1.dist-info" / "patchkit.json").write_text("{}")  # read, and refused as damaged
    assert "patchkit.distinfo.installed_wheel" in loaded_by_a_dry_run(tree, diff, exit_code=2)


def test_the_fetch_package_still_gives_its_modules_as_attributes():
    names = ["cache", "download", "extract", "index", "net", "ranges", "release", "wheel_choice", "zipread"]
    code = (
        "import json, sys, patchkit.fetch as f; "
        "print(json.dumps([n for n in sys.argv[1:] if getattr(f, n).__name__ == 'patchkit.fetch.' + n]))"
    )
    done = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == names  # each loaded on first use, as when the package imported them all


def test_a_warm_dry_run_recalls_the_names_check_without_loading_pyflakes_checker(tmp_path):
    """Issue 21: pyflakes' checker (2.2 ms of start-up) loads only when a file's findings are not
    remembered: the first dry run runs it, the same dry run again recalls its findings."""
    tree = write_tree(tmp_path / "site", "0.17.1")
    diff = tmp_path / "change.diff"
    diff.write_bytes(make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()}))
    env = {**os.environ, "PATCHKIT_CACHE_DIR": str(tmp_path / "cache")}
    cold = loaded_by_a_dry_run(tree, diff, env=env)
    assert "patchkit.checks.names" in cold and "pyflakes.checker" in cold
    warm = loaded_by_a_dry_run(tree, diff, env=env)
    assert "patchkit.checks.names" in warm and "pyflakes.checker" not in warm
    assert "logging" not in warm  # the notes below the CLI go through base.notes (issue 21)


# Patterns a quiet dry run or `run`'s fast path never uses (output, tables, recovery, git, a
# patch's mail header), kept as text and compiled on first use: each was compiled at import.
LAZY_PATTERNS = {
    "patchkit.base.fsutil": ["_DRIVE", "_DRIVES", "_DOT_PARTS"],
    "patchkit.base.usercache": ["_ENTRY_NAME"],
    "patchkit.checks.syntax": ["_ERROR_LINE"],
    "patchkit.cli.ui.console": ["_LABEL"],
    "patchkit.cli.ui.findings": ["_LINE_FIRST"],
    "patchkit.cli.ui.text": ["_COMMAND", "_ASIDE", "_SLASH", "_JOINER"],
    "patchkit.distinfo.entry_points": ["_VALUE"],
    "patchkit.launch.command": ["_ENV_ASSIGNMENT"],
    "patchkit.launch.interpreter": ["_ASSIGNMENT", "_PYTHON_CLUSTER"],
    "patchkit.series.patchfile": ["_DIFF_START", "_QUOTED_PART"],
    "patchkit.store.journal": ["_TXID", "_TEMP_NAME"],
    "patchkit.tree.version": ["_DESCRIBE"],
}

COMPILED_AT_IMPORT = """
import importlib, json, re, sys
modules = json.loads(sys.argv[1])
for name in modules:
    importlib.import_module(name)
compiled = {key[1] for key in re._cache}
print(json.dumps([f"{m}.{p}" for m, names in modules.items() for p in names
                  if getattr(sys.modules[m], p) in compiled or not isinstance(getattr(sys.modules[m], p), (str, bytes))]))
"""


def test_loading_the_modules_compiles_none_of_the_patterns_a_start_up_does_not_use():
    """Issue 21: a regular expression compiled at import is start-up time for every run (the
    visible() pair alone ~0.4 ms); these compile on first use, as a test of each use shows."""
    code = [sys.executable, "-c", COMPILED_AT_IMPORT, json.dumps(LAZY_PATTERNS)]
    done = subprocess.run(code, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_the_library_reader_loads_no_difflib_and_still_names_the_field_a_typo_meant():
    """Issue 21: difflib (with heapq, ~1 ms) loaded on every start-up for a set.toml's misspelt
    field; the nearest field is told by edits instead (a swap of two letters is one)."""
    code = "import sys, patchkit.series.library; print('difflib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
    fields = library._MANIFEST_FIELDS
    typos = ["behavior", "upstrem", "nmae", "neededby", "upstream-fix", "supportd", "release", "owner", "dir"]
    said = ["behaviour", "upstream", "name", "needed_by", "upstream_fix", "supported", "releases", None, None]
    assert [library._nearest(typo, fields) for typo in typos] == said
