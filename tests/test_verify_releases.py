"""`patchkit verify` against releases (--vllm-version V..., --all, --latest) and upstream checks.

Unit tests use small trees and a fake package index (release_tree / available_versions
monkeypatched); the tests marked `release` verify real releases fetched from the index.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import SPEC_PY, FakeIndex, make_patch, write_library, write_tree
from packaging.version import Version

from patchkit.releases import check as release_check

PATCHED_SPEC = SPEC_PY.replace('"qwen",\n', '"qwen",\n        "deepseek",\n')
BROKEN_SPEC = PATCHED_SPEC.replace("def accepts(model_type: str) -> bool:", "def accepts(model_type: str) -> bool")
OTHER_SPEC = SPEC_PY.replace('"llama",', '"mistral",')  # context the patch does not find


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """The result cache lives in the fetch cache: keep each test's apart from the user's."""
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def index(tmp_path, monkeypatch) -> FakeIndex:
    return FakeIndex(tmp_path / "index", monkeypatch)


@pytest.fixture
def library(tmp_path, index) -> Path:
    """A set supported from 0.16.0, upstream from 0.18.0; 0.16.0 and 0.16.1 share one series."""
    stock = index.add("0.16.0")
    patch = make_patch(tmp_path, stock, {"vllm/config/spec.py": PATCHED_SPEC})
    root = write_library(tmp_path / "lib", {"0.16.0": [patch]}, supported=">=0.16.0", upstream=">=0.18.0")
    with (root / "demo" / "set.toml").open("a") as manifest:
        manifest.write('\n[[releases]]\nversions = "==0.16.1"\ndir = "0.16.0"\n')
    return root


def verify_json(run, library, *args):
    result = run("verify", "--patches", library, "--format", "json", *args)
    return result, {r["vllm_version"]: r for r in json.loads(result.stdout)["releases"]}


# --------------------------------------------------------------------------- outcomes


def test_patched_and_upstream_releases_pass(run, library, index):
    index.add("0.18.0", PATCHED_SPEC)
    result, releases = verify_json(run, library, "--vllm-version", "0.16.0", "--vllm-version", "0.18.0")
    assert result.exit_code == 0, result.output
    patched, upstream = releases["0.16.0"], releases["0.18.0"]
    assert (patched["outcome"], patched["ok"], patched["series"]) == ("patched", True, "0.16.0")
    assert patched["reverted_identical"] is True
    assert any(c["check"] == "syntax" and c["ok"] for c in patched["checks"])
    assert {"fetch", "dry_run", "checks", "apply", "revert", "total"} <= set(patched["timings"])
    assert (upstream["outcome"], upstream["ok"], upstream["upstream_regression"]) == ("upstream", True, False)
    assert upstream["checks"] and all(c["ok"] for c in upstream["checks"])
    # the upstream release is checked on the files of the newest series
    assert ("0.18.0", ("vllm/config/spec.py",)) in index.fetched


def test_the_stock_trees_are_never_written(run, library, index):
    before = {p: p.read_bytes() for p in index.root.rglob("*") if p.is_file()}
    run("verify", "--patches", library, "--vllm-version", "0.16.0")
    assert {p: p.read_bytes() for p in index.root.rglob("*") if p.is_file()} == before


def test_conflict(run, library, index):
    index.add("0.16.1", OTHER_SPEC)
    result, releases = verify_json(run, library, "--vllm-version", "0.16.1")
    assert result.exit_code == 1
    assert releases["0.16.1"]["outcome"] == "conflict"
    assert "vllm/config/spec.py: hunk #1 does not apply" in releases["0.16.1"]["detail"]
    assert releases["0.16.1"]["reverted_identical"] is None  # nothing was written


def test_a_patch_that_breaks_the_syntax_is_check_failed(run, tmp_path, index):
    stock = index.add("0.16.0")
    patch = make_patch(tmp_path, stock, {"vllm/config/spec.py": BROKEN_SPEC})
    lib = write_library(tmp_path / "badlib", {"0.16.0": [patch]}, supported=">=0.16.0")
    result, releases = verify_json(run, lib, "--vllm-version", "0.16.0")
    assert result.exit_code == 1
    assert releases["0.16.0"]["outcome"] == "check-failed"
    assert "syntax: vllm/config/spec.py" in releases["0.16.0"]["detail"]
    assert [c["check"] for c in releases["0.16.0"]["checks"] if not c["ok"] and c["level"] == "error"] == ["syntax"]


def test_a_revert_that_leaves_the_tree_changed_fails(run, library, index, monkeypatch):
    monkeypatch.setattr(release_check, "_revert", lambda resolved: None)
    result, releases = verify_json(run, library, "--vllm-version", "0.16.0")
    assert result.exit_code == 1
    assert releases["0.16.0"]["outcome"] == "check-failed"
    assert releases["0.16.0"]["reverted_identical"] is False
    assert "vllm/config/spec.py" in releases["0.16.0"]["detail"]


def test_an_unsupported_release_asked_for_by_name_is_exit_3(run, library, index):
    result, releases = verify_json(run, library, "--vllm-version", "0.10.0", "--vllm-version", "0.16.0")
    assert result.exit_code == 3
    assert releases["0.10.0"]["outcome"] == "unsupported" and releases["0.10.0"]["requested"]
    assert releases["0.16.0"]["outcome"] == "patched"
    assert ("0.10.0", ()) not in index.fetched and not any(v == "0.10.0" for v, _ in index.fetched)


def test_a_failure_outranks_an_unsupported_release(run, library, index):
    index.add("0.16.1", OTHER_SPEC)
    result = run("verify", "--patches", library, "--vllm-version", "0.10.0", "--vllm-version", "0.16.1")
    assert result.exit_code == 1


def test_all_covers_the_range_and_unsupported_there_is_not_a_failure(run, library, index):
    index.add("0.15.0")  # below the supported minimum: not in the range
    index.add("0.16.1")
    index.add("0.17.0")  # supported, but no series covers it
    index.add("0.18.0", PATCHED_SPEC)
    result, releases = verify_json(run, library, "--all")
    assert result.exit_code == 0, result.output
    assert list(releases) == ["0.16.0", "0.16.1", "0.17.0", "0.18.0"]
    assert [r["outcome"] for r in releases.values()] == ["patched", "patched", "unsupported", "upstream"]
    assert "no patch series for vLLM 0.17.0" in releases["0.17.0"]["detail"]
    assert not any(r["requested"] for r in releases.values())


def test_latest_is_the_newest_release_and_counts_as_asked_for(run, library, index):
    index.add("0.18.0", PATCHED_SPEC)
    index.add("0.19.0", PATCHED_SPEC)
    result, releases = verify_json(run, library, "--latest")
    assert result.exit_code == 0
    assert list(releases) == ["0.19.0"] and releases["0.19.0"]["requested"]


def test_releases_sharing_a_series_are_compared_by_record_not_fetched_again(run, library, index):
    index.add("0.16.1")  # the same stock files as 0.16.0
    result, releases = verify_json(
        run, library, "--vllm-version", "0.16.1", "--vllm-version", "0.16.0", "--vllm-version", "0.16"
    )
    assert result.exit_code == 0
    assert list(releases) == ["0.16.0", "0.16.1"]  # 0.16 is 0.16.0
    assert releases["0.16.1"]["outcome"] == "patched" and releases["0.16.1"]["same_as"] == "0.16.0"
    assert [paths for version, paths in index.fetched if version == "0.16.1"] == [()]  # RECORD only
    assert [version for version, paths in index.fetched if paths] == ["0.16.0"]


def test_a_series_mate_whose_files_differ_is_fetched_and_verified_itself(run, library, index):
    index.add("0.16.1", OTHER_SPEC)
    result, releases = verify_json(run, library, "--vllm-version", "0.16.0", "--vllm-version", "0.16.1")
    assert result.exit_code == 1
    assert releases["0.16.0"]["outcome"] == "patched"
    assert releases["0.16.1"]["outcome"] == "conflict" and releases["0.16.1"]["same_as"] is None
    assert ("0.16.1", ("vllm/config/spec.py",)) in index.fetched


def test_series_mates_judged_by_other_contract_requirements_are_verified_each(run, library, index):
    pytest.importorskip("patchkit.checks.contract")
    with (library / "demo" / "set.toml").open("a") as manifest:
        manifest.write(
            '\n[[contract]]\nfile = "vllm/config/spec.py"\nkind = "imported"\nnames = ["EAGLE3"]\n'
            'versions = "==0.16.1"\n'
        )
    index.add("0.16.1")
    result, releases = verify_json(run, library, "--vllm-version", "0.16.0", "--vllm-version", "0.16.1")
    assert result.exit_code == 1  # the series does not add EAGLE3, which 0.16.1's contract requires
    assert releases["0.16.0"]["outcome"] == "patched"
    assert releases["0.16.1"]["outcome"] == "check-failed" and releases["0.16.1"]["same_as"] is None
    assert "contract" in releases["0.16.1"]["detail"]


def test_upstream_releases_with_identical_stock_files_are_judged_once_one_byte_apart_on_its_own(run, library, index):
    index.add("0.18.0", PATCHED_SPEC)
    index.add("0.18.1", PATCHED_SPEC)  # the same stock file: 0.18.0's result, nothing fetched but RECORD
    index.add("0.18.2", BROKEN_SPEC)  # one byte less (a colon): judged on its own, and it fails
    assert len(PATCHED_SPEC) - len(BROKEN_SPEC) == 1
    result, releases = verify_json(
        run, library, "--vllm-version", "0.18.0", "--vllm-version", "0.18.1", "--vllm-version", "0.18.2"
    )
    assert result.exit_code == 1
    assert [(r["outcome"], r["same_as"], r["upstream_regression"]) for r in releases.values()] == [
        ("upstream", None, False),
        ("upstream", "0.18.0", False),
        ("upstream", None, True),
    ]
    assert "stock files identical to 0.18.0's" in releases["0.18.1"]["detail"]
    assert "syntax" in releases["0.18.2"]["detail"]
    assert [version for version, paths in index.fetched if paths] == ["0.18.0", "0.18.2"]


def test_releases_of_one_series_share_with_the_release_whose_files_they_have(run, library, index):
    with (library / "demo" / "set.toml").open("a") as manifest:
        manifest.write('\n[[releases]]\nversions = "==0.16.2"\ndir = "0.16.0"\n')
    index.add("0.16.1", OTHER_SPEC)  # not the first release's file: judged itself
    index.add("0.16.2", OTHER_SPEC)  # 0.16.1's file: 0.16.1's result
    result, releases = verify_json(run, library, "--all")
    assert result.exit_code == 1
    assert [(v, r["outcome"], r["same_as"], r["series"]) for v, r in releases.items()] == [
        ("0.16.0", "patched", None, "0.16.0"),
        ("0.16.1", "conflict", None, "0.16.0"),
        ("0.16.2", "conflict", "0.16.1", "0.16.0"),
    ]
    assert [version for version, paths in index.fetched if paths] == ["0.16.0", "0.16.1"]


# The behaviour test keys releases by minor version (as the tool-call sets' top-up changes by release).
KEYED_JUDGE = """\
import json, pathlib, sys
if sys.argv[1] == "--version-keys":
    with pathlib.Path(__file__).with_name("asked").open("a") as asked:
        asked.write(" ".join(sys.argv[2:]) + "\\n")
    print(json.dumps({"version_keys": {v: v.rsplit(".", 1)[0] for v in sys.argv[2:]}}))
    sys.exit(0)
print(json.dumps({"ok": True, "error": None, "runs": 1, "failed": 0, "failures": []}))
"""


def test_releases_the_behaviour_test_keys_apart_are_judged_each(run, library, index):
    (library / "demo" / "judge.py").write_text(KEYED_JUDGE)
    manifest = library / "demo" / "set.toml"
    manifest.write_text('behaviour = "judge.py"\n' + manifest.read_text())
    for version in ("0.18.0", "0.18.1", "0.19.0"):  # identical stock files
        index.add(version, PATCHED_SPEC)
    result, releases = verify_json(run, library, "--all")
    assert result.exit_code == 0, result.output
    assert [(v, r["same_as"]) for v, r in releases.items() if r["outcome"] == "upstream"] == [
        ("0.18.0", None),
        ("0.18.1", "0.18.0"),
        ("0.19.0", None),  # another key: its own behaviour test
    ]
    assert any(c["check"] == "behaviour" and c["ok"] for c in releases["0.19.0"]["checks"])
    # the keys are remembered: a second run asks the script no more
    asked = "0.16.0 0.18.0 0.18.1 0.19.0\n"
    assert (library / "demo" / "asked").read_text() == asked
    again = verify_json(run, library, "--all", "--no-result-cache")[1]
    assert [r["same_as"] for r in again.values()] == [r["same_as"] for r in releases.values()]
    assert (library / "demo" / "asked").read_text() == asked


def test_series_mates_the_behaviour_test_keys_apart_are_judged_each(run, library, index):
    """0.16.0 and 0.16.1 share a series and their stock files, but the test judges them under
    different keys (as deepseek-tool-calls' 0.13.0 and 0.14.0: another top-up): no shared verdict."""
    (library / "demo" / "judge.py").write_text(KEYED_JUDGE.replace('v.rsplit(".", 1)[0]', "v"))
    manifest = library / "demo" / "set.toml"
    manifest.write_text('behaviour = "judge.py"\n' + manifest.read_text())
    index.add("0.16.1")
    result, releases = verify_json(run, library, "--vllm-version", "0.16.0", "--vllm-version", "0.16.1")
    assert result.exit_code == 0, result.output
    assert [(r["outcome"], r["same_as"]) for r in releases.values()] == [("patched", None), ("patched", None)]


def test_a_behaviour_test_that_gives_no_version_keys_shares_nothing(run, library, index):
    (library / "demo" / "judge.py").write_text(KEYED_JUDGE.replace('"--version-keys"', '"--never"'))
    manifest = library / "demo" / "set.toml"
    manifest.write_text('behaviour = "judge.py"\n' + manifest.read_text())
    for version in ("0.18.0", "0.18.1"):
        index.add(version, PATCHED_SPEC)
    result, releases = verify_json(run, library, "--all")
    assert result.exit_code == 0, result.output
    assert [(v, r["same_as"]) for v, r in releases.items() if r["outcome"] == "upstream"] == [
        ("0.18.0", None),
        ("0.18.1", None),
    ]


def test_the_scratch_trees_are_written_without_fsync_and_a_users_tree_with_it(run, library, index, monkeypatch):
    """A release is laid out in a temporary directory deleted afterwards: durability there was only
    time (fsync on a busy disk). `apply` on a user's tree still fsyncs each file it writes."""
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    result, releases = verify_json(run, library, "--vllm-version", "0.16.0")
    assert result.exit_code == 0 and releases["0.16.0"]["outcome"] == "patched"
    assert synced == []
    tree = write_tree(index.root.parent / "user", "0.16.0", {"vllm/config/spec.py": SPEC_PY})
    applied = run("apply", "--patches", library, "--target", tree)
    assert applied.exit_code == 0, applied.output
    assert synced


def test_a_fetch_failure_is_a_target_problem(run, library, index):
    result = run("verify", "--patches", library, "--vllm-version", "0.16.1")
    assert result.exit_code == 4
    assert "no wheel for vllm==0.16.1" in result.output


# --------------------------------------------------------------------------- upstream regressions


def test_an_upstream_regression_fails_verify(run, library, index):
    index.add("0.18.0", PATCHED_SPEC)
    index.add("0.19.0", BROKEN_SPEC)
    result, releases = verify_json(run, library, "--vllm-version", "0.18.0", "--vllm-version", "0.19.0")
    assert result.exit_code == 1
    assert releases["0.18.0"]["ok"] and not releases["0.18.0"]["upstream_regression"]
    regression = releases["0.19.0"]
    assert (regression["outcome"], regression["ok"], regression["upstream_regression"]) == ("upstream", False, True)
    assert "upstream regression" in regression["detail"] and "syntax" in regression["detail"]


def test_an_upstream_regression_by_the_sets_contract(run, library, index):
    pytest.importorskip("patchkit.checks.contract")
    with (library / "demo" / "set.toml").open("a") as manifest:
        manifest.write('\n[[contract]]\nfile = "vllm/config/spec.py"\nkind = "imported"\nnames = ["EAGLE3"]\n')
    index.add("0.18.0", PATCHED_SPEC + "\nEAGLE3 = True\n")
    index.add("0.19.0", PATCHED_SPEC)  # vLLM dropped it
    result, releases = verify_json(run, library, "--vllm-version", "0.18.0", "--vllm-version", "0.19.0")
    assert result.exit_code == 1
    assert releases["0.18.0"]["ok"]
    assert releases["0.19.0"]["upstream_regression"]
    assert [c["check"] for c in releases["0.19.0"]["checks"] if not c["ok"] and c["level"] == "error"] == ["contract"]


def test_status_and_verify_on_an_upstream_target_run_the_checks(run, library, tmp_path):
    good = write_tree(tmp_path / "good", "0.18.0", {"vllm/config/spec.py": PATCHED_SPEC})
    status = run("status", "--patches", library, "--target", good, "--format", "json")
    assert status.exit_code == 0
    data = json.loads(status.stdout)
    assert data["state"] == "upstream" and data["upstream_regression"] is False
    assert any(c["check"] == "syntax" and c["path"] == "vllm/config/spec.py" and c["ok"] for c in data["checks"])

    bad = write_tree(tmp_path / "bad", "0.19.0", {"vllm/config/spec.py": BROKEN_SPEC})
    status = run("status", "--patches", library, "--target", bad, "--format", "json")
    assert status.exit_code == 1
    data = json.loads(status.stdout)
    assert data["state"] == "upstream" and data["upstream_regression"] is True
    text = run("status", "--patches", library, "--target", bad)
    assert text.exit_code == 1 and "upstream regression" in text.output
    verify = run("verify", "--patches", library, "--target", bad)
    assert verify.exit_code == 1 and "upstream regression" in verify.output
    assert run("verify", "--patches", library, "--target", good).exit_code == 0


# --------------------------------------------------------------------------- formats and options


def test_junit_has_a_testcase_per_release_with_failures_and_skips(run, library, index):
    index.add("0.16.1", OTHER_SPEC)
    index.add("0.18.0", PATCHED_SPEC)
    result = run(
        "verify",
        "--patches",
        library,
        "--format",
        "junit",
        "--vllm-version",
        "0.10.0",
        "--vllm-version",
        "0.16.0",
        "--vllm-version",
        "0.16.1",
        "--vllm-version",
        "0.18.0",
    )
    assert result.exit_code == 1
    suites = ET.fromstring(result.stdout)
    cases = {c.get("name"): c for c in suites.iter("testcase")}
    assert list(cases) == ["vllm 0.10.0", "vllm 0.16.0", "vllm 0.16.1", "vllm 0.18.0"]
    assert suites.get("tests") == "4" and suites.get("failures") == "1" and suites.get("skipped") == "1"
    failure = cases["vllm 0.16.1"].find("failure")
    assert failure is not None and failure.get("type") == "conflict" and "hunk #1" in failure.get("message")
    assert cases["vllm 0.10.0"].find("skipped") is not None
    for name in ("vllm 0.16.0", "vllm 0.18.0"):
        assert cases[name].find("failure") is None and cases[name].find("skipped") is None
    assert "patched" in cases["vllm 0.16.0"].find("system-out").text


def test_text_is_one_row_per_release_without_progress_when_piped(run, library, index):
    index.add("0.18.0", PATCHED_SPEC)
    result = run("verify", "--patches", library, "--vllm-version", "0.16.0", "--vllm-version", "0.18.0")
    assert result.exit_code == 0
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[2][:3] == ["0.16.0", "patched", "0.16.0"] and rows[3][:2] == ["0.18.0", "upstream"]
    assert result.stdout.splitlines()[-1].startswith("verify: ok")
    assert "\x1b[" not in result.output and "━" not in result.output  # no colour, no progress bar


def test_results_are_cached_by_their_inputs(run, library, index):
    _, first = verify_json(run, library, "--vllm-version", "0.16.0")
    _, again = verify_json(run, library, "--vllm-version", "0.16.0")
    _, fresh = verify_json(run, library, "--vllm-version", "0.16.0", "--no-result-cache")
    assert (first["0.16.0"]["cached"], again["0.16.0"]["cached"], fresh["0.16.0"]["cached"]) == (False, True, False)
    assert {k: v for k, v in again["0.16.0"].items() if k not in ("cached", "timings")} == {
        k: v for k, v in first["0.16.0"].items() if k not in ("cached", "timings")
    }

    # another stock file (and its RECORD: a file RECORD disowns is a damaged cache): another key
    index.add("0.16.0", OTHER_SPEC)
    result, changed = verify_json(run, library, "--vllm-version", "0.16.0")
    assert result.exit_code == 1 and changed["0.16.0"]["outcome"] == "conflict"
    assert not changed["0.16.0"]["cached"]


def test_a_changed_patch_set_is_not_answered_from_the_cache(run, library, index):
    verify_json(run, library, "--vllm-version", "0.16.0")
    with (library / "demo" / "set.toml").open("a") as manifest:
        manifest.write("# edited\n")
    _, releases = verify_json(run, library, "--vllm-version", "0.16.0")
    assert not releases["0.16.0"]["cached"]


def test_an_edited_behaviour_test_judges_again_and_no_cached_verdict_is_replayed(run, library, index):
    """A set's behaviour test is part of what a result depends on: edited (more splits, say), every
    release is judged again by the new script (its keys asked again too), not answered from the cache."""
    judge = library / "demo" / "judge.py"
    judge.write_text(KEYED_JUDGE)
    manifest = library / "demo" / "set.toml"
    manifest.write_text('behaviour = "judge.py"\n' + manifest.read_text())

    def said() -> tuple[bool, list[str]]:
        release = verify_json(run, library, "--vllm-version", "0.16.0")[1]["0.16.0"]
        return release["cached"], [c["message"] for c in release["checks"] if c["check"] == "behaviour"]

    assert said() == (False, ["0 of 1 runs differ (stand-ins for vLLM's classes)"])
    assert said()[0] is True
    judge.write_text(KEYED_JUDGE.replace('"runs": 1', '"runs": 2'))
    assert said() == (False, ["0 of 2 runs differ (stand-ins for vLLM's classes)"])


def test_one_version_with_a_target_still_overrides_its_detection(run, library, tmp_path, index):
    target = write_tree(tmp_path / "site", "0.15.9")
    result = run("verify", "--patches", library, "--target", target, "--vllm-version", "0.16.0", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["vllm_version"] == "0.16.0"
    assert index.fetched == []


@pytest.mark.parametrize(
    "args",
    [
        ["--all", "--target", "."],
        ["--latest", "--python", "python3"],
        ["--vllm-version", "0.16.0", "--vllm-version", "0.18.0", "--target", "."],
        ["--vllm-version", "0.16.0", "--patch", "x.patch"],
    ],
)
def test_contradictory_options_are_bad_input(run, library, args):
    result = run("verify", "--patches", library, *args)
    assert result.exit_code == 2, result.output


def test_exit_code_rules():
    def result(outcome, requested=False, **extra):
        return release_check.ReleaseResult(Version("1.0"), outcome, "", requested=requested, **extra)

    assert release_check.exit_code([result("patched"), result("upstream"), result("unsupported")]) == 0
    assert release_check.exit_code([result("patched"), result("unsupported", requested=True)]) == 3
    assert release_check.exit_code([result("conflict"), result("unsupported", requested=True)]) == 1
    assert release_check.exit_code([result("check-failed")]) == 1
    assert release_check.exit_code([result("upstream", upstream_regression=True)]) == 1
    assert release_check.exit_code([result("patched", reverted_identical=False)]) == 1


# --------------------------------------------------------------------------- real releases


@pytest.mark.release
def test_real_releases_patched_and_upstream(run):
    """eagle3's (`--set eagle3`: the library holds other sets, each a part of its own document)."""
    versions = ["--vllm-version", "0.16.0", "--vllm-version", "0.18.0"]
    result = run("verify", "--set", "eagle3", *versions, "--format", "json", "--no-result-cache")
    assert result.exit_code == 0, result.output[-3000:]
    releases = {r["vllm_version"]: r for r in json.loads(result.stdout)["releases"]}
    assert releases["0.16.0"]["outcome"] == "patched" and releases["0.16.0"]["reverted_identical"]
    assert releases["0.18.0"]["outcome"] == "upstream" and not releases["0.18.0"]["upstream_regression"]
    assert any(c["check"] == "contract" for c in releases["0.18.0"]["checks"])


@pytest.mark.release
def test_real_releases_of_every_set_are_a_part_each(run):
    result = run("verify", "--vllm-version", "0.16.0", "--vllm-version", "0.18.0", "--format", "json")
    assert result.exit_code == 0, result.output[-3000:]
    parts = {p["set"]: p["releases"] for p in json.loads(result.stdout)["sets"]}
    assert "eagle3" in parts and len(parts) > 1
    assert all(r["ok"] for releases in parts.values() for r in releases), parts


@pytest.mark.release
def test_real_all_releases(run):
    from patchkit.fetch import available_versions

    result = run("verify", "--set", "eagle3", "--all", "--format", "json")  # eagle3's range and upstream
    assert result.exit_code == 0, result.output[-3000:]
    releases = {Version(r["vllm_version"]): r for r in json.loads(result.stdout)["releases"]}
    expected = [v for v in available_versions() if v >= Version("0.11.0")]
    assert sorted(releases) == expected and expected[0] == Version("0.11.0")
    for version, r in releases.items():
        want = "upstream" if version >= Version("0.18.0") else "patched"
        assert (r["outcome"], r["ok"]) == (want, True), (version, r["detail"])


def test_the_releases_document_carries_the_schema_version_and_the_set(run, library, index):
    result = run("verify", "--patches", library, "--format", "json", "--vllm-version", "0.16.0")
    data = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    assert (data["schema_version"], data["set"]) == (1, "demo")
    assert [r["outcome"] for r in data["releases"]] == ["patched"]


# --------------------------------------------------------------------------- the set's behaviour test (audit 23 M1, M4)

PASSING_JUDGE = 'import json\nprint(json.dumps({"ok": True, "runs": 4, "failed": 0, "failures": [], "error": None}))\n'


def with_behaviour(library: Path, judge: str) -> None:
    (library / "demo" / "judge.py").write_text(judge)
    manifest = library / "demo" / "set.toml"
    manifest.write_text('behaviour = "judge.py"\n' + manifest.read_text())  # before the [[releases]] tables


def test_verify_of_releases_shows_the_behaviour_verdict_with_v(run, library, index):
    with_behaviour(library, PASSING_JUDGE)
    plain = run("verify", "--patches", library, "--vllm-version", "0.16.0")
    assert plain.exit_code == 0 and "runs differ" not in plain.output, plain.output
    shown = run("verify", "--patches", library, "--vllm-version", "0.16.0", "-v")
    assert "0.16.0 behaviour: 0 of 4 runs differ (stand-ins for vLLM's classes)" in shown.stdout.splitlines()


def test_a_release_the_behaviour_test_did_not_judge_says_why_without_v(run, library, index):
    with_behaviour(library, "import nothing_here_at_all\n")
    done = run("verify", "--patches", library, "--vllm-version", "0.16.0")
    said = " ".join(done.output.split())
    assert done.exit_code == 0, done.output  # a warning, as documented: the last line says it
    assert "; behaviour not judged (below)" in said, done.output
    assert "0.16.0 behaviour warning: not judged: judge.py exited 1 with no JSON verdict" in said, done.output
    assert "No module named 'nothing_here_at_all'" in said
    assert "verify: ok (1 patched; behaviour not judged on 0.16.0)" in said


@pytest.mark.parametrize("typed", ["0.16.0.0", "0.16.0.0.0", "v0.16.0.0", "00.16.00.00"])
def test_a_release_typed_with_trailing_zeros_is_that_release(run, library, index, typed):
    result, releases = verify_json(run, library, "--vllm-version", typed)
    assert result.exit_code == 0, result.output
    assert list(releases) == ["0.16.0"] and releases["0.16.0"]["outcome"] == "patched"
