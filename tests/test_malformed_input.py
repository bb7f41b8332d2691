"""Malformed input from a patch or a library, refused cleanly or shown harmlessly (issue 10, defects 3, 12)."""

from __future__ import annotations

from helpers import SPEC_PY, assert_clean_failure, make_patch, patched_spec, run_cli, snapshot, write_tree


def test_a_corrupt_hunk_header_after_a_good_file_is_refused_and_nothing_is_written(tmp_path):
    tree = write_tree(tmp_path / "site")
    model = (tree / "vllm/models/model.py").read_text()
    raw = make_patch(
        tmp_path, tree, {"vllm/config/spec.py": patched_spec(), "vllm/models/model.py": model + "\nLATE = 1\n"}
    )
    lines = raw.split(b"\n")
    second = [i for i, line in enumerate(lines) if line.startswith(b"@@ -")][1]
    lines[second] = lines[second].replace(b" @@", b" @", 1)  # "@@ -6,0 +7,2 @" : git calls it corrupt
    (tmp_path / "bad.patch").write_bytes(b"\n".join(lines))
    before = snapshot(tree)
    done = run_cli("apply", "--target", tree, "--patch", tmp_path / "bad.patch")
    assert_clean_failure(done, 2)
    assert f"bad.patch: malformed diff: line {second + 1}: corrupt hunk header" in done.stderr + done.stdout
    assert snapshot(tree) == before
    assert SPEC_PY == (tree / "vllm/config/spec.py").read_text()
