"""`run` and --no-import: the VLLM_* settings vLLM's import reads to configure its logging
(patchkit/launch/logging_env.py), judged as the tree's logger.py and envs.py read them."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import run_cli_judged
from launch_fixtures import DEEPSEEK_V3, write_eagle3_setup, write_model

from patchkit.launch import observed

# the lines of the tree's envs.py and logger.py the rule reads (0.12-0.33's shape)
ENVS = textwrap.dedent("""\
    environment_variables = {
        "VLLM_CONFIGURE_LOGGING": lambda: bool(int(os.getenv("VLLM_CONFIGURE_LOGGING", "1"))),
        "VLLM_LOGGING_LEVEL": lambda: os.getenv("VLLM_LOGGING_LEVEL", "INFO").upper(),
    }
    """)
LOGGER = textwrap.dedent("""\
    def _configure_vllm_root_logger():
        if VLLM_LOGGING_CONFIG_PATH:
            if not path.exists(VLLM_LOGGING_CONFIG_PATH):
                raise RuntimeError("Could not load logging config. File does not exist: %s")
            with open(VLLM_LOGGING_CONFIG_PATH, encoding="utf-8") as file:
                custom_config = json.loads(file.read())
            if not isinstance(custom_config, dict):
                raise ValueError("Invalid logging config.")


    DEFAULT_LOGGING_CONFIG = {"handlers": {"vllm": {"stream": VLLM_LOGGING_STREAM}}}
    _configure_vllm_root_logger()
    """)


def _findings(tmp_path: Path, *settings: str, logger: str = LOGGER) -> list[dict]:
    tree, library = write_eagle3_setup(tmp_path)
    (tree / "vllm" / "envs.py").write_text(ENVS)
    (tree / "vllm" / "logger.py").write_text(logger)
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "env", *settings, "vllm", "serve", str(target),
    )  # fmt: skip
    return [f for f in json.loads(done.stdout)["findings"] if f["check"] == "vllm-environment"]


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        (("VLLM_LOGGING_LEVEL=verbose",), "VLLM_LOGGING_LEVEL='verbose' names no logging level"),
        (("VLLM_CONFIGURE_LOGGING=yes",), "VLLM_CONFIGURE_LOGGING='yes' is not an integer"),
        (("VLLM_LOGGING_CONFIG_PATH=/nonexistent/log.json",), "/nonexistent/log.json does not exist"),
        (("VLLM_CONFIGURE_LOGGING=0", "VLLM_LOGGING_CONFIG_PATH=x.json"), "is given with VLLM_CONFIGURE_LOGGING=0"),
    ],
)
def test_a_logging_setting_vllms_import_raises_on_fails_statically(tmp_path, settings, said):
    [found] = _findings(tmp_path, *settings)
    assert found["result"] == "fail" and said in found["message"], found
    assert "every vLLM command fails at start" in found["message"], found


def test_a_config_file_of_no_json_object_fails_and_of_one_cannot_be_judged(tmp_path):
    for name, text, result in (
        ("list.json", "[]", "fail"),
        ("bad.json", "{", "fail"),
        ("ok.json", "{}", "cannot judge"),
        ("bom.json", "\ufeff{}", "fail"),  # vLLM reads it as UTF-8 text: json.loads refuses the BOM
        ("utf16.json", "{}".encode("utf-16").decode("latin-1"), "fail"),
    ):
        (tmp_path / name).write_text(text, encoding="utf-8" if name != "utf16.json" else "latin-1")
        [found] = _findings(tmp_path / name.replace(".", "_"), f"VLLM_LOGGING_CONFIG_PATH={tmp_path / name}")
        assert found["result"] == result, (name, found)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_config_path_vllms_import_cannot_read_fails_statically_without_reading_it(tmp_path, kind):
    path = tmp_path / "logging.json"
    if kind == "fifo":
        os.mkfifo(path)  # a read of it would block this test
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    [found] = _findings(tmp_path / "setup", f"VLLM_LOGGING_CONFIG_PATH={path}")
    assert found["result"] == "fail" and found["message"].startswith(f"VLLM_LOGGING_CONFIG_PATH {path} is "), found


def test_a_config_over_the_bound_is_not_read_and_cannot_be_judged_never_failed(tmp_path):
    """review43a S4: vLLM imports a 2 MiB logging config; patchkit reads 1 MiB at most, so it says so."""
    path = tmp_path / "logging.json"
    path.write_text('{"version": 1, "pad": "' + "x" * (2 << 20) + '"}')
    [found] = _findings(tmp_path / "setup", f"VLLM_LOGGING_CONFIG_PATH={path}")
    assert found["result"] == "cannot judge" and "is over 1 MiB: not read" in found["message"], found
    assert found["fix"] == "preflight without --no-import imports vLLM with it", found


@pytest.mark.parametrize(
    ("stream", "judged"),
    [("ext://sys.bogus", True), ("cfg://handlers.x", True), ("ext://sys.stderr", False), ("bogus", False)],
)
def test_a_logging_stream_dictconfig_resolves_cannot_be_judged(tmp_path, stream, judged):
    """review43a S5: dictConfig resolves an ext:// stream as vLLM is imported (ext://sys.bogus raises
    "Unable to configure handler 'vllm'"); sys's own streams and a plain text are taken."""
    found = _findings(tmp_path, f"VLLM_LOGGING_STREAM={stream}")
    if not judged:
        assert found == [], found
        return
    assert [f["result"] for f in found] == ["cannot judge"] and "VLLM_LOGGING_STREAM" in found[0]["message"], found
    assert _findings(tmp_path / "off", f"VLLM_LOGGING_STREAM={stream}", "VLLM_CONFIGURE_LOGGING=0") == []


def test_settings_vllm_takes_pass_and_a_tree_read_otherwise_cannot_judge(tmp_path):
    assert _findings(tmp_path / "fine", "VLLM_LOGGING_LEVEL=debug", "VLLM_CONFIGURE_LOGGING=0") == []
    assert _findings(tmp_path / "off", "VLLM_LOGGING_LEVEL=verbose", "VLLM_CONFIGURE_LOGGING=0") == []
    [found] = _findings(tmp_path / "other", "VLLM_LOGGING_LEVEL=verbose", logger=LOGGER.replace("\n_configure", "\n# "))
    assert found["result"] == "cannot judge" and "VLLM_LOGGING_LEVEL" in found["message"], found


def test_the_import_path_does_not_import_vllm_with_a_config_path_it_cannot_read(tmp_path):
    fifo = tmp_path / "logging.fifo"
    os.mkfifo(fifo)  # an import of vLLM reading it would block until the worker's time-out
    tree, library = write_eagle3_setup(tmp_path / "setup")
    (tree / "vllm" / "envs.py").write_text(ENVS)
    (tree / "vllm" / "logger.py").write_text(LOGGER)
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--python", sys.executable, "--format", "json",
        "--", "env", f"VLLM_LOGGING_CONFIG_PATH={fifo}", "vllm", "serve", str(target),
    )  # fmt: skip
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert found["vllm-environment"]["result"] == "fail", done.stdout
    said = found["vllm-validation"]
    assert said["result"] == "cannot judge" and said["message"].startswith(
        "cannot judge: not run: VLLM_LOGGING_CONFIG_PATH"
    ), said


def test_a_config_nested_past_pythons_limit_fails_never_crashes(tmp_path):
    """review44a T3: a RecursionError from json.loads went uncaught (exit 70)."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    [found] = _findings(tmp_path / "setup", f"VLLM_LOGGING_CONFIG_PATH={path}")
    assert found["result"] == "fail" and "holds no JSON" in found["message"], found


def _counting_reads(monkeypatch, path: Path) -> list[int]:
    """The bounded reads of `path` patchkit makes (through observed): one entry each, its limit."""
    counted: list[int] = []
    plain = observed._ASKED["read"]

    def read(asked: str, limit: int, follow_symlinks: bool, head: bool) -> bytes:
        if os.path.realpath(asked) == os.path.realpath(path):
            counted.append(limit)
        return plain(asked, limit, follow_symlinks, head)

    monkeypatch.setitem(observed._ASKED, "read", read)
    return counted


@pytest.mark.parametrize("import_path", [False, True])
def test_the_config_is_read_once_bounded_on_either_path(tmp_path, monkeypatch, import_path):
    """It was read twice by --no-import (its first 1 MiB + 1 to tell its size, then whole) and a third
    time by the import path (import_blocker): each read a chance to see another file."""
    path = tmp_path / "logging.json"
    path.write_text('{"version": 1}')
    counted = _counting_reads(monkeypatch, path)
    tree, library = write_eagle3_setup(tmp_path / "setup")
    (tree / "vllm" / "envs.py").write_text(ENVS)
    (tree / "vllm" / "logger.py").write_text(LOGGER)
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    how = ["--python", sys.executable] if import_path else ["--no-import"]
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, *how, "--format", "json",
        "--", "env", f"VLLM_LOGGING_CONFIG_PATH={path}", "vllm", "serve", str(target),
    )  # fmt: skip
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert found["vllm-environment"]["result"] == "cannot judge", done.stdout  # dictConfig's to judge
    assert counted == [(1 << 20) + 1], counted
    assert not found.get("vllm-validation", {}).get("message", "").startswith("cannot judge: not run: VLLM_LOGGING")


def test_a_config_over_the_bound_is_imported_with_on_the_import_path(tmp_path, monkeypatch):
    """Its static finding says "preflight without --no-import imports vLLM with it": the import path
    did not (it said "not run: ... over 1 MiB"); the worker's memory is bounded, and vLLM judges it."""
    path = tmp_path / "logging.json"
    path.write_text('{"version": 1, "pad": "' + "x" * (2 << 20) + '"}')
    counted = _counting_reads(monkeypatch, path)
    tree, library = write_eagle3_setup(tmp_path / "setup")
    (tree / "vllm" / "envs.py").write_text(ENVS)
    (tree / "vllm" / "logger.py").write_text(LOGGER)
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--python", sys.executable, "--format", "json",
        "--", "env", f"VLLM_LOGGING_CONFIG_PATH={path}", "vllm", "serve", str(target),
    )  # fmt: skip
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert "is over 1 MiB: not read here" in found["vllm-environment"]["message"], done.stdout
    assert "VLLM_LOGGING_CONFIG_PATH" not in found["vllm-validation"]["message"], found["vllm-validation"]
    assert counted == [(1 << 20) + 1], counted


@pytest.mark.parametrize("name", ["VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING"])
def test_a_long_value_is_quoted_cut_never_whole(tmp_path, name):
    """review44a L4: a 5000-character value was quoted whole."""
    [found] = _findings(tmp_path, f"{name}={'7' * 5000}")
    assert found["result"] == "fail" and f"{name}='{'7' * 80}'... (5,000 characters)" in found["message"], found
    assert len(found["message"]) < 400, found


def test_an_empty_config_fails_as_vllms_json_loads_of_it_raises(tmp_path):
    """It was "cannot judge: ... is not read (empty, or gone since)": json.loads("") raises in vLLM's import."""
    path = tmp_path / "logging.json"
    path.write_text("")
    [found] = _findings(tmp_path / "setup", f"VLLM_LOGGING_CONFIG_PATH={path}")
    assert found["result"] == "fail" and "holds no JSON" in found["message"], found
