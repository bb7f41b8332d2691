"""The draft tool-call set deepseek-tool-calls on every release it covers, with its behaviour test.

DeepSeek-V3 and V3.1's parsers on 0.11.0-0.33.0; DeepSeek-V3.2's on 0.13.0-0.18.1.

For each release: the stock parser files fail the set's behaviour.py (streamed calls differ from the
non-streamed ones), the patched files compile and pass it, `verify` passes, and `revert` gives the
stock bytes back. Marker `release`: the files come from the index through patchkit's fetcher (cached).
"""

from __future__ import annotations

import importlib.util
import json
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import snapshot
from packaging.version import Version

from patchkit.fetch import release_tree
from patchkit.release_files import files_for, lay_out

pytestmark = pytest.mark.release

DRAFTS = Path(__file__).resolve().parent.parent / "patches" / "_drafts"
SET = "deepseek-tool-calls"
BEHAVIOUR = DRAFTS / SET / "behaviour.py"

# Every vLLM release from the set's minimum to the newest one on the index when the set was proven.
RELEASES = [
    *("0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0"),
    *("0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0"),
    *("0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0"),
    *("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"),
]


def behaviour(parser_file: Path, version: str, *options: str) -> subprocess.CompletedProcess[str]:
    """The set's behaviour test as a user (or a later `verify`) runs it: its own interpreter, stdlib only."""
    command = [sys.executable, "-I", str(BEHAVIOUR), str(parser_file), "--vllm-version", version, *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("version", RELEASES)
def test_stock_fails_the_behaviour_test_patched_passes_and_reverts(tmp_path, run, version):
    paths = files_for(version, str(DRAFTS), SET)
    parsers = sorted(p for p in paths if p.rsplit("/", 1)[-1].startswith("deepseekv3"))
    with_v32 = Version("0.13.0") <= Version(version) < Version("0.19.0")  # 0.19.0 fixed V3.2's upstream
    assert len(parsers) == (3 if with_v32 else 2), paths
    target = tmp_path / "site"
    lay_out(release_tree(version, paths), target)
    stock = snapshot(target)

    for parser in parsers:
        result = behaviour(target / parser, version)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "FAIL" in result.stdout and "token(s) per delta" in result.stdout  # names the split and the loss

    library = ("--patches", DRAFTS, "--set", SET)
    applied = run("apply", "--target", target, *library, "--format", "json")
    assert applied.exit_code == 0, applied.output[-2000:]
    assert json.loads(applied.stdout)["result"] == "applied"
    for parser in parsers:
        py_compile.compile(str(target / parser), cfile=str(tmp_path / "compiled.pyc"), doraise=True)
        result = behaviour(target / parser, version, "--random", "20")  # and 20 seeded random splits per output
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.startswith("PASS"), result.stdout
    assert run("verify", "--target", target, *library).exit_code == 0

    assert run("revert", "--target", target, *library).exit_code == 0
    assert snapshot(target) == stock


def test_the_behaviour_test_checks_every_top_up_without_a_version():
    """Without --vllm-version the harness runs each release line's end-of-stream top-up."""
    tree = release_tree("0.16.0", ["vllm/tool_parsers/deepseekv31_tool_parser.py"])
    result = subprocess.run(
        [sys.executable, "-I", str(BEHAVIOUR), str(tree / "vllm/tool_parsers/deepseekv31_tool_parser.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    for top_up in ("bare", "dumps", "replace", "append"):
        assert f"top-up {top_up}:" in result.stdout
    assert "all at once, top-up append" in result.stdout  # a whole call in one delta vanishes on stock


@pytest.mark.parametrize("version", ["0.19.0"])  # later files import helpers the stand-ins lack
def test_deepseek_v32_stock_passes_from_0_19_0_where_upstream_rewrote_it(version):
    """Why the set's 0003 (DeepSeek-V3.2) stops at 0.18.1: the harness passes vLLM's own rewrite."""
    path = "vllm/tool_parsers/deepseekv32_tool_parser.py"
    result = behaviour(release_tree(version, [path]) / path, version)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("PASS DeepSeekV32ToolParser")


def _harness():
    spec = importlib.util.spec_from_file_location("deepseek_behaviour", BEHAVIOUR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_call_extract_tool_calls_skips_is_not_streamed_either(tmp_path, run):
    """A closed call the V3 regex does not match (no closing fence) is no call for extract_tool_calls:
    arriving whole, the patched stream does not announce it either. (Streamed piece by piece, its
    name goes out before its end shows it malformed: no stream can take that back.)"""
    target = tmp_path / "site"
    path = "vllm/tool_parsers/deepseekv3_tool_parser.py"
    lay_out(release_tree("0.33.0", [path]), target)
    assert run("apply", "--target", target, "--patches", DRAFTS, "--set", SET).exit_code == 0
    harness = _harness()
    parser_class = harness.load_parser_module(target / path).DeepSeekV3ToolParser
    fmt = harness.FORMATS["DeepSeekV3ToolParser"]
    tokenizer = harness.FakeTokenizer(fmt.markers)
    calls_begin, calls_end, call_begin, call_end, sep = harness.DSK_MARKERS
    broken = f"{call_begin}function{sep}broken\n```json\n{{}}{call_end}"  # no closing fence
    text = calls_begin + fmt.render_call("get_time", '{"tz": "UTC"}') + broken + calls_end
    content, calls = harness.expected_result(parser_class, tokenizer, text)
    assert calls == [("get_time", '{"tz": "UTC"}')]
    total = len(tokenizer.tokenize(text + harness.EOS))
    streamed = harness.stream(parser_class, tokenizer, text, [total], "append")
    assert harness.differences(streamed, content, calls) == []
