"""launch26: issue 20/22, preflight and run answers that must be true.

1. newuser16 5: a launch on a stock tree gets one fix that applies the sets it needs together
   (`apply --set A --set B`), not a line per set and a third that applies every set.
2. newuser16 2: `--target PATCHED --python P` where the launch runs P's own, stock vLLM: that vLLM's
   state is judged (FAILED, fix `apply --python P`), not "ok" for the patched tree it never imports.
"""

from __future__ import annotations

import json
import shlex
import sys

import pytest
from helpers import make_patch, run_cli, run_cli_judged, run_cli_read_only, run_cli_writing, write_library
from importable_vllm import venv_importing, write_refusing_engine_args
from launch_fixtures import (
    DEEPSEEK_V3,
    DRAFTER,
    KIMI_K25,
    TOOLS,
    declare,
    eagle3_and_tools,  # noqa: F401  (the fixture `setup`)
    serve,
    write_eagle3_setup,
    write_model,
)

OTHER = "vllm/other_feature.py"


@pytest.fixture
def three(setup, tmp_path):
    """(tree, library, launch): eagle3 and `tools`, which the launch needs, and `other`, which it
    does not; none applied."""
    tree, lib, target, drafter = setup
    (tree / OTHER).write_text("on = False\n")
    write_library(lib, {"0.16.0": [make_patch(tmp_path, tree, {OTHER: "on = True\n"})]}, name="other", upstream=None)
    declare(lib / "other", 'tool_call_parsers = ["elsewhere"]')
    (lib / "library.toml").write_text('order = ["eagle3", "tools", "other"]\n')
    return tree, lib, serve(target, drafter, *TOOLS)


def fixes(done) -> set[str | None]:
    """The fixes of the failed findings that apply something."""
    return {f["fix"] for f in json.loads(done.stdout)["findings"] if not f["ok"] and "apply" in (f["fix"] or "")}


def applying(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("fix") and "apply" in line]


def test_a_launch_on_a_stock_tree_gets_one_fix_applying_the_sets_it_needs(three):
    tree, lib, launch = three
    one = f"run `patchkit apply --target {tree} --patches {lib} --set eagle3 --set tools`"
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--no-import", "--", *launch, env={"COLUMNS": "200"}
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert applying(done.stdout) == [f"fix (all 4 above): {one}"], done.stdout
    ran = run_cli("run", "--target", tree, "--patches", lib, "--", *launch, env={"COLUMNS": "200"})
    assert ran.returncode == 1 and applying(ran.stdout) == [f"fix (all 4 above): {one}"], ran.stdout + ran.stderr
    json_done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json", "--", *launch
    )
    assert fixes(json_done) == {one}
    # as pasted: the launch then passes, and the set it does not use stays as it was
    applied = run_cli_judged(*shlex.split(one.removeprefix("run `patchkit ").removesuffix("`")))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    again = run_cli_read_only("preflight", "--target", tree, "--patches", lib, "--no-import", "--", *launch)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "not used by this launch: other (not applied)" in again.stderr


def test_a_set_every_launch_needs_keeps_the_apply_that_applies_every_set(three):
    """eagle3 without [needed_by] is needed by every launch: its fix (`apply`, every set) is not
    narrowed to a --set list that would leave it out."""
    tree, lib, launch = three
    manifest = lib / "eagle3" / "set.toml"
    manifest.write_text(manifest.read_text().replace('[needed_by]\nspeculative_methods = ["eagle3"]\n', ""))
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json", "--", *launch
    )
    assert f"run `patchkit apply --target {tree} --patches {lib}`" in fixes(done), done.stdout


def test_vllms_refusal_on_a_stock_tree_names_the_same_one_apply_not_every_set(three):
    """The validation's fix was `apply` alone: every set, `other` too, which this launch does not use."""
    tree, lib, launch = three
    write_refusing_engine_args(tree)  # --python imports the tree checked; its create_engine_config refuses eagle3
    done = run_cli_read_only(
        "preflight", "--target", tree, "--python", sys.executable, "--patches", lib, "--format", "json",
        "--", *launch, env={"PYTHONPATH": str(tree)},
    )  # fmt: skip
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert "Eagle3 is only supported" in found["vllm-validation"]["message"], done.stdout
    python = shlex.quote(sys.executable)
    assert fixes(done) == {
        f"run `patchkit apply --target {tree} --python {python} --patches {lib} --set eagle3 --set tools`"
    }


def test_a_launch_running_pythons_own_stock_vllm_fails_on_its_state_with_apply_there(tmp_path):
    patched, lib = write_eagle3_setup(tmp_path / "a")
    assert run_cli_writing("apply", "--target", patched, "--patches", lib, "--no-import").returncode == 0
    stock, _ = write_eagle3_setup(tmp_path / "b")
    script = venv_importing(stock, tmp_path / "venv")  # its python imports the stock tree's vllm
    python = script.parent / "python"
    launch = serve(write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    path = {"PATH": f"{script.parent}:/usr/bin:/bin"}  # the launch's `vllm` is the venv's own
    args = ("preflight", "--target", patched, "--python", python, "--patches", lib, "--format", "json", "--", *launch)
    done = run_cli_judged(*args, env=path)
    assert done.returncode == 1, done.stdout + done.stderr
    [state] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "tree-state" and not f["ok"]]
    assert state["message"].startswith(f"the vLLM the launch runs ({stock / 'vllm'}, --python's, not --target's): ")
    assert "not applied" in state["message"], state
    apply = f"patchkit apply --python {python} --patches {lib}"
    assert state["fix"].startswith(f"run `{apply}"), state
    ran = run_cli("run", *args[1:7], "--", *launch, env=path)
    assert ran.returncode == 1 and "not launched" in ran.stderr, ran.stdout + ran.stderr
    # as pasted (--no-import: the stand-in vLLM does not import), it patches the vLLM the launch runs
    pasted = shlex.split(state["fix"].removeprefix("run `patchkit ").removesuffix("`"))
    assert run_cli(*pasted, "--no-import").returncode == 0
    again = run_cli_judged(*args, env=path)
    assert again.returncode == 0, again.stdout + again.stderr
    # the control: the same launch through a `vllm` not on its PATH runs no vLLM: nothing said of one
    assert "the vLLM the launch runs" not in run_cli_judged(*args, env={"PATH": "/usr/bin:/bin"}).stdout


# --- 3. the drafter's vocabulary ------------------------------------------------------------------

KIMI_VOCAB, DEEPSEEK_VOCAB = 163840, 129280


@pytest.mark.parametrize(
    ("target", "drafter", "ok", "said"),
    [
        # newuser16 3: a DeepSeek-V3 drafter for Kimi-K2.5, and the reverse, passed on draft_vocab_size alone
        (KIMI_K25, {"vocab_size": DEEPSEEK_VOCAB, "draft_vocab_size": 32000}, False, "must be the target's"),
        (DEEPSEEK_V3, {"vocab_size": KIMI_VOCAB, "draft_vocab_size": 32000}, False, "must be the target's"),
        (DEEPSEEK_V3, {"vocab_size": DEEPSEEK_VOCAB + 1, "draft_vocab_size": None}, False, "must be the target's"),
        (KIMI_K25, {"vocab_size": KIMI_VOCAB, "draft_vocab_size": 32000}, True, f"target vocab_size {KIMI_VOCAB}"),
        (DEEPSEEK_V3, {"vocab_size": DEEPSEEK_VOCAB, "draft_vocab_size": None}, True, "draft_vocab_size 129280)"),
        # d2t maps each draft id into vocab_size: a larger draft vocabulary has no room there
        (DEEPSEEK_V3, {"vocab_size": DEEPSEEK_VOCAB, "draft_vocab_size": DEEPSEEK_VOCAB + 1}, False, "into which"),
        (DEEPSEEK_V3, {"vocab_size": None, "draft_vocab_size": 32000}, False, "cannot judge: drafter vocab_size none"),
    ],
)
def test_the_drafters_own_vocab_size_must_be_the_targets(tmp_path, target, drafter, ok, said):
    tree, lib = write_eagle3_setup(tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    config = {k: v for k, v in {**DRAFTER, **drafter}.items() if v is not None}
    launch = serve(write_model(tmp_path / "target", target), write_model(tmp_path / "drafter", config))
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json", "--", *launch
    )
    [found] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-vocabulary"]
    assert found["ok"] is ok and said in found["message"], found
    assert done.returncode == (0 if ok else 1), done.stdout


def test_a_tree_reinstalled_under_its_record_gets_one_apply_for_every_finding(three):
    """New-user 17, 2: vLLM reinstalled over an applied tree (the stock files back, the record and
    the guard kept): each set's `apply --set` and the guard's `apply` were three fixes, and the first
    two, pasted in order, left the guard refusing. Plain apply does what each does: one line."""
    tree, lib, launch = three
    before = {path: path.read_bytes() for path in (tree / "vllm").rglob("*.py")}
    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    for path, stock in before.items():
        path.write_bytes(stock)
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json", "--", *launch
    )
    assert done.returncode == 1, done.stdout + done.stderr
    one = f"run `patchkit apply --target {tree} --patches {lib}`"
    assert fixes(done) == {one}, done.stdout
    assert run_cli_judged(*shlex.split(one.removeprefix("run `patchkit ").removesuffix("`"))).returncode == 0
    again = run_cli_read_only("preflight", "--target", tree, "--patches", lib, "--no-import", "--", *launch)
    assert again.returncode == 0, again.stdout + again.stderr
