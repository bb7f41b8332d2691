"""Versions between releases (issue 23, step 6): a nightly or a vLLM git checkout's build
(0.17.2.dev5+gabc1234) gets the series of the newest release at or below its base version whose
dry run applies cleanly, and says so; --vllm-version still overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import SPEC_PY, make_patch, patched_spec, snapshot, write_library, write_tree

from patchkit.store.state import read_state

SPEC = "vllm/config/spec.py"
NIGHTLY = "0.17.2.dev5+gabc1234"
ELSEWHERE = SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "mistral",\n')  # a newer release's stock file


@pytest.fixture
def nightly(tmp_path) -> Path:
    return write_tree(tmp_path / "site", version=NIGHTLY)


def library_of(scratch: Path, tree: Path, series: dict[str, bytes], versions: dict[str, str] | None = None) -> Path:
    return write_library(scratch / "lib", {d: [p] for d, p in series.items()}, versions=versions, upstream=None)


def newer_release_patch(scratch: Path) -> bytes:
    """A patch made against ELSEWHERE: its context is not in the nightly's file."""
    other = write_tree(scratch / "other", files={SPEC: ELSEWHERE})
    return make_patch(scratch, other, {SPEC: ELSEWHERE.replace('"mistral"', '"mistral",\n    "deepseek"')})


def applied_json(run, tree: Path, library: Path, *extra: str) -> dict:
    result = run("apply", "--target", tree, "--patches", library, "--format", "json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_nightly_gets_the_newest_series_whose_dry_run_applies_and_says_so(run, nightly, scratch):
    spec = make_patch(scratch, nightly, {SPEC: patched_spec()})
    library = library_of(scratch, nightly, {"0.16.0": spec, "0.17.0": newer_release_patch(scratch)})
    document = applied_json(run, nightly, library)
    assert document["series"] == "0.16.0" and document["result"] == "applied"
    assert (nightly / SPEC).read_text() == patched_spec()
    text = run("status", "--target", nightly, "--patches", library)
    assert text.exit_code == 0, text.output
    assert f"vLLM {NIGHTLY} is a build between releases: the series ==0.16.0 [0.16.0] is the newest" in text.output
    assert read_state(nightly).entries[0].release == "0.16.0"


def test_the_newest_release_wins_when_several_apply(run, nightly, scratch):
    spec = make_patch(scratch, nightly, {SPEC: patched_spec()})
    library = library_of(scratch, nightly, {"0.15.0": spec, "0.16.0": spec})
    assert applied_json(run, nightly, library, "--dry-run")["series"] == "0.16.0"


def test_a_range_below_the_base_version_counts_as_its_last_release(run, nightly, scratch):
    spec = make_patch(scratch, nightly, {SPEC: patched_spec()})
    library = library_of(scratch, nightly, {"0.16.0": spec}, versions={"0.16.0": ">=0.16.0,<0.17.0"})
    assert applied_json(run, nightly, library, "--dry-run")["series"] == "0.16.0"


def test_vllm_version_overrides(run, nightly, scratch):
    spec = make_patch(scratch, nightly, {SPEC: patched_spec()})
    library = library_of(scratch, nightly, {"0.16.0": spec, "0.17.0": newer_release_patch(scratch)})
    stock = snapshot(nightly)
    named = run("apply", "--target", nightly, "--patches", library, "--vllm-version", "0.17.0", "--dry-run")
    assert named.exit_code == 1 and "does not apply" in named.output, named.output  # the named release's series
    assert snapshot(nightly) == stock


def test_no_series_that_applies_is_exit_3_naming_what_was_tried(run, nightly, scratch):
    library = library_of(scratch, nightly, {"0.17.0": newer_release_patch(scratch)})
    result = run("apply", "--target", nightly, "--patches", library)
    assert result.exit_code == 3, result.output
    assert "applies cleanly" in result.output and "==0.17.0 [0.17.0]" in result.output
    assert "--vllm-version" in result.output
