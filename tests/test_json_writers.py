"""patchkit writes no JSON its own readers refuse: every reader takes NaN and Infinity for malformed
(fsutil.load_json_text), so every writer refuses them (fsutil.json_text, allow_nan=False) as a
patchkit error, and nothing is written. json.dumps' default writes them as NaN and Infinity."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

from patchkit.base import fsutil, seal
from patchkit.base.errors import BadInput
from patchkit.cli.ui import run
from patchkit.fetch import cache
from patchkit.store import journal

NON_FINITE = [math.nan, math.inf, -math.inf]
PACKAGE = Path(fsutil.__file__).resolve().parent.parent


@pytest.mark.parametrize("number", NON_FINITE)
def test_json_text_refuses_what_load_json_text_refuses(number):
    for data in (number, {"a": [1, {"b": number}]}, [number]):
        with pytest.raises(BadInput, match="holds NaN or Infinity, which is no JSON number"):
            fsutil.json_text(data, "the thing")
        with pytest.raises(ValueError):  # the reader's side: the same value, as json.dumps' default writes it
            fsutil.load_json_text(json.dumps(data))
    assert fsutil.load_json_text(fsutil.json_text({"a": [1.5, -0.0, 1e308]}, "x")) == {"a": [1.5, -0.0, 1e308]}


@pytest.mark.parametrize("number", NON_FINITE)
def test_the_journal_is_not_written_with_a_non_finite_number(tmp_path, number):
    (tmp_path / ".patchkit").mkdir()
    with pytest.raises(BadInput):
        journal.begin(tmp_path, {"id": "t", "entries": [{"size": number}]}, tick=lambda: None)
    assert not journal.journal_path(tmp_path).exists()


@pytest.mark.parametrize("number", NON_FINITE)
def test_the_json_output_and_the_cache_state_are_not_written_with_one(tmp_path, capsys, number):
    with pytest.raises(BadInput):
        run.write_json({"ok": True, "value": number})
    assert capsys.readouterr().out == ""
    with pytest.raises(BadInput):
        cache.save_state(tmp_path, {"version": "0.16.0", "url": "https://x/", "size": number})
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(BadInput):
        seal.canonical({"a": number})


def test_no_module_writes_json_but_through_json_text():
    """The class: a json.dump or json.dumps whose text is written (a file, stdout) is json_text's.
    Left: hashes of inputs, messages quoting a value, requests to a child process, and the code run
    in the target's interpreter (patchkit/_target), which imports nothing of patchkit's."""
    allowed = {
        "base/fsutil.py",  # json_text itself, and load_json_text's check that a string is text
        "launch/shortcut.py",  # a sha256 of the launch's inputs
        "launch/observed.py",  # a question's words as a key, and a sha256 of its answer
        "launch/genconfig.py", "launch/preflight.py", "launch/late_files.py",  # quoted in a message
        "launch/serve_parser.py", "launch/toolparsers.py",  # a value as vLLM's own json.dumps makes it
        "launch/tls.py", "launch/middleware.py", "tree/target.py",  # a request to a child process
        "checks/behaviour.py",  # a value quoted in a finding
    }  # fmt: skip
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("_target/") or relative in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            called = isinstance(node, ast.Attribute) and node.attr in ("dump", "dumps")
            if called and isinstance(node.value, ast.Name) and node.value.id == "json":
                found.append(f"{relative}:{node.lineno}")
    assert found == []
