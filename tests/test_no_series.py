"""A vLLM inside a set's supported range for which the set has no series (a 0.16.1, a 0.16.0.1, a
build between releases no series fits): the set is never dropped in silence. A launch that needs
it fails tree-state, its launch checks run on the files as they are, and `run` (with `--apply`
too) launches nothing; `apply` refuses before writing, naming the set and `--set` for the others;
status and verify fail while an apply of the tree still chose it.

The trees are real vLLM 0.16.0 stock files (fetched), their METADATA relabelled: what an
installed 0.16.1 holds is not known, and 0.16.0's files fail every eagle3 check unpatched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import lay_out_release, run_cli, run_cli_read_only, run_cli_writing, snapshot
from launch_fixtures import DEEPSEEK_V3, DRAFTER, REGISTRY, serve, write_model

from patchkit.releases.files import files_for

pytestmark = pytest.mark.release

STOCK = "0.16.0"
GAPS = ["0.16.1", "0.16.0.1", "0.15.2.dev5+gabc1234"]  # eagle3 and kimi-k2-tool-calls have no series of these
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "vocab_size": 32000}
TOOL_PARSERS = "vllm/tool_parsers/__init__.py"


def relabelled(tmp_path: Path, version: str) -> Path:
    """vLLM 0.16.0's stock files under a dist-info that says `version`."""
    site = tmp_path / "site"
    lay_out_release(STOCK, sorted({*files_for(STOCK), REGISTRY, TOOL_PARSERS}), site)
    metadata = site / f"vllm-{STOCK}.dist-info/METADATA"
    metadata.write_text(metadata.read_text().replace(f"Version: {STOCK}\n", f"Version: {version}\n", 1))
    return site


def stand_in_vllm(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH starts with a `vllm` that leaves a marker when it runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f"#!/bin/sh\ntouch {tmp_path / 'launched'}\n")
    (bin_dir / "vllm").chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def failed(done) -> dict[str, str]:
    return {f["check"]: f["message"] for f in json.loads(done.stdout)["findings"] if not f["ok"]}


@pytest.mark.parametrize("version", GAPS)
def test_an_eagle3_launch_on_a_release_without_its_series_fails_and_is_not_launched(tmp_path, version):
    site = relabelled(tmp_path, version)
    launch = serve(write_model(tmp_path / "ds", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    done = run_cli_read_only("preflight", "--target", site, "--no-import", "--format", "json", "--", *launch)
    assert done.returncode == 1, done.stdout + done.stderr
    found = failed(done)
    assert "eagle3" in found["tree-state"], found
    # the set's launch checks ran on the installed (stock) files, as they do on an upstream release
    assert {"whitelist", "supports-eagle3"} <= set(found), found
    fix = next(f["fix"] for f in json.loads(done.stdout)["findings"] if f["check"] == "tree-state")
    assert "install vLLM" in fix and "patchkit port" in fix, fix

    env = stand_in_vllm(tmp_path)
    before = snapshot(site)
    for run in (["run"], ["run", "--apply"]):
        done = run_cli(*run, "--target", site, "--", *launch, env=env)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "no series of" in done.stdout + done.stderr
        assert not (tmp_path / "launched").exists()
    assert snapshot(site) == before and not (site / ".patchkit").exists()  # run --apply wrote nothing


def test_a_kimi_tool_call_launch_on_a_release_without_its_series_fails(tmp_path):
    site = relabelled(tmp_path, "0.16.1")
    model = write_model(tmp_path / "llama", LLAMA)
    launch = ["vllm", "serve", str(model), "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2"]
    done = run_cli_read_only("preflight", "--target", site, "--no-import", "--format", "json", "--", *launch)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "kimi-k2-tool-calls" in failed(done)["tree-state"]


def test_preflight_of_another_set_names_the_needed_set_it_leaves_out(tmp_path):
    site = relabelled(tmp_path, "0.16.1")
    launch = serve(write_model(tmp_path / "ds", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    done = run_cli_read_only(
        "preflight", "--target", site, "--set", "deepseek-tool-calls", "--no-import", "--format", "json", "--", *launch
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "eagle3" in failed(done)["tree-state"]


def test_apply_refuses_before_writing_and_names_the_sets_then_status_and_verify(tmp_path):
    site = relabelled(tmp_path, "0.16.1")
    before = snapshot(site)
    for dry in ([], ["--dry-run"]):
        done = run_cli_writing("apply", "-q", "--target", site, "--no-import", *dry)
        assert done.returncode == 1, done.stdout + done.stderr
        said = done.stdout + done.stderr
        assert "no series of eagle3" in said and "no series of kimi-k2-tool-calls" in said, said
        assert "--set deepseek-tool-calls" in said, said
    done = run_cli_writing("apply", "--target", site, "--set", "eagle3", "--set", "deepseek-tool-calls", "--no-import")
    assert done.returncode == 1 and "no series of eagle3" in done.stderr, done.stdout + done.stderr
    assert snapshot(site) == before and not (site / ".patchkit").exists()

    # no apply chose a set yet: apply's default (every covering set) cannot make the tree safe
    for command in (["status"], ["verify", "--no-import"]):
        done = run_cli(*command, "--target", site)
        assert done.returncode == 1, (command, done.stdout + done.stderr)
        assert "no series of eagle3" in done.stdout + done.stderr
    document = json.loads(run_cli_read_only("status", "--target", site, "--format", "json").stdout)
    assert document["no_series"] == ["eagle3", "kimi-k2-tool-calls"]
    assert "--set deepseek-tool-calls" in document["hint"]

    # the fix status names: the others alone; the sets it leaves out are then a note
    done = run_cli_writing("apply", "-q", "--target", site, "--set", "deepseek-tool-calls", "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr
    for command in (["status"], ["verify", "--no-import"]):
        done = run_cli(*command, "--target", site)
        assert done.returncode == 0, (command, done.stdout + done.stderr)
        assert "eagle3" in done.stderr  # still said, as a note


def test_one_set_named_on_a_release_without_its_series_names_the_nearest_and_the_port(tmp_path):
    """`status --set eagle3` (one set: exit 3, no series) says which releases have one and how a
    maintainer adds this one, not the set's every release."""
    site = relabelled(tmp_path, "0.16.1")
    done = run_cli_read_only("status", "--target", site, "--set", "eagle3")
    assert done.returncode == 3, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "0.16.0, 0.17.0" in said and "`patchkit port --set eagle3 --from 0.16.0 --to 0.16.1`" in said, said
