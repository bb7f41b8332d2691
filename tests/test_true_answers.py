"""Issue 22, "Answers that must be true": each everyday answer, as a new user meets it on a tree
from `patchkit fetch 0.16.0 --dest DIR`, says what is so (release tier: the real 0.16.0 files)."""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
from pathlib import Path

import pytest
from helpers import assert_clean_failure, fingerprint, run_cli, run_cli_read_only, run_cli_writing
from launch_fixtures import DEEPSEEK_V3, DRAFTER, REGISTRY, serve, write_model
from packaging.version import Version

from patchkit.base.errors import LockBusy
from patchkit.base.options import Options
from patchkit.checks import registry
from patchkit.engine.transaction import target_lock
from patchkit.releases import check as release_check

pytestmark = pytest.mark.release

KIMI = "vllm/model_executor/models/kimi_k25.py"


@pytest.fixture
def fetched(tmp_path) -> Path:
    """A tree as `patchkit fetch 0.16.0 --dest DIR` lays it out: the set's files and the dist-info."""
    site = tmp_path / "vllm-0.16.0"
    done = run_cli("fetch", "0.16.0", "--dest", site)
    assert done.returncode == 0, done.stderr
    return site


def break_import(path: Path) -> None:
    """`import copy` -> `import copy,` (line 14 of 0.16.0's kimi_k25.py): a syntax error."""
    text = path.read_text()
    assert "\nimport copy\n" in text
    path.write_text(text.replace("\nimport copy\n", "\nimport copy,\n", 1))


def adhoc_patch(site: Path, tmp_path: Path) -> Path:
    """An ad-hoc --patch that adds the trailing comma to kimi_k25.py's `import copy`."""
    stock = (site / KIMI).read_text().splitlines(keepends=True)
    line = stock.index("import copy\n")
    before, after = (" " + c for c in stock[line - 3 : line]), (" " + c for c in stock[line + 1 : line + 4])
    header = f"--- a/{KIMI}\n+++ b/{KIMI}\n@@ -{line - 2},7 +{line - 2},7 @@\n"
    body = "".join([*before, "-import copy\n", "+import copy,\n", *after])
    diff = tmp_path / "comma.patch"
    diff.write_text(header + body)
    return diff


# 1. A dry run says what apply would do.


def test_a_dry_run_fails_a_patch_that_breaks_the_syntax_as_apply_does_and_writes_nothing(fetched, tmp_path):
    diff = adhoc_patch(fetched, tmp_path)
    before = fingerprint(fetched)
    dry = run_cli_writing("apply", "--dry-run", "--target", fetched, "--patch", diff)
    assert_clean_failure(dry, 1)
    assert f"syntax: {KIMI}: line 14: invalid syntax" in dry.stderr
    assert "apply would write nothing" in dry.stderr
    assert fingerprint(fetched) == before  # not even .patchkit/
    applied = run_cli_writing("apply", "--target", fetched, "--patch", diff)
    assert_clean_failure(applied, 1)
    assert f"syntax: {KIMI}: line 14: invalid syntax" in applied.stderr


def test_a_dry_run_of_the_library_series_runs_the_checks_and_says_they_passed(fetched):
    done = run_cli_writing("apply", "--dry-run", "--target", fetched, "--set", "eagle3", "--format", "json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["result"] == "dry-run"
    ran = {c["check"] for c in document["checks"]}
    assert {"integrity", "syntax", "names", "contract"} <= ran
    text = run_cli_writing("apply", "--dry-run", "--target", fetched, "--set", "eagle3")
    assert text.stdout.splitlines()[-1].startswith("dry run: 5 file(s) would change, 27 check(s) passed")


def test_a_dry_run_counts_the_checks_apply_counts_and_shows_them_with_v(fetched):
    # review 6 L6: the dry run said 20 (its integrity rows left out), apply 24; -v showed no row
    verbose = run_cli_writing("apply", "--dry-run", "-v", "--target", fetched, "--set", "eagle3")
    assert verbose.returncode == 0, verbose.stderr
    rows = [line.split() for line in verbose.stdout.splitlines()]
    assert {row[0] for row in rows if len(row) > 2 and row[2] == "pass"} >= {"integrity", "syntax", "names", "contract"}
    dry = re.search(r"(\d+) check\(s\) passed", verbose.stdout.splitlines()[-1])
    applied = run_cli_writing("apply", "--target", fetched, "--set", "eagle3")
    counted = re.search(r"^checks +(\d+) checks passed", applied.stdout, re.MULTILINE)
    assert dry and counted and dry.group(1) == counted.group(1), verbose.stdout + applied.stdout


def test_verify_against_a_release_checks_the_planned_contents_once(monkeypatch):
    """The dry run and apply of `verify --vllm-version`/`--all` share one run of the checks on
    the planned contents; the checks on disk run after writing."""
    runs = []
    real = registry.run_checks

    def counted(ctx, checks=None):
        names = None if checks is None else [check.name for check in checks]
        runs.append((ctx.on_disk, names))
        return real(ctx, checks)

    monkeypatch.setattr(registry, "run_checks", counted)
    [result] = release_check.verify_releases([Version("0.16.0")], set(), Options(set_name="eagle3"), use_cache=False)
    assert result.outcome == "patched", result.detail
    # the planned contents once, the written files once; a set's behaviour test (issue 23) on its own
    assert [on_disk for on_disk, names in runs if names != ["behaviour"]] == [False, True], runs
    assert [names for _, names in runs].count(["behaviour"]) == 1, runs


# 2. -q is never silent on a failure.


def test_verify_quiet_names_the_failure_on_stderr(fetched):
    assert run_cli_writing("apply", "--target", fetched).returncode == 0
    break_import(fetched / KIMI)
    done = run_cli_read_only("verify", "-q", "--target", fetched)
    assert_clean_failure(done, 1)
    assert done.stdout == ""
    assert f"{KIMI}:14: syntax: invalid syntax" in done.stderr
    assert "verify: FAILED" in done.stderr


def test_quiet_commands_that_pass_print_nothing(fetched):
    for command in (["status"], ["verify"], ["apply", "--dry-run"]):
        done = run_cli(*command, "-q", "--target", fetched)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), command


# 3. status names a drifted file that does not compile.


def test_status_names_a_drifted_file_that_does_not_compile_with_its_line(fetched):
    assert run_cli_writing("apply", "--target", fetched).returncode == 0
    break_import(fetched / KIMI)
    done = run_cli_read_only("status", "--target", fetched)
    assert_clean_failure(done, 1)
    # the syntax error leads the file's line, with the source line and a caret as verify shows them;
    # the drift (and the guard's refusal) follow from it
    shown = f"{KIMI}:14: syntax: invalid syntax\n    import copy,\n                ^\n  also: drifted (edited after"
    assert shown in done.stdout, done.stdout
    verified = run_cli_read_only("verify", "--target", fetched, "--no-import")
    assert f"{KIMI}:14: syntax: invalid syntax\n    import copy,\n                ^\n" in verified.stdout
    document = json.loads(
        run_cli_read_only("status", "--target", fetched, "--set", "eagle3", "--format", "json").stdout
    )
    assert document["drifted"] == [KIMI]
    assert document["does_not_compile"] == {KIMI: "line 14: invalid syntax"}
    quiet = run_cli_read_only("status", "-q", "--target", fetched)
    assert f"{KIMI}:14: syntax: invalid syntax\n    import copy,\n                ^\n" in quiet.stderr


def test_status_of_a_drifted_file_that_compiles_says_only_drifted(fetched):
    assert run_cli_writing("apply", "--target", fetched).returncode == 0
    with (fetched / KIMI).open("a") as f:
        f.write("\n# a local note\n")
    document = json.loads(
        run_cli_read_only("status", "--target", fetched, "--set", "eagle3", "--format", "json").stdout
    )
    assert document["drifted"] == [KIMI] and document["does_not_compile"] == {}


EAGLE = "vllm/v1/spec_decode/eagle.py"


def test_an_edit_inside_a_patched_hunk_is_a_drift_not_a_conflict_nor_a_partial_series(fetched):
    """New-user trial 14, item 5: an edit to a line patch 0002 added made status (and verify) say
    0002 "conflict: hunk #1 does not apply" and the series "partial" (3 of 4 applied): 0002 is
    applied; its file was edited. Said once, as the drift, with its fix."""
    assert run_cli_writing("apply", "--target", fetched, "--set", "eagle3").returncode == 0
    lines = (fetched / EAGLE).read_text().splitlines(keepends=True)
    edited = next(i for i, line in enumerate(lines) if "KimiK25ForConditionalGeneration" in line)
    lines[edited] = lines[edited].rstrip("\n") + "  # tuned\n"
    (fetched / EAGLE).write_text("".join(lines))
    for command in (["status"], ["verify", "--no-import"]):
        done = run_cli(*command, "--target", fetched, "--set", "eagle3")
        assert_clean_failure(done, 1)
        said = done.stdout + done.stderr
        assert f"{EAGLE}: drifted: edited after patchkit patched it" in said, said
        assert "conflict" not in said and "partial" not in said, said
    document = json.loads(
        run_cli_read_only("status", "--target", fetched, "--set", "eagle3", "--format", "json").stdout
    )
    assert document["state"] == "applied" and document["drifted"] == [EAGLE], document


SPECULATIVE = "vllm/config/speculative.py"
ACCEPT = "0001-speculative-accept-deepseek-kimi-eagle3-targets.patch"


def test_a_patch_a_drifted_file_no_longer_holds_is_not_called_applied(fetched):
    """New-user 19, 1: speculative.py put back to stock, then edited: `status -v` said "4 of 4
    patches applied; 1 file drifted" and 0001 `applied`, though its change is not in the file."""
    stock = (fetched / SPECULATIVE).read_bytes()
    assert run_cli_writing("apply", "--target", fetched, "--set", "eagle3").returncode == 0
    (fetched / SPECULATIVE).write_bytes(stock + b"# debug\n")
    done = run_cli_read_only("status", "-v", "--target", fetched, "--set", "eagle3")
    assert_clean_failure(done, 1)
    row = next(" ".join(line.split()) for line in done.stdout.splitlines() if line.startswith(ACCEPT[:20]))
    assert "not-applied" in row, done.stdout
    assert f"4 of 5 patches applied; 1 file drifted ({ACCEPT} no longer in it)" in done.stdout, done.stdout
    assert "partial" not in done.stdout, done.stdout  # the drift is the failure, with its fix
    document = json.loads(
        run_cli_read_only("status", "--target", fetched, "--set", "eagle3", "--format", "json").stdout
    )
    states = {p["name"]: p["state"] for p in document["patches"]}
    assert document["state"] == "applied" and states[ACCEPT] == "not-applied", document


def test_a_patched_file_deleted_is_said_deleted_and_its_fix_keeps_no_copy(fetched):
    """New-user trial 14, item 21: status said a deleted file was "edited after patchkit patched it"
    with a fix that "keeps a copy of the edits", and revert offered to keep "your edit"."""
    assert run_cli_writing("apply", "--target", fetched, "--set", "eagle3").returncode == 0
    (fetched / EAGLE).unlink()
    done = run_cli_read_only("status", "--target", fetched, "--set", "eagle3")
    assert_clean_failure(done, 1)
    assert f"{EAGLE}: drifted: deleted after patchkit patched it" in done.stdout, done.stdout
    assert "copy" not in done.stdout and "conflict" not in done.stdout, done.stdout
    revert = run_cli_writing("revert", "--target", fetched)
    assert_clean_failure(revert, 1)
    assert f"{EAGLE} was deleted after patchkit patched it" in revert.stderr and "copy" not in revert.stderr
    assert run_cli_writing("revert", "--target", fetched, "--force").returncode == 0
    assert (fetched / EAGLE).is_file()


def test_a_preflight_that_judged_nothing_never_says_ok_and_counts_in_english(fetched, tmp_path):
    """New-user trial 14, item 3: `preflight: ok: 0 checks passed, 1 cannot judge` read as a pass,
    and one check was "1 checks passed"."""
    assert run_cli_writing("apply", "--target", fetched).returncode == 0
    model = write_model(tmp_path / "model", DEEPSEEK_V3)
    # a dummy load: the weights are not judged either (loadable weights would be a pass counted)
    launch = [
        "vllm",
        "serve",
        str(model),
        "--load-format",
        "dummy",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "deepseekv3",
    ]
    done = run_cli_read_only("preflight", "--target", fetched, "--", *launch)
    assert done.returncode == 0, done.stderr
    # the tool-call model is not cached, and a fetch --dest tree has no parser registry to judge the name by
    assert done.stdout.splitlines()[-1] == "preflight: nothing judged: 2 cannot judge (-v shows each)", done.stdout
    # the parser vLLM builds (auto tool choice): deepseek-tool-calls' tree-state, applied, is the one pass
    parser = ["--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v32"]
    one = run_cli_read_only("preflight", "--target", fetched, "--", *launch[:5], *parser)
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines()[-1] == "preflight: ok: 1 check passed, 2 cannot judge (-v shows each)", one.stdout


def test_status_names_each_sets_series_and_counts_an_upstream_sets_checks_as_verify_does(tmp_path):
    """New-user trial 14, items 1, 16 and 23b: status's set lines never named the series (0.13.0 for
    deepseek-tool-calls on 0.20.0: only JSON said it), counted an upstream set's skipped check as
    passing ("its 21 checks pass" where verify says "20 checks passed, 1 skipped"), and said
    "0 of 1 patches applied"."""
    site = tmp_path / "vllm-0.20.0"
    assert run_cli("fetch", "0.20.0", "--dest", site).returncode == 0
    done = run_cli_read_only("status", "--target", site)
    assert done.returncode == 0, done.stderr
    lines = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("set ")}
    verified = run_cli_read_only("verify", "--target", site, "--set", "eagle3").stdout.splitlines()[-1]
    counted = verified.removeprefix("verify: ok: ").removesuffix(" (-v shows each)")
    assert re.fullmatch(rf"set +eagle3 +upstream +on its stock files {counted}", lines["eagle3"]), (lines, verified)
    assert lines["deepseek-tool-calls"].endswith("0 of 3 patches applied; series 0.20.0"), lines
    assert lines["kimi-k2-tool-calls"].endswith("0 of 1 patch applied; series 0.20.0"), lines


# 4. A check that lacks what it needs cannot judge: never a pass, never a failure.


def drafted_launch(tmp_path: Path, model: dict) -> list[str]:
    drafter = write_model(tmp_path / "drafter", DRAFTER)
    return serve(write_model(tmp_path / "model", model), drafter)


def findings(done) -> dict[str, dict]:
    return {f["check"]: f for f in json.loads(done.stdout)["findings"]}


def test_preflight_on_a_fetched_tree_cannot_judge_what_needs_the_registry_and_says_what_gives_it(fetched, tmp_path):
    assert not (fetched / REGISTRY).exists()  # `fetch --dest` lays out the set's files only
    assert run_cli_writing("apply", "--target", fetched).returncode == 0
    launch = drafted_launch(tmp_path, DEEPSEEK_V3)
    done = run_cli_read_only("preflight", "--target", fetched, "--format", "json", "--", *launch)
    assert done.returncode == 0, done.stdout + done.stderr
    found = findings(done)
    for check in ("supports-eagle3", "drafter-architecture", "vllm-validation"):
        assert found[check]["result"] == "cannot judge", found[check]
    assert "no vllm/model_executor/models/registry.py" in found["supports-eagle3"]["message"]
    assert "fetch 0.16.0 --all --dest" in found["drafter-architecture"]["fix"]
    assert "--python" in found["vllm-validation"]["fix"]
    assert {found[c]["result"] for c in ("tree-state", "whitelist", "drafter-hidden-size")} == {"pass"}
    text = run_cli_read_only("preflight", "--target", fetched, "--", *launch)
    rows = {line.split()[0]: line for line in text.stdout.splitlines() if line.split()}
    assert " pass " not in rows["vllm-validation"] and "cannot judge" in rows["vllm-validation"]


def test_on_an_applied_tree_the_whole_release_hint_works_as_printed(fetched, tmp_path):
    """`fetch --all --dest` over the applied tree keeps the files patchkit patched (the record says so):
    the hint is that one command, as on a stock tree (new-user 14 item 6: revert, fetch, apply)."""
    assert run_cli_writing("apply", "--target", fetched).returncode == 0
    launch = drafted_launch(tmp_path, DEEPSEEK_V3)
    done = run_cli_read_only("preflight", "--target", fetched, "--format", "json", "--", *launch)
    fix = findings(done)["supports-eagle3"]["fix"]
    commands = [c for c in fix.split("`")[1::2] if c.startswith("patchkit ")]
    assert [c.split()[1] for c in commands] == ["fetch"], fix
    for command in commands:
        step = run_cli(*shlex.split(command)[1:])
        assert step.returncode == 0, command + "\n" + step.stdout + step.stderr
    assert run_cli_read_only("status", "--target", fetched).returncode == 0  # applied, the guard's files in place
    again = findings(run_cli_read_only("preflight", "--target", fetched, "--format", "json", "--", *launch))
    assert again["supports-eagle3"]["result"] != "cannot judge", again["supports-eagle3"]


def test_on_an_unapplied_tree_the_fixes_work_in_the_order_printed(fetched, tmp_path):
    """Review 6 M4: `apply` first, then `fetch --all` refused the patched files ("pass --force", which
    put stock files over them). fetch --all now keeps what the tree's record says patchkit patched."""
    launch = drafted_launch(tmp_path, DEEPSEEK_V3)
    done = run_cli_read_only("preflight", "--target", fetched, "--", *launch)
    said = " ".join(done.stdout.split() + done.stderr.split())
    commands = list(dict.fromkeys(c for c in said.split("`")[1::2] if c.startswith("patchkit ")))
    assert [c.split()[1] for c in commands] == ["apply", "fetch"], said  # the trap's order
    for command in commands:
        step = run_cli(*shlex.split(command)[1:])
        assert step.returncode == 0, command + "\n" + step.stdout + step.stderr
    # applied, the patched files kept: the set this launch needs (its fix names it: --set eagle3)
    assert run_cli_read_only("status", "--target", fetched, "--set", "eagle3").returncode == 0
    again = findings(run_cli_read_only("preflight", "--target", fetched, "--format", "json", "--", *launch))
    assert again["supports-eagle3"]["result"] != "cannot judge", again["supports-eagle3"]


def test_preflight_on_a_whole_release_still_judges_the_registry(tmp_path):
    site = tmp_path / "all"
    assert run_cli("fetch", "0.16.0", "--all", "--dest", site).returncode == 0
    assert run_cli_writing("apply", "--target", site).returncode == 0
    done = run_cli_read_only(
        "preflight", "--target", site, "--format", "json", "--", *drafted_launch(tmp_path, DEEPSEEK_V3)
    )
    assert done.returncode == 0, done.stdout
    assert {findings(done)[c]["result"] for c in ("supports-eagle3", "drafter-architecture")} == {"pass"}


# 5. preflight reports every finding in one run; the exit code is the worst of them.


def test_a_missing_model_is_one_finding_beside_the_unpatched_tree(fetched, tmp_path):
    launch = serve(tmp_path / "nowhere", write_model(tmp_path / "drafter", DRAFTER))
    done = run_cli_read_only("preflight", "--target", fetched, "--format", "json", "--", *launch)
    assert_clean_failure(done, 4)
    found = findings(done)
    assert found["tree-state"]["ok"] is False and "not applied" in found["tree-state"]["message"]
    assert found["models"]["ok"] is False and "no config.json found" in found["models"]["message"]


def test_a_missing_drafter_leaves_the_target_checks_to_run(fetched, tmp_path):
    launch = serve(write_model(tmp_path / "model", DEEPSEEK_V3), tmp_path / "no-drafter")
    done = run_cli_read_only("preflight", "--target", fetched, "--format", "json", "--", *launch)
    assert_clean_failure(done, 4)
    found = findings(done)
    assert "drafter" in found["models"]["message"]
    fix = f"run `patchkit apply --target {fetched} --set eagle3`"  # on the tree checked (hints.py), the set it needs
    assert found["whitelist"]["result"] == "fail" and found["whitelist"]["fix"] == fix


# 6. fetch of a release no set covers says so.


def test_fetch_of_a_release_no_set_covers_exits_3_saying_what_the_set_covers(tmp_path):
    """New-user trial 14, item 9: the reason was said once per set (four lines at 80 columns), and
    the hint's `fetch 0.9.2 --all` dropped the --dest given (as printed, it laid out nothing)."""
    done = run_cli("fetch", "0.9.2", "--dest", tmp_path / "old")
    assert_clean_failure(done, 3)
    ranges = "(eagle3, deepseek-tool-calls, kimi-k2-tool-calls: >=0.11.0)"
    assert f"vLLM 0.9.2 is outside the range every set supports {ranges}" in done.stderr, done.stderr
    assert done.stderr.count("0.9.2 is outside") == 1, done.stderr
    assert f"`patchkit fetch 0.9.2 --all --dest {tmp_path / 'old'}` fetches it anyway" in done.stderr
    assert not (tmp_path / "old").exists()
    (tmp_path / "tree" / "vllm").mkdir(parents=True)
    (tmp_path / "tree" / "vllm" / "__init__.py").write_text("")
    status = run_cli_read_only("status", "--target", tmp_path / "tree", "--vllm-version", "0.10.0")
    assert_clean_failure(status, 3)
    assert status.stderr.count("0.10.0 is outside") == 1 and ranges in status.stderr, status.stderr


def test_fetch_all_still_lays_out_a_release_no_set_covers(tmp_path):
    done = run_cli("fetch", "0.9.2", "--all", "--dest", tmp_path / "old")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "old/vllm/__init__.py").is_file()
    status = run_cli_read_only("status", "--target", tmp_path / "old", "--format", "json")  # every set of the library
    assert_clean_failure(status, 3)
    assert json.loads(status.stdout)["state"] == "unsupported"


# 7. Hints fit how the tree came.


def test_a_fetched_tree_is_told_to_fetch_its_stock_files_again(fetched):
    with (fetched / KIMI).open("a") as f:
        f.write("# an edit\n")
    done = run_cli_writing("apply", "--target", fetched)
    assert_clean_failure(done, 1)
    assert f"patchkit fetch 0.16.0 --dest {fetched} --force" in done.stderr
    assert "pip install" not in done.stderr
    assert run_cli("fetch", "0.16.0", "--dest", fetched, "--force").returncode == 0  # the hint, followed
    assert run_cli_writing("apply", "--target", fetched).returncode == 0


def test_an_installed_tree_is_still_told_to_reinstall(fetched):
    (fetched / "vllm-0.16.0.dist-info/INSTALLER").write_text("pip\n")
    with (fetched / KIMI).open("a") as f:
        f.write("# an edit\n")
    done = run_cli_writing("apply", "--target", fetched)
    assert_clean_failure(done, 1)
    assert "pip install --force-reinstall --no-deps vllm==0.16.0" in done.stderr


def test_target_may_name_the_vllm_directory_of_a_fetched_tree(fetched):
    assert not (fetched / "vllm/__init__.py").exists()
    done = run_cli_read_only("status", "--target", fetched / "vllm", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["target"] == str(fetched)


# 8. Read-only commands write nothing into the tree; a revert that leaves nothing recorded leaves no .patchkit/.

READING = (["status"], ["verify"], ["diff"], ["apply", "--dry-run"], ["revert", "--dry-run"], ["revert"], ["recover"])


def test_reading_commands_and_a_revert_of_a_stock_tree_create_nothing_in_it(fetched):
    before = fingerprint(fetched)
    for command in READING:
        done = run_cli(*command, "--target", fetched)
        assert done.returncode == 0, (command, done.stderr)
        assert fingerprint(fetched) == before, command  # no .patchkit/, no lock


def test_a_failed_first_apply_leaves_no_patchkit_dir(fetched):
    """New-user trial 14, item 10: "nothing was written", yet .patchkit/ was left with its lock."""
    with (fetched / "vllm/config/speculative.py").open("a") as f:
        f.write("# local tweak\n")
    done = run_cli_writing("apply", "--target", fetched)
    assert_clean_failure(done, 1)
    assert "nothing was written" in done.stderr, done.stderr
    assert not (fetched / ".patchkit").exists()
    # the likely causes once on stderr (the hint), not in the error too (item 10: three times in all)
    assert done.stderr.count("a different build of vLLM") == 1, done.stderr
    assert "hint: " in done.stderr and "likely causes: a local edit" in done.stderr, done.stderr


def test_a_revert_that_leaves_nothing_recorded_removes_patchkit_dir(fetched):
    before = fingerprint(fetched)
    assert run_cli_writing("apply", "--target", fetched).returncode == 0
    assert (fetched / ".patchkit/lock").exists()
    assert run_cli_writing("revert", "--target", fetched).returncode == 0
    assert fingerprint(fetched) == before


def test_copies_of_the_users_edits_stay_and_are_named(fetched):
    assert run_cli_writing("apply", "--target", fetched).returncode == 0
    with (fetched / KIMI).open("a") as f:
        f.write("# my edit\n")
    done = run_cli_writing("revert", "--force", "--target", fetched)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in (fetched / ".patchkit").iterdir()] == ["saved"]
    [copy] = (fetched / ".patchkit/saved").iterdir()
    assert str(copy) in done.stderr and (copy / KIMI).read_text().endswith("# my edit\n")


def test_a_lock_waiter_locks_the_file_there_once_the_holder_removed_its_own(fetched):
    """A revert that leaves nothing recorded removes .patchkit/lock while it holds it: a patchkit
    that waited for that lock must then lock the file at the path, or two would hold "the" lock."""
    holding, done = threading.Event(), threading.Event()

    def waiter() -> None:
        with target_lock(fetched, timeout=30):
            holding.set()
            done.wait(30)

    with target_lock(fetched, timeout=5):
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.5)  # the waiter is blocked on the holder's lock file
        (fetched / ".patchkit/lock").unlink()
        (fetched / ".patchkit").rmdir()
    assert holding.wait(30)
    try:
        with pytest.raises(LockBusy), target_lock(fetched, timeout=0.3):
            pass
    finally:
        done.set()
        thread.join(30)


def test_status_json_says_the_guard_apply_installed(fetched):
    """Right after apply's "launch guard installed", status's JSON says the guard is installed (and
    refuses nothing); after revert, that none is."""
    assert run_cli_writing("apply", "--target", fetched).returncode == 0
    assert (fetched / "patchkit_guard.py").is_file()
    said = json.loads(run_cli_read_only("status", "--target", fetched, "--set", "eagle3", "--format", "json").stdout)[
        "guard"
    ]
    assert said == {
        "installed": True,
        "refuses": [],
        "fix": None,
        "by_hand": False,
        "missing": None,
        "missing_fix": None,
    }
    assert run_cli_writing("revert", "--target", fetched).returncode == 0
    said = json.loads(run_cli_read_only("status", "--target", fetched, "--set", "eagle3", "--format", "json").stdout)[
        "guard"
    ]
    assert said == {
        "installed": False,
        "refuses": [],
        "fix": None,
        "by_hand": False,
        "missing": None,
        "missing_fix": None,
    }
