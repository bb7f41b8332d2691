"""`patchkit preflight` on the real files of every release the eagle3 set supports (fetched with
patchkit's fetcher), with DeepSeek-V3- and Kimi-K2.5-like configs and the seed's command shape: on the
stock files every fault is named in one run, each fixed by `patchkit apply`; after apply the launch
passes. Kimi-K2.5 (KimiK25ForConditionalGeneration) is registered from 0.15.0 on: before, the set
does not bring it, and the preflight says the architecture is not registered."""

from __future__ import annotations

import json

import pytest
from helpers import assert_clean_failure, lay_out_release, run_cli
from launch_fixtures import DEEPSEEK_V3, DRAFTER, KIMI_K25, REGISTRY, serve, write_model
from packaging.version import Version

from patchkit.releases.files import files_for

pytestmark = pytest.mark.release

RELEASES = ["0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0"]
RELEASES += ["0.17.0", "0.17.1"]
STOCK_FAULTS = {"tree-state", "whitelist", "supports-eagle3"}
KIMI_K25_SINCE = Version("0.15.0")


def failed(done) -> dict[str, dict]:
    return {f["check"]: f for f in json.loads(done.stdout)["findings"] if not f["ok"]}


@pytest.mark.parametrize("release", RELEASES)
def test_stock_release_names_every_fault_and_passes_after_apply(tmp_path, release):
    site = tmp_path / "site"
    lay_out_release(release, sorted({*files_for(release), REGISTRY}), site)
    drafter = write_model(tmp_path / "drafter", DRAFTER)
    deepseek = serve(write_model(tmp_path / "deepseek", DEEPSEEK_V3), drafter)
    kimi = serve(write_model(tmp_path / "kimi", KIMI_K25), drafter)
    kimi_registered = Version(release) >= KIMI_K25_SINCE
    preflight = ["preflight", "--target", site, "--format", "json", "--no-import", "--"]

    done = run_cli(*preflight, *deepseek)
    assert_clean_failure(done, 1)
    assert set(failed(done)) == STOCK_FAULTS
    assert {f["fix"] for f in failed(done).values()} == {f"run `patchkit apply --target {site}`"}
    done = run_cli(*preflight, *kimi)
    assert_clean_failure(done, 1)
    assert set(failed(done)) == (STOCK_FAULTS | {"image-token"} if kimi_registered else STOCK_FAULTS)

    assert run_cli("apply", "--target", site, "--no-import").returncode == 0
    done = run_cli(*preflight, *deepseek)
    assert done.returncode == 0, done.stdout
    done = run_cli(*preflight, *kimi)
    if kimi_registered:
        assert done.returncode == 0, done.stdout
    else:
        assert set(failed(done)) == {"supports-eagle3"}
        assert "does not register the target architecture KimiK25" in failed(done)["supports-eagle3"]["message"]
