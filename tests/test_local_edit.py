"""A tree never applied, with a local edit inside a patch's hunk (new-user 20, 1): every command says
the series does not apply because the file differs from stock, with a fix that works; none says
"partly applied"; revert finds nothing to revert and writes nothing."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    make_patch,
    patched_spec,
    record_rows,
    run_cli,
    run_cli_read_only,
    run_cli_writing,
    snapshot,
    write_library,
)
from launch_fixtures import DEEPSEEK_V3, DRAFTER, write_model

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
EDITED = SPEC_PY.replace('    "qwen",\n', '    "qwen", "mymodel",\n')  # a model added by hand, inside the hunk


@pytest.fixture
def library(tmp_path, tree, scratch):
    patches = [
        make_patch(scratch, tree, {SPEC: patched_spec()}, "Description: accept deepseek\n"),
        make_patch(scratch, tree, {MODEL: MODEL_PY + "# eagle3\n"}, "Description: eagle3 interface\n"),
    ]
    return write_library(tmp_path / "lib", {"0.16.0": patches})


@pytest.fixture
def edited(tree, library):  # the library first: its patches are made from the stock tree
    assert EDITED != SPEC_PY
    (tree / SPEC).write_text(EDITED)
    return tree


def args(tree, library, *extra):
    return [*extra, "--target", tree, "--patches", library]


def test_status_says_the_file_differs_from_stock_not_partly_applied(run, edited, library):
    data = json.loads(run("status", *args(edited, library), "--format", "json").stdout)
    assert data["state"] == "conflict"
    assert re.search(rf" && patchkit fetch [^`]*0\.16\.0 --dest {edited} --force && patchkit apply", data["hint"]), data
    assert [p["state"] for p in data["patches"]] == ["conflict", "not-applied"]
    result = run("status", *args(edited, library))
    assert result.exit_code == 1
    assert "partial" not in result.output and "partly" not in result.output, result.output
    assert f"{SPEC} differs from stock vLLM 0.16.0" in result.output
    fix = rf"fix: keep your edit as \.mine, .*: `cp -p .* && patchkit fetch [^`]*0\.16\.0 --dest {edited} --force && patchkit apply"
    assert re.search(fix, " ".join(result.output.split())), result.output


def test_verify_offers_no_force_that_cannot_apply_a_conflict(run, edited, library):
    result = run("verify", *args(edited, library))
    assert result.exit_code == 1
    assert "partial" not in result.output and "--force" in result.output
    assert "apply --target" not in result.output.split("--force")[0].rsplit("fix:", 1)[-1]
    assert "--force` patches it" not in " ".join(result.output.split())


def test_apply_names_the_edited_file_and_the_fix(run, edited, library):
    before = snapshot(edited)
    result = run("apply", *args(edited, library))
    assert result.exit_code == 1
    said = " ".join(result.output.split())
    assert f"hint: {SPEC} differs from stock vLLM 0.16.0" in said, said
    assert re.search(rf" && patchkit fetch [^`]*0\.16\.0 --dest {edited} --force && patchkit apply", said), said
    assert snapshot(edited) == before


def test_revert_of_a_tree_never_applied_has_nothing_to_revert_and_writes_nothing(run, edited, library):
    before = snapshot(edited)
    result = run("revert", *args(edited, library))
    assert result.exit_code == 0, result.output
    assert "nothing to revert" in result.output and "lost" not in result.output
    assert not (edited / ".patchkit").exists()
    assert snapshot(edited) == before


def test_a_partly_applied_series_is_still_partial(run, tree, library):
    """The other side: one patch applied and the other's file edited is partly applied (vLLM's
    RECORD shows the applied file is not stock; without it, it may be upstream's: test_upstream_reached)."""
    dist = "vllm-0.16.0.dist-info"
    (tree / dist / "RECORD").write_text(record_rows(tree, dist))
    (tree / SPEC).write_text(patched_spec())
    (tree / MODEL).write_text(MODEL_PY.replace("class Model", "class Model  # edited", 1))
    data = json.loads(run("status", *args(tree, library), "--format", "json").stdout)
    assert data["state"] == "partial", data


@pytest.fixture(scope="module")
def stock(tmp_path_factory) -> Path:
    """vLLM 0.16.0's files as `fetch 0.16.0 --dest` lays them out, and the two models of a launch."""
    base = tmp_path_factory.mktemp("local-edit")
    done = run_cli("fetch", "0.16.0", "--dest", base / "stock")
    assert done.returncode == 0, done.stderr
    write_model(base / "models" / "dsv3", DEEPSEEK_V3)
    write_model(base / "models" / "drafter", DRAFTER)
    return base


@pytest.mark.release
def test_preflight_judges_the_launch_on_what_the_fix_of_the_local_edit_leaves(stock, tmp_path):
    """A model added by hand to the EAGLE-3 whitelist of a tree never applied: the tree-state said
    "partly applied" and the whitelist "serve it without --speculative-config"; the stock file back
    and apply make the launch pass. Every failure's fix is that one, and it works pasted."""
    tree = tmp_path / "edited"
    shutil.copytree(stock / "stock", tree)
    spec = tree / "vllm/config/speculative.py"
    text = spec.read_text()
    assert '"hunyuan_v1_dense",' in text
    spec.write_text(text.replace('"hunyuan_v1_dense",', '"hunyuan_v1_dense", "mymodel",', 1))
    launch = ["vllm", "serve", str(stock / "models/dsv3"), "-tp", "4", "--speculative-config"]
    launch.append(f'{{"method":"eagle3","model":"{stock}/models/drafter","num_speculative_tokens":3}}')
    done = run_cli_read_only("preflight", "--target", tree, "--no-import", "--format", "json", "--", *launch)
    assert done.returncode == 1, done.stdout + done.stderr
    found = json.loads(done.stdout)
    failed = {f["check"]: f for f in found["findings"] if not f["ok"] and f["result"] == "fail"}
    assert found["tree_state"] == "conflict" and set(failed) == {"tree-state", "whitelist"}, failed
    assert "partly" not in failed["tree-state"]["message"]
    fix = {f["fix"] for f in failed.values()}
    assert len(fix) == 1 and f" && patchkit fetch --set eagle3 0.16.0 --dest {tree} --force && " in fix.pop(), failed
    assert run_cli("fetch", "0.16.0", "--dest", tree, "--force").returncode == 0
    assert run_cli_writing("apply", "--target", tree).returncode == 0
    assert run_cli_read_only("preflight", "--target", tree, "--no-import", "--", *launch).returncode == 0


@pytest.mark.release
def test_the_fix_is_one_command_that_pasted_keeps_the_edit_and_applies(stock, tmp_path):
    """words30 item 8: the fix said "copy your edit of that file elsewhere, run `…` (the stock files
    back), then `…`": a chore, not a command. It is one command now; run step by step as a shell runs
    `a && b && c`, it keeps the edit beside the file and leaves the tree applied."""
    tree = tmp_path / "edited"
    shutil.copytree(stock / "stock", tree)
    spec = tree / "vllm/config/speculative.py"
    edit = spec.read_text().replace('"hunyuan_v1_dense",', '"hunyuan_v1_dense", "mymodel",', 1)
    spec.write_text(edit)
    done = run_cli_read_only("status", "--target", tree, "--format", "json")
    [line] = re.findall(r"`([^`]+)`", json.loads(done.stdout)["hint"])
    steps = [shlex.split(step) for step in line.split(" && ")]
    assert [step[:2] for step in steps] == [["cp", "-p"], ["patchkit", "fetch"], ["patchkit", "apply"]], steps
    subprocess.run(steps[0], check=True)
    for step in steps[1:]:
        done = run_cli(*step[1:])
        assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / "vllm/config/speculative.py.mine").read_text() == edit
    assert json.loads(run_cli_read_only("status", "--target", tree, "--format", "json").stdout)["state"] == "applied"
