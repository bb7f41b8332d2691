"""`patchkit preflight` on the real 0.16.0 files (fetched with patchkit's fetcher), with DeepSeek-V3-
and Kimi-K2.5-like configs: on the stock files every fault is named; after apply the launch passes."""

from __future__ import annotations

import json

import pytest
from helpers import assert_clean_failure, run_cli
from launch_fixtures import DEEPSEEK_V3, DRAFTER, KIMI_K25, REGISTRY, serve, write_model

from patchkit.fetch import release_tree
from patchkit.release_files import files_for, lay_out

pytestmark = pytest.mark.release


def failed(done) -> set[str]:
    return {f["check"] for f in json.loads(done.stdout)["findings"] if not f["ok"]}


@pytest.mark.parametrize(
    ("config", "faults"),
    [
        (DEEPSEEK_V3, {"tree-state", "whitelist", "supports-eagle3"}),
        (KIMI_K25, {"tree-state", "whitelist", "supports-eagle3", "image-token"}),
    ],
)
def test_real_0_16_0_stock_names_every_fault_and_passes_after_apply(tmp_path, config, faults):
    site = tmp_path / "site"
    lay_out(release_tree("0.16.0", sorted({*files_for("0.16.0"), REGISTRY})), str(site))
    command = serve(write_model(tmp_path / "target", config), write_model(tmp_path / "drafter", DRAFTER))
    preflight = ["preflight", "--target", site, "--format", "json", "--no-import", "--"]

    done = run_cli(*preflight, *command)
    assert_clean_failure(done, 1)
    assert failed(done) == faults

    assert run_cli("apply", "--target", site, "--no-import").returncode == 0
    done = run_cli(*preflight, *command)
    assert done.returncode == 0, done.stdout
