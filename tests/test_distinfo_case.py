"""patchkit finds vLLM's metadata directory as importlib.metadata does: a name ending in .dist-info
(or .egg-info) in any letter case, the part before the first '-' normalizing to vllm. Each test
first asks importlib.metadata itself that the renamed directory is still vLLM's distribution."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import sys
from pathlib import Path

import pytest
from helpers import LIBRARY, lay_out_release, record_rows, write_tree

from patchkit._target import guard as target_guard
from patchkit.base.errors import BadInput
from patchkit.checks.behaviour import _installed_key
from patchkit.distinfo import installed_record, installed_wheel
from patchkit.distinfo.record import PROVENANCE, find_record, has_provenance
from patchkit.engine.guard import is_site_packages
from patchkit.releases.files import files_for
from patchkit.tree.target import from_directory, vllm_metadata_dirs
from patchkit.tree.version import detect

SET = "deepseek-tool-calls"
SPELLINGS = ["VLLM-0.16.0.DIST-INFO", "vllm-0.16.0.Dist-Info", "Vllm-0.16.0.dist-info"]


def renamed(root: Path, spelling: str) -> Path:
    """The tree's vllm-0.16.0.dist-info renamed to `spelling`, checked to be vLLM 0.16.0 for importlib."""
    (root / "vllm-0.16.0.dist-info").rename(root / spelling)
    [dist] = [d for d in importlib.metadata.distributions(path=[str(root)]) if d.metadata["Name"] == "vllm"]
    assert (dist.version, Path(str(dist._path)).name) == ("0.16.0", spelling)  # type: ignore[attr-defined]
    return root


@pytest.mark.release
def test_status_apply_verify_on_a_fetched_tree_whose_dist_info_is_renamed(
    tmp_path, run, spelling="vllm-0.16.0.Dist-Info"
):
    # A fetched tree has no vllm/__init__.py: the dist-info beside vllm/ is what makes it a target.
    tree = renamed(lay_out_release("0.16.0", files_for("0.16.0", str(LIBRARY), SET), tmp_path / "site"), spelling)
    library = ("--patches", LIBRARY, "--set", SET)
    status = run("status", "--target", tree / "vllm", *library)
    assert status.exit_code == 0, status.output[-2000:]
    assert "0.16.0" in status.output
    applied = run("apply", "--target", tree / "vllm", *library)
    assert applied.exit_code == 0, applied.output[-2000:]
    verified = run("verify", "--target", tree / "vllm", *library)
    assert verified.exit_code == 0, verified.output[-2000:]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_version_read_from_a_renamed_dist_info(tmp_path, spelling):
    root = write_tree(tmp_path / "site")
    # the version file and git are not there to fall back on: only METADATA tells
    found = detect(from_directory(renamed(root, spelling)))
    assert (str(found.version), found.source) == ("0.16.0", f"{spelling}/METADATA")


def test_behaviour_remembers_a_verdict_under_a_renamed_dist_info(tmp_path):
    root = write_tree(tmp_path / "site")
    (root / "vllm-0.16.0.dist-info" / "RECORD").write_text("vllm/__init__.py,,\n")
    renamed(root, "VLLM-0.16.0.DIST-INFO")
    script = tmp_path / "set" / "behaviour.py"
    script.parent.mkdir()
    script.write_text("")
    assert _installed_key(sys.executable, script, root, ["vllm/config/spec.py"], ["0.16.0"]) is not None


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_the_launch_guard_reads_the_version_of_a_renamed_dist_info(tmp_path, spelling):
    root = renamed(write_tree(tmp_path / "site"), spelling)
    assert target_guard.installed_vllm_version(str(root)) == "0.16.0"
    assert is_site_packages(root)


def test_the_guards_copy_finds_what_patchkit_and_importlib_find(tmp_path):
    """_target/guard.py cannot import patchkit: its copy of the rule agrees with tree/target.py's and
    with importlib.metadata, over names that are vLLM's for importlib and names that are not."""
    names = [
        *SPELLINGS,
        "vllm.dist-info",
        "VLLM-0.15.0.EGG-INFO",
        "vllm_x-1.dist-info",
        "vllm_-1.dist-info",
        "v.llm-1.dist-info",
        "vllmx-1.dist-info",
        "vllm-1.dist-info.bak",
        "vllm-1.distinfo",
    ]
    for name in names:
        site = tmp_path / name.replace(".", "_")
        (site / name).mkdir(parents=True)
        (site / name / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 1\n")
        # importlib.metadata's own search for the distribution named vllm (its Lookup and Prepared)
        by_importlib = [
            Path(str(d._path)).name for d in importlib.metadata.distributions(name="vllm", path=[str(site)])
        ]  # type: ignore[attr-defined]
        assert target_guard._vllm_dist_infos(str(site)) == [p.name for p in vllm_metadata_dirs(site)] == by_importlib, (
            name
        )


def test_the_installed_record_and_provenance_are_found_under_a_renamed_dist_info(tmp_path):
    """integrity's reference (RECORD), stale records' test (vllm-<installed>.dist-info) and the wheel
    provenance's cheap test read a dist-info importlib finds in any letter case."""
    root = write_tree(tmp_path / "site")
    (root / "vllm-0.16.0.dist-info" / "RECORD").write_text(record_rows(root, "vllm-0.16.0.dist-info"))
    renamed(root, "VLLM-0.16.0.DIST-INFO")
    # another release's RECORD left behind, listed first: the installed release's own is chosen
    (root / "VLLM-0.15.0.DIST-INFO").mkdir()
    (root / "VLLM-0.15.0.DIST-INFO" / "RECORD").write_text("vllm/__init__.py,,\n")
    assert find_record(root, "0.16.0") == root / "VLLM-0.16.0.DIST-INFO" / "RECORD"
    assert find_record(root, "0.15.0") == root / "VLLM-0.15.0.DIST-INFO" / "RECORD"
    installed, why_not = installed_record(root, "0.16.0", {"vllm/config/spec.py"})
    assert installed is not None and "vllm/config/spec.py" in installed.hashes, why_not
    assert not has_provenance(root)
    (root / "VLLM-0.16.0.DIST-INFO" / PROVENANCE).write_text("{}")
    assert has_provenance(root)


def test_a_patched_wheels_provenance_is_read_under_a_renamed_dist_info(tmp_path):
    """installed_wheel.find reads patchkit.json in a dist-info of any letter case: a damaged one is
    named (the old test passed it over and judged the tree as a stock install)."""
    root = renamed(write_tree(tmp_path / "site"), "vllm-0.16.0.Dist-Info")
    (root / "vllm-0.16.0.Dist-Info" / PROVENANCE).write_text("{}")
    with pytest.raises(BadInput, match=f"vllm-0.16.0.Dist-Info/{PROVENANCE} is damaged"):
        installed_wheel.find(root)


def test_the_launch_guard_reads_a_patched_wheels_record_under_a_renamed_dist_info(tmp_path):
    """_target/guard.py's _wheel_records: a file changed since the patched wheel was installed is a
    problem whatever the dist-info's letter case (the old test found no record: nothing to check);
    the record believed as patchkit believes it, by the version the dist-info's name gives."""
    root = write_tree(tmp_path / "site")
    dist = "VLLM-0.16.0+PATCHKIT.MINE.DIST-INFO"
    (root / "vllm-0.16.0.dist-info").rename(root / dist)
    patched = "1" * 64
    shas = {"stock_sha256": "0" * 64, "patched_sha256": patched}
    (root / dist / "patchkit").mkdir()
    (root / dist / "patchkit" / "0001-mine.patch").write_bytes(b"the patch\n")
    patches = [{"name": "0001-mine.patch", "sha256": hashlib.sha256(b"the patch\n").hexdigest()}]
    record = {"schema_version": 1, "patchkit": "0.1.0", "vllm_version": "0.16.0", "label": "patchkit.mine"}
    record |= {"set": "mine", "patches": patches, "files": {"vllm/config/spec.py": shas}}
    (root / dist / PROVENANCE).write_text(json.dumps(record))
    listed = base64.urlsafe_b64encode(bytes.fromhex(patched)).rstrip(b"=").decode()
    (root / dist / "RECORD").write_text(f"vllm/config/spec.py,sha256={listed},1\n")
    assert [p for p in target_guard.find_problems(str(root)) if p.startswith("vllm/config/spec.py was changed")]
