"""Upstream's change reaching a tree patchkit did not write it into: by an upgrade of vLLM over a
patched tree, in a checkout with no RECORD, or only in some of a set's files (audit23b R1, R2, R3).
patchkit never records, or reverses, a change it did not write."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from helpers import (
    BEHAVIOUR_JUDGE,
    EAGLE_MODEL,
    MODEL,
    MODEL_PY,
    SPEC,
    SPEC_PY,
    Releases,
    cli_runner,
    make_patch,
    patched_spec,
    pip_install,
    release_of,
    spec_and_model,
    verify,
    write_library,
    write_tree,
    write_wheel,
)

from patchkit.store.state import read_state

FIXED = {SPEC: patched_spec(), MODEL: EAGLE_MODEL}


def state_of(run, site: Path, library: Path) -> str:
    status = run("status", "--target", site, "--patches", library, "--format", "json")
    return json.loads(status.stdout)["state"]


def test_an_upgrade_onto_a_release_holding_the_change_is_upstream_and_revert_keeps_it(run, tmp_path, open_library):
    """Patched on 0.16.0, then `pip install -U` to a 0.17.0 whose own files hold the change (R1)."""
    site = tmp_path / "up"
    pip_install(site, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    assert run("apply", "--target", site, "--patches", open_library).exit_code == 0
    pip_install(site, "0.17.0", FIXED)  # .patchkit/ and the guard stay, as pip leaves them
    upgraded = spec_and_model(site)

    assert state_of(run, site, open_library) == "upstream"
    applied = run("apply", "--target", site, "--patches", open_library)
    assert applied.exit_code == 0, applied.output
    assert "no record of it" not in applied.output
    assert "already hold this set's change" in applied.output
    assert not read_state(site).entries and spec_and_model(site) == upgraded

    reverted = run("revert", "--target", site, "--patches", open_library)
    assert reverted.exit_code == 0, reverted.output
    assert spec_and_model(site) == upgraded  # upstream's change, as the release ships it


def checkout(root: Path, files: dict[str, str], version: str = "0.17.1.dev3+gabc1234") -> Path:
    """A vLLM source checkout: vllm/ and its _version.py, no dist-info and so no RECORD."""
    for rel, content in {"vllm/__init__.py": "", "vllm/_version.py": f'__version__ = "{version}"\n', **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return root


def test_a_checkout_holding_the_change_is_not_recorded_nor_reversed(run, tmp_path, open_library):
    """No RECORD proves stock (R2): files that already hold the change are upstream, or applied by
    hand; apply records nothing, revert leaves them."""
    co = checkout(tmp_path / "co", FIXED)
    status = run("status", "--target", co, "--patches", open_library, "--format", "json")
    assert json.loads(status.stdout)["state"] == "unrecorded", status.output  # nothing proves upstream (words30)
    assert "upstream, or applied by hand" in run("status", "--target", co, "--patches", open_library).output
    verified = run("verify", "--target", co, "--patches", open_library)  # audit23 F1: nothing proves it stock
    assert verified.exit_code == 0 and "close the set's range" not in verified.output, verified.output
    assert "stock" not in verified.output, verified.output

    applied = run("apply", "--target", co, "--patches", open_library)
    assert applied.exit_code == 0, applied.output
    assert "no record of it" not in applied.output
    assert not read_state(co).entries and spec_and_model(co) == {p: c.encode() for p, c in FIXED.items()}

    reverted = run("revert", "--target", co, "--patches", open_library)
    assert reverted.exit_code == 0, reverted.output
    assert spec_and_model(co) == {p: c.encode() for p, c in FIXED.items()}


def _git(root: Path, *args: str) -> None:
    who = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(root), *who, *args], check=True, capture_output=True)


def _printed(text: str) -> list[list[str]]:
    """The commands a message prints in backquotes, in order, as argument lists."""
    return [shlex.split(c) for c in re.findall(r"`([^`]+)`", " ".join(text.split()))]


@pytest.fixture
def hand_patched(tmp_path) -> Path:
    """A git checkout of "0.17.0" (no RECORD) whose files got the set's change by hand."""
    co = checkout(tmp_path / "co", {SPEC: SPEC_PY, MODEL: MODEL_PY}, version="0.17.0")
    _git(co, "init", "-q")
    _git(co, "add", "-A")
    _git(co, "commit", "-qm", "0.17.0")
    for path, content in FIXED.items():
        (co / path).write_text(content)
    return co


def test_a_hand_patched_checkout_of_a_cached_release_is_said_so_with_the_commands_that_hand_it_over(
    run, tmp_path, open_library, hand_patched
):
    """audit23 F1, F2: the fetch cache holds 0.17.0's published RECORD, unlike these files: status
    called them upstream "on its stock files" and verify told to close the set's range, with no
    command to give the change to patchkit. Now: applied by hand; the printed commands, run in order,
    leave it applied with a record, and revert gives the checkout's own files."""
    write_wheel(tmp_path / "wheels", "0.17.0", {SPEC: SPEC_PY.encode(), MODEL: MODEL_PY.encode()})
    co = hand_patched
    status = run("status", "--target", co, "--patches", open_library)
    said = " ".join(status.output.split())
    assert status.exit_code == 0, status.output
    assert "unlike its stock files (the fetch cache's): applied by hand" in said, said
    assert "stock files 6" not in said and "on its files, applied by hand" in said, said
    verified = run("verify", "--target", co, "--patches", open_library)
    assert verified.exit_code == 0, verified.output
    assert "close the set's range" not in verified.output and "upstream:" not in verified.output, verified.output

    restore, apply = _printed(status.output)[:2]
    assert restore[:4] == ["git", "-C", str(co), "checkout"] and set(restore[5:]) == {SPEC, MODEL}, restore
    subprocess.run(restore, check=True, capture_output=True)
    assert apply[:3] == ["patchkit", "apply", "--target"], apply
    assert run(*apply[1:]).exit_code == 0
    assert state_of(run, co, open_library) == "applied" and read_state(co).entries
    assert run("revert", "--target", co, "--patches", open_library).exit_code == 0
    assert spec_and_model(co) == {SPEC: SPEC_PY.encode(), MODEL: MODEL_PY.encode()}


def test_a_checkout_whose_files_are_the_cached_releases_own_is_stock(run, tmp_path, open_library, hand_patched):
    """The other side of F1: the cached RECORD lists these very files: the release ships the change."""
    write_wheel(tmp_path / "wheels", "0.17.0", {p: c.encode() for p, c in FIXED.items()})
    verified = run("verify", "--target", hand_patched, "--patches", open_library)
    assert verified.exit_code == 0, verified.output
    assert "the stock files of vLLM 0.17.0 already hold this set's change" in verified.output
    assert "close the set's range" in verified.output


def test_a_checkout_patchkit_patched_still_reverts(run, tmp_path, open_library):
    """The other side: what patchkit applied (and recorded) on a checkout it reverses byte for byte."""
    co = checkout(tmp_path / "co", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    assert run("apply", "--target", co, "--patches", open_library).exit_code == 0
    assert state_of(run, co, open_library) == "applied"
    assert run("revert", "--target", co, "--patches", open_library).exit_code == 0
    assert spec_and_model(co) == {SPEC: SPEC_PY.encode(), MODEL: MODEL_PY.encode()}


# R3: a release where upstream fixed one of the set's two parsers
ONE = "vllm/tool_parsers/one_parser.py"
TWO = "vllm/tool_parsers/two_parser.py"
STOCK = "class DemoParser:\n    BROKEN = True\n"
FIXED_PARSER = "class DemoParser:\n    BROKEN = False\n"


@pytest.fixture
def two_parsers(scratch) -> Path:
    """An open-ended set fixing two parsers (0001: one, 0002: two), with a behaviour test."""
    stock = write_tree(scratch / "stock", "0.16.0", {ONE: STOCK, TWO: STOCK})
    patches = [make_patch(scratch, stock, {ONE: FIXED_PARSER}), make_patch(scratch, stock, {TWO: FIXED_PARSER})]
    root = write_library(scratch / "two", {"0.16.0": patches}, versions={"0.16.0": ">=0.16.0"}, upstream=None)
    (root / "demo" / "judge.py").write_text(BEHAVIOUR_JUDGE)
    manifest = root / "demo" / "set.toml"
    manifest.write_text('behaviour = "judge.py"\n' + manifest.read_text())
    return root


def test_a_tree_of_a_release_fixing_one_file_is_not_partly_applied_and_gets_the_rest(run, tmp_path, two_parsers):
    site = tmp_path / "half"
    pip_install(site, "0.17.0", {ONE: FIXED_PARSER, TWO: STOCK})
    status = run("status", "--target", site, "--patches", two_parsers)
    assert "partial" not in status.output and "some patches" not in status.output, status.output
    assert "the stock files of vLLM 0.17.0 already hold the change of 0001-change.patch" in status.output
    assert json.loads(run("status", "--target", site, "--patches", two_parsers, "--format", "json").stdout)[
        "state"
    ] == ("not-applied")

    applied = run("apply", "--target", site, "--patches", two_parsers)
    assert applied.exit_code == 0, applied.output
    assert (site / TWO).read_text() == FIXED_PARSER
    assert [p["name"] for p in read_state(site).entries[0].patches] == ["0002-change.patch"]
    verified = run("verify", "--target", site, "--patches", two_parsers)
    assert verified.exit_code == 0, verified.output
    assert run("revert", "--target", site, "--patches", two_parsers).exit_code == 0
    assert (site / ONE).read_text() == FIXED_PARSER and (site / TWO).read_text() == STOCK  # as pip left them


def test_verify_of_a_release_fixing_one_file_judges_its_stock_files_and_says_what_to_do(
    tmp_path, monkeypatch, two_parsers
):
    Releases(tmp_path / "index", monkeypatch).add("0.99.0", {ONE: FIXED_PARSER, TWO: STOCK})
    done = verify(two_parsers, "0.99.0")
    [release] = json.loads(done.stdout)["releases"]
    assert done.exit_code == 1, done.output
    assert (release["outcome"], release["stock_behaviour"]) == ("check-failed", "fails"), release
    assert "is it upstream?" not in release["detail"]
    assert release["detail"].startswith("the stock files of 0.99.0 already hold 0001-change.patch's change"), release
    assert "reverted byte-identical" in release["detail"]  # the rest applied, checked and reverted
    assert "0.99.0" in release["hint"] and "without 0001-change.patch" in release["hint"], release
    text = verify(two_parsers, "0.99.0", "text")
    assert "not judged" not in text.output and "the stock files of 0.99.0 already hold" in text.output, text.output


def test_the_fix_verify_prints_for_a_release_fixing_one_file_works_as_printed(tmp_path, monkeypatch, two_parsers):
    """The fix verify prints, run as printed: the port writes 0.99.0's series without 0001 (the
    stock files hold it) and ends the open range before 0.99.0."""
    releases = Releases(tmp_path / "index", monkeypatch)
    releases.add("0.16.0", {ONE: STOCK, TWO: STOCK})
    releases.add("0.99.0", {ONE: FIXED_PARSER, TWO: STOCK})
    hint = release_of(verify(two_parsers, "0.99.0"))["hint"]
    fix = hint.split("`")[1]
    assert fix.startswith("patchkit port "), hint

    ported = cli_runner()(*shlex.split(fix)[1:])
    assert ported.exit_code == 0, ported.output
    manifest = (two_parsers / "demo" / "set.toml").read_text()
    assert 'versions = ">=0.16.0,<0.99.0"' in manifest and 'versions = ">=0.99.0"' in manifest, manifest
    series = (two_parsers / "demo" / "0.99.0" / "series").read_text()
    assert "0002-change.patch" in series and "0001-change.patch" not in series, series  # upstream's: dropped
    for version, series in (("0.99.0", "0.99.0"), ("0.16.0", "0.16.0")):
        done = release_of(verify(two_parsers, version))
        assert (done["outcome"], done["series"]) == ("patched", series), done


def test_a_dev_build_patched_with_vllm_version_is_judged_as_it_was_applied(run, tree, scratch, tmp_path):
    """audit23b N2: `apply --vllm-version 0.16.0` on a 0.17.0.dev5 build (the fix patchkit gives
    there); status and verify then judged the series a dry run picks for 0.17.0.dev5 instead."""
    spec, model = make_patch(scratch, tree, {SPEC: patched_spec()}), make_patch(scratch, tree, {MODEL: EAGLE_MODEL})
    library = write_library(
        scratch / "lib",
        {"0.16.0": [spec, model], "0.17.0": [spec]},
        versions={"0.16.0": ">=0.16.0,<0.17.0", "0.17.0": ">=0.17.0"},
        upstream=None,
    )
    site = tmp_path / "dev"
    pip_install(site, "0.17.0.dev5+gabc1234", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    applied = run("apply", "--target", site, "--patches", library, "--vllm-version", "0.16.0")
    assert applied.exit_code == 0, applied.output

    status = run("status", "--target", site, "--patches", library, "--format", "json")
    said = json.loads(status.stdout)
    assert (said["state"], said["series"], len(said["patches"])) == ("applied", "0.16.0", 2), status.stdout
    assert "patched with --vllm-version 0.16.0" in run("status", "--target", site, "--patches", library).output
    verified = run("verify", "--target", site, "--patches", library)
    assert verified.exit_code == 0, verified.output
    assert run("revert", "--target", site, "--patches", library).exit_code == 0
    assert spec_and_model(site) == {SPEC: SPEC_PY.encode(), MODEL: MODEL_PY.encode()}


def test_the_conflict_fix_verify_prints_for_an_open_ended_set_works_as_printed(tmp_path, monkeypatch, scratch, tree):
    """audit23b N3: `verify --latest` on a release where the open-ended set conflicts printed
    `patchkit port … --from 0.16.0 --to V`, which refused ("the library already has a series for
    V"). As printed, it now ports into a new entry and narrows the open range to end before V."""
    library = write_library(
        scratch / "lib",
        {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]},
        versions={"0.16.0": ">=0.16.0"},
        upstream=None,
    )
    releases = Releases(tmp_path / "index", monkeypatch)
    releases.add("0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    releases.add("0.99.0", {SPEC: SPEC_PY.replace('"llama"', '"llama3"'), MODEL: MODEL_PY})  # in 0001's context
    conflict = release_of(verify(library, "0.99.0"))
    assert conflict["outcome"] == "conflict", conflict
    fix = conflict["hint"].split("`")[1]
    assert fix.startswith("patchkit port "), conflict["hint"]

    ported = cli_runner()(*shlex.split(fix)[1:])
    assert ported.exit_code == 0, ported.output
    manifest = (library / "demo" / "set.toml").read_text()
    assert 'versions = ">=0.16.0,<0.99.0"' in manifest and 'versions = ">=0.99.0"' in manifest, manifest
    for version, series in (("0.99.0", "0.99.0"), ("0.16.0", "0.16.0")):
        done = release_of(verify(library, version))
        assert (done["outcome"], done["series"]) == ("patched", series), done


@pytest.mark.parametrize("git", [True, False])
def test_a_local_edit_in_a_checkout_gets_a_fix_that_puts_its_own_file_back_not_pip(run, tmp_path, open_library, git):
    """audit23 F4: a checkout (no dist-info) with a line the series changes edited: the conflict's fix
    was `pip install --force-reinstall vllm==...`, which restores no checkout's file (and would
    replace an editable install). In a git work tree the fix is `git checkout -- FILE`, and following
    it lets apply patch; elsewhere, the file from the user's own source."""
    co = checkout(tmp_path / "co", {SPEC: SPEC_PY, MODEL: MODEL_PY}, version="0.17.0")
    if git:
        _git(co, "init", "-q")
        _git(co, "add", "-A")
        _git(co, "commit", "-qm", "0.17.0")
    (co / MODEL).write_text(MODEL_PY.replace("SupportsPP):", "SupportsPP):  # mine"))
    status = run("status", "--target", co, "--patches", open_library)
    said = " ".join(status.output.split())
    assert status.exit_code == 1 and "conflict" in said, status.output
    assert "pip" not in said, said
    if not git:
        assert f"restore {MODEL} from your source (the stock file back), then `patchkit apply" in said, said
        return
    [chain] = re.findall(r"`([^`]+)`", said.split("fix: ", 1)[1].split(" note:")[0])
    keep, restore, apply = (shlex.split(step) for step in chain.split(" && "))
    assert keep[:3] == ["cp", "-p", "--"] and restore == ["git", "-C", str(co), "checkout", "--", MODEL], chain
    subprocess.run(keep, check=True, capture_output=True)
    subprocess.run(restore, check=True, capture_output=True)
    assert run(*apply[1:]).exit_code == 0
    assert state_of(run, co, open_library) == "applied"


def _git_out(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def two_tags(tmp_path) -> Path:
    """A git checkout tagged v0.16.0 and v0.17.0 (each file changed by the later release, away from
    the hunks), at v0.16.0; `.patchkit/` ignored, as a user keeps it out of git."""
    co = tmp_path / "co"
    for version in ("0.16.0", "0.17.0"):
        later = "" if version == "0.16.0" else f"# {version}\n"
        checkout(co, {SPEC: SPEC_PY + later, MODEL: MODEL_PY + later, ".gitignore": ".patchkit/\n"}, version)
        if version == "0.16.0":
            _git(co, "init", "-q")
        _git(co, "add", "-A")
        _git(co, "commit", "-qm", version)
        _git(co, "tag", f"v{version}")
    _git(co, "checkout", "-q", "v0.16.0")
    return co


@pytest.mark.parametrize("way_out", [("revert", "--force"), ("revert",), ("apply",)])
def test_a_checkout_moved_to_another_release_under_its_record_has_a_way_out(run, open_library, two_tags, way_out):
    """audit23 F3: patched at v0.16.0, then `git checkout -f v0.17.0` with `.patchkit/` kept: status
    said drifted (and partial), revert --force was refused naming a pip reinstall (no help on a
    checkout) and apply named revert --force: a loop, `rm -r .patchkit` said nowhere. The record is
    another release's: said stale; revert drops it writing no file, apply discards it and patches."""
    co = two_tags
    on_tree = ("--target", co, "--patches", open_library)
    assert run("apply", *on_tree).exit_code == 0
    _git(co, "checkout", "-q", "-f", "v0.17.0")
    moved = spec_and_model(co)

    status = run("status", *on_tree)
    said = " ".join(status.output.split())
    assert status.exit_code == 0, status.output
    assert "recorded 0.16.0, the checkout is 0.17.0 now: the old record is stale" in said, said
    assert "drifted" not in said and "partial" not in said and "pip" not in said, said

    done = run(*way_out, *on_tree)
    assert done.exit_code == 0, done.output
    if way_out[0] == "revert":
        assert spec_and_model(co) == moved and not read_state(co).entries
        assert _git_out(co, "status", "--porcelain") == ""
        assert run("apply", *on_tree).exit_code == 0
    assert state_of(run, co, open_library) == "applied"
    assert read_state(co).entries[0].vllm_version == "0.17.0"
    assert run("revert", *on_tree).exit_code == 0
    assert _git_out(co, "status", "--porcelain") == "" and spec_and_model(co) == moved


def test_a_moved_checkout_with_one_file_still_patchkits_gets_gits_fix_not_pip(run, open_library, two_tags):
    """The same move, one file kept as patchkit wrote it at v0.16.0: not stale (that file is the
    record's), and revert refuses to mix the releases; its fix was a pip reinstall, which restores no
    checkout's file. Now git's checkout of the recorded files; following it, apply patches v0.17.0."""
    co = two_tags
    on_tree = ("--target", co, "--patches", open_library)
    assert run("apply", *on_tree).exit_code == 0
    kept = (co / SPEC).read_bytes()
    _git(co, "checkout", "-q", "-f", "v0.17.0")
    (co / SPEC).write_bytes(kept)

    refused = run("revert", *on_tree, "--force")
    said = " ".join(refused.output.split())
    assert refused.exit_code == 1 and "pip" not in said, said
    restore, apply = _printed(said.split("hint: ", 1)[1])[:2]
    assert restore[:5] == ["git", "-C", str(co), "checkout", "--"] and set(restore[5:]) == {SPEC, MODEL}, restore
    subprocess.run(restore, check=True, capture_output=True)
    assert run(*apply[1:]).exit_code == 0
    assert state_of(run, co, open_library) == "applied"
    assert read_state(co).entries[0].vllm_version == "0.17.0"
