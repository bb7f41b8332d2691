"""`run` says what its preflight could not judge before it execs (new-user 22, M2): a `#!/bin/sh`
wrapper as `vllm` runs a tree that was never compared with --target; -q says it too, and so does a
warm run (its findings kept)."""

from __future__ import annotations

import pytest
from launch_fixtures import applied, patchkit_run, stand_in_launch


@pytest.fixture
def launch(tmp_path):
    return stand_in_launch(tmp_path)


@pytest.mark.parametrize("quiet", [(), ("-q",)])
def test_run_warns_of_a_launch_target_it_cannot_judge_before_it_execs(launch, quiet):
    tree, library, command, env, marker = launch
    applied(tree, library)
    for _cold_then_warm in range(2):
        _pid, done = patchkit_run(tree, library, command, env, *quiet)
        assert done.returncode == 7 and marker.exists(), done.stderr
        said = " ".join(done.stderr.split())
        assert "warning: launch-target: cannot judge: " in said and "`#!/bin/sh` runs /bin/sh" in said, said
        assert f"not compared with --target {tree}" in said and "hint: give --python" in said, said
        assert "vllm-validation" not in said, said  # run never asks vLLM: said by -v, not at every launch
