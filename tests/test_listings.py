"""One walk of the installed distributions' RECORDs answers both questions a rollback and a revert
ask of a file patchkit says it created: does vLLM list it, does another distribution."""

from __future__ import annotations

import os
from pathlib import Path

from patchkit.distinfo.record import listings

SHA = "sha256=" + "A" * 43


def _dist(tree: Path, name: str, rows: list[str]) -> None:
    (tree / name).mkdir(parents=True, exist_ok=True)
    (tree / name / "RECORD").write_text("".join(row + "\n" for row in rows))


def test_another_distributions_files_outside_vllm_are_theirs_with_or_without_a_hash(tmp_path):
    _dist(tmp_path, "torch-2.0.dist-info", [f"torch/a.py,{SHA},1", "torch/b.py,,", f"vllm/x.py,{SHA},1"])
    _dist(tmp_path, "patchkit_guard-1.dist-info", [f"patchkit_guard.py,{SHA},1"])
    listed = listings(tmp_path, ["torch/a.py", "torch/b.py", "vllm/x.py", "patchkit_guard.py", "mine.py"])
    assert listed.by_others() == {"torch/a.py", "torch/b.py"}  # never vllm/, never the guard's own
    assert listed.by_vllm() == set()


def test_vllms_files_need_a_hash_wheels_allow_and_the_installed_version_picks_its_record(tmp_path):
    _dist(tmp_path, "vllm-0.16.0.dist-info", [f"vllm/old.py,{SHA},1", "vllm/md5.py,md5=abc,1", "vllm/bare.py,,"])
    _dist(tmp_path, "vllm-0.17.0.dist-info", [f"vllm/new.py,{SHA},1"])
    paths = ["vllm/old.py", "vllm/md5.py", "vllm/bare.py", "vllm/new.py"]
    listed = listings(tmp_path, paths)
    assert listed.by_vllm() == {"vllm/old.py", "vllm/new.py"}  # every installed vLLM's (a rollback)
    assert listed.by_vllm("0.17.0") == {"vllm/new.py"}
    assert listed.by_vllm("0.15.0") == {"vllm/old.py"}  # none of its own: the first, as find_record chooses
    assert listed.by_others() == set()


def test_an_unreadable_record_lists_nothing_and_still_counts_as_the_first(tmp_path):
    _dist(tmp_path, "vllm-0.17.0.dist-info", [f"vllm/new.py,{SHA},1"])
    (tmp_path / "vllm-0.16.0.dist-info").mkdir()
    os.mkfifo(tmp_path / "vllm-0.16.0.dist-info" / "RECORD")  # never opened for reading: no hang
    listed = listings(tmp_path, ["vllm/new.py"])
    assert listed.by_vllm() == {"vllm/new.py"}
    assert listed.by_vllm("0.15.0") == set()  # find_record's first candidate is the unreadable one


def test_no_paths_reads_no_record(tmp_path):
    _dist(tmp_path, "torch-2.0.dist-info", [f"torch/a.py,{SHA},1"])
    assert listings(tmp_path, []).rows == {}


def test_only_a_record_that_can_answer_is_read(tmp_path):
    """Files a patch adds under vllm/ ask vLLM alone: the other distributions' RECORDs (hundreds in
    a real environment) and the guard's are not read."""
    _dist(tmp_path, "vllm-0.17.0.dist-info", [f"vllm/new.py,{SHA},1"])
    _dist(tmp_path, "torch-2.0.dist-info", [f"torch/a.py,{SHA},1"])
    _dist(tmp_path, "patchkit_guard-1.dist-info", [f"patchkit_guard.py,{SHA},1"])
    assert set(listings(tmp_path, ["vllm/new.py"]).rows) == {"vllm-0.17.0.dist-info"}
    assert set(listings(tmp_path, ["vllm/new.py", "torch/a.py"]).rows) == {
        "vllm-0.17.0.dist-info",
        "torch-2.0.dist-info",
    }
