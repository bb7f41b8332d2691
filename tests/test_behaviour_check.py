"""verify runs a set's declared behaviour test (set.toml `behaviour`, patchkit/checks/behaviour.py).

A small set of the tests' own with a behaviour script that speaks the protocol (JSON on stdout; exit
0, 1 or 2): one finding per set, a line that fits 80 columns naming the split and what was lost; the
planned contents judged on a stock tree, the files as they are on an upstream one; apply never runs
it. The tool-call sets on real releases: tests/test_behaviour_release.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import BEHAVIOUR_JUDGE as JUDGE
from helpers import make_patch, make_venv, pip_install, purelib, write_library, write_tree

PARSER = "vllm/tool_parsers/demo_parser.py"
STOCK = "class DemoParser:\n    BROKEN = True\n"
FIXED = "class DemoParser:\n    BROKEN = False\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "site", "0.16.0", {PARSER: STOCK})


def library(tmp_path: Path, tree: Path, *, upstream: str | None = None, judge: str = JUDGE) -> Path:
    root = write_library(
        tmp_path / "lib",
        {"0.16.0": [make_patch(tmp_path, tree, {PARSER: FIXED})]},
        versions={"0.16.0": "==0.15.0"} if upstream else None,  # upstream overlaps no series
        upstream=upstream,
    )
    (root / "demo" / "judge.py").write_text(judge)
    manifest = root / "demo" / "set.toml"
    manifest.write_text('behaviour = "judge.py"\n' + manifest.read_text())  # before the [[releases]] tables
    return root


def behaviour_results(stdout: str) -> list[dict]:
    return [c for c in json.loads(stdout)["checks"] if c["check"] == "behaviour"]


def test_verify_of_a_stock_tree_judges_the_planned_files_and_says_so(run, tmp_path, tree):
    lib = library(tmp_path, tree)
    text = run("verify", "--target", tree, "--patches", lib)
    assert text.exit_code == 0, text.output
    assert "behaviour: 0 of 8 runs differ (stand-ins for vLLM's classes)" in text.stdout.splitlines()
    ran = (lib / "demo" / "ran").read_text()
    assert PARSER in ran and str(tree) not in ran  # a scratch copy of the planned contents
    done = run("verify", "--target", tree, "--patches", lib, "--format", "json")
    assert [(c["ok"], c["path"]) for c in behaviour_results(done.stdout)] == [(True, None)]


def test_stock_files_that_fail_name_the_split_and_what_was_lost_in_80_columns(run, tmp_path, tree):
    lib = library(tmp_path, tree, upstream=">=0.16.0")  # vLLM "ships" it: the stock file is judged
    text = run("verify", "--target", tree, "--patches", lib)
    assert text.exit_code == 1
    line = next(line for line in text.stdout.splitlines() if line.startswith("behaviour: "))
    assert line == "behaviour: 3/8 runs differ; 2 tokens per delta: call 0 lost", line
    assert "    DemoParser [one call] 2 tokens per delta: call 0 lost" in text.stdout.splitlines()
    assert str(tree / PARSER) in (lib / "demo" / "ran").read_text()  # the file as it is
    done = run("verify", "--target", tree, "--patches", lib, "--format", "json")
    [found] = behaviour_results(done.stdout)
    assert not found["ok"] and found["message"] == line.removeprefix("behaviour: ")


@pytest.mark.parametrize(
    ("judge", "said"),
    [
        ("print('no verdict here')\n", "judge.py exited 0 with no JSON verdict on its last line"),
        (
            'import json\nprint(json.dumps({"ok": True, "runs": 1, "failed": 1, "error": None}))\nexit(1)\n',
            "exited 1: its verdict says otherwise",
        ),
        (
            'import json\nprint(json.dumps({"ok": False, "runs": 0, "failed": 0, "error": "cannot load x"}))\nexit(2)\n',
            "not judged: cannot load x",
        ),
        # audit 23 W3: a verdict that judged nothing is no pass
        (
            'import json\nprint(json.dumps({"ok": True, "runs": 0, "failed": 0, "error": None}))\n',
            "exited 0: it judged nothing (no run)",
        ),
        # audit 23 W4: a pass with failures, or more failures than runs, contradicts itself
        (
            'import json\nprint(json.dumps({"ok": True, "runs": 5, "failed": 3, "failures": [], "error": None}))\n',
            "exited 0: its verdict contradicts itself",
        ),
        (
            'import json\nprint(json.dumps({"ok": False, "runs": 2, "failed": 7, "error": None}))\nexit(1)\n',
            "exited 1: its verdict contradicts itself",
        ),
    ],
)
def test_a_test_that_gives_no_verdict_is_a_warning_that_says_so(run, tmp_path, tree, judge, said):
    lib = library(tmp_path, tree, upstream=">=0.16.0", judge=judge)
    done = run("verify", "--target", tree, "--patches", lib, "--format", "json")
    [found] = behaviour_results(done.stdout)
    assert (found["ok"], found["level"]) == (False, "warning") and said in found["message"], found
    assert len("behaviour: " + found["message"]) <= 80


# audit23b N1: a failing verdict whose failure holds JSON's own values (false, a number, null)
FAILING_WITH_VALUES = (
    "import json\nprint(json.dumps({'ok': False, 'runs': 4, 'failed': 1, 'error': None, 'failures': [{'parser':"
    " 'DemoParser', 'case': 'one call', 'split': '2 tokens per delta', 'top_up': False, 'k': 2, 'lost': 'call 0 lost', 'note': None}]}))\nexit(1)\n"
)


def test_a_failing_verdict_with_false_or_a_number_in_a_failure_fails_verify(run, tmp_path, tree):
    lib = library(tmp_path, tree, upstream=">=0.16.0", judge=FAILING_WITH_VALUES)
    done = run("verify", "--target", tree, "--patches", lib, "--format", "json")
    assert done.exit_code == 1, done.output
    [found] = behaviour_results(done.stdout)
    assert (found["ok"], found["level"]) == (False, "error"), found
    assert found["message"] == "1/4 runs differ; 2 tokens per delta: call 0 lost", found


@pytest.mark.parametrize(
    ("failure", "said"),
    [("['a']", "failure 1 is a list, not an object"), ("{'top_up': [1]}", "failure 1's 'top_up' is a list")],
)
def test_a_failure_of_no_readable_shape_is_not_judged_naming_it(run, tmp_path, tree, failure, said):
    judge = (
        "import json\nprint(json.dumps({'ok': False, 'runs': 4, 'failed': 1, 'error': None,"
        f" 'failures': [{failure}]}}))\nexit(1)\n"
    )
    lib = library(tmp_path, tree, upstream=">=0.16.0", judge=judge)
    done = run("verify", "--target", tree, "--patches", lib, "--format", "json")
    [found] = behaviour_results(done.stdout)
    assert (found["ok"], found["level"]) == (False, "warning") and said in found["message"], found


def test_apply_does_not_run_the_behaviour_test(run, tmp_path, tree):
    lib = library(tmp_path, tree)
    assert run("apply", "--target", tree, "--patches", lib).exit_code == 0
    assert not (lib / "demo" / "ran").exists()
    assert run("verify", "--target", tree, "--patches", lib).exit_code == 0  # applied: the files on disk
    assert str(tree / PARSER) in (lib / "demo" / "ran").read_text()


def test_a_set_without_a_behaviour_test_has_no_such_finding(run, tmp_path, tree):
    lib = write_library(tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {PARSER: FIXED})]})
    done = run("verify", "--target", tree, "--patches", lib, "--format", "json")
    assert done.exit_code == 0 and behaviour_results(done.stdout) == []


def test_a_behaviour_test_the_set_names_must_exist(run, tmp_path, tree):
    lib = library(tmp_path, tree)
    (lib / "demo" / "judge.py").unlink()
    done = run("verify", "--target", tree, "--patches", lib)
    assert done.exit_code == 2 and "behaviour test" in done.output and "does not exist" in done.output


# The protocol's `read`: the verdict also depends on the tree's vllm/serving.py.
JUDGE_READING = JUDGE.replace(
    '"skipped": [], "failures": failures}',
    '"skipped": [], "failures": failures,\n            "read": [str(files[0].parents[1] / "serving.py")]}',
)


def test_a_verdict_with_vllms_classes_is_remembered_while_its_inputs_are_unchanged(run, tmp_path):
    """verify --python on an applied environment: the judge runs once; the next verify takes its
    verdict (said: remembered) until a file it read changes."""
    venv = tmp_path / "venv"
    make_venv(venv)
    python = venv / "bin" / "python"
    site = purelib(python)
    pip_install(site, "0.16.0", {PARSER: STOCK, "vllm/serving.py": "top_up = 'append'\n"})
    lib = library(tmp_path, write_tree(tmp_path / "base", "0.16.0", {PARSER: STOCK}), judge=JUDGE_READING)
    ran = lib / "demo" / "ran"
    assert run("apply", "--python", python, "--patches", lib).exit_code == 0

    def verify() -> str:
        done = run("verify", "--python", python, "--patches", lib, "--format", "json")
        assert done.exit_code == 0, done.output
        [found] = behaviour_results(done.stdout)
        return found["message"]

    assert verify() == "0 of 8 runs differ (vLLM's classes)" and "--installed" in ran.read_text()
    ran.unlink()
    assert verify() == "0 of 8 runs differ (vLLM's classes; remembered)" and not ran.exists()
    (site / "vllm" / "serving.py").write_text("top_up = 'replace'\n")  # a file the judge read
    assert verify() == "0 of 8 runs differ (vLLM's classes)" and ran.exists()


# With --installed, vLLM's classes do not load (as where vLLM's own imports are missing): exit 2.
JUDGE_WITHOUT_VLLM = JUDGE.replace(
    "import json, pathlib, sys\n",
    "import json, pathlib, sys\n"
    'if "--installed" in sys.argv:\n'
    "    error = f\"cannot load {sys.argv[1]}: ModuleNotFoundError: No module named 'regex_the_parser_imports'\"\n"
    '    print(json.dumps({"ok": False, "runs": 0, "failed": 0, "failures": [], "error": error}))\n'
    "    sys.exit(2)\n",
)


def test_a_pass_with_the_stand_ins_where_vllms_classes_did_not_load_says_why_in_full(run, tmp_path):
    """verify --python asked for vLLM's classes: the pass says the stand-ins judged, and the reason
    is shown whole below the line (it was cut off inside it: "vLLM's classes di…")."""
    venv = tmp_path / "venv"
    make_venv(venv)
    python = venv / "bin" / "python"
    pip_install(purelib(python), "0.16.0", {PARSER: STOCK})
    lib = library(tmp_path, write_tree(tmp_path / "base", "0.16.0", {PARSER: STOCK}), judge=JUDGE_WITHOUT_VLLM)
    assert run("apply", "--python", python, "--patches", lib).exit_code == 0

    done = run("verify", "--python", python, "--patches", lib)
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    line = next(line for line in lines if line.startswith("behaviour: "))
    assert line == "behaviour: 0 of 8 runs differ (stand-ins; vLLM's classes did not load)", line
    below = lines[lines.index(line) + 1]
    assert below == (
        "    vLLM's classes did not load: demo_parser.py does not load: "
        "ModuleNotFoundError: No module named 'regex_the_parser_imports'"
    ), below
    document = run("verify", "--python", python, "--patches", lib, "--format", "json")
    [found] = behaviour_results(document.stdout)
    assert found["ok"] and found["message"] == line.removeprefix("behaviour: ")


def test_a_verdict_after_a_flood_of_output_is_still_read(run, tmp_path, tree):
    """Audit 23 W6: only the first 16 MiB of a test's output were kept, so a failing verdict printed
    after more was lost ("no JSON verdict") and verify passed. The verdict is the output's last line."""
    flood = "for _ in range(20_000): print('y' * 1000)\n"  # 20 MB before the verdict
    lib = library(tmp_path, tree, upstream=">=0.16.0", judge=flood + JUDGE)
    done = run("verify", "--target", tree, "--patches", lib, "--format", "json")
    [found] = behaviour_results(done.stdout)
    assert (found["ok"], found["level"]) == (False, "error") and found["message"].startswith("3/8 runs differ"), found
    assert done.exit_code == 1


def test_a_flood_with_no_verdict_says_its_last_line_was_cut(run, tmp_path, tree):
    lib = library(tmp_path, tree, upstream=">=0.16.0", judge="for _ in range(17_000): print('y' * 1024, end='')\n")
    text = run("verify", "--target", tree, "--patches", lib)
    said = " ".join(text.stdout.split())
    assert "no JSON verdict on its last line (its output passed what patchkit keeps, and its last line was cut)" in said


@pytest.mark.parametrize(
    ("judge", "said"),
    [
        ("import vllm_that_is_not_here\n", "ModuleNotFoundError: No module named 'vllm_that_is_not_here'"),
        # a flood of error output first: only its end is kept, and its last line is the one shown
        (
            "import sys\nfor _ in range(3000): sys.stderr.write('e' * 1000 + '\\n')\nraise SystemExit('boom' * 100)\n",
            "it said: boomboom",
        ),
    ],
)
def test_a_test_that_crashes_is_shown_with_the_last_line_of_its_error_output(run, tmp_path, tree, judge, said):
    """Audit 23 M2: a crash was `exited 1 with no JSON verdict`, its exception sent to /dev/null."""
    lib = library(tmp_path, tree, upstream=">=0.16.0", judge=judge)
    text = run("verify", "--target", tree, "--patches", lib)
    shown = " ".join(text.stdout.split())
    assert "judge.py exited 1 with no JSON verdict on its last line; it said: " in shown, text.stdout
    assert said in shown and "eeeeeeeeee" not in shown, text.stdout


WRITING_JUDGE = (
    "import json, sys\n"
    "for name in sys.argv[1:]:\n"
    "    if name.endswith('.py'):\n"
    "        open(name, 'a').write('# judged\\n')\n"
    'print(json.dumps({"ok": True, "runs": 1, "failed": 0, "failures": [], "error": None}))\n'
)


def test_a_test_that_writes_into_the_tree_it_judges_fails_verify_naming_the_file(run, tmp_path, tree):
    """Audit 23 W5: verify said ok while the test edited the applied files; the next one found drift."""
    lib = library(tmp_path, tree, judge=WRITING_JUDGE)
    assert run("apply", "--target", tree, "--patches", lib).exit_code == 0
    done = run("verify", "--target", tree, "--patches", lib, "--format", "json")
    assert done.exit_code == 1, done.output
    [found] = behaviour_results(done.stdout)
    assert (found["ok"], found["path"]) == (False, PARSER) and "wrote into the file it judged" in found["message"]
    text = run("verify", "--target", tree, "--patches", lib)
    assert "says how to restore it" in " ".join(text.stdout.split()), text.stdout
