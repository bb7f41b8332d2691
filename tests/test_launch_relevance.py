"""Which sets a launch needs (set.toml's [needed_by]): preflight and run require, and `run --apply`
applies, exactly those; another set's state is at most a one-line note (new-user trial 12, item 3).
With the launch guard off in the launch, its refusal for a set the launch does not need is a note
too; with the guard on, it stands (review 8 launch-guard M2). Fast tier: the launch tests' eagle3
set and a `tools` set patching a tool parser, on a small tree."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from helpers import run_cli, run_cli_judged, run_cli_read_only, run_cli_writing
from launch_fixtures import (
    PARSER,
    SPEC,
    TOOLS,
    declare,
    eagle3_and_tools,  # noqa: F401  (the fixture `setup`)
    serve,
)

from patchkit.base.errors import BadInput
from patchkit.series.library import load_set
from patchkit.store.state import read_state


def preflight(tree: Path, lib: Path, launch: list[str], *options: str):
    """In this process: read-only, judged by its output and exit code alone (CONTRIBUTING)."""
    done = run_cli_read_only("preflight", "--target", tree, "--patches", lib, "--no-import", *options, "--", *launch)
    return done, json.loads(done.stdout) if "json" in options else None


def failed(document: dict) -> list[str]:
    return [f["message"] for f in document["findings"] if not f["ok"]]


def test_an_eagle3_launch_on_an_eagle3_only_tree_passes_with_a_note(setup):
    tree, lib, target, drafter = setup
    assert (
        run_cli_writing("apply", "--target", tree, "--patches", lib, "--set", "eagle3", "--no-import").returncode == 0
    )
    done, document = preflight(tree, lib, serve(target, drafter), "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert document["unused_sets"] == {"tools": "not applied"}
    text, _ = preflight(tree, lib, serve(target, drafter))
    assert text.returncode == 0, text.stdout + text.stderr
    notes = [line for line in text.stderr.splitlines() if "tools" in line]
    assert notes == ["note: not used by this launch: tools (not applied)"], text.stderr


def test_a_tool_parser_launch_on_that_tree_fails_naming_the_set_and_its_apply(setup):
    tree, lib, target, _ = setup
    assert (
        run_cli_writing("apply", "--target", tree, "--patches", lib, "--set", "eagle3", "--no-import").returncode == 0
    )
    launch = ["vllm", "serve", str(target), *TOOLS]
    done, document = preflight(tree, lib, launch, "--format", "json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert failed(document) == ["the tools series is not applied to vLLM 0.16.0"]
    text, _ = preflight(tree, lib, launch)
    assert text.returncode == 1 and f"`patchkit apply --target {tree} --patches {lib} --set tools`" in text.stdout, (
        text.stdout + text.stderr
    )
    # eagle3 applied, and not needed by this launch: no note (nothing to say of it)
    assert document["unused_sets"] == {} and "not used by this launch" not in text.stderr


def test_both_combined_need_both_and_a_stock_tree_names_each_with_its_set(setup):
    tree, lib, target, drafter = setup
    launch = serve(target, drafter, *TOOLS)
    stock, document = preflight(tree, lib, launch, "--format", "json")
    assert stock.returncode == 1
    trees = [f["message"] for f in document["findings"] if f["check"] == "tree-state"]
    assert trees == [
        "the eagle3 series is not applied to vLLM 0.16.0",
        "the tools series is not applied to vLLM 0.16.0",
    ]
    assert (
        run_cli_writing("apply", "--target", tree, "--patches", lib, "--set", "eagle3", "--no-import").returncode == 0
    )
    half, document = preflight(tree, lib, launch, "--format", "json")
    assert half.returncode == 1 and failed(document) == ["the tools series is not applied to vLLM 0.16.0"]
    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    done, document = preflight(tree, lib, launch, "--format", "json")
    assert done.returncode == 0 and document["unused_sets"] == {}, done.stdout + done.stderr


def test_every_set_judged_shows_its_tree_state_pass_in_json_and_with_v(setup):
    """New-user 17, 4: an eagle3 + tool-parser launch on a tree with both sets applied showed one
    tree-state pass (eagle3's), in the -v table and the JSON findings: the tools set, judged, had
    none. Each set's pass is shown; beside the other's failure too."""
    tree, lib, target, drafter = setup
    launch = serve(target, drafter, *TOOLS)
    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    done, document = preflight(tree, lib, launch, "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    trees = [(f["ok"], f["message"]) for f in document["findings"] if f["check"] == "tree-state"]
    assert trees == [
        (True, "the eagle3 series is applied to vLLM 0.16.0, no drift"),
        (True, "the tools series is applied to vLLM 0.16.0, no drift"),
    ], trees
    verbose, _ = preflight(tree, lib, launch, "-v")
    rows = [" ".join(line.split()) for line in verbose.stdout.splitlines() if line.startswith("tree-state")]
    assert len(rows) == 2 and all("pass" in row for row in rows), verbose.stdout
    assert "eagle3 series" in rows[0] and "tools series" in rows[1], rows

    (tree / PARSER).write_text((tree / PARSER).read_text() + "# tuned\n")
    _, document = preflight(tree, lib, launch, "--format", "json")
    trees = [(f["ok"], f["message"]) for f in document["findings"] if f["check"] == "tree-state"]
    assert (True, "the eagle3 series is applied to vLLM 0.16.0, no drift") in trees, trees
    assert any(not ok and PARSER in message for ok, message in trees), trees


def test_a_launch_that_needs_neither_set_passes_on_a_stock_tree(setup):
    tree, lib, target, _ = setup
    done, document = preflight(tree, lib, ["vllm", "serve", str(target)], "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert document["unused_sets"] == {"eagle3": "not applied", "tools": "not applied"}


def test_run_refuses_and_run_apply_applies_only_the_sets_the_launch_needs(setup, tmp_path):
    tree, lib, target, drafter = setup
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}  # exec fails with exit 4: it got that far
    tools_launch = ["vllm", "serve", str(target), *TOOLS]
    refused = run_cli("run", "--target", tree, "--patches", lib, "--", *tools_launch, env=no_vllm)
    assert refused.returncode == 1 and "the tools series is not applied" in refused.stdout, refused.stdout

    eagle = run_cli("run", "--apply", "--target", tree, "--patches", lib, "--", *serve(target, drafter), env=no_vllm)
    assert eagle.returncode == 4 and "cannot run vllm" in eagle.stderr, eagle.stdout + eagle.stderr
    assert [e.set_name for e in read_state(tree).entries] == ["eagle3"]
    assert "note: not used by this launch: tools (not applied)" in eagle.stderr, eagle.stderr

    tools = run_cli("run", "--apply", "--target", tree, "--patches", lib, "--", *tools_launch, env=no_vllm)
    assert tools.returncode == 4 and "cannot run vllm" in tools.stderr, tools.stdout + tools.stderr
    assert [e.set_name for e in read_state(tree).entries] == ["eagle3", "tools"]


@pytest.mark.parametrize(
    ("how", "passes"),
    [
        ([], False),
        (["env", "PATCHKIT_GUARD=off"], True),
        (["env", "PATCHKIT_GUARD=warn"], True),
        (["env", "VLLM_PLUGINS="], True),
        (["env", "VLLM_PLUGINS=other"], True),
        (["env", "VLLM_PLUGINS=other,patchkit_guard"], False),
        (["env", "PATCHKIT_GUARD=on"], False),
    ],
)
def test_the_guards_refusal_for_a_set_the_launch_does_not_need_is_a_note_when_the_guard_is_off(setup, how, passes):
    tree, lib, target, drafter = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    with open(tree / PARSER, "a") as edited:
        edited.write("# a user's edit\n")
    for narrowed in ((), ("--set", "eagle3")):
        done, document = preflight(tree, lib, [*how, *serve(target, drafter)], *narrowed, "--format", "json")
        if passes:
            assert done.returncode == 0, done.stdout + done.stderr
            assert document["unused_sets"] == {"tools": f"changed after apply: {PARSER}"}
        else:
            assert done.returncode == 1, done.stdout + done.stderr
            assert failed(document) == [
                f"the launch guard refuses this tree: {PARSER} was changed after patchkit patched it"
            ]
    # a launch that needs the drifted set fails on its drift, guard or not
    own, document = preflight(tree, lib, [*how, "vllm", "serve", str(target), *TOOLS], "--format", "json")
    assert own.returncode == 1 and any(PARSER in message for message in failed(document)), own.stdout


def test_a_set_without_a_rule_is_needed_by_every_launch(setup):
    tree, lib, target, _ = setup
    manifest = lib / "tools" / "set.toml"
    manifest.write_text(manifest.read_text().replace('[needed_by]\ntool_call_parsers = ["demo", "demo_v2"]\n', ""))
    done, document = preflight(tree, lib, ["vllm", "serve", str(target)], "--format", "json")
    assert done.returncode == 1 and failed(document) == ["the tools series is not applied to vLLM 0.16.0"]


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ('tool_parsers = ["x"]', "[needed_by] has no key 'tool_parsers'"),
        ('tool_call_parsers = "x"', "`tool_call_parsers` must be a non-empty array of names"),
        ("tool_call_parsers = []", "`tool_call_parsers` must be a non-empty array of names"),
        ("", "[needed_by] names no launch"),
    ],
)
def test_a_malformed_rule_is_refused_naming_it(setup, table, said):
    _, lib, _, _ = setup
    manifest = lib / "tools" / "set.toml"
    manifest.write_text(manifest.read_text().replace('[needed_by]\ntool_call_parsers = ["demo", "demo_v2"]\n', ""))
    declare(lib / "tools", table)
    with pytest.raises(BadInput) as raised:
        load_set(lib / "tools")
    assert said in raised.value.message


def test_run_apply_on_a_drifted_tree_names_the_drifted_set_with_its_fix_in_one_summary(setup, tmp_path):
    """New-user trial 12, item 2: `run --apply` on a tree whose eagle3 file the user edited said
    "already applied: nothing to do" once per other set, then "2 set(s) applied (...)" without eagle3.
    Now: no set is re-applied for another set's drift, and one summary names the drifted set with
    its fix, which works as printed."""
    tree, lib, target, drafter = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    with open(tree / SPEC, "a") as edited:
        edited.write("# a user's edit\n")
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}
    launch = ["run", "--apply", "--target", tree, "--patches", lib, "--", *serve(target, drafter, *TOOLS)]
    done = run_cli(*launch, env=no_vllm)
    assert done.returncode == 1 and "not launched: the preflight failed" in done.stderr, done.stdout + done.stderr
    assert "already applied" not in done.stdout and "plan:" not in done.stdout, done.stdout
    revert = f"patchkit revert --target {tree} --patches {lib} --set eagle3 --force"
    apply = f"patchkit apply --target {tree} --patches {lib} --set eagle3"
    summary = [line for line in done.stdout.splitlines() if "set(s) applied" in line]
    assert summary == [
        f"0 set(s) applied; eagle3 changed after apply ({SPEC}): run `{revert}` (it keeps a copy of your edits), "
        f"then `{apply}`"
    ], done.stdout
    for command in (revert, apply):
        step = run_cli_judged(*shlex.split(command)[1:])  # as printed
        assert step.returncode == 0, command + step.stdout + step.stderr
    again = run_cli(*launch, env=no_vllm)
    assert again.returncode == 4 and "cannot run vllm" in again.stderr, again.stdout + again.stderr


def test_run_apply_and_its_preflight_give_one_fix_for_a_drifted_set_every_launch_needs(setup, tmp_path):
    """A set with no [needed_by] (every launch needs it), drifted: `run --apply`'s summary said revert
    --set tools --force, then apply --set tools; its preflight's tree-state finding, in the same output,
    revert --force, then apply of the whole tree. One fix now, status's (the sets the record chose)."""
    tree, lib, target, drafter = setup
    manifest = lib / "tools" / "set.toml"
    manifest.write_text(manifest.read_text().replace('[needed_by]\ntool_call_parsers = ["demo", "demo_v2"]\n', ""))
    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    with open(tree / PARSER, "a") as edited:
        edited.write("# a user's edit\n")
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}
    launch = ["run", "--apply", "--target", tree, "--patches", lib, "--", *serve(target, drafter)]
    done = run_cli(*launch, env=no_vllm)
    assert done.returncode == 1 and "not launched: the preflight failed" in done.stderr, done.stdout + done.stderr
    summary = next(line for line in done.stdout.splitlines() if "set(s) applied" in line)
    finding = done.stdout.splitlines().index(f"tree-state: changed after patchkit wrote them: {PARSER}")
    fix = done.stdout.splitlines()[finding + 1].removeprefix("  fix: ")
    assert summary == f"0 set(s) applied; tools changed after apply ({PARSER}): {fix}", done.stdout
    revert, apply = (
        f"patchkit revert --target {tree} --patches {lib} --force",
        f"patchkit apply --target {tree} --patches {lib}",
    )
    assert fix == f"run `{revert}` (keeps a copy of the edits), then `{apply}`", fix  # as `status` says it
    for command in (revert, apply):
        step = run_cli_judged(*shlex.split(command)[1:])  # as printed
        assert step.returncode == 0, command + step.stdout + step.stderr
    again = run_cli(*launch, env=no_vllm)
    assert again.returncode == 4 and "cannot run vllm" in again.stderr, again.stdout + again.stderr


def test_a_drifted_set_is_one_tree_state_failure_with_its_own_fix(setup):
    """A drift of eagle3's file was said twice: as eagle3's drift and as the guard's refusal in every
    other set's finding. The launch that needs eagle3 gets one tree-state failure; a launch that does
    not (the guard on) gets the refusal once, its fix naming --set eagle3."""
    tree, lib, target, drafter = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    with open(tree / SPEC, "a") as edited:
        edited.write("# a user's edit\n")
    both, document = preflight(tree, lib, serve(target, drafter, *TOOLS), "--format", "json")
    assert both.returncode == 1 and failed(document) == [f"changed after patchkit wrote them: {SPEC}"], both.stdout
    fix = next(f["fix"] for f in document["findings"] if not f["ok"])  # the commands, not `status` that names them
    assert fix == (
        f"run `patchkit revert --target {tree} --patches {lib} --set eagle3 --force` (it keeps a copy of your "
        f"edits), then `patchkit apply --target {tree} --patches {lib} --set eagle3`"
    )
    tools, document = preflight(tree, lib, ["vllm", "serve", str(target), *TOOLS], "--format", "json")
    refusals = [f for f in document["findings"] if not f["ok"]]
    assert tools.returncode == 1 and len(refusals) == 1, tools.stdout
    assert refusals[0]["message"] == f"the launch guard refuses this tree: {SPEC} was changed after patchkit patched it"
    assert f"`patchkit revert --target {tree} --patches {lib} --set eagle3 --force`" in refusals[0]["fix"]


def test_run_apply_says_it_skipped_a_set_whose_file_has_a_local_edit_with_the_fix(setup, tmp_path):
    """New-user 21, 7c: `run --apply` on a tree with a local edit where eagle3's series changes a
    file applied the other set ("1 set(s) applied (tools)") and never said eagle3 was skipped."""
    tree, lib, target, drafter = setup
    patch = (lib / "eagle3" / "0.16.0" / "0001-eagle3.patch").read_text().split(f"diff --git a/{SPEC}", 1)[1]
    hunk = patch.split("\n@@", 1)[1].split("\ndiff --git", 1)[0].splitlines()[1:]
    removed = next(line[1:] for line in hunk if line.startswith((" ", "-")) and line[1:].strip())
    stock = (tree / SPEC).read_text()
    (tree / SPEC).write_text(stock.replace(removed, removed + "  # a local edit", 1))
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}
    launch = ["run", "--apply", "--target", tree, "--patches", lib, "--", *serve(target, drafter, *TOOLS)]
    done = run_cli(*launch, env=no_vllm)
    assert done.returncode == 1 and "not launched: the preflight failed" in done.stderr, done.stdout + done.stderr
    summary = " ".join(line for line in done.stdout.splitlines() if "set(s) applied" in line)
    assert summary.startswith("1 set(s) applied (tools); eagle3 not applied: ") and SPEC in summary, done.stdout
    fix = f" && patchkit apply --target {tree} --patches {lib} --set eagle3`"
    assert "keep your edit as .mine, put the stock file back, apply: `cp -p" in summary and summary.endswith(fix), (
        summary
    )


def test_the_fix_of_a_set_that_does_not_apply_names_the_set_on_its_fetch_and_apply(setup):
    """Review: preflight's (and run's) tree-state fix for a set that does not apply dropped --set
    (apply's own named it): its `fetch VERSION --dest TREE --force` then laid out every set's files,
    replacing another set's patched file. Preflight and a plain `apply` name the set on both."""
    tree, lib, target, _ = setup
    assert (
        run_cli_writing("apply", "--target", tree, "--patches", lib, "--set", "eagle3", "--no-import").returncode == 0
    )
    (tree / PARSER).write_text("def parse(text):\n    return text  # site edit\n")
    fetch = f"patchkit fetch --patches {lib} --set tools 0.16.0 --dest {tree} --force && "
    apply = f"patchkit apply --target {tree} --patches {lib} --set tools`"
    done, document = preflight(tree, lib, ["vllm", "serve", str(target), *TOOLS], "--format", "json")
    (fix,) = [f["fix"] for f in document["findings"] if f["check"] == "tree-state" and not f["ok"]]
    assert done.returncode == 1 and f"{fetch}{apply}" in fix, fix
    plain = run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import")
    assert plain.returncode != 0 and f"{fetch}{apply}" in plain.stderr, plain.stderr
