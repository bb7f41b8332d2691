"""Output a person reads (issue 22, the new-user trial's hard-to-read items A-J): each answer
names what it is about, says a fix once, and reads without the library's jargon."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import LIBRARY, make_patch, on_a_terminal, patched_spec, run_cli, write_library, write_tree
from launch_fixtures import DEEPSEEK_V3, DRAFTER, serve, write_eagle3_setup, write_model

from patchkit.store import state as state_module

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
        start = next(
            i for i, line in enumerate(lines) if line.startswith("  fix: preflight needs the model's config.json")
        )
        end = next(i for i in range(start + 1, len(lines)) if re.match(r"[a-z-]+( warning)?: ", lines[i]))
        fix = lines[start + 1 : end]
        assert "".join(fix).count("`") >= 6 and fix[-1].strip().endswith("or a folder with it"), lines
        flush_left = [line for line in fix if not line.startswith(" " * 7)]
        assert flush_left == ["`pipx run --spec huggingface_hub hf download moonshotai/Kimi-K2.5 config.json`),"], lines
        # a word wider than the terminal (a long tmp path inside a command) stays whole on its own line,
        # with the backslash that goes on to the command's next line (tmp paths of 43+ characters)
        assert all(len(line) <= 80 or " " not in line.strip().removesuffix(" \\") for line in lines), lines


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
    """J: after `revert --force`, the printed `rm -r .patchkit/saved` left an empty .patchkit/. The
    command names the copies alone (new-user 17, 1: `rm -r .patchkit` after the apply that follows
    deleted its record, and the guard checked nothing); the next revert takes the emptied store."""
    tree = write_tree(tmp_path / "site")
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})
    chosen = ("--target", tree, "--patches", library)
    assert run_cli("apply", *chosen).returncode == 0
    (tree / SPEC).write_text(patched_spec() + "# my edit\n")
    done = run_cli("revert", "--force", *chosen)
    assert done.returncode == 0, done.stderr
    command = re.search(r"`(rm -r [^`]+)` deletes them once not wanted", " ".join(done.stderr.split()))
    assert command, done.stderr
    removed, _, then = command.group(1).partition(" && ")
    assert removed.endswith(tuple(p.name for p in (tree / ".patchkit/saved").iterdir())), done.stderr
    assert then == f"rmdir {tree / '.patchkit/saved'}", done.stderr  # its only copies: saved/ goes with them
    assert run_cli("apply", *chosen).returncode == 0  # as revert --force's hint goes on
    subprocess.run(command.group(1), shell=True, check=True)
    assert (tree / ".patchkit/state.json").is_file()  # the apply's record stays
    assert not (tree / ".patchkit/saved").exists()  # newuser18 5e: no empty saved/ left behind
    assert run_cli("revert", *chosen).returncode == 0
    assert sorted(p.name for p in tree.iterdir()) == sorted(p.name for p in write_tree(tmp_path / "fresh").iterdir())


def test_saved_edits_deleted_before_the_next_apply_leave_no_empty_folder(tmp_path, scratch):
    """newuser18 5e: the copies deleted (`rm -r …/saved/T`), then an apply: an empty saved/ stayed.
    A write removes it once empty; a copy another run kept stays, and the printed command then
    deletes this run's copies alone."""
    tree = write_tree(tmp_path / "site")
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})
    chosen = ("--target", tree, "--patches", library)
    assert run_cli("apply", *chosen).returncode == 0
    (tree / SPEC).write_text(patched_spec() + "# my edit\n")
    assert run_cli("revert", "--force", *chosen).returncode == 0
    (first,) = (tree / ".patchkit/saved").iterdir()
    shutil.rmtree(first)
    assert run_cli("apply", *chosen).returncode == 0
    assert not (tree / ".patchkit/saved").exists()

    (tree / SPEC).write_text(patched_spec() + "# my edit\n")
    assert run_cli("revert", "--force", *chosen).returncode == 0
    assert run_cli("apply", *chosen).returncode == 0
    (tree / SPEC).write_text(patched_spec() + "# another edit\n")
    done = run_cli("revert", "--force", *chosen)
    command = re.search(r"`(rm -r [^`]+)` deletes them once not wanted", " ".join(done.stderr.split()))
    assert command and "rmdir" not in command.group(1), done.stderr  # saved/ holds the earlier copies too
    subprocess.run(command.group(1), shell=True, check=True)
    assert len(list((tree / ".patchkit/saved").iterdir())) == 1


# -- three sets on vLLM 0.16.0's files, fetched as a user fetches them (the release tier) ----------

PREFLIGHT_SPEC = '{"method":"eagle3","model":"models/drafter","num_speculative_tokens":3}'


@pytest.fixture(scope="module")
def fetched(tmp_path_factory) -> Path:
    """stock/ (as `fetch 0.16.0 --dest` lays it out), applied/ (the three sets) and the two models."""
    base = tmp_path_factory.mktemp("reading")
    done = run_cli("fetch", "0.16.0", "--dest", base / "stock")
    assert done.returncode == 0, done.stderr
    shutil.copytree(base / "stock", base / "applied")
    assert run_cli("apply", "--target", base / "applied").returncode == 0
    write_model(base / "models" / "dsv3", DEEPSEEK_V3)
    write_model(base / "models" / "drafter", DRAFTER)
    return base


def lines_of(done: subprocess.CompletedProcess) -> list[str]:
    return done.stdout.splitlines()


@pytest.mark.release
def test_status_of_three_sets_is_the_tree_once_a_line_per_set_and_one_verdict(fetched):
    """D: status said vLLM, version, set, state, each patch and a verdict per set: 28 lines."""
    done = run_cli("status", "--target", fetched / "applied")
    assert done.returncode == 0, done.stderr
    lines = lines_of(done)
    assert [line.split()[0] for line in lines] == ["vLLM", "version", "library", "set", "set", "set", "status:"], lines
    assert re.fullmatch(r"set +deepseek-tool-calls +applied +3 of 3 patches applied; series 0.13.0", lines[4]), lines
    assert lines[-1] == "status: applied: 3 of 3 set(s) applied (eagle3, deepseek-tool-calls, kimi-k2-tool-calls)"


@pytest.mark.release
def test_status_of_a_drifted_set_says_the_failure_first_and_once(fetched, tmp_path):
    tree = tmp_path / "drifted"
    shutil.copytree(fetched / "applied", tree)
    (tree / "vllm/v1/spec_decode/eagle.py").write_text((tree / "vllm/v1/spec_decode/eagle.py").read_text() + "x = (\n")
    done = run_cli("status", "--target", tree)
    assert done.returncode == 1, done.stderr
    lines = lines_of(done)
    failure = next(i for i, line in enumerate(lines) if line.startswith("vllm/v1/spec_decode/eagle.py:"))
    assert failure < min(i for i, line in enumerate(lines) if line.startswith("set ")), lines
    assert sum("fix:" in line for line in lines) == 1 and not any(line.startswith("guard:") for line in lines), lines
    eagle3 = next(line for line in lines if line.startswith("set "))
    series = (LIBRARY / "eagle3" / "0.16.0" / "series").read_text().splitlines()
    count = sum(1 for line in series if line.strip() and not line.startswith("#"))  # the release's patches
    said = rf"set +eagle3 +applied +{count} of {count} patches applied; 1 file drifted; series 0.16.0"
    assert re.fullmatch(said, eagle3), lines
    assert lines[-1].endswith("; eagle3: 1 file drifted; the launch guard refuses the tree"), lines


@pytest.mark.release
def test_a_dry_run_of_three_sets_names_the_tree_once_and_each_sets_line(fetched):
    """D: three `dry run:` lines did not say which set each was; F: `series <0.19.0,>=0.13.0 [0.13.0]`."""
    done = run_cli("apply", "--dry-run", "--target", fetched / "stock")
    assert done.returncode == 0, done.stderr
    lines = lines_of(done)
    assert sum(line.startswith(("vLLM ", "version ")) for line in lines) == 2, lines
    assert "set      deepseek-tool-calls  series 0.13.0 (covers 0.13.0 to before 0.19.0)" in lines
    assert "set      eagle3  series 0.16.0" in lines and not any(
        "[" in line for line in lines if line.startswith("set")
    )
    said = [line.partition(":")[0] for line in lines if "would change," in line]
    assert said == ["eagle3", "deepseek-tool-calls", "kimi-k2-tool-calls"], lines


@pytest.mark.release
def test_preflight_says_a_fix_several_failures_share_once(fetched):
    """D: on a stock tree preflight printed `fix: run patchkit apply` under five findings."""
    launch = ["vllm", "serve", "models/dsv3", "-tp", "4", "--speculative-config", PREFLIGHT_SPEC]
    done = run_cli("preflight", "--target", "stock", "--no-import", "--", *launch, cwd=fetched)
    assert done.returncode == 1, done.stderr
    fixes = [line for line in lines_of(done) if "fix" in line and "patchkit apply" in line]
    assert len(fixes) == 1 and re.fullmatch(
        rf"  fix \(all \d above\): run `patchkit apply --target {re.escape(str(fetched))}/stock[^`]*`", fixes[0]
    )
    failed = [line for line in lines_of(done) if line.startswith(("tree-state:", "whitelist:", "supports-eagle3:"))]
    assert len(failed) >= 2, done.stdout


@pytest.mark.release
def test_a_set_partly_applied_gets_apply_as_its_fix_not_serve_without_it(fetched, tmp_path):
    """New-user 18, 1: one patched file put back to stock: the whitelist's fix said to serve without
    --speculative-config, while `apply` finishes the set; the partial state named no set."""
    tree = tmp_path / "partial"
    shutil.copytree(fetched / "applied", tree)
    spec = "vllm/config/speculative.py"
    (tree / spec).write_bytes((fetched / "stock" / spec).read_bytes())
    launch = ["vllm", "serve", str(fetched / "models/dsv3"), "-tp", "4"]
    launch += ["--speculative-config", PREFLIGHT_SPEC.replace("models/", f"{fetched}/models/")]
    done = run_cli("preflight", "--target", tree, "--no-import", "--format", "json", "--", *launch)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = {f["check"]: f for f in json.loads(done.stdout)["findings"] if not f["ok"]}
    assert "whitelist" in failed and failed["tree-state"]["message"].startswith("the eagle3 series is partly applied")
    # every failure's fix is the apply that finishes the set (the series leaves the files passing)
    assert {f["fix"] for f in failed.values()} == {f"run `patchkit apply --target {tree} --set eagle3`"}, failed
    assert run_cli("apply", "--target", tree, "--set", "eagle3").returncode == 0
    assert run_cli("preflight", "--target", tree, "--no-import", "--", *launch).returncode == 0


def _drifted_with_launch(fetched: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """An applied tree whose speculative.py was put back to stock, then edited; the DeepSeek-V3 EAGLE-3 launch."""
    tree = tmp_path / "drifted"
    shutil.copytree(fetched / "applied", tree)
    spec = "vllm/config/speculative.py"
    (tree / spec).write_bytes((fetched / "stock" / spec).read_bytes() + b"# debug\n")
    launch = ["vllm", "serve", str(fetched / "models/dsv3"), "-tp", "4"]
    launch += ["--speculative-config", PREFLIGHT_SPEC.replace("models/", f"{fetched}/models/")]
    return tree, launch


@pytest.mark.release
def test_a_drifted_set_gets_its_drift_fix_not_serve_without_it(fetched, tmp_path):
    """New-user 19, 1: the file put back to stock, then edited: the whitelist judged the edited file
    and said to serve without --speculative-config, while the set's revert --force and apply make
    it pass. Judged as that fix leaves the files (the series on the saved original)."""
    tree, launch = _drifted_with_launch(fetched, tmp_path)
    done = run_cli("preflight", "--target", tree, "--no-import", "--format", "json", "--", *launch)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = {f["check"]: f for f in json.loads(done.stdout)["findings"] if not f["ok"]}
    assert "whitelist" in failed and "changed after patchkit" in failed["tree-state"]["message"], failed
    revert = f"`patchkit revert --target {tree} --set eagle3 --force`"
    fix = f"run {revert} (it keeps a copy of your edits), then `patchkit apply --target {tree} --set eagle3`"
    assert {f["fix"] for f in failed.values()} == {fix}, failed
    assert run_cli("revert", "--target", tree, "--set", "eagle3", "--force").returncode == 0
    assert run_cli("apply", "--target", tree, "--set", "eagle3").returncode == 0
    assert run_cli("preflight", "--target", tree, "--no-import", "--", *launch).returncode == 0


@pytest.mark.release
def test_a_set_partly_applied_and_drifted_gets_the_drift_fix_that_apply_does_not_refuse(fetched, tmp_path):
    """Review 13 M3: one file put back to stock and another edited: preflight's fix was `apply --set
    eagle3` (the partial set's), which refuses the edited file and names revert --force: a loop."""
    tree = tmp_path / "both"
    shutil.copytree(fetched / "applied", tree)
    spec, eagle = "vllm/config/speculative.py", "vllm/v1/spec_decode/eagle.py"
    (tree / spec).write_bytes((fetched / "stock" / spec).read_bytes())
    (tree / eagle).write_bytes((tree / eagle).read_bytes() + b"# edit\n")
    launch = ["vllm", "serve", str(fetched / "models/dsv3"), "-tp", "4"]
    launch += ["--speculative-config", PREFLIGHT_SPEC.replace("models/", f"{fetched}/models/")]
    done = run_cli("preflight", "--target", tree, "--no-import", "--format", "json", "--", *launch)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = {f["check"]: f for f in json.loads(done.stdout)["findings"] if not f["ok"]}
    revert = f"`patchkit revert --target {tree} --set eagle3 --force`"
    fix = f"run {revert} (it keeps a copy of your edits), then `patchkit apply --target {tree} --set eagle3`"
    assert {f["fix"] for f in failed.values()} == {fix}, failed
    assert "whitelist" in failed and "changed after patchkit" in failed["tree-state"]["message"], failed
    # as pasted: the launch then passes
    assert run_cli("revert", "--target", tree, "--set", "eagle3", "--force").returncode == 0
    assert run_cli("apply", "--target", tree, "--set", "eagle3").returncode == 0
    assert run_cli("preflight", "--target", tree, "--no-import", "--", *launch).returncode == 0


@pytest.mark.release
def test_preflight_of_a_drifted_set_parses_the_record_no_more_than_inspect_did(fetched, tmp_path, monkeypatch, run):
    """Closing 16, work done twice: judging a drifted set as its fix leaves it read state.json again
    (and the guard's refusals, once per set), though inspect had read it for the same status."""
    tree, launch = _drifted_with_launch(fetched, tmp_path)
    parsed: list[Path] = []
    parse = state_module.parse_state
    monkeypatch.setattr(state_module, "parse_state", lambda raw, origin: parsed.append(origin) or parse(raw, origin))
    done = run("preflight", "--target", tree, "--set", "eagle3", "--no-import", "--", *launch)
    assert done.exit_code == 1 and "whitelist" in done.output, done.output
    assert len(parsed) <= 2, parsed  # inspect read it once; the guard check once (it runs in vLLM too)


@pytest.mark.release
def test_revert_of_one_set_over_its_stock_files_speaks_of_that_set_only(fetched, tmp_path):
    """New-user 18, 2: `revert --set X` whose files were stock again said "the tree is stock" while
    the other sets stayed applied."""
    tree = tmp_path / "one"
    shutil.copytree(fetched / "applied", tree)
    for path in ("vllm/entrypoints/openai/chat_completion/serving.py", "vllm/tool_parsers/kimi_k2_tool_parser.py"):
        (tree / path).write_bytes((fetched / "stock" / path).read_bytes())
    done = run_cli("revert", "--target", tree, "--set", "kimi-k2-tool-calls")
    assert done.returncode == 0, done.stderr
    assert "the files of kimi-k2-tool-calls are stock" in done.stdout and "the tree is stock" not in done.stdout


@pytest.mark.release
def test_run_v_shows_what_could_not_be_judged_before_it_launches(fetched, tmp_path):
    """C: `run -v` launched without a word of its "cannot judge" findings."""
    vllm = tmp_path / "bin" / "vllm"
    vllm.parent.mkdir()
    vllm.write_text("#!/bin/sh\necho launched\nexit 7\n")
    vllm.chmod(0o755)
    launch = [str(vllm), "serve", "models/dsv3", "-tp", "4", "--speculative-config", PREFLIGHT_SPEC]
    done = run_cli("run", "-v", "--target", "applied", "--", *launch, cwd=fetched)
    assert done.returncode == 7, done.stderr
    said = " ".join(done.stdout.split())
    assert "launch-target cannot judge patchkit cannot tell" in said and said.endswith("launched"), done.stdout
    assert said.count("patchkit cannot tell which Python") == 1, done.stdout  # in the table only (newuser15 11e)
    assert "vLLM's own validation did not run: `patchkit preflight" in " ".join(done.stderr.split())
    quiet = run_cli("run", "--target", "applied", "--", *launch, cwd=fetched)
    assert quiet.returncode == 7 and quiet.stdout == "launched\n", quiet.stderr
    # without -v, what could not be judged is still said before the launch, as warnings (new-user 22, M2)
    assert "warning: launch-target: cannot judge" in quiet.stderr, quiet.stderr
    assert all(line.startswith(("warning: ", "hint: ")) for line in quiet.stderr.splitlines()), quiet.stderr


@pytest.mark.release
def test_verify_of_three_sets_names_the_tree_once_and_says_what_stood_in_for_vllm(fetched):
    """D: the vLLM and version lines once per set; F: `(stand-ins)`, `(3 set(s) judged)`."""
    done = run_cli("verify", "--target", fetched / "applied")
    assert done.returncode == 0, done.stderr
    lines = lines_of(done)
    assert sum(line.startswith(("vLLM ", "version ")) for line in lines) == 2, lines
    assert "behaviour: 0 of 170 runs differ (stand-ins for vLLM's classes)" in lines
    assert lines[-1] == "verify: ok: all 3 sets pass"


def test_list_says_what_a_set_covers_on_every_release_row_and_dash_only_where_it_does_not():
    """G: `0.16.0  applied  -  applied`: deepseek-tool-calls does apply to 0.16.0 (by its range row)."""
    done = run_cli("list")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in lines_of(done) if re.match(r"0\.\d+\.\d+ ", line)}
    assert rows["0.16.0"] == ["applied", "applied", "applied"], rows
    assert rows["0.18.0"] == ["upstream", "applied", "applied"], rows  # eagle3 is upstream from 0.18.0
    assert "- = the set does not cover it" in " ".join(done.stdout.split())
    assert "upstream never" not in done.stdout


def test_list_says_what_each_set_holds_across_another_sets_range_row():
    """`>=0.23.0  -  applied  upstream` said eagle3 does not cover 0.23.0 on (it is upstream there),
    and `>=0.18.0  upstream  applied  applied` hid that kimi is upstream from 0.23.0: the rows are
    the releases the library names, each set's cell what it holds for that release, and one row for
    those after the last."""
    done = run_cli("list")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in lines_of(done) if line[:1] in "0>"}
    assert rows[">=0.23.0"] == ["upstream", "applied", "upstream"], rows
    assert rows["0.18.0"] == ["upstream", "applied", "applied"], rows
    assert rows["0.22.1"] == ["upstream", "applied", "applied"], rows
    assert rows["0.12.0"] == ["applied", "applied", "applied"], rows
    assert [row for row in rows if row.startswith(">")] == [">=0.23.0"], rows  # no set's range as a row


def test_the_set_option_of_fetch_and_workspace_says_what_it_does_there():
    """fetch takes every covering set; workspace works on one: neither help speaks of the other."""
    fetch = " ".join(run_cli("fetch", "--help").stdout.split())
    workspace = " ".join(run_cli("workspace", "--help").stdout.split())
    assert "--set NAME Patch set in the library (default: every set that covers the vLLM version)." in fetch
    assert "port and workspace" not in fetch
    assert "--set NAME The library's set to work on (needed when the library holds several)." in workspace
    assert "every set that covers" not in workspace
