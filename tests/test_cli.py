"""Every command through click's CliRunner on small trees, and once as `python -m patchkit`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    make_patch,
    mark_staged,
    patched_spec,
    record_rows,
    snapshot,
    write_library,
    write_tree,
)

CHECKOUT = Path(__file__).resolve().parent.parent

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"


def patched_model(import_line: str = "from .interfaces import SupportsEagle3, SupportsLoRA, SupportsPP\n") -> str:
    return MODEL_PY.replace("from .interfaces import SupportsLoRA, SupportsPP\n", import_line).replace(
        "class Model(SupportsLoRA, SupportsPP):", "class Model(SupportsLoRA, SupportsPP, SupportsEagle3):"
    )


@pytest.fixture
def library(tmp_path, tree, scratch):
    patches = [
        make_patch(scratch, tree, {SPEC: patched_spec()}, "Description: accept deepseek\n"),
        make_patch(scratch, tree, {MODEL: patched_model()}, "Description: eagle3 interface\n"),
    ]
    return write_library(tmp_path / "lib", {"0.16.0": patches})


def args(tree, library, *extra):
    return [*extra, "--target", tree, "--patches", library]


def test_status_apply_verify_revert_cycle_is_byte_identical(run, tree, library):
    stock = snapshot(tree)
    result = run("status", *args(tree, library), "--format", "json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["state"] == "not-applied" and data["vllm_version"] == "0.16.0"
    assert [p["state"] for p in data["patches"]] == ["not-applied", "not-applied"]

    result = run("apply", *args(tree, library))
    assert result.exit_code == 0, result.output
    assert '"deepseek"' in (tree / SPEC).read_text()
    assert json.loads(run("status", *args(tree, library), "--format", "json").output)["state"] == "applied"
    state = json.loads((tree / ".patchkit/state.json").read_text())
    entry = state["entries"][0]
    assert entry["set"] == "demo" and entry["vllm_version"] == "0.16.0"
    assert set(entry["files"]) == {SPEC, MODEL}

    assert run("verify", *args(tree, library)).exit_code == 0
    result = run("revert", *args(tree, library))
    assert result.exit_code == 0, result.output
    assert snapshot(tree) == stock
    assert json.loads(run("status", *args(tree, library), "--format", "json").output)["state"] == "not-applied"


def test_dry_run_reports_hunks_and_writes_nothing(run, tree, library):
    stock = snapshot(tree)
    result = run("apply", "--dry-run", *args(tree, library), "--format", "json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["result"] == "dry-run"
    assert data["plan"][0]["files"][0]["hunks"][0]["line"] >= 1
    assert snapshot(tree) == stock and not (tree / ".patchkit/state.json").exists()
    text = run("apply", "--dry-run", *args(tree, library)).output
    assert "would change 2 file(s)" in text and SPEC in text


def test_apply_twice_is_a_no_op(run, tree, library):
    assert run("apply", *args(tree, library)).exit_code == 0
    patched = snapshot(tree)
    result = run("apply", *args(tree, library), "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["result"] == "already-applied"
    assert snapshot(tree) == patched


def test_trailing_comma_import_is_refused_and_nothing_changes(run, tmp_path, tree, scratch):
    broken = patched_model("from .interfaces import SupportsEagle3, SupportsLoRA, SupportsPP,\n")
    lib = write_library(
        tmp_path / "badlib",
        {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()}), make_patch(scratch, tree, {MODEL: broken})]},
    )
    stock = snapshot(tree)
    result = run("apply", *args(tree, lib))
    assert result.exit_code == 1
    assert "syntax" in result.output and MODEL in result.output and "nothing was written" in result.output
    assert snapshot(tree) == stock
    assert not (tree / ".patchkit/state.json").exists()
    assert run("verify", *args(tree, lib)).exit_code == 1


def test_conflict_exit_1_names_the_file_and_line(run, tree, library):
    (tree / SPEC).write_text(SPEC_PY.replace('"qwen"', '"mistral"'))
    before = snapshot(tree)
    result = run("apply", *args(tree, library))
    assert result.exit_code == 1
    assert SPEC in result.output and "hunk #1" in result.output and "mistral" in result.output
    assert snapshot(tree) == before


def test_partial_state_when_only_some_patches_are_present(run, tree, library):
    # vLLM's RECORD shows the file is not stock (without it, upstream's or a hand's: test_upstream_reached)
    (tree / "vllm-0.16.0.dist-info" / "RECORD").write_text(record_rows(tree, "vllm-0.16.0.dist-info"))
    (tree / SPEC).write_text(patched_spec())
    result = run("status", *args(tree, library), "--format", "json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["state"] == "partial"
    assert run("apply", *args(tree, library)).exit_code == 0  # completes the series
    assert json.loads(run("status", *args(tree, library), "--format", "json").output)["state"] == "applied"


def test_revert_refuses_drift_and_force_keeps_a_copy(run, tree, library):
    stock = snapshot(tree)
    assert run("apply", *args(tree, library)).exit_code == 0
    (tree / SPEC).write_text(patched_spec() + "# my local edit\n")
    status = json.loads(run("status", *args(tree, library), "--format", "json").output)
    assert status["drifted"] == [SPEC]
    result = run("revert", *args(tree, library))
    assert result.exit_code == 1 and SPEC in result.output
    assert (tree / SPEC).read_text().endswith("# my local edit\n")
    result = run("revert", "--force", *args(tree, library), "--format", "json")
    assert result.exit_code == 0
    saved = json.loads(result.stdout)["saved"]
    assert snapshot(tree) == stock
    assert (tree / ".patchkit/saved").exists()
    from pathlib import Path

    assert (Path(saved) / SPEC).read_text().endswith("# my local edit\n")


def test_revert_without_record_reverse_applies(run, tree, library):
    """vLLM's RECORD proves the files patched are not stock; without it, a change no apply recorded
    may be upstream's or a hand's, and revert leaves it (test_upstream_reached)."""
    (tree / "vllm-0.16.0.dist-info" / "RECORD").write_text(record_rows(tree, "vllm-0.16.0.dist-info"))
    stock = snapshot(tree)
    (tree / SPEC).write_text(patched_spec())
    (tree / MODEL).write_text(patched_model())
    result = run("revert", *args(tree, library))
    assert result.exit_code == 0, result.output
    assert snapshot(tree) == stock


def test_adhoc_patch_apply_and_revert(run, tree, scratch):
    stock = snapshot(tree)
    patch_file = scratch / "mine.diff"
    patch_file.write_bytes(make_patch(scratch, tree, {SPEC: patched_spec()}))
    assert run("apply", "--target", tree, "--patch", patch_file).exit_code == 0
    assert (
        json.loads(run("status", "--target", tree, "--patch", patch_file, "--format", "json").stdout)["state"]
        == "applied"
    )
    assert run("revert", "--target", tree, "--patch", patch_file).exit_code == 0
    assert snapshot(tree) == stock


@pytest.mark.parametrize(
    "version, state, code", [("0.18.0", "upstream", 0), ("0.25.1", "upstream", 0), ("0.10.2", "unsupported", 3)]
)
def test_upstream_and_unsupported_versions(run, tmp_path, library, version, state, code):
    old = write_tree(tmp_path / f"v{version}", version)
    stock = snapshot(old)
    result = run("status", *args(old, library), "--format", "json")
    assert result.exit_code == code
    assert json.loads(result.stdout)["state"] == state
    result = run("apply", *args(old, library))
    assert result.exit_code == code
    if state == "unsupported":
        assert ">=0.11.0" in result.output
    assert snapshot(old) == stock


def test_version_without_series_is_exit_3(run, tmp_path, library):
    other = write_tree(tmp_path / "v0.15.0", "0.15.0")
    result = run("apply", *args(other, library))
    assert result.exit_code == 3 and "0.15.0" in result.output


def test_verify_names_a_vllm_version_the_tree_is_not_in_one_line(run, tmp_path, library):
    """newuser15 10: --vllm-version 0.16.0 on a 0.17.0 tree said "partial", conflicts and integrity
    warnings, then "FAILED: N checks passed": the mismatch itself was never named."""
    other = write_tree(tmp_path / "v0.17.0", "0.17.0", {SPEC: SPEC_PY.replace('"qwen"', '"qwen2"'), MODEL: MODEL_PY})
    result = run("verify", *args(other, library), "--vllm-version", "0.16.0")
    assert result.exit_code == 1, result.output
    said = "--vllm-version says 0.16.0, the tree's dist-info 0.17.0 (vllm-0.17.0.dist-info/METADATA)"
    lines = result.output.splitlines()
    # the cause once (newuser17 5f: the verdict said it again), the verdict pointing to it
    assert lines[-1] == "verify: FAILED: --vllm-version names another release than the tree's (above)", lines
    assert result.output.count("--vllm-version says") == 1, result.output
    assert f"version: {said}" in lines and "partial" not in result.output and "conflict" not in result.output
    assert f"  fix: `patchkit verify --target {other} --patches {library}` (the tree's own release)" in lines
    same = run("verify", *args(write_tree(tmp_path / "v0.16.0", "0.16.0"), library), "--vllm-version", "0.16.0")
    assert same.exit_code == 0 and "--vllm-version says" not in same.output, same.output


def test_revert_says_its_one_passing_check_only_with_v(run, tree, library):
    """newuser15 11f: revert printed `checks   1 check passed (-v shows each)`, which says nothing;
    newuser16 6g: then `bytecode no stale compiled copy ...` as its first line, a label a user does
    not know. Its one line says the files are stock; -v shows the check."""
    assert run("apply", *args(tree, library)).exit_code == 0
    done = run("revert", *args(tree, library))
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[3:] == ["reverted: 2 file(s) restored to stock; launch guard removed"], done.output
    assert run("apply", *args(tree, library)).exit_code == 0
    verbose = run("revert", "-v", *args(tree, library))
    assert verbose.exit_code == 0 and "bytecode" in verbose.output.split(), verbose.output


def test_an_interpreter_without_vllm_is_not_answered_with_give_python(run):
    """newuser15 11i: `status --python P` (no vLLM there) hinted "point patchkit at it with --python"."""
    done = run("status", "--python", sys.executable)
    assert done.exit_code == 4, done.output
    said = " ".join(done.output.split())
    assert f"{sys.executable} imports no vllm: give --python the interpreter of the environment" in said, said
    assert "point patchkit at it" not in said, said


def test_status_v_shows_the_patch_table_without_a_bare_title_line(run, tree, library):
    """newuser15 11g: `status -v` printed a line `patches` alone before each set's table."""
    done = run("status", "-v", *args(tree, library))
    assert done.exit_code == 0, done.output
    lines = [line.strip() for line in done.output.splitlines()]
    assert "patches" not in lines and any(line.startswith("patch ") for line in lines), done.output


def test_vllm_version_override(run, tmp_path, library):
    other = write_tree(tmp_path / "v0.15.0", "0.15.0")
    result = run("status", *args(other, library), "--vllm-version", "0.16.0", "--format", "json")
    data = json.loads(result.stdout)
    assert data["vllm_version"] == "0.16.0" and data["version_source"] == "--vllm-version"


def test_list_and_diff(run, library, tree):
    data = json.loads(run("list", "--patches", library, "--format", "json").stdout)
    release = data["sets"][0]["releases"][0]
    assert release["versions"] == "==0.16.0"
    assert [p["description"] for p in release["patches"]] == ["accept deepseek", "eagle3 interface"]
    text = run("list", "--patches", library).output
    assert "accept deepseek" in text
    diff = run("diff", *args(tree, library)).output
    assert '+    "deepseek",' in diff and "\x1b[" not in diff


@pytest.mark.parametrize(
    "argv, code, fragment",
    [
        (["status", "--target", "/nonexistent/dir"], 4, "does not exist"),
        (["status", "--format", "xml"], 2, "xml"),
        (["apply", "--bogus"], 2, "bogus"),
    ],
)
def test_usage_and_target_errors(run, argv, code, fragment):
    result = run(*argv)
    assert result.exit_code == code
    assert fragment in result.output
    assert "Traceback" not in result.output


def test_target_without_vllm_is_exit_4(run, tmp_path):
    (tmp_path / "empty").mkdir()
    result = run("status", "--target", tmp_path / "empty")
    assert result.exit_code == 4 and "no vllm/" in result.output


def test_malformed_patch_and_unreadable_manifest_are_exit_2(run, tmp_path, tree):
    bad = tmp_path / "bad.diff"
    bad.write_bytes(b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,3 +1,3 @@\n x\n")
    result = run("apply", "--target", tree, "--patch", bad)
    assert result.exit_code == 2 and "malformed" in result.output
    lib = tmp_path / "lib" / "broken"
    lib.mkdir(parents=True)
    (lib / "set.toml").write_text("name = [unclosed\n")
    result = run("status", "--target", tree, "--patches", tmp_path / "lib")
    assert result.exit_code == 2 and "manifest" in result.output


def test_python_module_entry_point_in_a_subprocess(tree, library):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "patchkit",
            "status",
            "--target",
            str(tree),
            "--patches",
            str(library),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "not-applied"
    done = subprocess.run(
        [sys.executable, "-m", "patchkit", "apply", "--target", str(tree / "missing")], capture_output=True, text=True
    )
    assert done.returncode == 4 and "Traceback" not in done.stderr


def test_verify_junit_on_a_target_has_one_testcase_per_check(run, tmp_path, tree, scratch):
    import xml.etree.ElementTree as ET

    broken = patched_model("from .interfaces import SupportsEagle3, SupportsLoRA, SupportsPP,\n")
    lib = write_library(
        tmp_path / "badlib",
        {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()}), make_patch(scratch, tree, {MODEL: broken})]},
    )
    result = run("verify", *args(tree, lib), "--format", "junit")
    assert result.exit_code == 1
    suite = ET.fromstring(result.stdout).find("testsuite")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert f"syntax: {MODEL}" in cases and f"syntax: {SPEC}" in cases
    assert cases[f"syntax: {MODEL}"].find("failure") is not None
    assert cases[f"syntax: {SPEC}"].find("failure") is None
    assert int(suite.get("failures")) >= 1 and int(suite.get("tests")) == len(cases)


def test_recover_command_rolls_back_an_interrupted_transaction(run, tree, library):
    import hashlib

    from patchkit.store.journal import journal_path
    from patchkit.store.state import meta_dir

    stock = snapshot(tree)
    # What a crash right after the first file was replaced leaves: the original saved, the file changed.
    original = (tree / SPEC).read_bytes()
    digest = hashlib.sha256(original).hexdigest()
    (meta_dir(tree) / "objects").mkdir(parents=True, exist_ok=True)
    (meta_dir(tree) / "objects" / digest).write_bytes(original)
    journal_path(tree).write_text(
        json.dumps(
            {
                "id": "x",
                "previous_state": None,
                "files": [
                    {
                        "path": SPEC,
                        "before": digest,
                        "after": hashlib.sha256(patched_spec().encode()).hexdigest(),
                        "staged": None,
                        "mode": 0o644,
                        "created_dirs": [],
                    }
                ],
            }
        )
    )
    (tree / SPEC).write_text(patched_spec())  # after its journal, as the commit writes it
    mark_staged(tree, "x", SPEC)  # staged before the replace, as the commit marks it
    result = run("recover", "--target", tree)
    assert result.exit_code == 0 and "rolled back" in result.output and "1 file(s) restored" in result.output
    assert snapshot(tree) == stock and not journal_path(tree).exists()
    assert "nothing to recover" in run("recover", "--target", tree).output


def test_revert_uses_the_record_when_the_library_no_longer_covers_the_version(run, tree, library):
    stock = snapshot(tree)
    assert run("apply", *args(tree, library)).exit_code == 0
    (tree / "vllm-0.16.0.dist-info").rename(tree / "vllm-0.15.9.dist-info")
    meta = tree / "vllm-0.15.9.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("0.16.0", "0.15.9"))
    result = run("revert", *args(tree, library))
    assert result.exit_code == 0, result.output
    assert snapshot(tree) == stock


# --------------------------------------------------------------------------- the command line a person reads


def test_a_misspelled_command_gets_a_suggestion(run):
    result = run("aply", "--target", "/nowhere")
    assert result.exit_code == 2
    assert "No such command 'aply'. Did you mean 'apply'?" in result.output
    assert "Did you mean 'preflight'?" in run("prefligth").output
    assert "Did you mean" not in run("zzzz").output  # nothing near: no guess


def test_another_commands_option_gets_no_suggestion_that_means_something_else(run):
    """New-user trial 14, item 23h: `fetch --format json` was answered "Did you mean '--force'?"
    (pasted, it overwrites files); a misspelling of the command's own option still gets one."""
    result = run("fetch", "0.16.0", "--format", "json")
    assert result.exit_code == 2
    assert "fetch has no --format option." in result.output, result.output
    assert "Did you mean" not in result.output
    assert "Did you mean '--format'?" in run("status", "--frmat", "json").output


def _help(columns: int) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    done = subprocess.run([sys.executable, "-m", "patchkit", "--help"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _listing(text: str) -> dict[str, dict[str, str]]:
    """section -> command -> its description, the wrapped lines joined."""
    sections: dict[str, dict[str, str]] = {}
    section = command = None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            section, command = line[:-1], None
            sections[section] = {}
        elif section and line.startswith("  ") and not line.startswith("    ") and line.strip():
            command, _, description = line.strip().partition(" ")
            sections[section][command] = description.strip()
        elif section and command and line.startswith("    ") and line.strip():
            sections[section][command] += " " + line.strip()
        elif not line.strip():
            command = None
    return sections


@pytest.mark.parametrize("columns", [80, 60, 120])
def test_help_groups_the_commands_with_whole_descriptions_wrapped_to_the_terminal(columns):
    from patchkit.cli.main import COMMANDS

    sections = ("Use", "Launch", "Build and fleets", "Maintain")

    text = _help(columns)
    assert "..." not in text.split("\n", 1)[1]  # the usage line's `[ARGS]...` aside
    assert [line for line in text.splitlines() if len(line) > min(columns, 80)] == []
    listing = _listing(text)
    assert list(listing) == ["Options", *sections, "Exit codes"]
    assert set(listing["Use"]) == {"status", "apply", "verify", "revert", "list", "diff", "recover", "fetch"}
    assert set(listing["Launch"]) == {"preflight", "run"}
    assert set(listing["Build and fleets"]) == {"wheel", "fleet"}
    assert set(listing["Maintain"]) == {"workspace", "refresh", "port"}
    shown = {name: text for section in sections for name, text in listing[section].items()}
    assert shown == {name: listed.help for name, listed in COMMANDS.items()}
    # newuser15 9: where the docs are, for a user with no clone (a wheel carries them: test_package)
    assert text.splitlines()[-1] == f"Docs: {CHECKOUT / 'README.md'} (and docs/ beside it)"


@pytest.mark.parametrize("width", [60, 80])
def test_helps_docs_line_never_cuts_a_word_of_a_long_installed_path(width, monkeypatch):
    """New-user trial 23, N4: pipx's path to the packaged docs made the last line wider than 80 columns,
    and the terminal cut it mid-word (`(and d` / `ocs/ beside it)`): the path goes whole on its own line."""
    from patchkit.cli import main

    root = "/home/someone/.local/share/pipx/venvs/vllm-patchkit/lib/python3.12/site-packages/patchkit/_docs"
    monkeypatch.setattr(main, "docs_root", lambda: root)
    lines = _help_words(None, width).splitlines()
    assert lines[-1].strip() == f"{root}/README.md", lines[-2:]
    assert lines[-2] == "Docs (README.md, and docs/ beside it):", lines[-2:]
    assert [line for line in lines[:-1] if len(line) > width] == []


def _help_words(name: str | None, width: int) -> str:
    """`patchkit [NAME] --help` as click draws it `width` columns wide."""
    from patchkit.cli.main import cli

    command = cli if name is None else cli.get_command(None, name)
    ctx = command.context_class(command, info_name=name or "patchkit", terminal_width=width, max_content_width=width)
    return command.get_help(ctx)


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_no_help_breaks_a_word_at_its_hyphen_or_cuts_it(columns, monkeypatch):
    """Each --help at 60, 80 and 120 columns: every word it shows is a whole word of its text (run's
    "site-packages" was "site-" / "packages"; preflight's "vllm.entrypoints.openai.api_server"
    was cut at 60), and no line is wider than click's width for that terminal."""
    from patchkit.cli.main import COMMANDS

    monkeypatch.setenv("COLUMNS", str(columns))
    width = min(columns, 80) - 2  # click's: the terminal's width, at most 80, less 2
    for name in [None, *COMMANDS]:
        whole = set(_help_words(name, 10_000).split())
        shown = _help_words(name, None)
        assert [word for word in shown.split() if word not in whole] == [], (name, columns)
        assert [line for line in shown.splitlines() if len(line) > width] == [], (name, columns)


def test_each_command_is_listed_with_the_first_paragraph_of_its_own_help():
    from patchkit.cli.main import COMMANDS, cli

    for name, listed in COMMANDS.items():
        command = cli.get_command(None, name)
        assert " ".join(command.help.split("\n\n")[0].split()) == listed.help, name


LOADED_BY_HELP = """
import json, sys
from patchkit.cli.main import main
sys.argv = ["patchkit", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith("patchkit.cli.commands."))), file=sys.stderr)
"""


def test_help_imports_no_command_module_and_a_command_imports_its_own():
    def loaded(*argv: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", LOADED_BY_HELP, *argv], capture_output=True, text=True)
        return json.loads(done.stderr.strip().splitlines()[-1])

    assert loaded("--help") == []
    assert loaded("aply") == []
    assert loaded("recover", "--help") == ["patchkit.cli.commands.options", "patchkit.cli.commands.recover"]


# Options a command would ignore are not offered there: each is a usage error (exit 2), not a silent no-op.
IGNORED = [
    ("list", "--target", "DIR"),
    ("list", "--python", "PY"),
    ("list", "--vllm-version", "0.16.0"),
    ("list", "--patch", "FILE"),
    ("list", "--set", "NAME"),
    ("list", "-v", None),
    ("diff", "--patch", "FILE"),
    ("diff", "-v", None),
    ("recover", "--vllm-version", "0.16.0"),
    ("recover", "--patches", "DIR"),
    ("recover", "--patch", "FILE"),
    ("recover", "--set", "NAME"),
    ("recover", "-v", None),
    ("fleet", "-v", None),
]


@pytest.mark.parametrize("command, option, value", IGNORED)
def test_an_option_a_command_ignores_is_not_offered(run, tree, command, option, value):
    argv = [*(["status"] if command == "fleet" else []), option, *([value] if value else [])]
    result = run(command, *argv, *([] if command in ("list", "fleet") else ["--target", tree]))
    assert result.exit_code == 2, result.output
    assert f"{command} has no {option} option" in result.output
    assert option not in re.split(r"[\s,]+", run(command, "--help").output)


def test_the_options_a_command_reads_are_still_offered(run, library, tree):
    assert json.loads(run("list", "--patches", library, "--format", "json", "-q").stdout)["sets"]
    diff = run("diff", "--target", tree, "--patches", library, "--set", "demo", "--vllm-version", "0.16.0", "-q")
    assert diff.exit_code == 0 and '+    "deepseek",' in diff.output
    assert run("recover", "--target", tree, "-q").exit_code == 0
    for command in ("status", "apply", "verify", "preflight", "run", "fetch", "wheel", "revert"):
        assert "-v, --verbose" in run(command, "--help").output, command


@pytest.mark.parametrize("flag", ["-q", "-v"])
def test_quiet_and_verbose_before_the_command_mean_what_they_mean_after_it(run, tree, library, flag):
    """ "Every command takes -q": `patchkit -q status` is `patchkit status -q`, not a usage error."""
    before = run(flag, "status", "--target", tree, "--patches", library)
    after = run("status", "--target", tree, "--patches", library, flag)
    assert before.exit_code == after.exit_code == 0, before.output
    assert before.output == after.output
    assert before.output != run("status", "--target", tree, "--patches", library).output
