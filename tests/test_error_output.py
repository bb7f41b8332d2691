"""What patchkit prints when things go wrong: a machine-readable document on every failed run
(`--format json`, `--format junit`), and text that never crashes on a path the output encoding
cannot hold."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import assert_clean_failure, make_patch, patched_spec, run_cli, snapshot, write_library, write_tree

SPEC = "vllm/config/spec.py"
ASCII_OUTPUT = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C"}


@pytest.fixture
def library(tmp_path, tree, scratch) -> Path:
    return write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})


# --------------------------------------------------------------------------- text on any encoding


def odd_tree(tmp_path: Path, name: bytes) -> Path:
    """A target under a directory whose name is `name` (bytes: maybe not UTF-8 at all)."""
    return write_tree(tmp_path / os.fsdecode(name) / "site-packages")


@pytest.mark.parametrize(
    ("name", "escaped"),
    [
        (b"Z\xc3\xbcrich-\xe2\x86\x92-env", "Z\\xfcrich-\\u2192-env"),  # "Zürich-→-env": escaped by the stream
        (b"latin1-\xe9t\xe9", "latin1-\\xe9t\\xe9"),  # not UTF-8 at all: bytes shown escaped (ui.visible)
    ],
    ids=["non-ascii", "invalid-utf8"],
)
def test_status_apply_revert_print_paths_an_ascii_stdout_cannot_hold(tmp_path, library, name, escaped):
    tree = odd_tree(tmp_path, name)
    stock = snapshot(tree)
    outputs = []
    for argv in (["status"], ["apply"], ["status"], ["revert"]):
        done = run_cli(*argv, "--target", tree, "--patches", library, env=ASCII_OUTPUT)
        assert_clean_failure(done, 0)
        outputs.append(done.stdout)
    assert '"deepseek"' not in (tree / SPEC).read_text() and snapshot(tree) == stock
    assert all(escaped in out for out in outputs), outputs
    assert "state    applied" in outputs[2]


def test_an_error_naming_such_a_path_is_one_clean_line(tmp_path, library):
    missing = tmp_path / os.fsdecode(b"gone-\xc3\xa5-\xfe")
    done = run_cli("status", "--target", missing, "--patches", library, env=ASCII_OUTPUT)
    assert_clean_failure(done, 4)
    assert "gone-\\xe5-\\xfe" in done.stderr
    as_json = run_cli("status", "--target", missing, "--patches", library, "--format", "json", env=ASCII_OUTPUT)
    assert_clean_failure(as_json, 4)
    assert as_json.stdout.isascii() and "gone-\u00e5-\udcfe" in json.loads(as_json.stdout)["error"]


def test_a_stream_that_keeps_file_name_bytes_still_escapes_what_it_cannot_encode(tmp_path, library):
    """ASCII with surrogateescape: the `ø` goes out as the stream's escape; the non-UTF-8 byte is shown
    escaped by the text output itself (ui.visible: a raw byte could be a C1 control to a terminal)."""
    tree = odd_tree(tmp_path, b"\xc3\xb8-\xfa")
    env = {**os.environ, "PYTHONIOENCODING": "ascii:surrogateescape"}
    argv = [sys.executable, "-m", "patchkit", "status", "--target", tree, "--patches", library]
    done = subprocess.run(argv, capture_output=True, env=env, timeout=300)  # bytes: stdout is not UTF-8
    assert done.returncode == 0, done.stderr
    assert b"\\xf8-\\xfa/site-packages" in done.stdout


# --------------------------------------------------------------------------- JSON on every failure


def one_document(stdout: str) -> dict:
    """stdout holds exactly one JSON object (json.loads refuses anything after it)."""
    document = json.loads(stdout)
    assert isinstance(document, dict) and document["schema_version"] == 1
    return document


def failing_runs(tmp_path: Path, tree: Path, library: Path) -> dict[str, tuple[list, int]]:
    """A failing run of every command that takes --format json: (its arguments, its exit code)."""
    no_vllm = tmp_path / "no-vllm"
    no_vllm.mkdir()
    old = write_tree(tmp_path / "old", version="0.10.4")
    return {
        "status": (["status", "--target", no_vllm], 4),
        "apply": (["apply", "--target", old, "--patches", library], 3),
        "verify": (["verify", "--latest", "--target", tree, "--patches", library], 2),
        "revert": (["revert", "--target", tree, "--patches", library, "--set", "absent"], 2),
        "list": (["list", "--patches", no_vllm], 2),
        "workspace": (["workspace", "0.9.3", tmp_path / "ws", "--patches", library], 3),
        "refresh": (["refresh", no_vllm], 2),
        "port": (["port", "--from", "0.13.0", "--to", "0.16.0", "--patches", library, "--out", tmp_path / "o"], 3),
    }


@pytest.mark.parametrize("command", ["status", "apply", "verify", "revert", "list", "workspace", "refresh", "port"])
def test_every_json_command_prints_a_document_when_it_fails(run, tmp_path, tree, library, command):
    argv, code = failing_runs(tmp_path, tree, library)[command]
    result = run(*argv, "--format", "json")
    assert result.exit_code == code, result.output
    document = one_document(result.stdout)
    assert (document["ok"], document["exit_code"], document["command"]) == (False, code, command)
    assert document["error"] and f"error: {document['error']}" in result.stderr
    assert "hint" in document


def test_a_failure_after_resolving_reports_the_target_and_version(run, tmp_path, library):
    old = write_tree(tmp_path / "old", version="0.10.4")
    document = one_document(run("apply", "--dry-run", "--target", old, "--patches", library, "--format", "json").stdout)
    assert document["exit_code"] == 3 and "0.10.4" in document["error"]
    assert (document["target"], document["vllm_version"], document["set"]) == (str(old), "0.10.4", "demo")


def test_text_output_stays_free_of_json_when_a_run_fails(run, tmp_path, library):
    result = run("status", "--target", tmp_path, "--patches", library)
    assert result.exit_code == 4 and result.stdout == ""


def test_an_internal_error_and_an_interrupt_print_a_document_too(run, tree, library, monkeypatch):
    from patchkit.engine import inspection

    for raised, code in ((LookupError("a bug"), 70), (KeyboardInterrupt(), 130)):

        def broken(*args, exc=raised, **kwargs):
            raise exc

        monkeypatch.setattr(inspection, "inspect", broken)
        result = run("status", "--target", tree, "--patches", library, "--format", "json")
        document = one_document(result.stdout)
        assert result.exit_code == code and (document["ok"], document["exit_code"]) == (False, code)
        assert document["target"] == str(tree) and document["vllm_version"] == "0.16.0"
    assert document["error"] == "interrupted before any change was made to the target"


def test_documents_say_ok_and_the_exit_code_and_a_failed_one_why(run, tree, library):
    listed = one_document(run("list", "--patches", library, "--format", "json").stdout)
    assert (listed["ok"], listed["exit_code"]) == (True, 0) and "error" not in listed
    (tree / SPEC).write_text((tree / SPEC).read_text().replace('"qwen"', '"falcon"'))
    result = run("apply", "--target", tree, "--patches", library, "--format", "json")
    applied = one_document(result.stdout)
    assert (result.exit_code, applied["result"], applied["ok"], applied["exit_code"]) == (1, "conflict", False, 1)
    assert SPEC in applied["error"] and f"error: {applied['error']}" in result.stderr


def test_every_successful_document_says_ok(run, tree, library):
    where = ["--target", tree, "--patches", library, "--format", "json"]
    for argv in (["status"], ["apply", "--dry-run"], ["apply"], ["verify"], ["revert"]):
        result = run(*argv, *where)
        document = one_document(result.stdout)
        assert (result.exit_code, document["ok"], document["exit_code"]) == (0, True, 0), argv
        assert "error" not in document


def test_a_status_document_of_an_unsupported_release_says_not_ok(run, tmp_path, library):
    older = write_tree(tmp_path / "older", version="0.10.9")  # below the set's range
    result = run("status", "--target", older, "--patches", library, "--format", "json")
    document = one_document(result.stdout)
    assert (result.exit_code, document["state"], document["ok"], document["exit_code"]) == (3, "unsupported", False, 3)


def test_a_usage_error_with_format_json_is_a_document_too(tmp_path, library):
    done = run_cli("workspace", "--patches", library, "--format", "json", "--all")  # VERSION missing
    assert_clean_failure(done, 2)
    document = one_document(done.stdout)
    assert (document["command"], document["exit_code"]) == ("workspace", 2)
    assert "VERSION" in document["error"] and "Usage:" in done.stderr
    refused = run_cli("status", "--format", "yml")  # no format chosen: click's message alone
    assert_clean_failure(refused, 2)
    assert refused.stdout == "" and "'yml' is not one of" in refused.stderr


# --------------------------------------------------------------------------- JUnit on every failure


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_verify_junit_that_cannot_fetch_is_a_junit_document_with_an_error(library):
    env = {"PIP_INDEX_URL": f"http://127.0.0.1:{closed_port()}/simple", "PIP_CONFIG_FILE": os.devnull}
    done = run_cli("verify", "--vllm-version", "0.16.0", "--patches", library, "--format", "junit", env=env)
    assert_clean_failure(done, 4)
    suites = ET.fromstring(done.stdout)
    [suite] = suites.findall("testsuite")
    assert (suites.get("errors"), suite.get("name"), suite.get("tests"), suite.get("failures")) == (
        "1",
        "patchkit.demo",
        "1",
        "0",
    )
    [error] = suite.findall("testcase/error")
    assert error.get("type") == "exit-4" and "127.0.0.1" in error.get("message", "")
    assert "hint: " in (error.text or "")


def test_verify_junit_on_a_target_it_cannot_find_is_a_junit_document_too(run, tmp_path, library):
    result = run("verify", "--target", tmp_path, "--patches", library, "--format", "junit")
    assert result.exit_code == 4
    [error] = ET.fromstring(result.stdout).findall("testsuite/testcase/error")
    assert "no vllm/ package" in error.get("message", "")


# --------------------------------------------------------------------------- output that cannot be written


def _to_full_disk(*args: object, stderr_full: bool = False) -> subprocess.CompletedProcess:
    """`patchkit ARGS > /dev/full` (every write fails with ENOSPC, as a log on a full disk)."""
    env = {k: v for k, v in os.environ.items() if k != "PATCHKIT_DEBUG"}
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "patchkit", *map(str, args)],
            stdout=full,
            stderr=full if stderr_full else subprocess.PIPE,
            text=True,
            env=env,
            timeout=300,
        )


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("command", ["list", "status"])
def test_a_stdout_that_cannot_be_written_is_an_environment_problem(tree, library, command, fmt):
    args = [command, "--patches", library, "--format", fmt] + (["--target", tree] if command == "status" else [])
    done = _to_full_disk(*args)
    assert done.returncode == 4, done.stderr
    assert "cannot write to stdout: No space left on device" in done.stderr
    assert "Traceback" not in done.stderr and "patchkit bug" not in done.stderr


def test_neither_stdout_nor_stderr_writable_is_still_exit_4(tree, library):
    assert _to_full_disk("list", "--patches", library, stderr_full=True).returncode == 4


def test_help_and_usage_errors_click_writes_itself_are_exit_4_too(library):
    done = _to_full_disk("--help")
    assert done.returncode == 4 and "cannot write to stdout" in done.stderr and "Traceback" not in done.stderr
    assert _to_full_disk("list", "--bogus", stderr_full=True).returncode == 4


# --------------------------------------------------------------------------- what reorders or breaks a line


# a line and a paragraph separator, each bidi override and isolate, and other format characters
# (a soft hyphen, a zero-width joiner, a byte order mark): none printable, each changes a terminal's line
LINE_BREAKERS = "\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u00ad\u200d\ufeff"
SHOWN = r"\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\xad\u200d\ufeff"


def test_a_path_with_a_bidi_override_or_a_line_separator_is_shown_escaped(tmp_path, library):
    """A tree under a directory named to reorder what follows it on the line (U+202E) and to break
    the line (U+2028): every output line shows each as \\uNNNN, on a terminal's encoding too."""
    tree = write_tree(tmp_path / f"x{LINE_BREAKERS}y" / "site-packages")
    for argv in (["status"], ["apply"], ["revert"]):
        done = run_cli(*argv, "--target", tree, "--patches", library, "-v")
        assert_clean_failure(done, 0)
        said = done.stdout + done.stderr
        assert not set(LINE_BREAKERS) & set(said), said
        assert "x" + SHOWN + "y/site-packages" in done.stdout
    failed = run_cli("status", "--target", tree / "gone", "--patches", library)
    assert_clean_failure(failed, 4)
    assert "\\u202e" in failed.stderr and not set(LINE_BREAKERS) & set(failed.stderr)


def test_text_kept_as_it_is_is_printable_and_a_tab_or_newline_only_outside_a_field():
    from patchkit.cli.ui.text import visible

    said = "Z\u00fcrich \u2192 \u2026\tcol\nnext"
    assert visible(said) == said  # printable non-ASCII is shown as it is
    assert visible(said, field=True) == "Z\u00fcrich \u2192 \u2026\\x09col\\x0anext"
    assert visible("a\u202eb\udcff\x1b\ue000") == "a\\u202eb\\xff\\x1b\\ue000"


def test_a_note_from_below_the_cli_is_shown_escaped_too(tmp_path, tree, library):
    """base.notes' lines (here the cache's: PATCHKIT_CACHE_DIR names a file) reach stderr through
    the same escaping as every other line."""
    cache = tmp_path / f"cache{LINE_BREAKERS}"
    cache.write_text("not a directory")
    done = run_cli("status", "--target", tree, "--patches", library, env={"PATCHKIT_CACHE_DIR": str(cache)})
    assert_clean_failure(done, 0)
    assert f"PATCHKIT_CACHE_DIR={tmp_path}/cache{SHOWN} is not a directory" in done.stderr, done.stderr
    assert not set(LINE_BREAKERS) & set(done.stderr)


# --------------------------------------------------------------------------- a recorded path in a refusal

ODD = "vllm/new\nfile\u202e.py"  # a file a patch created, named with a newline and a bidi override
ODD_SHOWN = "vllm/new\\x0afile\\u202e.py"


def _applied_odd(tmp_path: Path) -> tuple[Path, Path]:
    """A tree where a patch created ODD (recorded as created), and its library."""
    tree = write_tree(tmp_path / "site", files={"vllm/m0.py": "x = 0\n"})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    lib = write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {ODD: "z = 1\n"})]})
    assert_clean_failure(run_cli("apply", "--target", tree, "--patches", lib), 0)
    return tree, scratch


def _one_line_each(done) -> str:
    said = done.stdout + done.stderr
    assert ODD_SHOWN in said and not any(line.startswith("file") for line in said.splitlines()), said
    assert "\u202e" not in said
    return said


def test_a_recorded_path_a_refusal_names_is_escaped_not_split(tmp_path):
    """The paths a refusal reads back from the record (revert's drift, a created file no patch of
    the set creates, another set's files in status's note) are shown escaped: every line whole."""
    tree, scratch = _applied_odd(tmp_path)
    (tree / ODD).write_text("edited = 1\n")
    edited = run_cli("revert", "--target", tree, "--patches", tmp_path / "lib")
    assert_clean_failure(edited, 1)
    assert f"{ODD_SHOWN} was edited after patchkit patched it" in _one_line_each(edited)
    (tree / ODD).write_text("z = 1\n")
    other = write_library(tmp_path / "other", {"0.16.0": [make_patch(scratch, tree, {"vllm/m0.py": "x = 1\n"})]})
    created = run_cli("revert", "--target", tree, "--patches", other)
    assert_clean_failure(created, 2)
    assert f"says patchkit created {ODD_SHOWN}, but none of the set's patches" in _one_line_each(created)
    renamed = write_library(
        tmp_path / "renamed", {"0.16.0": [make_patch(scratch, tree, {"vllm/m0.py": "x = 2\n"})]}, name="another"
    )
    noted = run_cli("status", "--target", tree, "--patches", renamed)
    assert f"the record also holds set demo ({ODD_SHOWN})" in _one_line_each(noted)
