"""Real vLLM releases, fetched from the package index with patchkit's own fetcher into the cache.

Marker `release`: run by `make test` (and CI), skipped with -m "not release".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import CONSECUTIVE, SUPPORTED_RELEASES, release_diff, snapshot

from patchkit.fetch import release_tree
from patchkit.releases.files import files_for, lay_out

pytestmark = pytest.mark.release


def copy_tree(src: Path, dest: Path, paths: list[str] | None = None) -> Path:
    """The release's dist-info and `paths` (all of `src` if None): the cache's tree holds whatever
    earlier fetches asked for, so a test that lays it out whole depends on which ran first."""
    lay_out(src, str(dest), paths)
    return dest


def test_real_release_to_release_diff_applies_exactly_and_reverts(tmp_path, run):
    old_version, new_version = CONSECUTIVE
    old = release_tree(old_version, all_python=True)
    new = release_tree(new_version, all_python=True)
    diff = release_diff(old, new, tmp_path / "diff")
    (tmp_path / "release.diff").write_bytes(diff)
    assert diff.count(b"\ndiff --git ") > 20

    target = copy_tree(old, tmp_path / "site")
    stock = snapshot(target)
    result = run("apply", "--target", target, "--patch", tmp_path / "release.diff", "--format", "json")
    assert result.exit_code == 0, result.output[-2000:]
    assert json.loads(result.stdout)["result"] == "applied"
    assert snapshot(target) == snapshot(new)

    result = run("revert", "--target", target, "--patch", tmp_path / "release.diff")
    assert result.exit_code == 0, result.output[-2000:]
    assert snapshot(target) == stock


@pytest.mark.parametrize("version", SUPPORTED_RELEASES)
def test_eagle3_series_applies_verifies_and_reverts_on_the_real_release(tmp_path, run, version):
    paths = files_for(version)
    assert "vllm/model_executor/models/deepseek_v2.py" in paths
    target = copy_tree(release_tree(version, paths), tmp_path / "site", paths)
    stock = snapshot(target)

    def status():
        return json.loads(run("status", "--target", target, "--format", "json").stdout)

    assert status()["state"] == "not-applied"
    assert run("apply", "--target", target).exit_code == 0
    assert status()["state"] == "applied"
    assert snapshot(target) != stock
    assert run("verify", "--target", target).exit_code == 0
    assert run("revert", "--target", target).exit_code == 0
    assert snapshot(target) == stock


@pytest.mark.parametrize("version", ["0.18.0", "0.20.2", "0.25.1", "0.33.0"])
def test_later_releases_are_upstream_and_untouched(tmp_path, run, version):
    paths = files_for(version)
    target = copy_tree(release_tree(version, paths), tmp_path / "site", paths)
    stock = snapshot(target)
    result = run("status", "--target", target, "--set", "eagle3", "--format", "json")  # eagle3's answer
    assert result.exit_code == 0 and json.loads(result.stdout)["state"] == "upstream"
    assert run("apply", "--target", target, "--set", "eagle3").exit_code == 0
    assert snapshot(target) == stock


def test_fetch_dest_of_an_upstream_release_holds_what_its_checks_read(tmp_path, run):
    result = run("fetch", "0.20.2", "--dest", tmp_path / "site")
    assert result.exit_code == 0
    assert (tmp_path / "site/vllm/v1/spec_decode/llm_base_proposer.py").is_file()  # the contract's file there
    assert (tmp_path / "site/vllm/model_executor/models/deepseek_v2.py").is_file()
    status = run("status", "--target", tmp_path / "site", "--set", "eagle3", "--format", "json")
    assert status.exit_code == 0 and json.loads(status.stdout)["state"] == "upstream"
    assert json.loads(status.stdout)["upstream_regression"] is False


def test_an_applied_tree_upgraded_in_place_to_an_upstream_release_is_reported_and_apply_clears_the_guard(tmp_path, run):
    """Issue 20 item 2 on the real releases: eagle3 applied to 0.16.0 (guard installed), then 0.18.0's
    files and dist-info laid over it as pip would: the guard refuses the launch, so status fails
    naming apply, and apply drops the stale record and the guard."""
    import shutil

    from helpers import load_plugins_like_vllm

    paths = files_for("0.16.0")
    target = copy_tree(release_tree("0.16.0", paths), tmp_path / "site")
    assert run("apply", "--target", target, "--no-import", "--set", "eagle3").exit_code == 0
    assert (target / "patchkit_guard.py").exists() and load_plugins_like_vllm(target).returncode == 0
    shutil.rmtree(target / "vllm")
    shutil.rmtree(target / "vllm-0.16.0.dist-info")
    lay_out(release_tree("0.18.0", paths), str(target), paths)
    refused = load_plugins_like_vllm(target)
    assert refused.returncode != 0 and "vLLM 0.18.0 is installed" in refused.stderr

    result = run("status", "--target", target, "--set", "eagle3", "--format", "json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert (
        report["state"] == "upstream" and f"`patchkit apply --target {target} --set eagle3`" in report["guard"]["fix"]
    )
    assert run("verify", "--target", target, "--no-import", "--set", "eagle3").exit_code == 1

    result = run("apply", "--target", target, "--set", "eagle3")
    assert result.exit_code == 0, result.output
    assert "dropped the record of eagle3" in result.output and "launch guard removed" in result.output
    assert load_plugins_like_vllm(target).returncode == 0 and not (target / "patchkit_guard.py").exists()
    assert run("status", "--target", target, "--set", "eagle3").exit_code == 0
