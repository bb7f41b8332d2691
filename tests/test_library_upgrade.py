"""A set applied from another library (upgrade28): patchkit upgraded (or `--patches` of another
library) changed the set's series since its apply. `apply` plans the library's series on the stock
bytes a revert would restore and writes the result in one transaction; status, preflight and `run
--apply` say so; an edit since is refused as apply refuses it; revert still gives stock bytes."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import crash_trials as ct
import pytest
from helpers import (
    MODEL,
    MODEL_PY,
    SPEC,
    SPEC_PY,
    lay_out_release,
    make_patch,
    record_rows,
    run_cli,
    run_cli_judged,
    snapshot,
    sweep_trials,
    write_library,
    write_tree,
)
from launch_fixtures import patched_files, stand_in_launch, write_eagle3_setup

from patchkit.releases.files import files_for
from patchkit.series import dry_run
from patchkit.series.library import default_root, load_library
from patchkit.series.patchfile import Patch, read_patch

DEEPSEEK = SPEC_PY.replace('"qwen",', '"qwen",\n    "deepseek",')
DEEPSEEK_KIMI = SPEC_PY.replace('"qwen",', '"qwen",\n    "deepseek",\n    "kimi",')
EAGLE = MODEL_PY.replace("SupportsPP):", "SupportsPP):  # eagle")


def one_line(text: str) -> str:
    return " ".join(text.split())


def libraries(tmp: Path, tree: Path, scratch: Path) -> tuple[Path, Path]:
    """Two libraries of one set for 0.16.0: the older one's 0002 adds deepseek, the newer one's kimi too."""
    old = [make_patch(scratch, tree, {MODEL: EAGLE}), make_patch(scratch, tree, {SPEC: DEEPSEEK})]
    new = [old[0], make_patch(scratch, tree, {SPEC: DEEPSEEK_KIMI})]
    return (
        write_library(tmp / "old", {"0.16.0": old}, name="demo"),
        write_library(tmp / "new", {"0.16.0": new}, name="demo"),
    )


def pk(*args: object):
    return run_cli_judged(*args)


@pytest.mark.parametrize("direction", ["older-to-newer", "newer-to-older"])
def test_apply_updates_a_set_applied_from_another_library(tree, scratch, tmp_path, direction):
    old, new = libraries(tmp_path, tree, scratch)
    first, then = (old, new) if direction == "older-to-newer" else (new, old)
    stock = snapshot(tree)
    assert pk("apply", "--target", tree, "--patches", first).returncode == 0
    status = pk("status", "--target", tree, "--patches", then)
    said = one_line(status.stdout + status.stderr)
    assert status.returncode == 1, said  # the tree lacks the library's change: a CI gate fails
    assert "applied from another library (0002 changed)" in said, said
    assert f"`patchkit apply --target {tree} --patches {then}` updates it" in said, said
    assert "conflict" not in said and "does not apply" not in said, said
    found = json.loads(pk("status", "--target", tree, "--patches", then, "--format", "json").stdout)
    assert found["other_library"]["changed"] == ["0002"], found  # one set: its own document

    done = pk("apply", "--target", tree, "--patches", then)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "updated from another library (0002 changed): 1 file(s) changed" in done.stdout
    wanted = DEEPSEEK_KIMI if then == new else DEEPSEEK
    assert (tree / SPEC).read_text() == wanted and (tree / MODEL).read_text() == EAGLE
    after = pk("status", "--target", tree, "--patches", then)
    assert after.returncode == 0, after.stdout + after.stderr
    entry = json.loads((tree / ".patchkit/state.json").read_text())["entries"][0]
    named = sorted(p["name"] for p in entry["patches"])
    assert named == ["0001-change.patch", "0002-change.patch"] and sorted(entry["files"]) == [SPEC, MODEL]

    undone = pk("revert", "--target", tree, "--patches", then)
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert snapshot(tree) == stock


def test_the_summary_of_several_sets_says_updated_for_a_set_moved_to_this_librarys_series(tree, scratch, tmp_path):
    """Several sets in one run: a set applied from another library that the run moves to this one's
    series is "updated from another library" in the run's last line, not counted as applied; a set the
    run applies to stock files is "applied" (before: "2 set(s) applied (demo, model)")."""
    old = write_library(tmp_path / "old", {"0.16.0": [make_patch(scratch, tree, {SPEC: DEEPSEEK})]}, name="demo")
    new = write_library(tmp_path / "new", {"0.16.0": [make_patch(scratch, tree, {SPEC: DEEPSEEK_KIMI})]}, name="demo")
    write_library(new, {"0.16.0": [make_patch(scratch, tree, {MODEL: EAGLE})]}, name="model")
    stock = snapshot(tree)
    assert pk("apply", "--target", tree, "--patches", old).returncode == 0
    would = pk("apply", "--dry-run", "--target", tree, "--patches", new)
    summary = "1 set(s) {} (model); 1 set(s) {} from another library (demo)"
    assert would.stdout.splitlines()[-1] == summary.format("would apply", "would be updated"), would.stdout
    done = pk("apply", "--target", tree, "--patches", new)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == summary.format("applied", "updated"), done.stdout
    assert (tree / SPEC).read_text() == DEEPSEEK_KIMI and (tree / MODEL).read_text() == EAGLE
    again = pk("apply", "--target", tree, "--patches", new)
    assert again.stdout.splitlines()[-1] == "0 set(s) applied; demo already-applied, model already-applied", (
        again.stdout
    )
    assert pk("revert", "--target", tree, "--patches", new).returncode == 0
    assert snapshot(tree) == stock


def test_a_file_the_new_series_no_longer_patches_goes_back_to_stock(tree, scratch, tmp_path):
    old, _ = libraries(tmp_path, tree, scratch)
    fewer = write_library(tmp_path / "fewer", {"0.16.0": [make_patch(scratch, tree, {SPEC: DEEPSEEK_KIMI})]})
    stock = snapshot(tree)
    assert pk("apply", "--target", tree, "--patches", old).returncode == 0
    said = one_line(pk("status", "--target", tree, "--patches", fewer).stdout)
    assert "applied from another library (0001, 0002 changed)" in said, said
    done = pk("apply", "--target", tree, "--patches", fewer)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / MODEL).read_text() == MODEL_PY and (tree / SPEC).read_text() == DEEPSEEK_KIMI
    entry = json.loads((tree / ".patchkit/state.json").read_text())["entries"][0]
    assert list(entry["files"]) == [SPEC]  # the file put back is no longer recorded
    whole_then_reverted_to(stock, tree, "--patches", fewer)


def plan_lines(result) -> list[str]:
    """The plan table of a piped apply --dry-run, from its title to its last line."""
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("plan: "))
    end = next(i for i, line in enumerate(lines) if line.startswith("dry run: "))
    return [" ".join(line.split()) for line in lines[start:end]]


def planned_row(result, path: str) -> str:
    return next(line for line in plan_lines(result) if line.startswith(path + " "))


def test_the_plan_of_an_update_says_which_patches_are_there_already(tree, scratch, tmp_path):
    """The update is planned on stock bytes, yet its table says what happens: a patch the earlier
    apply wrote, unchanged since, is `applied` (no file row: its change stays); the changed one
    `apply`; the JSON plan says the same."""
    old, new = libraries(tmp_path, tree, scratch)
    assert pk("apply", "--target", tree, "--patches", old).returncode == 0
    planned = pk("apply", "--dry-run", "--target", tree, "--patches", new)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert plan_lines(planned) == [
        "plan: would change 1 file(s)",
        "file hunks lines",
        "0001-change.patch applied",
        "0002-change.patch apply",
        planned_row(planned, SPEC),
    ], planned.stdout
    assert planned_row(planned, SPEC).startswith(f"{SPEC} 1 "), planned.stdout  # its one hunk
    said = next(line for line in planned.stdout.splitlines() if line.startswith("dry run: "))
    assert said.startswith("dry run: would update from another library (0002 changed): 1 file(s) would change"), said
    document = json.loads(pk("apply", "--dry-run", "--target", tree, "--patches", new, "--format", "json").stdout)
    assert [(step["patch"], step["state"]) for step in document["plan"]] == [
        ("0001-change.patch", "applied"),
        ("0002-change.patch", "apply"),
    ], document["plan"]


def test_the_plan_of_an_update_names_the_file_going_back_to_stock(tree, scratch, tmp_path):
    """A file the earlier series patched and the library's does not: the table's count holds it,
    and so does a row of its own, under the earlier series' change taken out."""
    old, _ = libraries(tmp_path, tree, scratch)
    fewer = write_library(tmp_path / "fewer", {"0.16.0": [make_patch(scratch, tree, {SPEC: DEEPSEEK_KIMI})]})
    assert pk("apply", "--target", tree, "--patches", old).returncode == 0
    planned = pk("apply", "--dry-run", "--target", tree, "--patches", fewer)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    lines = plan_lines(planned)
    assert lines[0] == "plan: would change 2 file(s)" and lines[1].startswith("file hunks lines"), lines
    assert lines[2:4] == ["0001-change.patch apply", planned_row(planned, SPEC)], lines
    assert lines[3].startswith(f"{SPEC} 1 "), lines
    assert lines[4:] == ["the earlier series' change revert", f"{MODEL} back to stock"], lines
    assert pk("apply", "--target", tree, "--patches", fewer).returncode == 0
    assert (tree / MODEL).read_text() == MODEL_PY  # the row said true


def test_verify_says_why_it_fails_and_its_fix_then_passes(tree, scratch, tmp_path):
    """verify's last line on a set applied from another library says why it fails and to run the fix
    it prints (its checks pass on the earlier series: "FAILED: 4 checks passed" read as a pass);
    that fix, run, leaves verify passing."""
    old, new = libraries(tmp_path, tree, scratch)
    assert pk("apply", "--target", tree, "--patches", old).returncode == 0
    checked = pk("verify", "--target", tree, "--patches", new)
    lines = checked.stdout.splitlines()
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert lines[-1] == "verify: FAILED: applied from another library (0002 changed): run the fix above", lines
    assert len(lines[-1]) <= 80  # a terminal's one line
    fix = next(line for line in lines if line.strip().startswith("fix: "))
    assert fix.strip() == f"fix: `patchkit apply --target {tree} --patches {new}` updates it", lines
    assert pk("apply", "--target", tree, "--patches", new).returncode == 0
    again = pk("verify", "--target", tree, "--patches", new)
    assert again.returncode == 0 and again.stdout.splitlines()[-1].startswith("verify: ok: "), again.stdout


def whole_then_reverted_to(stock: dict, tree: Path, *source: object) -> None:
    """status finds the tree whole (exit 0), and revert gives the stock files back exactly."""
    assert pk("status", "--target", tree, *source).returncode == 0
    assert pk("revert", "--target", tree, *source).returncode == 0
    assert snapshot(tree) == stock


def test_a_file_edited_since_is_refused_as_apply_refuses_it(tree, scratch, tmp_path):
    old, new = libraries(tmp_path, tree, scratch)
    stock = snapshot(tree)
    assert pk("apply", "--target", tree, "--patches", old).returncode == 0
    edited = (tree / SPEC).read_text() + "# mine\n"
    (tree / SPEC).write_text(edited)
    before = snapshot(tree)
    refused = pk("apply", "--target", tree, "--patches", new)
    said = one_line(refused.stdout + refused.stderr)
    assert refused.returncode == 1, said
    assert f"files edited after patchkit patched them: {SPEC}" in said, said
    assert f"`patchkit revert --target {tree} --patches {new} --force` (keeps a copy of the edits)" in said, said
    assert snapshot(tree) == before
    assert pk("revert", "--target", tree, "--patches", new, "--force").returncode == 0
    assert snapshot(tree) == stock
    assert pk("apply", "--target", tree, "--patches", new).returncode == 0
    whole_then_reverted_to(stock, tree, "--patches", new)


def test_saved_copies_lost_the_earlier_patches_reversed_give_stock(tree, scratch, tmp_path):
    old, new = libraries(tmp_path, tree, scratch)
    stock = snapshot(tree)
    assert pk("apply", "--target", tree, "--patches", old).returncode == 0
    shutil.rmtree(tree / ".patchkit/objects")  # the old library is still where the record says
    done = pk("apply", "--target", tree, "--patches", new)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / SPEC).read_text() == DEEPSEEK_KIMI
    assert pk("revert", "--target", tree, "--patches", new).returncode == 0
    assert snapshot(tree) == stock


def test_nothing_at_hand_gives_stock_apply_says_revert_first(tree, scratch, tmp_path):
    old, new = libraries(tmp_path, tree, scratch)
    assert pk("apply", "--target", tree, "--patches", old).returncode == 0
    shutil.rmtree(tree / ".patchkit/objects")
    shutil.rmtree(old)  # the earlier series nowhere: nothing proves the originals
    before = snapshot(tree)
    status = pk("status", "--target", tree, "--patches", new)
    said = one_line(status.stdout + status.stderr)
    assert status.returncode == 1 and "applied from another library (0002 changed)" in said, said
    revert = f"`patchkit revert --target {tree} --patches {new} --force` (only the record vouches for the originals)"
    assert revert in said, said
    refused = pk("apply", "--target", tree, "--patches", new)
    said = one_line(refused.stdout + refused.stderr)
    assert refused.returncode == 1 and "nothing was written" in said, said
    assert f"`patchkit revert --target {tree} --patches {new} --force`, then" in said, said
    assert snapshot(tree) == before


def test_an_edited_patch_file_is_applied_in_place_of_its_earlier_text(tree, scratch, tmp_path):
    mine = tmp_path / "my.patch"
    first, second = (
        make_patch(scratch, tree, {SPEC: DEEPSEEK, MODEL: EAGLE}),
        make_patch(scratch, tree, {SPEC: DEEPSEEK_KIMI}),
    )
    dist = "vllm-0.16.0.dist-info"  # vLLM's RECORD vouches for the originals: the earlier text will be gone
    (tree / dist / "RECORD").write_text(record_rows(tree, dist))
    mine.write_bytes(first)
    stock = snapshot(tree)
    assert pk("apply", "--target", tree, "--patch", mine).returncode == 0
    mine.write_bytes(second)  # edited: the model file left alone now
    status = pk("status", "--target", tree, "--patch", mine)
    said = one_line(status.stdout + status.stderr)
    assert status.returncode == 1, said
    assert "the earlier text of my.patch is applied" in said, said
    assert f"`patchkit apply --target {tree} --patch {mine}` updates it" in said, said
    done = pk("apply", "--target", tree, "--patch", mine)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "applied in place of the earlier text of my.patch" in done.stdout
    assert (tree / SPEC).read_text() == DEEPSEEK_KIMI and (tree / MODEL).read_text() == MODEL_PY
    entries = json.loads((tree / ".patchkit/state.json").read_text())["entries"]
    assert len(entries) == 1 and list(entries[0]["files"]) == [SPEC]  # one apply recorded, the earlier gone
    assert pk("status", "--target", tree, "--patch", mine).returncode == 0
    undone = pk("revert", "--target", tree, "--patch", mine)
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert snapshot(tree) == stock


def test_preflight_and_run_apply_say_it_and_run_apply_updates_it(tmp_path):
    tree, old, launch, env, marker = stand_in_launch(tmp_path / "old")
    first = next(iter(patched_files("0.16.0")))
    newer = patched_files("0.16.0")[first] + "# newer\n"
    _, new = write_eagle3_setup(tmp_path / "new", patched={first: newer})
    assert pk("apply", "--target", tree, "--patches", old, "--no-import").returncode == 0
    judged = run_cli("preflight", "--no-import", "--target", tree, "--patches", new, "--", *launch, env=env)
    said = one_line(judged.stdout)
    assert judged.returncode == 1, said
    assert "the eagle3 series on vLLM 0.16.0 was applied from another library (0001 changed)" in said, said
    assert f"run `patchkit apply --target {tree} --patches {new}` updates it" in said, said
    launched = run_cli("run", "--apply", "--target", tree, "--patches", new, "--", *launch, env=env)
    assert "updated from another library (0001 changed)" in launched.stdout, launched.stdout + launched.stderr
    assert launched.returncode == 7 and marker.exists(), launched.stdout + launched.stderr  # then launched
    assert (tree / first).read_text() == newer
    assert pk("status", "--target", tree, "--patches", new).returncode == 0


# review38 B1's fix of eagle3 0003 (0.11.0-0.17.0): layer 0's aux hidden state is the embeddings alone
B1_FIXED = """                # before the first layer there is no residual yet: its input is the embeddings
                aux_hidden_states.append(
                    hidden_states if residual is None else hidden_states + residual
                )
"""
B1_BEFORE = "                aux_hidden_states.append(hidden_states + residual)\n"
DEEPSEEK_V2 = "vllm/model_executor/models/deepseek_v2.py"
THIRD = "0003-deepseek-v2-supports-eagle3.patch"


@pytest.mark.release
def test_a_real_tree_applied_before_the_b1_fix_is_updated_by_apply(tmp_path):
    """vLLM 0.16.0's stock files applied with the library as main had it before the fix (its 0003 adds
    `hidden_states + residual`), then apply with the library the fix is in: one transaction, 0003's
    file now the fixed series' output, every other file as it was, status 0, revert = stock bytes."""
    stock = lay_out_release("0.16.0", files_for("0.16.0"), tmp_path / "stock")
    fixed = read_patch(default_root() / "eagle3" / "0.16.0" / THIRD)
    made = dry_run(stock, [fixed]).content(DEEPSEEK_V2)
    assert made is not None and made.count(B1_FIXED.encode()) == 1, "the library holds the B1 fix"
    before = made.decode().replace(B1_FIXED, B1_BEFORE)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    header = fixed.raw.split(b"\n---\n", 1)[0].decode() + "\n"
    old = tmp_path / "old"
    shutil.copytree(default_root(), old)
    (old / "eagle3/0.16.0" / THIRD).write_bytes(make_patch(scratch, stock, {DEEPSEEK_V2: before}, header=header))
    series = old / "eagle3/0.16.0/series"
    lines = [line for line in series.read_text().splitlines() if not line.startswith(THIRD)]
    digest = hashlib.sha256((old / "eagle3/0.16.0" / THIRD).read_bytes()).hexdigest()
    series.write_text("\n".join([*lines[:2], f"{THIRD} sha256:{digest}", *lines[2:]]) + "\n")

    tree = tmp_path / "site"
    shutil.copytree(stock, tree)
    assert pk("apply", "--target", tree, "--patches", old, "--set", "eagle3", "--no-import").returncode == 0
    assert (tree / DEEPSEEK_V2).read_text().count(B1_BEFORE) == 1
    others = {p: b for p, b in snapshot(tree).items() if p != DEEPSEEK_V2}
    status = pk("status", "--target", tree, "--set", "eagle3")
    said = one_line(status.stdout)
    assert status.returncode == 1 and "applied from another library (0003 changed)" in said, said
    assert "conflict" not in said, said
    done = pk("apply", "--target", tree, "--set", "eagle3", "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "updated from another library (0003 changed): 1 file(s) changed" in done.stdout, done.stdout
    assert (tree / DEEPSEEK_V2).read_bytes() == dry_run(stock, read_eagle3(default_root())).content(DEEPSEEK_V2)
    assert {p: b for p, b in snapshot(tree).items() if p != DEEPSEEK_V2} == others
    assert pk("status", "--target", tree, "--set", "eagle3").returncode == 0
    assert pk("revert", "--target", tree).returncode == 0
    assert snapshot(tree) == snapshot(stock)


def read_eagle3(library: Path) -> list[Patch]:
    (release,) = [r for r in load_library(library)["eagle3"].releases if r.directory.name == "0.16.0"]
    return release.read_patches(load_library(library)["eagle3"].roots)


def test_a_crash_at_each_step_of_the_update_leaves_one_library_or_the_other(tmp_path):
    """The update is one transaction: a SIGKILL or a full disk at each of its commit steps leaves the
    tree as the earlier library's apply left it or as the update makes it, never mixed; the next
    command (status, recover, apply, revert in turn) leaves no journal, and revert gives stock bytes."""
    stock = write_tree(tmp_path / "stock")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    old, _ = libraries(tmp_path, stock, scratch)
    created = "vllm/brand/new.py"  # the newer series: spec changed again, the model back to stock, a file made
    newer = [make_patch(scratch, stock, {SPEC: DEEPSEEK_KIMI, created: "NEW = 1\n"})]
    new = write_library(tmp_path / "newer", {"0.16.0": newer})
    earlier, updated = tmp_path / "earlier", tmp_path / "updated"
    shutil.copytree(stock, earlier)
    assert pk("apply", "--target", earlier, "--patches", old, "--no-import").returncode == 0
    shutil.copytree(earlier, updated)
    assert pk("apply", "--target", updated, "--patches", new, "--no-import").returncode == 0
    prints = {
        name: ct.fingerprint(tree) for name, tree in [("stock", stock), ("earlier", earlier), ("updated", updated)]
    }
    assert prints["earlier"] != prints["updated"] and (updated / "patchkit_guard.py").exists()
    work = tmp_path / "work"
    wanted = {"apply": {"updated"}, "revert": {"stock"}, "status": {"earlier", "updated"}}
    steps = 0
    for n in sweep_trials(range(1, 300)):
        for mode in ("kill", "raise"):
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(earlier, work, symlinks=True)
            code, out = ct.run_cli(
                ["apply", "--target", str(work), "--patches", str(new), "--no-import"], f"{n}:{mode}", served=True
            )
            left = next((name for name, known in prints.items() if known == ct.fingerprint(work)), "mixed")
            # a full disk rolls back at once; a SIGKILL leaves the journal the next command recovers from
            assert left == ("updated" if code == 0 else "earlier") or mode == "kill", (n, mode, code, out)
            following = ct.NEXT[(n + (mode == "raise")) % len(ct.NEXT)]
            library = [] if following == "recover" else ["--patches", str(new)]  # recover: the tree alone
            again, said = ct.then([following, "--target", str(work), *library])
            left = next((name for name, known in prints.items() if known == ct.fingerprint(work)), "mixed")
            assert not (work / ".patchkit/journal.json").exists(), (n, mode, following, said)
            assert left in wanted.get(following, {"earlier", "updated"}), (n, mode, following, again, said)
            if following == "revert" or code == 0:
                continue
            assert ct.then(["revert", "--target", str(work), "--patches", str(new)])[0] == 0, (n, mode)
            assert ct.fingerprint(work) == prints["stock"], (n, mode)
        if code == 0:  # past the commit's last step
            break
        steps = n
    assert steps > 10, steps
