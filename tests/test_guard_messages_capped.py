"""A record naming thousands of files the series never writes (a hostile or damaged state.json):
every message that lists what the launch guard refuses names a few and counts the rest (status,
verify, apply's warning, the guard's own refusal), and the fix is the revert that clears the
record, not an apply that says "already applied". A recorded path holding a control character
is shown escaped: a message line never splits."""

from __future__ import annotations

import json

from helpers import (
    MODEL,
    MODEL_PY,
    make_patch,
    patched_spec,
    record_created,
    run_cli_judged,
    run_cli_writing,
    write_library,
    write_tree,
)

import patchkit._target.guard as target_guard

MANY = 2_000
CREATED = "vllm/zz/made_{}.py"  # created files the record names, absent, that no patch writes


def test_status_verify_and_apply_name_a_few_refused_files_and_revert_as_the_fix(run, tree, open_library):
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    record_created(tree, [CREATED.format(i) for i in range(MANY)])
    for command in ("status", "verify", "apply"):
        done = run_cli_judged(command, "--target", tree, "--patches", open_library)
        said = done.stdout + done.stderr
        assert done.returncode == 1, said  # apply too: the guard it leaves refuses every launch
        assert len(said) < 3_000, said[:3_000]
        assert f"+{MANY - 3:,} more" in said, said
        fix = said[said.index("fix") :]
        assert "patches those" not in fix and "`patchkit revert --target" in fix, said
        assert f"the record names {MANY:,} files no patch of the set writes" in " ".join(fix.split()), said
    # the fix named is true: revert, then apply, and the guard lets the tree launch
    assert run_cli_writing("revert", "--target", tree, "--patches", open_library).returncode == 0
    assert run_cli_writing("apply", "--target", tree, "--patches", open_library).returncode == 0
    done = run_cli_judged("status", "--target", tree, "--patches", open_library)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_guards_own_refusal_names_a_few_files(run, tree, open_library):
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    record_created(tree, [CREATED.format(i) for i in range(MANY)])
    problems = target_guard.find_problems(str(tree))
    assert len(problems) == MANY
    said = target_guard.refusal(str(tree), problems)
    assert len(said) < 1_000 and said.count(" is gone") == 3 and f"+{MANY - 3:,} more" in said, said


def test_a_recorded_path_holding_a_newline_is_shown_escaped(run, tree, open_library):
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    record_created(tree, ["vllm/zz/a\nb.py"])
    said = target_guard.refusal(str(tree), target_guard.find_problems(str(tree)))
    assert "\n" not in said and "vllm/zz/a\\x0ab.py is gone" in said, said
    done = run_cli_judged("status", "--target", tree, "--patches", open_library)
    guard = next(line for line in done.stdout.splitlines() if line.startswith("guard:"))
    assert "vllm/zz/a\\x0ab.py is gone, as before patchkit created it" in guard, done.stdout


def test_apply_of_a_record_of_many_edited_files_names_a_few(run, tree, open_library):
    """The drift refusal lists the files edited since apply: a few, then how many more."""
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    (tree / "vllm" / "zz").mkdir(parents=True)
    edited = [f"vllm/zz/edited_{i}.py" for i in range(500)]
    for i, rel in enumerate(edited):  # each there, not what the record says patchkit wrote
        (tree / rel).write_text(f"x = {i}\n")
    record_created(tree, edited)
    done = run_cli_writing("apply", "--target", tree, "--patches", open_library)
    assert done.returncode == 1, done.stdout + done.stderr
    [said] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "files edited after patchkit patched them: " in said and said.endswith("+497 more"), said[:500]


def test_a_drifted_recorded_path_holding_a_newline_is_one_line(run, tree, open_library):
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    rel = "vllm/zz/a\nb.py"
    (tree / "vllm" / "zz").mkdir(parents=True)
    (tree / rel).write_text("x = 1\n")  # there, not what the record says patchkit wrote: drifted
    record_created(tree, [rel])
    done = run_cli_judged("status", "--target", tree, "--patches", open_library)
    lines = done.stdout.splitlines()
    assert "vllm/zz/a\\x0ab.py: drifted: edited after patchkit patched it" in lines, done.stdout
    assert not any(line.startswith("b.py") for line in lines), done.stdout


def test_another_sets_files_no_patch_writes_are_fixed_by_reverting_it(tmp_path, tree):
    """review36 L6: the refused files belong to another set's record, and no patch of that set's
    series writes them: its fix reverts the set, then applies it (apply alone says "already applied")."""
    stock = write_tree(tmp_path / "stock")
    library = tmp_path / "lib"
    write_library(
        library, {"0.16.0": [make_patch(tmp_path, stock, {"vllm/config/spec.py": patched_spec()})]}, name="spec"
    )
    fixed = {MODEL: MODEL_PY.replace("SupportsPP):", "SupportsPP):  # fixed\n")}
    write_library(library, {"0.16.0": [make_patch(tmp_path, stock, fixed)]}, name="model-fix")
    (library / "library.toml").write_text('order = ["spec", "model-fix"]\n')
    assert run_cli_writing("apply", "--target", tree, "--patches", library).returncode == 0
    data = json.loads((tree / ".patchkit" / "state.json").read_text())
    assert [e["set"] for e in data["entries"]] == ["spec", "model-fix"]
    record_created(tree, [CREATED.format(i) for i in range(5)])  # in spec's record
    done = run_cli_judged("status", "--target", tree, "--patches", library, "--set", "model-fix")
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1, said
    assert f"`patchkit revert --target {tree} --patches {library} --set spec` (its record names files" in said, said
    assert f"then `patchkit apply --target {tree} --patches {library} --set spec`" in said, said
    done = run_cli_writing("apply", "--target", tree, "--patches", library)  # every set: its warning says the same
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and "still refuses" in said, said
    assert f"`patchkit revert --target {tree} --patches {library} --set spec`" in said, said
    # the fix is true: the commands it names clear the guard's refusal
    assert run_cli_writing("revert", "--target", tree, "--patches", library, "--set", "spec").returncode == 0
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--set", "spec").returncode == 0
    assert run_cli_judged("status", "--target", tree, "--patches", library).returncode == 0


def test_status_and_verify_say_one_fix_of_many_drifted_files_once(run, tree, open_library):
    """100 files edited since apply, one fix: status and verify said a drifted line and the same fix
    for each (200 lines); now one line naming a few, then how many more, and the fix once. The exit
    code and the JSON document (every drifted file) are unchanged."""
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    (tree / "vllm" / "zz").mkdir(parents=True)
    edited = [f"vllm/zz/edited_{i:03}.py" for i in range(100)]
    for rel in edited:  # each there, not what the record says patchkit wrote
        (tree / rel).write_text("x = 1\n")
    record_created(tree, edited)
    for command in ("status", "verify"):
        done = run_cli_judged(command, "--target", tree, "--patches", open_library)
        assert done.returncode == 1, done.stdout + done.stderr
        drifted = [line for line in done.stdout.splitlines() if "drifted: edited after" in line]
        assert drifted == [
            "drifted: edited after patchkit patched it (100 files: vllm/zz/edited_000.py, "
            "vllm/zz/edited_001.py, vllm/zz/edited_002.py +97 more)"
        ], done.stdout[:2000]
        assert done.stdout.count("--force` (keeps a copy of the edits), then `patchkit apply") == 1, done.stdout[:2000]
        assert len(done.stdout.splitlines()) < 20, done.stdout[:2000]
        document = json.loads(
            run_cli_judged(command, "--target", tree, "--patches", open_library, "--format", "json").stdout
        )
        assert set(edited) <= set(document["drifted"])
