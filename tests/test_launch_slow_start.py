"""A launch whose Python starts slowly (a sitecustomize on the launch's PYTHONPATH that sleeps):
preflight asks that Python each question within its own time, all of them within one budget, and
one whose start-up did not end in time is not asked again (not one budget each, added); and the launch-target fix names the start-up code the launch's environment adds,
not another interpreter (it is the right one)."""

from __future__ import annotations

import json
import sys
import time

import pytest
from helpers import run_cli_in_process
from launch_fixtures import write_eagle3_setup, write_model

from patchkit.tree import target

BUDGET = 4.0
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "vocab_size": 32000}


def slow_launch(tmp_path, monkeypatch):
    """A BUDGET-second question time, and a launch whose PYTHONPATH's sitecustomize never ends:
    (its directory, the tree, the library, the launch)."""
    monkeypatch.setattr(target, "LAUNCH_QUESTION", BUDGET)
    monkeypatch.setattr(target, "LAUNCH_BUDGET", 3 * BUDGET)
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(300)\n")
    tree, library = write_eagle3_setup(tmp_path)
    model = write_model(tmp_path / "llama", LLAMA)
    launch = ["env", f"PYTHONPATH={slow}", sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model)]
    return slow, tree, library, launch


def test_a_slow_start_up_is_named_as_the_fix_and_its_questions_share_one_budget(tmp_path, monkeypatch):
    slow, tree, library, launch = slow_launch(tmp_path, monkeypatch)
    started = time.monotonic()
    done = run_cli_in_process(
        "preflight", "--no-import", "--target", tree, "--patches", library, "--format", "json", "--", *launch
    )
    took = time.monotonic() - started
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    said = found["launch-target"]
    assert not said["ok"] and f"within {BUDGET:g} s" in said["message"], said
    assert str(slow / "sitecustomize.py") in said["fix"] and "interpreter of the venv" not in said["fix"], said
    assert took < 2 * BUDGET + 15, took  # one budget for every question, not one each


def test_a_launch_python_that_did_not_start_in_time_is_not_asked_again_by_vllms_validation(tmp_path, monkeypatch):
    """The full preflight: vLLM's validation (its own budget is minutes) is not run in an environment
    whose start-up already took the launch's whole budget."""
    _, tree, library, launch = slow_launch(tmp_path, monkeypatch)
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


def test_a_start_up_slower_than_half_a_question_s_time_is_asked_every_question(monkeypatch):
    """review36 W6: one 60 s budget for every question failed a start-up of 31-60 s (each question
    runs the start-up again): vLLM starts such a launch, late. Each question has its own time, and
    all of them one larger budget."""
    now = [1000.0]
    monkeypatch.setattr(target.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(target, "_LAUNCH_DEADLINES", {})
    ask = ("/venv/bin/python", {"PYTHONPATH": "/slow"}, [], "/")
    assert target._launch_timeout(*ask, 60) == 60
    now[0] += 35  # the first question's start-up took 35 s
    assert target._launch_timeout(*ask, 60) == 60 and target._launch_timeout(*ask, 30) == 30
    now[0] += 35 + 35 + 60  # three more
    assert target._launch_timeout(*ask, 60) == target.LAUNCH_BUDGET - 165
    now[0] += 60
    with pytest.raises(target.WorkerFailed, match="did not finish its answers within the 180 s they share"):
        target._launch_timeout(*ask, 60)
