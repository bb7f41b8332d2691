"""A tree pip moved to a release no set covers (a downgrade below the library's range) under a record of
another release: the launch guard refuses every launch, so the commands say so and name the revert that
removes the record and the guard with it, not only `patchkit list`."""

from __future__ import annotations

import shutil

import pytest
from helpers import make_patch, patched_spec, run_cli_read_only, run_cli_writing, write_library, write_tree

REFUSED = "the launch guard refuses this tree"


def downgraded(tmp_path, names: tuple[str, ...]):
    stock = write_tree(tmp_path / "stock")
    patch = make_patch(tmp_path, stock, {"vllm/config/spec.py": patched_spec()})
    for name in names:  # the other set has a series of another release only
        first = name == names[0]
        supported = ">=0.11.0" if first else ">=0.15.0,<0.16.0"
        library = write_library(
            tmp_path / "lib", {"0.16.0" if first else "0.15.0": [patch]}, name=name, supported=supported
        )
    site = write_tree(tmp_path / "site")
    assert run_cli_writing("apply", "--target", site, "--patches", library).returncode == 0
    shutil.move(site / "vllm-0.16.0.dist-info", site / "vllm-0.10.0.dist-info")
    metadata = site / "vllm-0.10.0.dist-info" / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.16.0", "Version: 0.10.0"))
    return site, library


@pytest.mark.parametrize("names", [("demo",), ("demo", "other")])
def test_status_and_verify_name_the_revert_the_guard_waits_for(tmp_path, names):
    site, library = downgraded(tmp_path, names)
    for command in ("status", "verify"):
        done = run_cli_read_only(command, "--target", site, "--patches", library)
        assert done.returncode == 3, done.stdout + done.stderr
        assert REFUSED in done.stderr and "vLLM 0.10.0 is installed, but the patches were applied" in done.stderr
        assert f"`patchkit revert --target {site} --patches {library}`" in done.stderr, done.stderr
    assert run_cli_writing("revert", "--target", site, "--patches", library).returncode == 0
    done = run_cli_read_only("status", "--target", site, "--patches", library)
    assert done.returncode == 3 and REFUSED not in done.stderr, done.stderr
