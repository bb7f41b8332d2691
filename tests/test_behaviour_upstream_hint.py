"""verify --latest / --all on a release where an open-ended set conflicts: the stock file changed,
and the set's behaviour test on the stock file says whether upstream may have fixed it (issue 23,
"A set whose upstream fix is pending"). Synthetic releases (helpers.Releases) and a set of the tests'
own; the real DeepSeek set: tests/test_behaviour_release.py."""

from __future__ import annotations

import json

import pytest
from helpers import PARSER, PARSER_STOCK, Releases, cli_runner, judged_library

FIXED_UPSTREAM = "class DemoParser:\n    BROKEN = None  # fixed upstream, another way\n"
CHANGED_STILL_BROKEN = "class DemoParser:\n    KIND = 2\n    BROKEN = True\n"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def library(tmp_path):
    """An open-ended set (its fix pending upstream) with a behaviour test."""
    return judged_library(tmp_path)


def latest(tmp_path, monkeypatch, library, newest: str, fmt: str = "json"):
    releases = Releases(tmp_path / "index", monkeypatch)
    releases.add("0.16.0", {PARSER: PARSER_STOCK})
    releases.add("0.17.0", {PARSER: newest})
    return cli_runner()("verify", "--latest", "--patches", library, "--format", fmt)


def test_a_conflict_whose_stock_file_now_passes_says_upstream_may_have_fixed_it(tmp_path, monkeypatch, library):
    done = latest(tmp_path, monkeypatch, library, FIXED_UPSTREAM)
    assert done.exit_code == 1
    [release] = json.loads(done.stdout)["releases"]
    assert (release["vllm_version"], release["outcome"], release["stock_behaviour"]) == ("0.17.0", "conflict", "passes")
    assert "the stock files changed" in release["detail"]
    assert "they pass the set's behaviour test (0 of 8 runs differ" in release["detail"]
    assert release["hint"] == "upstream may have fixed this in 0.17.0: close the set's range"
    [stock] = [c for c in release["checks"] if c["check"] == "behaviour"]
    assert stock["ok"] and stock["message"] == "stock: 0 of 8 runs differ (stand-ins for vLLM's classes)"

    text = latest(tmp_path, monkeypatch, library, FIXED_UPSTREAM, fmt="text")
    assert "upstream may have fixed this in 0.17.0: close the set's range" in text.output
    [fix] = [line for line in text.output.splitlines() if "upstream may" in line]
    assert fix == "  fix: upstream may have fixed this in 0.17.0: close the set's range"


def test_a_conflict_whose_stock_file_still_fails_says_to_port_the_series(tmp_path, monkeypatch, library):
    done = latest(tmp_path, monkeypatch, library, CHANGED_STILL_BROKEN)
    assert done.exit_code == 1
    [release] = json.loads(done.stdout)["releases"]
    assert (release["outcome"], release["stock_behaviour"]) == ("conflict", "fails")
    assert "the stock files changed" in release["detail"]
    assert "still fail the set's behaviour test (3/8 runs differ; 2 tokens per delta" in release["detail"]
    assert (
        release["hint"] == f"port the series: `patchkit port --patches {library} --set demo --from 0.16.0 --to 0.17.0`"
    )
    [stock] = [c for c in release["checks"] if c["check"] == "behaviour"]
    assert not stock["ok"] and stock["level"] == "warning"  # the conflict is the failure; this says why
    assert stock["message"] == "stock: 3/8 runs differ; 2 tokens per delta: call 0 lost"


def test_a_set_without_a_behaviour_test_gets_no_such_hint(tmp_path, monkeypatch, library):
    manifest = library / "demo" / "set.toml"
    manifest.write_text(manifest.read_text().replace('behaviour = "judge.py"\n', ""))
    done = latest(tmp_path, monkeypatch, library, FIXED_UPSTREAM)
    [release] = json.loads(done.stdout)["releases"]
    assert release["outcome"] == "conflict" and release["stock_behaviour"] is None
    assert "behaviour" not in release["detail"] and release["hint"].startswith("port the series: `patchkit port ")


PULL = "https://github.com/vllm-project/vllm/pull/1"


def test_the_hint_asks_whether_the_pending_pull_request_was_merged(tmp_path, monkeypatch, library):
    """set.toml's [upstream_fix] names the pull request while the fix is pending: the hint asks after
    it, and `list` shows it; once released (another state) it is named nowhere."""
    manifest = library / "demo" / "set.toml"
    pending = f'\n[upstream_fix]\nstate = "pending"\npull_request = "{PULL}"\n'
    manifest.write_text(manifest.read_text().replace("\n[[releases]]", pending + "\n[[releases]]", 1))
    done = latest(tmp_path, monkeypatch, library, FIXED_UPSTREAM)
    [release] = json.loads(done.stdout)["releases"]
    assert release["hint"] == f"upstream may have fixed this in 0.17.0 (was {PULL} merged?): close the set's range"
    listed = cli_runner()("list", "--patches", library)
    assert f"; not in vLLM yet\n         upstream fix pending: {PULL}\n" in listed.output, listed.output
    assert (
        json.loads(cli_runner()("list", "--patches", library, "--format", "json").stdout)["sets"][0]["pending_fix"]
        == PULL
    )

    manifest.write_text(manifest.read_text().replace('state = "pending"', 'state = "released"'))
    done = latest(tmp_path, monkeypatch, library, FIXED_UPSTREAM)
    assert (
        json.loads(done.stdout)["releases"][0]["hint"]
        == "upstream may have fixed this in 0.17.0: close the set's range"
    )
    assert PULL not in cli_runner()("list", "--patches", library).output
