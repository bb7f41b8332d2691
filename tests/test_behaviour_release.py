"""verify runs the tool-call sets' behaviour tests on real release files (marker `release`).

The stock parsers fail it (the split and what was lost, in a line that fits 80 columns), the
planned and the applied ones pass it, on a directory target (stand-ins) and in `verify` of
releases. vLLM's real classes (`verify --python`): tests/vllm_import/test_toolcall_real.py.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import LIBRARY, Releases, lay_out_release
from packaging.version import Version

from patchkit.releases.files import files_for

pytestmark = pytest.mark.release

DEEPSEEK, KIMI = "deepseek-tool-calls", "kimi-k2-tool-calls"


def behaviour_of(stdout: str) -> list[dict]:
    return [c for c in json.loads(stdout)["checks"] if c["check"] == "behaviour"]


def stock_016(tmp_path: Path, set_name: str) -> Path:
    return lay_out_release("0.16.0", files_for("0.16.0", str(LIBRARY), set_name), tmp_path / "site")


def as_upstream(tmp_path: Path, set_name: str) -> Path:
    """The set as if vLLM 0.16.0 had fixed it: verify judges the stock files as they are."""
    library = tmp_path / "lib"
    shutil.copytree(LIBRARY / set_name, library / set_name)
    manifest = library / set_name / "set.toml"
    text = manifest.read_text()
    for index in range(text.count("[[releases]]")):  # upstream may not overlap a series: each moved below 0.16.0
        text = RELEASE_VERSIONS.sub(f'[[releases]]\nversions = "==0.0.{index}"  # was \\1', text, count=1)
    manifest.write_text('upstream = ">=0.16.0"\n' + text.replace("upstream = ", "# upstream = "))
    return library


# a [[releases]] entry's range not yet moved (the newest series stays the last entry: the files judged)
RELEASE_VERSIONS = re.compile(r'\[\[releases\]\]\nversions = "((?!==0\.0\.)[^"]*)"')


@pytest.mark.parametrize(("set_name", "runs"), [(DEEPSEEK, 170), (KIMI, 70)])
def test_stock_fails_naming_the_split_and_the_loss_planned_and_applied_pass(tmp_path, run, set_name, runs):
    tree = stock_016(tmp_path, set_name)
    stock = run("verify", "--target", tree, "--patches", as_upstream(tmp_path, set_name))
    assert stock.exit_code == 1
    [line] = [line for line in stock.stdout.splitlines() if line.startswith("behaviour: ")]
    assert len(line) <= 80 and re.search(r"^behaviour: \d+/\d+ runs differ; \d+ tokens? per delta: call", line), line
    assert line.endswith((" lost", " differ", " differs")), line

    library = ("--patches", LIBRARY, "--set", set_name)
    planned = run("verify", "--target", tree, *library, "--format", "json")
    assert planned.exit_code == 0, planned.output[-2000:]
    assert [(c["ok"], c["message"]) for c in behaviour_of(planned.stdout)] == [
        (True, f"0 of {runs} runs differ (stand-ins for vLLM's classes)")
    ]
    assert run("apply", "--target", tree, *library).exit_code == 0
    applied = run("verify", "--target", tree, *library)
    assert (
        applied.exit_code == 0
        and f"behaviour: 0 of {runs} runs differ (stand-ins for vLLM's classes)" in applied.stdout
    )


@pytest.mark.parametrize("version", ["0.20.0", "0.22.1"])
def test_stock_kimi_0_20_to_0_22_fails_verify_on_an_uneven_split_named(tmp_path, run, version):
    """vLLM 0.20's Kimi rewrite passes every even split; a last delta holding a call's tail and the next
    call loses the tail under the 0.20-0.22 servers' top-up. `verify` judging those stock files (as a
    set that called them upstream would) fails them, naming that split."""
    paths = [*files_for(version, str(LIBRARY), KIMI), "vllm/entrypoints/openai/chat_completion/serving.py"]
    tree = lay_out_release(version, paths, tmp_path / "site")
    stock = run("verify", "--target", tree, "--patches", as_upstream(tmp_path, KIMI))
    assert stock.exit_code == 1, stock.output[-2000:]
    [line] = [line for line in stock.stdout.splitlines() if line.startswith("behaviour: ")]
    assert re.fullmatch(r"behaviour: 3/70 runs differ; deltas of \[\d+, \d+\] tokens: call 0 arguments differ", line)


def test_verify_of_releases_runs_it_once_on_the_patched_release(run):
    done = run(
        "verify",
        "--vllm-version",
        "0.16.0",
        "--patches",
        LIBRARY,
        "--set",
        DEEPSEEK,
        "--no-result-cache",
        "--format",
        "json",
    )
    assert done.exit_code == 0, done.output[-2000:]
    [release] = json.loads(done.stdout)["releases"]
    assert [(c["ok"], c["message"]) for c in release["checks"] if c["check"] == "behaviour"] == [
        (True, "0 of 170 runs differ (stand-ins for vLLM's classes)")
    ]


@pytest.mark.parametrize(("parsers", "verdict"), [("patched", "passes"), ("stock", "fails")])
def test_a_new_release_where_the_open_ended_set_conflicts_says_whether_upstream_fixed_it(
    tmp_path, run, monkeypatch, parsers, verdict
):
    """A synthetic 0.99.0 on a fake index: 0.33.0's DeepSeek parsers (stock, or as the set patches
    them: "upstream's fix"), their first line changed, so the series conflicts there."""
    paths = files_for("0.33.0", str(LIBRARY), DEEPSEEK)
    site = lay_out_release("0.33.0", paths, tmp_path / "site")
    if parsers == "patched":
        assert run("apply", "--target", site, "--patches", LIBRARY, "--set", DEEPSEEK).exit_code == 0
    files = {
        path: (site / path).read_text().replace("Apache-2.0", "Apache-2.0 (changed in 0.99.0)", 1) for path in paths
    }
    Releases(tmp_path / "index", monkeypatch).add("0.99.0", files)

    done = run("verify", "--latest", "--patches", LIBRARY, "--set", DEEPSEEK, "--format", "json")
    assert done.exit_code == 1
    [release] = json.loads(done.stdout)["releases"]
    assert (release["vllm_version"], release["outcome"], release["stock_behaviour"]) == ("0.99.0", "conflict", verdict)
    assert release["detail"].startswith("the stock files changed (vllm/tool_parsers/deepseekv3")
    if verdict == "passes":
        assert release["hint"] == (
            "upstream may have fixed this in 0.99.0 (was https://github.com/vllm-project/vllm/pull/48636 merged?): "
            "close the set's range"
        )
    else:
        assert (
            "still fail the set's behaviour test (" in release["detail"]
            and "tokens per delta: call" in release["detail"]
        )
        assert release["hint"].startswith("port the series: `patchkit port --patches ")
        assert release["hint"].endswith("--set deepseek-tool-calls --from 0.23.0 --to 0.99.0`")


def without_behaviour_reads(tmp_path: Path, set_name: str) -> Path:
    """The set as a library whose set.toml names no files its behaviour test reads (a set before
    `behaviour_reads`): verify of releases fetches only the files the series change."""
    library = tmp_path / "lib"
    shutil.copytree(LIBRARY / set_name, library / set_name)
    manifest = library / set_name / "set.toml"
    text = manifest.read_text()
    start = text.index("behaviour_reads = [")
    manifest.write_text(text[:start] + text[text.index("]\n", start) + 2 :])
    return library


def test_the_verdict_names_the_releases_the_behaviour_test_did_not_judge(tmp_path, run):
    """New-user trial 14, item 13: `verify --latest` ended `verify: ok (1 upstream)`, the one line CI
    shows, though the behaviour test (what proves the tool-call sets) did not run on that release.
    Without the engine files beside the parser (no behaviour_reads), 0.25.0 is not judged, and said."""
    library = ("--patches", without_behaviour_reads(tmp_path, KIMI), "--set", KIMI)
    done = run("verify", "--vllm-version", "0.24.0", "--vllm-version", "0.25.0", *library)
    assert done.exit_code == 0, done.output[-2000:]
    assert done.stdout.splitlines()[-1] == "verify: ok (2 upstream; behaviour not judged on 0.25.0)", done.stdout
    done = run("verify", "--vllm-version", "0.25.0", *library, "--no-result-cache", "--format", "json")
    [unjudged] = json.loads(done.stdout)["releases"]
    [warning] = [c for c in unjudged["checks"] if c["check"] == "behaviour"]
    assert (warning["ok"], warning["level"]) == (False, "warning")
    assert warning["message"].startswith("not judged: kimi_k2_tool_parser.py does not load: ImportError")
    assert len("behaviour: " + warning["message"]) <= 80
    assert unjudged["detail"].endswith(
        "its behaviour test did not judge them (kimi_k2_tool_parser.py does not load: ImportError: behaviour.py "
        "has no stand-in for vllm.parser.engine.registered_adapters.KimiK2ParserToolAdapter (the tree has no "
        "vllm/parser/engine/ beside the file)): upstream by the set's range alone"
    )


ENGINE_FILES = {  # some of the vllm/parser/ files behaviour.py loads for the parser from 0.25.0
    "vllm/parser/engine/parser_engine.py",
    "vllm/parser/engine/registered_adapters.py",
    "vllm/parser/kimi_k2.py",
}


def test_verify_of_releases_judges_kimi_on_every_upstream_release_with_the_engine_it_fetched(run):
    """0.24.0's stock parser is judged (it passes); from 0.25.0 the parser is an adapter on vLLM's
    parser engine: verify of releases fetches the engine files set.toml's `behaviour_reads` names
    beside it, so the stock parser is judged there too (it passes), never upstream by the range
    alone. A file the release lacks (the enum before 0.31) is no finding of it."""
    library = ("--patches", LIBRARY, "--set", KIMI, "--no-result-cache", "--format", "json")
    versions = ["0.24.0", "0.25.0", "0.31.0", "0.34.0"]
    done = run("verify", *[a for v in versions for a in ("--vllm-version", v)], *library)
    assert done.exit_code == 0, done.output[-2000:]
    releases = json.loads(done.stdout)["releases"]
    assert [(r["vllm_version"], r["outcome"]) for r in releases] == [(v, "upstream") for v in versions]
    for release in releases:
        assert [(c["ok"], c["message"]) for c in release["checks"] if c["check"] == "behaviour"] == [
            (True, "0 of 70 runs differ (stand-ins for vLLM's classes)")
        ], release["vllm_version"]
        assert "did not judge" not in release["detail"]
        stock = {c["path"] for c in release["checks"] if c["check"] == "integrity"}
        assert all(c["message"].startswith("stock: matches ") for c in release["checks"] if c["check"] == "integrity")
        version = Version(release["vllm_version"])
        assert ("vllm/tool_parsers/tool_strict_level.py" in stock) == (version >= Version("0.31.0"))
        assert stock >= ENGINE_FILES or version < Version("0.25.0")


@pytest.mark.parametrize(("set_name", "runs"), [(DEEPSEEK, 170), (KIMI, 70)])
def test_applied_then_moved_under_another_name_passes_through_the_link(tmp_path, run, set_name, runs):
    """vllm/ moved to another volume as vllm-pkg, a symlink left in its place: the behaviour test reads
    the parser (and the serving code it tops up with) through the link, as status judges the tree."""
    tree = stock_016(tmp_path, set_name)
    library = ("--patches", LIBRARY, "--set", set_name)
    assert run("apply", "--target", tree, *library).exit_code == 0
    volume = tmp_path / "vol" / "pkgs"
    volume.mkdir(parents=True)
    (tree / "vllm").rename(volume / "vllm-pkg")
    (tree / "vllm").symlink_to(volume / "vllm-pkg", target_is_directory=True)
    for target in (tree, tree / "vllm"):
        moved = run("verify", "--target", target, *library)
        said = f"behaviour: 0 of {runs} runs differ (stand-ins for vLLM's classes)"
        assert moved.exit_code == 0 and said in moved.stdout, moved.output[-2000:]
