"""The operations layer (apply/revert results), the one exit path, the state names, JSON's
schema_version, and the options every command shares."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SPEC_PY, make_patch, run_cli_read_only, run_cli_writing, snapshot, write_library
from launch_fixtures import write_model

import patchkit
from patchkit.base.enums import Outcome, PatchState, StepState, TreeState
from patchkit.base.errors import CHECK_FAILED, INTERNAL_ERROR, CheckFailed, Conflict
from patchkit.base.options import Options
from patchkit.engine import inspection
from patchkit.engine.operations import apply_series, resolve_for_revert, revert_series, verify_tree
from patchkit.engine.resolve import resolve
from patchkit.store import state

SPEC = "vllm/config/spec.py"
PATCHED_SPEC = SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "deepseek",\n')
PACKAGE = Path(patchkit.__file__).parent


@pytest.fixture
def library(tmp_path, tree, scratch) -> Path:
    return write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: PATCHED_SPEC})]})


def options(tree: Path, library: Path) -> Options:
    return Options(target_dir=str(tree), library=str(library))


# --------------------------------------------------------------------------- operations


def test_apply_and_revert_return_what_they_did(tree, library):
    stock = snapshot(tree)
    resolved = resolve(options(tree, library))

    dry = apply_series(resolved, dry_run=True)
    assert dry.outcome == Outcome.DRY_RUN and not dry.written and snapshot(tree) == stock
    assert [s.state for s in dry.plan.steps] == [StepState.WILL_CHANGE]

    applied = apply_series(resolved)
    assert applied.outcome == Outcome.APPLIED and applied.error is None and applied.written
    assert (tree / SPEC).read_text() == PATCHED_SPEC
    assert {r.check for r in applied.planned_checks} >= {"syntax", "names"}
    assert applied.message == "applied 1 patch(es): 1 file(s) changed"

    again = apply_series(resolved)
    assert again.outcome == Outcome.ALREADY_APPLIED and not again.written

    target, still_resolved = resolve_for_revert(options(tree, library))
    reverted = revert_series(target, still_resolved)
    assert (reverted.outcome, reverted.files, reverted.error) == (Outcome.REVERTED, [SPEC], None)
    assert snapshot(tree) == stock
    assert revert_series(target, still_resolved).outcome == Outcome.NOT_APPLIED


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, object]] = []

    def warning(self, text):
        self.events.append(("warning", text))

    def planned(self, plan):
        self.events.append(("planned", plan))

    def checked(self, results):
        self.events.append(("checked", results))


def test_the_watcher_is_told_each_step_as_it_happens(tree, library):
    watch = Recorder()
    result = apply_series(resolve(options(tree, library)), watch=watch)
    assert [kind for kind, _ in watch.events] == ["planned", "checked", "checked"]
    assert watch.events[0][1] is result.plan
    assert [shown for _, shown in watch.events[1:]] == result.tables
    assert {r.check for r in result.tables[1]} == {"bytecode"}  # after writing

    watch = Recorder()
    target, resolved = resolve_for_revert(options(tree, library))
    reverted = revert_series(target, resolved, watch=watch)
    assert watch.events == [("checked", reverted.checks)]


def test_a_conflict_is_a_result_carrying_its_error(tree, library):
    (tree / SPEC).write_text(SPEC_PY.replace('"llama",', '"mistral",'))
    before = snapshot(tree)
    result = apply_series(resolve(options(tree, library)))
    assert result.outcome == Outcome.CONFLICT and isinstance(result.error, Conflict)
    assert "hunk #1 does not apply" in result.error.message
    assert snapshot(tree) == before and not result.written


def test_verify_checks_the_planned_tree_and_names_its_verdict(tree, library):
    verified = verify_tree(resolve(options(tree, library)), import_probe=False)
    assert (verified.status.state, verified.ok, verified.outcome) == (TreeState.NOT_APPLIED, True, Outcome.OK)
    assert {"integrity", "syntax", "bytecode"} <= {r.check for r in verified.checks}

    (tree / SPEC).write_text(SPEC_PY.replace('"llama",', '"mistral",'))
    verified = verify_tree(resolve(options(tree, library)), import_probe=False)
    assert verified.outcome == Outcome.CHECK_FAILED and [s.patch.name for s in verified.conflicts] == [
        "0001-change.patch"
    ]


# --------------------------------------------------------------------------- exit path


def test_an_internal_error_has_its_own_exit_code(run, tree, library, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(inspection, "inspect", broken)
    result = run("status", "--target", tree, "--patches", library)
    assert result.exit_code == INTERNAL_ERROR == 70
    assert "internal error: RuntimeError: boom" in result.output
    assert INTERNAL_ERROR != CHECK_FAILED


def test_an_invariant_patchkit_catches_broken_is_an_internal_error_too(run, tree, library, monkeypatch):
    """What patchkit detects as its own bug (maintainer.series' check that a refreshed series reproduces
    the workspace) is exit 70, never 1, "a check failed"."""
    from patchkit.base.errors import InternalError, PatchkitError, ToolFailed

    def broken(*args, **kwargs):
        raise InternalError("the refreshed series does not reproduce the workspace")

    monkeypatch.setattr(inspection, "inspect", broken)
    result = run("status", "--target", tree, "--patches", library)
    assert result.exit_code == 70 and "does not reproduce" in result.output
    assert ToolFailed("git diff failed").exit_code == 4
    assert PatchkitError.__subclasses__() and all(
        cls.exit_code != CHECK_FAILED or issubclass(cls, CheckFailed) for cls in PatchkitError.__subclasses__()
    )


# Imports every patchkit module (the target's workers are no part of it) and prints each error class
# whose exit code, as a class, is 1 ("a check failed") but is no CheckFailed.
EXIT_ONE_CLASSES = """
import importlib, pkgutil, patchkit
from patchkit.base.errors import CHECK_FAILED, CheckFailed, PatchkitError
for found in pkgutil.walk_packages(patchkit.__path__, "patchkit."):
    if not found.name.startswith("patchkit._target") and not found.name.endswith("__main__"):
        importlib.import_module(found.name)
def below(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from below(sub)
print(sorted(f"{c.__module__}.{c.__qualname__}" for c in below(PatchkitError)
             if c.exit_code == CHECK_FAILED and not issubclass(c, CheckFailed)))
"""


def test_no_error_class_of_any_module_says_a_check_failed_unless_it_is_one():
    """Exit 1 is "a check failed" alone: an error class that inherits PatchkitError's exit code is
    seen wherever it is defined (the check above sees only the modules its process imported)."""
    done = subprocess.run([sys.executable, "-c", EXIT_ONE_CLASSES], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_exit_codes_are_in_the_help(run):
    assert re.search(r"\n  70 +internal error", run("--help").output)


def exits(tree: ast.AST) -> list[int]:
    """Lines that end a command with an exit code: `raise SystemExit...`, `sys.exit(...)`,
    `ctx.exit(...)`, `exit(...)`, `quit(...)`. Catching a parser's SystemExit is not one, nor the
    hard `os._exit` of a worker or of a simulated crash."""

    def named(node: ast.AST | None) -> str:
        node = node.func if isinstance(node, ast.Call) else node
        return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""

    return [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Raise) and named(node.exc) == "SystemExit")
        or (isinstance(node, ast.Call) and named(node) in ("exit", "quit"))
    ]


def test_no_command_exits_by_itself():
    """Exit codes are decided in cli/main.py alone, and in cli/start.py for a Ctrl-C while it loads."""
    for path in PACKAGE.rglob("*.py"):
        if path not in (PACKAGE / "cli" / "main.py", PACKAGE / "cli" / "start.py"):
            assert exits(ast.parse(path.read_bytes())) == [], path


def test_the_exit_finder_sees_each_way_out_and_not_a_caught_parser_exit():
    source = "raise SystemExit(2)\nsys.exit(1)\nctx.exit(3)\nexit()\nos._exit(0)\ntry:\n    p()\nexcept SystemExit:\n    pass\n"
    assert exits(ast.parse(source)) == [1, 2, 3, 4]


# --------------------------------------------------------------------------- JSON


def documents(run, tree, library) -> dict[str, dict]:
    where = ["--target", tree, "--patches", library, "--format", "json"]
    out = {}
    for name, argv in [
        ("status", ["status", *where]),
        ("dry-run", ["apply", "--dry-run", *where]),
        ("apply", ["apply", *where]),
        ("verify", ["verify", *where]),
        ("revert", ["revert", *where]),
        ("list", ["list", "--patches", library, "--format", "json"]),
    ]:
        result = run(*argv)
        assert result.exit_code == 0, result.output
        out[name] = json.loads(result.stdout)
    return out


def test_every_json_document_carries_the_schema_version(run, tree, library):
    docs = documents(run, tree, library)
    assert {name: doc["schema_version"] for name, doc in docs.items()} == dict.fromkeys(docs, 1)
    assert [docs[n]["result"] for n in ("dry-run", "apply", "revert")] == ["dry-run", "applied", "reverted"]
    assert (docs["status"]["state"], docs["verify"]["state"]) == ("not-applied", "applied")


def test_a_failed_apply_prints_its_document_too(run, tree, library):
    (tree / SPEC).write_text(SPEC_PY.replace('"llama",', '"mistral",'))
    result = run("apply", "--target", tree, "--patches", library, "--format", "json")
    data = json.loads(result.stdout)
    assert result.exit_code == 1 and (data["schema_version"], data["result"]) == (1, "conflict")
    assert data["plan"][0]["state"] == "conflict"


# --------------------------------------------------------------------------- names for states


def test_states_print_and_serialize_as_their_values():
    assert json.dumps({"state": StepState.WILL_CHANGE}) == '{"state": "apply"}'
    assert (str(TreeState.NOT_APPLIED), f"{TreeState.PARTIAL}", f"{Outcome.DRY_RUN:>8}") == (
        "not-applied",
        "partial",
        " dry-run",
    )
    # the same string, distinct meanings
    assert StepState.ALREADY_APPLIED == PatchState.APPLIED == TreeState.APPLIED == "applied"
    assert StepState.ALREADY_APPLIED is not TreeState.APPLIED


def test_the_text_report_shows_state_values(run, tree, library):
    output = run("status", "--target", tree, "--patches", library).output
    assert "state    not-applied" in output and "StepState" not in output and "TreeState" not in output


# --------------------------------------------------------------------------- layers and options


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_only_the_commands_and_the_cli_import_the_presentation_layer():
    engine = [p for p in PACKAGE.rglob("*.py") if "cli" not in p.parts]
    assert engine
    assert [p.name for p in engine if "patchkit.cli.ui" in _imports(p)] == []


SHARED = ["--patches", "--set", "--quiet", "--verbose"]


def test_shared_options_are_declared_once_and_read_the_same_everywhere(run):
    from patchkit.cli.commands.options import ONE_SET_HELP, SET_HELP
    from patchkit.cli.main import COMMANDS, cli

    declared_in = [p.name for p in (PACKAGE / "cli" / "commands").glob("*.py") if '"--patches"' in p.read_text()]
    assert declared_in == ["options.py"]
    helps: dict[str, set[str]] = {}
    for name in COMMANDS:
        command = cli.get_command(None, name)
        for param in command.params:
            for flag in param.opts:
                if flag in SHARED:
                    helps.setdefault(flag, set()).add(param.help)
    assert sorted(helps) == sorted(SHARED)
    assert all(len(texts) == 1 for flag, texts in helps.items() if flag != "--set"), helps
    # --set: one text where it narrows every covering set, one where the command works on one set
    assert helps["--set"] == {SET_HELP, ONE_SET_HELP}, helps
    for name in ("fetch", "workspace", "port"):
        assert "--patches DIR" in run(name, "--help").output
    assert "-q, --quiet" in run("refresh", "--help").output


# --------------------------------------------------------------------------- a module Python imports first


def _shadowed_tree(tmp_path: Path, shadowing: str) -> tuple[Path, Path]:
    from helpers import patched_spec, write_tree

    tree = write_tree(tmp_path / "site")
    patch = tmp_path / "change.diff"
    patch.write_bytes(make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()}))
    (tree / shadowing).parent.mkdir(parents=True, exist_ok=True)
    (tree / shadowing).write_bytes(b"\x7fELF or a package\n")
    return tree, patch


@pytest.mark.parametrize(
    "shadowing",
    [
        "vllm/config/spec/__init__.py",
        "vllm/config/spec/__init__.pyc",
        "vllm/config/spec.cpython-312-x86_64-linux-gnu.so",
        "vllm/config/spec.abi3.so",
        "vllm/config/spec.pypy310-pp73-x86_64-linux-gnu.so",
        "vllm/config.py",  # vllm/config/ has no __init__: a module of its name wins over it
        "vllm/config.cpython-312-x86_64-linux-gnu.so",
        "vllm/config/__init__.abi3.so",  # an extension __init__ on the way is the package, before __init__.py
        "vllm/__init__.cpython-311-x86_64-linux-gnu.so",
        "vllm/config/__init__.so",
    ],
)
def test_apply_refuses_a_tree_where_python_imports_another_file_than_the_patched_source(tmp_path, shadowing):
    from helpers import fingerprint

    tree, patch = _shadowed_tree(tmp_path, shadowing)
    vllm = tree / "vllm"
    before = fingerprint(vllm)
    done = run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 4, done.stdout + done.stderr
    assert shadowing in done.stderr and "instead of vllm/config/spec.py" in done.stderr, done.stderr
    assert fingerprint(vllm) == before


def test_verify_fails_an_applied_tree_once_a_module_python_imports_first_is_added(tmp_path):

    tree, patch = _shadowed_tree(tmp_path, "vllm/config/notes.txt")
    assert run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import").returncode == 0
    assert run_cli_read_only("verify", "--target", tree, "--patch", patch, "--no-import").returncode == 0
    (tree / "vllm/config/spec").mkdir()
    (tree / "vllm/config/spec/__init__.py").write_text("")
    done = run_cli_read_only("verify", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "vllm/config/spec/__init__.py is imported instead" in done.stdout + done.stderr
    model = write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    launch = ("--no-import", "--", "vllm", "serve", str(model))
    done = run_cli_read_only("preflight", "--target", tree, "--patch", patch, *launch)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "vllm/config/spec/__init__.py is imported instead" in done.stdout + done.stderr


@pytest.mark.parametrize("library", [False, True])
def test_verify_and_apply_give_one_fix_for_a_stray_extension_init_on_the_way(tmp_path, library):
    """review 8 M4: apply's hint (remove the stray file) was right; verify's blamed the series."""
    from helpers import write_library

    stray = "vllm/config/__init__.abi3.so"
    tree, patch = _shadowed_tree(tmp_path, stray)
    chosen = (
        ("--patches", write_library(tmp_path / "lib", {"0.16.0": [patch.read_bytes()]}))
        if library
        else ("--patch", patch)
    )
    applied = run_cli_writing("apply", "--target", tree, *chosen, "--no-import")
    verified = run_cli_read_only("verify", "--target", tree, *chosen, "--no-import")
    assert applied.returncode == 4 and verified.returncode == 1, verified.stdout + verified.stderr
    apply_says = " ".join(applied.stderr.split()).partition("hint: ")[2]
    verify_says = " ".join((verified.stdout + verified.stderr).split())
    assert f"if {stray} is not vLLM's own, remove it" in apply_says, applied.stderr
    assert apply_says.partition("; ")[2] in verify_says, verify_says  # "if vLLM ships it, ...": the same words
    assert "remove it and run `patchkit apply" in verify_says, verify_says
    assert "report the library's series" not in verify_says and "fix the patch" not in verify_says, verify_says


def test_a_module_named_like_a_package_with_its_init_is_no_shadow():
    from patchkit.checks import shadow

    listing = {"vllm": ["__init__.py", "config", "config.py"], "vllm/config": ["__init__.py", "spec.py"]}
    assert shadow.shadow("vllm/config/spec.py", lambda d: listing.get(d, [])) is None
    listing["vllm/config"] = ["spec.py"]
    assert shadow.shadow("vllm/config/spec.py", lambda d: listing.get(d, [])) == "vllm/config.py"
    listing[""] = ["vllm.py", "vllm"]  # top-down: the first package on the way that loses
    listing["vllm"].remove("__init__.py")
    assert shadow.shadow("vllm/config/spec.py", lambda d: listing.get(d, [])) == "vllm.py"


def test_a_namespace_directory_or_legacy_bytecode_beside_the_source_is_no_shadow(tmp_path):

    tree, patch = _shadowed_tree(tmp_path, "vllm/config/spec/data.json")
    (tree / "vllm/config/spec.pyc").write_bytes(b"legacy")
    done = run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_series_that_turns_a_module_into_a_package_of_its_name_is_no_shadow(tmp_path):
    """A release diff deletes vllm/config/spec.py and creates vllm/config/spec/__init__.py: judged
    on the tree the series leaves, neither shadows the other, and apply, verify and revert pass."""
    import subprocess

    from helpers import fingerprint, write_tree

    tree = write_tree(tmp_path / "site")
    stock = fingerprint(tree / "vllm")
    old = (tree / "vllm/config/spec.py").read_text()
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "vllm/config").mkdir(parents=True)
    (b / "vllm/config/spec").mkdir(parents=True)
    (a / "vllm/config/spec.py").write_text(old)
    (b / "vllm/config/spec/__init__.py").write_text(old + "MOVED = 1\n")
    text = (
        subprocess.run(
            ["git", "diff", "--no-index", "--no-prefix", "--src-prefix=a/", "--dst-prefix=b/", "a", "b"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        .stdout.replace("a/a/", "a/")
        .replace("b/b/", "b/")
        .replace("rename from a/", "rename from ")  # a rename line names the path itself, no a/ or b/
        .replace("rename to b/", "rename to ")
    )
    patch = tmp_path / "move.diff"
    patch.write_text(text)
    done = run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / "vllm/config/spec/__init__.py").exists() and not (tree / "vllm/config/spec.py").exists()
    assert run_cli_read_only("verify", "--target", tree, "--patch", patch, "--no-import").returncode == 0
    assert run_cli_writing("revert", "--target", tree, "--patch", patch).returncode == 0
    assert fingerprint(tree / "vllm") == stock


def _count_record_reads(monkeypatch) -> list[Path]:
    """Every read of .patchkit/state.json from here on (read_state reads it through read_meta_file),
    but the lock-free view's: it compares the bytes before and after (settled_record), no reading
    of the record."""

    reads: list[Path] = []
    unread = state.read_meta_file

    def read_meta_file(path: Path) -> bytes | None:
        if path.name == "state.json" and sys._getframe(1).f_code.co_name != "settled_record":
            reads.append(path)
        return unread(path)

    monkeypatch.setattr(state, "read_meta_file", read_meta_file)
    return reads


@pytest.mark.parametrize("guard", [False, True])
def test_apply_and_revert_each_read_the_record_once(tree, library, monkeypatch, guard):
    """One read of state.json per operation, passed down: not one per phase (plan, stock integrity,
    commit, the record's settling), which could each see another record."""
    resolved = resolve(options(tree, library))
    reads = _count_record_reads(monkeypatch)
    assert apply_series(resolved, dry_run=True, guard=guard).outcome == Outcome.DRY_RUN
    assert len(reads) == 1
    del reads[:]
    assert apply_series(resolved, guard=guard).outcome == Outcome.APPLIED
    assert len(reads) == 1
    del reads[:]
    assert apply_series(resolved, guard=guard).outcome == Outcome.ALREADY_APPLIED
    assert len(reads) == 1
    target, still_resolved = resolve_for_revert(options(tree, library))
    del reads[:]
    assert revert_series(target, still_resolved).outcome == Outcome.REVERTED
    assert len(reads) == 1


def test_status_of_a_guarded_tree_reads_the_record_once(tree, library, monkeypatch):
    """inspect reads state.json once and hands that State to the guard's questions (what it
    refuses, whether other users can read its files, an older patchkit's guard). The guard's own
    check reads the record by itself, as it does inside vLLM (patchkit/_target/guard.py)."""
    resolved = resolve(options(tree, library))
    assert apply_series(resolved, guard=True).outcome == Outcome.APPLIED
    reads = _count_record_reads(monkeypatch)
    assert inspection.inspect(resolved).state == TreeState.APPLIED
    assert len(reads) == 1
