"""A launch whose Python starts slowly (a sitecustomize on the launch's PYTHONPATH that sleeps):
preflight asks that Python its questions within one budget shared by all of them (not one budget
each, added), and the launch-target fix names the start-up code the launch's environment adds,
not another interpreter (it is the right one)."""

from __future__ import annotations

import json
import sys
import time

from helpers import run_cli_in_process
from launch_fixtures import write_eagle3_setup, write_model

from patchkit.tree import target

BUDGET = 4.0
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "vocab_size": 32000}


def test_a_slow_start_up_is_named_as_the_fix_and_its_questions_share_one_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(target, "LAUNCH_BUDGET", BUDGET, raising=False)
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(300)\n")
    tree, library = write_eagle3_setup(tmp_path)
    model = write_model(tmp_path / "llama", LLAMA)
    launch = ["env", f"PYTHONPATH={slow}", sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model)]
    started = time.monotonic()
    done = run_cli_in_process(
        "preflight", "--no-import", "--target", tree, "--patches", library, "--format", "json", "--", *launch
    )
    took = time.monotonic() - started
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    said = found["launch-target"]
    assert not said["ok"] and f"did not finish within {BUDGET:g} s" in said["message"], said
    assert str(slow / "sitecustomize.py") in said["fix"] and "interpreter of the venv" not in said["fix"], said
    assert took < 2 * BUDGET + 15, took  # one budget for every question, not one each


def test_a_launch_python_that_did_not_start_in_time_is_not_asked_again_by_vllms_validation(tmp_path, monkeypatch):
    """The full preflight: vLLM's validation (its own budget is minutes) is not run in an environment
    whose start-up already took the launch's whole budget."""
    monkeypatch.setattr(target, "LAUNCH_BUDGET", BUDGET, raising=False)
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(300)\n")
    tree, library = write_eagle3_setup(tmp_path)
    model = write_model(tmp_path / "llama", LLAMA)
    launch = ["env", f"PYTHONPATH={slow}", sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model)]
    started = time.monotonic()
    done = run_cli_in_process(
        "preflight", "--python", sys.executable, "--target", tree, "--patches", library, "--format", "json", "--",
        *launch,
    )  # fmt: skip
    took = time.monotonic() - started
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert not found["launch-target"]["ok"], found
    assert "did not start within" in found["vllm-validation"]["message"], found["vllm-validation"]
    assert took < 2 * BUDGET + 15, took
