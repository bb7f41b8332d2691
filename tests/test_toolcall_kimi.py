"""The tool-call set kimi-k2-tool-calls (patches/, issue 23) on the real releases of its range.

For each release: the stock files fail the set's behaviour test (streamed calls differ from
extract_tool_calls' at some split, named), patchkit applies the series, the patched files compile
and pass it, `verify` passes, and `revert` gives the stock bytes back. Files come from the index
through patchkit's fetcher (cached: one fetch per release).
"""

from __future__ import annotations

import json
import py_compile
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import LIBRARY, behaviour_harness, lay_out_release, snapshot
from packaging.version import Version

from patchkit.fetch import available_versions, release_tree
from patchkit.fetch.cache import load_state, release_root
from patchkit.series.library import read_toml

pytestmark = pytest.mark.release


KIMI = "kimi-k2-tool-calls"
KIMI_RELEASES = [
    "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0",
    "0.15.1", "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1",
    "0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1",  # upstream's rewrite: names first only
]  # fmt: skip
KIMI_FILES = [
    "vllm/entrypoints/openai/tool_parsers/kimi_k2_tool_parser.py",  # up to 0.12.0
    "vllm/tool_parsers/kimi_k2_tool_parser.py",  # from 0.13.0
    "vllm/entrypoints/openai/serving_chat.py",  # up to 0.14.1
    "vllm/entrypoints/openai/chat_completion/serving.py",  # from 0.15.0
    "vllm/parser/abstract_parser.py",  # from 0.23.0 the top-up appends, in here
]


def stock_tree(version: str, dest: Path) -> Path:
    return lay_out_release(version, KIMI_FILES, dest)


def parser_file(tree: Path) -> Path:
    (found,) = [tree / p for p in KIMI_FILES[:2] if (tree / p).is_file()]
    return found


def behaviour(parser: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """The set's behaviour test, run as a user or `verify` would: its own interpreter, stand-ins only."""
    script = LIBRARY / KIMI / "behaviour.py"
    return subprocess.run([sys.executable, script, parser, *options], capture_output=True, text=True, timeout=120)


def all_streams_match(report: str) -> bool:
    verdict = report.splitlines()[-1]
    matched = re.search(r": (\d+) of (\d+) streamed runs differ \(top-up [^:]+: read from ", verdict)
    return verdict.startswith("PASS") and matched is not None and matched[1] == "0" and int(matched[2]) > 0


def judged_under(report: str) -> str:
    """The top-up the harness read from the tree's serving code."""
    matched = re.search(r"\(top-up ([^:]+): read from .*/vllm/entrypoints/openai/", report.splitlines()[-1])
    assert matched, report
    return matched[1]


def test_the_tests_cover_every_release_the_set_covers_and_the_index_has():
    manifest = read_toml(LIBRARY / KIMI / "set.toml", "set manifest")
    assert [r["versions"].removeprefix("==") for r in manifest["releases"]] == KIMI_RELEASES
    in_range = [str(v) for v in available_versions() if Version("0.11.0") <= v < Version("0.23.0")]
    assert in_range == KIMI_RELEASES


@pytest.mark.parametrize("version", KIMI_RELEASES)
def test_kimi_set_fixes_streaming_on_the_real_release(tmp_path, run, version):
    target = stock_tree(version, tmp_path / "site")
    stock = snapshot(target)
    parser = parser_file(target)

    before = behaviour(parser)  # the fixed splits, as `verify` runs it: 0.20-0.22 fail only the uneven ones
    assert before.returncode == 1, before.stdout + before.stderr
    streamed = [line for line in before.stdout.splitlines() if line.startswith("FAIL ") and ", top-up " in line]
    split_named = re.compile(r"\] (\d+ token\(s\) per delta|all at once|deltas of \[[\d, ]+\] tokens), top-up ")
    assert streamed and all(split_named.search(line) for line in streamed)  # each names the split
    assert before.stdout.splitlines()[-1].startswith("FAIL")

    library = ("--patches", LIBRARY, "--set", KIMI)
    applied = run("apply", "--target", target, *library, "--format", "json")
    assert applied.exit_code == 0, applied.output[-2000:]
    assert json.loads(applied.stdout)["result"] == "applied"
    changed = [p for p, data in snapshot(target).items() if stock[p] != data]
    assert parser.relative_to(target).as_posix() in changed
    for path in changed:
        py_compile.compile(str(target / path), cfile=str(tmp_path / "check.pyc"), doraise=True)

    after = behaviour(parser, "--random", "20")  # 20 seeded random splits per output besides the fixed ones
    assert after.returncode == 0, after.stdout + after.stderr
    assert all_streams_match(after.stdout)
    # judged under the server as patched: 0002 makes it take a str as it is, up to 0.16.0
    line = Version(version).release[:2]
    assert judged_under(before.stdout) == ("bare" if line < (0, 14) else "dumps" if line < (0, 17) else "replace")
    assert judged_under(after.stdout) == ("bare, str as is" if line < (0, 14) else "replace")

    assert run("verify", "--target", target, *library).exit_code == 0
    reverted = run("revert", "--target", target, *library)
    assert reverted.exit_code == 0, reverted.output[-2000:]
    assert snapshot(target) == stock


@pytest.mark.parametrize("version", ["0.23.0", "0.24.0"])
def test_kimi_upstream_release_passes_the_behaviour_test_as_shipped(tmp_path, run, version):
    """From 0.23.0 the server appends the unstreamed rest instead of rewriting the final delta. (From
    0.25.0 the parser is an adapter on vLLM's parser engine, loaded from the tree: tests below.)"""
    target = stock_tree(version, tmp_path / "site")
    result = behaviour(parser_file(target), "--random", "100")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all_streams_match(result.stdout) and "(top-up append: read from " in result.stdout
    status = run("status", "--target", target, "--patches", LIBRARY, "--set", KIMI, "--format", "json")
    assert status.exit_code == 0 and json.loads(status.stdout)["state"] == "upstream"


# A release of each series whose stock parser has vLLM's section state (0.11.0's has none).
SECTION_STATE_RELEASES = ["0.11.1", "0.13.0", "0.14.0", "0.15.0", "0.16.0", "0.17.0", "0.19.1"]


def streamed(parser: Any, deltas: list[str]) -> list[Any]:
    """Each delta's message from the parser (the patched method reads the text, not the token ids)."""
    results, previous = [], ""
    for delta in deltas:
        results.append(parser.extract_tool_calls_streaming(previous, previous + delta, delta, [], [], [], None))
        previous += delta
    return results


@pytest.mark.parametrize("version", SECTION_STATE_RELEASES)
def test_patched_kimi_keeps_what_vllms_own_tests_ask_of_the_sections(tmp_path, run, version):
    """Besides the calls, vLLM's own tests (make test-vllm runs 0.16.0's) ask: text after the section
    streams as content, in_tool_section follows the text (either marker variant), a section open past
    max_section_chars is taken as content, a delta of markers gives an empty message, not None."""
    target = stock_tree(version, tmp_path / "site")
    assert run("apply", "--target", target, "--patches", LIBRARY, "--set", KIMI).exit_code == 0
    harness = behaviour_harness(KIMI)
    scenario = harness.load_scenario(LIBRARY / KIMI / "scenario.py")
    parser_class = harness.load_parser_module(parser_file(target)).KimiK2ToolParser
    tokenizer = harness.FakeTokenizer(scenario.MARKERS, scenario.STOP)

    parser = parser_class(tokenizer)
    call = f'{scenario.CB}get_weather:0 {scenario.CA} {{"city": "Paris"}} {scenario.CE}'
    results = streamed(parser, ["Let me help. ", scenario.B, call + scenario.E, " Done"])
    assert [r.content for r in results] == ["Let me help. ", "", None, " Done"]
    assert not parser.in_tool_section
    assert [(c.function.name, c.function.arguments) for c in results[2].tool_calls] == [
        ("get_weather", None),
        (None, '{"city": "Paris"}'),
    ]

    parser = parser_class(tokenizer)
    streamed(parser, ["Reasoning ", "<|tool_call_section_begin|>"])  # the singular variant
    assert parser.in_tool_section

    parser = parser_class(tokenizer)
    results = streamed(parser, [scenario.B, "x" * (parser.max_section_chars + 1)])
    assert results[1].content == "x" * (parser.max_section_chars + 1) and not parser.in_tool_section


ENGINE_RELEASES = [
    "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0",
    "0.33.0", "0.34.0",
]  # fmt: skip


def engine_files(version: str) -> list[str]:
    """vLLM's parser engine as the release has it: every module of vllm/parser/, and the enum its
    Parser reads (0.31 on); the cached release's member list names them."""
    release_tree(version, KIMI_FILES)  # the member list, fetched once
    members = load_state(release_root(version), version)["members"]
    wanted = ("vllm/parser/", "vllm/tool_parsers/tool_strict_level.py")
    return [m for m in members if m.startswith(wanted) and m.endswith(".py")]


def test_the_engine_tests_cover_every_release_from_0_25():
    assert [str(v) for v in available_versions() if v >= Version("0.25.0")] == ENGINE_RELEASES


@pytest.mark.parametrize("version", ENGINE_RELEASES)
def test_kimi_on_vllms_parser_engine_is_judged_with_the_trees_engine_and_passes(tmp_path, run, version):
    """From 0.25.0 the parser is an adapter on vLLM's parser engine (vllm/parser/: plain Python). With
    the tree's engine files beside it, the harness loads them as they are (stand-ins for the rest of
    vLLM) and judges the stock parser: it passes every split, under the release's own top-up."""
    target = lay_out_release(version, [*KIMI_FILES, *engine_files(version)], tmp_path / "site")
    result = behaviour(parser_file(target), "--random", "20")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all_streams_match(result.stdout) and ": 0 of 190 streamed runs differ (top-up append: " in result.stdout
    harness = behaviour_harness(KIMI)  # in this process: the engine modules are the tree's own files
    harness.load_parser_module(parser_file(target))
    assert sys.modules["vllm.parser.kimi_k2"].__file__ == str(target / "vllm/parser/kimi_k2.py")
    assert sys.modules["vllm.parser.engine.parser_engine"].__file__ == str(
        target / "vllm/parser/engine/parser_engine.py"
    )
    status = run("status", "--target", target, "--patches", LIBRARY, "--set", KIMI, "--format", "json")
    assert status.exit_code == 0 and json.loads(status.stdout)["state"] == "upstream"


@pytest.mark.parametrize("version", ["0.25.0", "0.34.0"])
def test_kimi_from_0_25_without_the_engine_beside_it_is_upstream_by_range_and_not_judged(tmp_path, run, version):
    """A tree of the parser alone (not what `fetch --set` lays out: see behaviour_reads in set.toml)
    has no engine to load: the behaviour test says so (exit 2) rather than judging it, and `status`
    says upstream from the range."""
    target = stock_tree(version, tmp_path / "site")
    result = behaviour(parser_file(target))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no stand-in for vllm.parser.engine.registered_adapters.KimiK2ParserToolAdapter" in result.stdout
    assert "(the tree has no vllm/parser/engine/ beside the file)" in result.stdout
    status = run("status", "--target", target, "--patches", LIBRARY, "--set", KIMI, "--format", "json")
    assert status.exit_code == 0 and json.loads(status.stdout)["state"] == "upstream"


@pytest.mark.parametrize("version", ["0.25.0", "0.34.0"])
def test_a_fetch_of_the_set_brings_the_engine_and_verify_of_the_tree_judges_the_parser(tmp_path, run, version):
    """`fetch --set kimi-k2-tool-calls` lays out what the behaviour test reads besides the parser
    (set.toml's behaviour_reads: vLLM's parser engine), so `verify --target` of that tree judges the
    stock parser (it passes) instead of "not judged"."""
    site = tmp_path / "site"
    library = ("--patches", LIBRARY, "--set", KIMI)
    assert run("fetch", version, *library, "--dest", site).exit_code == 0
    assert (site / "vllm/parser/engine/parser_engine.py").is_file()
    done = run("verify", "--target", site, *library, "--format", "json")
    assert done.exit_code == 0, done.output[-2000:]
    assert [(c["ok"], c["message"]) for c in json.loads(done.stdout)["checks"] if c["check"] == "behaviour"] == [
        (True, "0 of 70 runs differ (stand-ins for vLLM's classes)")
    ]
