"""The record is readable by the user vLLM runs as, whatever the umask of patchkit's last write
(review 5 H2: a write under umask 077 left state.json 0600, and the guard refused every launch of
another user while status said ok)."""

from __future__ import annotations

import os
import stat

from helpers import SPEC_PY, make_patch, write_tree


def test_a_write_under_umask_077_leaves_the_record_readable_by_others(run, tmp_path, scratch):
    tree = write_tree(tmp_path / "site")
    first = scratch / "first.diff"
    first.write_bytes(make_patch(scratch, tree, {"vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"kimi"')}))
    assert run("apply", "--target", tree, "--patch", first).exit_code == 0
    second = scratch / "second.diff"
    second.write_bytes(make_patch(scratch, tree, {"vllm/added.py": "ADDED = 1\n"}))
    old = os.umask(0o077)
    try:
        result = run("apply", "--target", tree, "--patch", second)
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(os.stat(tree / ".patchkit" / "state.json").st_mode) == 0o644
