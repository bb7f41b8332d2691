"""One truth in every form (new-user 20, 4b and 4e): a launch check that cannot judge a file that
does not parse is "cannot judge" in the text, the JSON and the counts alike; a revert that removes a
guard no record named says so once."""

from __future__ import annotations

import json

from helpers import run_cli_read_only, run_cli_writing
from launch_fixtures import DEEPSEEK, DEEPSEEK_V3, DRAFTER, serve, write_eagle3_setup, write_model


def test_a_check_that_cannot_judge_a_file_that_does_not_parse_is_no_failure_in_json_or_counts(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    chosen = ("--target", tree, "--patches", library)
    assert run_cli_writing("apply", *chosen, "--no-import").returncode == 0
    with (tree / DEEPSEEK).open("a") as source:
        source.write("def broken(:\n")
    launch = serve(write_model(tmp_path / "dsv3", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    done = run_cli_read_only("preflight", *chosen, "--no-import", "--format", "json", "--", *launch)
    findings = json.loads(done.stdout)["findings"]  # two `models` passes: the target's weights and the drafter's
    found = {f["check"]: f for f in findings}
    judged = found["supports-eagle3"]
    assert "does not parse" in judged["message"], judged
    assert (judged["ok"], judged["result"]) == (True, "cannot judge"), judged
    assert judged["fix"], judged  # what gives it a verdict: the drift's fix
    text = run_cli_read_only("preflight", *chosen, "--no-import", "--", *launch).stdout
    failed = [f for f in findings if f["result"] == "fail"]
    assert f"{len(failed)} of {len(findings)} checks failed" in text, text
    assert "supports-eagle3 warning: cannot judge" in text, text


def test_revert_of_a_tree_with_no_record_says_the_guard_removal_once(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    chosen = ("--target", tree, "--patches", library)
    assert run_cli_writing("apply", *chosen, "--no-import").returncode == 0
    assert (tree / "patchkit_guard.py").exists()
    for name in ("state.json", "journal.json"):
        (tree / ".patchkit" / name).unlink(missing_ok=True)
    done = run_cli_writing("revert", *chosen)
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert said.count("guard") == 1 and "launch guard removed (no record named it)" in said, said
    assert not (tree / "patchkit_guard.py").exists()
