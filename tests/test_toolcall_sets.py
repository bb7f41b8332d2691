"""The tool-call set deepseek-tool-calls on every release it covers, with its behaviour test.

DeepSeek-V3 and V3.1's parsers on 0.11.0-0.34.0; DeepSeek-V3.2's on 0.13.0-0.22.1 (from 0.19.0 vLLM's
own rewrite, which still loses calls in a final delta on servers up to 0.22).

For each release: the stock parser files fail the set's behaviour.py (streamed calls differ from the
non-streamed ones), the patched files compile and pass it under the top-up the release's own serving
code runs, `verify` passes, and `revert` gives the stock bytes back. Marker `release`: the files come
from the index through patchkit's fetcher (cached, one fetch per release).
"""

from __future__ import annotations

import json
import py_compile
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import LIBRARY, behaviour_harness, lay_out_release, snapshot
from packaging.version import Version

from patchkit.fetch import available_versions, release_tree
from patchkit.releases.files import files_for, lay_out

pytestmark = pytest.mark.release

SET = "deepseek-tool-calls"
BEHAVIOUR = LIBRARY / SET / "behaviour.py"
# where the chat server's end-of-stream top-up lives, by release: the harness reads it from the tree
SERVING = [
    "vllm/entrypoints/openai/serving_chat.py",  # up to 0.14.1
    "vllm/entrypoints/openai/chat_completion/serving.py",  # from 0.15.0
    "vllm/parser/abstract_parser.py",  # from 0.23.0: the top-up appends
]

# Every vLLM release from the set's minimum to the newest one on the index when the set was proven.
RELEASES = [
    *("0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0"),
    *("0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0"),
    *("0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0"),
    *("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"),
]


def test_the_tests_cover_every_release_of_the_open_range_the_index_has():
    """The range is open: a release the index gains fails here until the set is proven on it (PROOF.md)."""
    assert [str(v) for v in available_versions() if Version("0.11.0") <= v] == RELEASES


def behaviour(parser_file: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """The set's behaviour test as a user (or a later `verify`) runs it: its own interpreter, stdlib only."""
    command = [sys.executable, "-I", str(BEHAVIOUR), str(parser_file), *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def top_up_line(version: str) -> str:
    line = Version(version).release[:2]
    return "bare" if line < (0, 14) else "dumps" if line < (0, 17) else "replace" if line < (0, 23) else "append"


@pytest.mark.parametrize("version", RELEASES)
def test_stock_fails_the_behaviour_test_patched_passes_and_reverts(tmp_path, run, version):
    paths = files_for(version, str(LIBRARY), SET)
    parsers = sorted(p for p in paths if p.rsplit("/", 1)[-1].startswith("deepseekv3"))
    with_v32 = Version("0.13.0") <= Version(version) < Version("0.23.0")  # 0.23.0's server appends instead
    assert len(parsers) == (3 if with_v32 else 2), paths
    target = tmp_path / "site"
    lay_out_release(version, [*paths, *SERVING], target)
    stock = snapshot(target)
    read_from_tree = f"(top-up {top_up_line(version)}: read from {target}"

    for parser in parsers:
        result = behaviour(target / parser)
        assert result.returncode == 1, result.stdout + result.stderr
        failures = [line for line in result.stdout.splitlines() if line.startswith("FAIL ") and "] " in line]
        split_named = re.compile(r"\] (\d+ token\(s\) per delta|all at once|deltas of \[[\d, ]+\] tokens), top-up ")
        assert failures and all(split_named.search(f) for f in failures)  # the split
        assert all(" lost" in f or "expected" in f or "raised" in f for f in failures)  # and what was lost
        assert read_from_tree in result.stdout.splitlines()[-1]

    library = ("--patches", LIBRARY, "--set", SET)
    applied = run("apply", "--target", target, *library, "--format", "json")
    assert applied.exit_code == 0, applied.output[-2000:]
    assert json.loads(applied.stdout)["result"] == "applied"
    for parser in parsers:
        py_compile.compile(str(target / parser), cfile=str(tmp_path / "compiled.pyc"), doraise=True)
        result = behaviour(target / parser, "--random", "20")  # and 20 seeded random splits per output
        assert result.returncode == 0, result.stdout + result.stderr
        summary = result.stdout.splitlines()[-1]
        assert summary.startswith("PASS") and ": 0 of " in summary and read_from_tree in summary, summary
    assert run("verify", "--target", target, *library).exit_code == 0

    assert run("revert", "--target", target, *library).exit_code == 0
    assert snapshot(target) == stock


@pytest.mark.parametrize("top_up", ["bare", "dumps", "replace", "append"])
def test_every_split_is_judged_and_the_patched_parsers_serve_each_top_up(tmp_path, run, top_up):
    """No split is left out: a final delta that brings whole calls (all at once, with text before them)
    keeps every call and the text, under every top-up, because the patched parsers send new calls'
    names first (the <= 0.22 servers rewrite a final delta only when its first entry has arguments)."""
    target = tmp_path / "site"
    paths = files_for("0.16.0", str(LIBRARY), SET)
    lay_out(release_tree("0.16.0", paths), target, paths)  # the parsers only: no serving code
    assert run("apply", "--target", target, "--patches", LIBRARY, "--set", SET).exit_code == 0
    module = behaviour_harness(SET)
    scenario = module.load_scenario(LIBRARY / SET / "scenario.py")
    tokenizer = module.FakeTokenizer(scenario.MARKERS, scenario.STOP)
    for parser in paths:
        parser_class = next(
            getattr(parsed, name)
            for parsed in [module.load_parser_module(target / parser)]
            for name in scenario.PARSERS
            if hasattr(parsed, name)
        )
        render = scenario.PARSERS[parser_class.__name__]
        text, _ = render(("Two of them:\n", (("lookup", '{"q": "a", "n": 7}'), ("count", '{"items": [1, 2]}'))))
        content, calls = module.expected_result(parser_class, tokenizer, text)
        whole = [len(tokenizer.tokenize(text))]
        streamed = module.stream(parser_class, tokenizer, text, whole, module.TOP_UPS[top_up])
        assert module.differences(streamed, content, calls, [False, False]) == [], parser
        assert content == "Two of them:\n" and [name for _, name, _ in calls] == ["lookup", "count"]

    no_serving_code = behaviour(target / paths[0], "--quiet")  # nor a version: every top-up, every split
    assert no_serving_code.returncode == 0, no_serving_code.stdout
    assert "of 220 streamed runs differ (top-up bare, dumps, replace, append" in no_serving_code.stdout


def test_the_trees_serving_code_decides_the_top_up_over_the_version(tmp_path):
    """A tree judged as it runs: 0.16.0's server dumps, whatever --vllm-version says."""
    parser = "vllm/tool_parsers/deepseekv31_tool_parser.py"
    lay_out_release("0.16.0", [parser, *SERVING], tmp_path)
    result = behaviour(tmp_path / parser, "--vllm-version", "0.33.0", "--quiet")
    assert result.returncode == 1
    assert f"(top-up dumps: read from {tmp_path}/vllm/entrypoints/openai/chat_completion/serving.py)" in result.stdout


def test_vllms_own_v32_rewrite_loses_calls_under_its_servers_top_up_and_not_under_0_23s():
    """Why 0003 goes on to 0.22.1: vLLM 0.19's V3.2 parser sends name and arguments in one entry, and
    0.19-0.22 servers rewrite a final delta whose first entry has arguments (the other calls go)."""
    path = "vllm/tool_parsers/deepseekv32_tool_parser.py"
    tree = release_tree("0.19.0", [path, *SERVING])
    under_its_server = behaviour(tree / path)
    assert under_its_server.returncode == 1
    assert "[two parallel calls] all at once, top-up replace: call 0 (get_weather) lost" in under_its_server.stdout
    under_append = behaviour(tree / path, "--top-up", "append", "--random", "20")
    assert under_append.returncode == 0, under_append.stdout
    assert under_append.stdout.startswith("PASS DeepSeekV32ToolParser")


def test_a_call_extract_tool_calls_skips_is_not_streamed_either(tmp_path, run):
    """A closed call the V3 regex does not match (no closing fence) is no call for extract_tool_calls:
    arriving whole, the patched stream does not announce it either. (Streamed piece by piece, its
    name goes out before its end shows it malformed: no stream can take that back.)"""
    target = tmp_path / "site"
    path = "vllm/tool_parsers/deepseekv3_tool_parser.py"
    lay_out_release("0.33.0", files_for("0.33.0", str(LIBRARY), SET), target)
    assert run("apply", "--target", target, "--patches", LIBRARY, "--set", SET).exit_code == 0
    module = behaviour_harness(SET)
    scenario = module.load_scenario(LIBRARY / SET / "scenario.py")
    parser_class = module.load_parser_module(target / path).DeepSeekV3ToolParser
    tokenizer = module.FakeTokenizer(scenario.MARKERS, scenario.STOP)
    broken = f"{scenario.CALL_BEGIN}function{scenario.SEP}broken\n```json\n{{}}{scenario.CALL_END}"  # no fence
    text = scenario.CALLS_BEGIN + scenario._v3_call("get_time", '{"tz": "UTC"}') + broken + scenario.CALLS_END
    content, calls = module.expected_result(parser_class, tokenizer, text)
    assert [(name, arguments) for _, name, arguments in calls] == [("get_time", '{"tz": "UTC"}')]
    total = len(tokenizer.tokenize(text))
    streamed = module.stream(parser_class, tokenizer, text, [total], module.TOP_UPS["append"])
    assert module.differences(streamed, content, calls, [False]) == []
