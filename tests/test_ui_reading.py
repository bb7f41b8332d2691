"""Output a person reads (issue 22, the new-user trial's hard-to-read items A-J): each answer
names what it is about, says a fix once, and reads without the library's jargon."""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET

from helpers import make_patch, on_a_terminal, patched_spec, run_cli, write_library, write_tree
from launch_fixtures import DEEPSEEK_V3, DRAFTER, serve, write_eagle3_setup, write_model

SPEC = "vllm/config/spec.py"


def test_preflight_junit_is_named_after_preflight(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    launch = serve(write_model(tmp_path / "dsv3", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    done = run_cli(
        "preflight", "--target", tree, "--patches", library, "--format", "junit", "--no-import", "--", *launch
    )
    assert done.returncode == 1, done.stderr
    assert ET.fromstring(done.stdout).get("name") == "patchkit preflight"


def drawn_at(width: int, *args: object) -> tuple[int, list[str]]:
    """A command drawn in a terminal `width` columns wide: its exit code and its lines as seen."""
    code, drawn = on_a_terminal(list(args), width=width, drop_env=("COLUMNS", "LINES", "FORCE_COLOR"))
    return code, re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]|\r", "", drawn.decode()).splitlines()


def test_runs_fix_text_is_indented_under_its_fix_as_in_preflight(tmp_path, monkeypatch):
    """B: at 80 columns run's fix for a hub model ran flush-left into the next finding: only a
    line holding one whole `command` that its indent would push past the width starts further left."""
    tree, library = write_eagle3_setup(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    launch = serve("moonshotai/Kimi-K2.5", write_model(tmp_path / "drafter", DRAFTER))
    for command in (["run"], ["preflight", "--no-import"]):
        code, lines = drawn_at(80, *command, "--target", tree, "--patches", library, "--", *launch)
        assert code == 4, lines
        start = next(i for i, line in enumerate(lines) if line.startswith("  fix: preflight reads only config.json"))
        end = next(i for i in range(start + 1, len(lines)) if re.match(r"[a-z-]+( warning)?: ", lines[i]))
        fix = lines[start + 1 : end]
        assert "".join(fix).count("`") >= 6 and fix[-1].strip().endswith("or a folder with it"), lines
        flush_left = [line for line in fix if not line.startswith(" " * 7)]
        assert flush_left == ["`pipx run --spec huggingface_hub hf download moonshotai/Kimi-K2.5 config.json`),"], lines
        assert all(len(line) <= 80 for line in lines), lines


def test_an_option_run_does_not_take_is_said_as_one_not_as_a_launch(tmp_path):
    """H: `run --format json -- vllm serve x` said "not a vLLM launch: '--format'"."""
    tree, library = write_eagle3_setup(tmp_path)
    chosen = ("--target", tree, "--patches", library)
    done = run_cli("run", "--format", "json", *chosen, "--", "vllm", "serve", "x")
    assert done.returncode == 2 and "run has no --format option." in done.stderr, done.stderr
    assert "not a vLLM launch" not in done.stderr
    done = run_cli("preflight", "--apply", *chosen, "--", "vllm", "serve", "x")
    assert done.returncode == 2 and "preflight has no --apply option (run takes it)." in done.stderr, done.stderr


def test_an_option_another_command_takes_names_the_commands_that_take_it(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    done = run_cli("status", "--dry-run", "--target", tree, "--patches", library)
    assert done.returncode == 2
    assert re.search(r"status has no --dry-run option \((\w+, )*apply(, \w+)* take it\)\.", done.stderr), done.stderr


def test_deleting_the_saved_edits_as_said_leaves_no_folder_in_the_tree(tmp_path, scratch):
    """J: after `revert --force`, the printed `rm -r .patchkit/saved` left an empty .patchkit/."""
    tree = write_tree(tmp_path / "site")
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})
    chosen = ("--target", tree, "--patches", library)
    assert run_cli("apply", *chosen).returncode == 0
    (tree / SPEC).write_text(patched_spec() + "# my edit\n")
    done = run_cli("revert", "--force", *chosen)
    assert done.returncode == 0, done.stderr
    command = re.search(r"`(rm -r [^`]+)` deletes them once not wanted", " ".join(done.stderr.split()))
    assert command, done.stderr
    subprocess.run(command.group(1), shell=True, check=True)
    assert sorted(p.name for p in tree.iterdir()) == sorted(p.name for p in write_tree(tmp_path / "fresh").iterdir())
