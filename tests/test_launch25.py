"""launch25: issue 20's leftovers on the launch rules, the guard against status, and the caches.

1. A [[needed_by.when]] entry's `versions`: a rule asks what that release needs. eagle3's draft_model
   entry holds from 0.16.0 (0.15.x's DraftModelProposer loads its drafter itself); deepseek_v32 and
   deepseek_v4 need deepseek-tool-calls below 0.23.0 only (its 0.23.0 series leaves the V3.2 file).
   Each rule is held against the stock files of the releases it covers (release tier).
2. `preflight`/`run --set X` leaving out a set Y the launch needs: Y judged from the tree's record
   (applied, no drift: a pass said as a note; else the failure naming it).
3. A launch guard `pip uninstall patchkit-guard` took: status warns (exit 0: the guard refuses
   nothing) with the fix, preflight and run fail a launch that would load it; apply puts it back.
4. After a vLLM upgrade the guard's fix (and each stale record's) applies the recorded sets only,
   not every covering set.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
from helpers import (
    EAGLE_MODEL,
    LIBRARY,
    MODEL,
    MODEL_PY,
    SPEC,
    SPEC_PY,
    lay_out_release,
    make_patch,
    patched_spec,
    pip_install,
    run_cli,
    run_cli_judged,
    run_cli_read_only,
    run_cli_writing,
    write_library,
    write_tree,
)
from launch_fixtures import (
    DEEPSEEK_V3,
    KIMI_K25,
    LEFT_OUT,
    PARSER,
    REGISTRY,
    TOOLS,
    eagle3_and_tools,  # noqa: F401  (the fixture `setup`)
    serve,
    write_model,
)
from packaging.version import Version

from patchkit.base.errors import BadInput
from patchkit.engine.guard import is_installed
from patchkit.fetch import release_tree
from patchkit.releases.files import files_for
from patchkit.series.library import LaunchFacts, load_set, select
from patchkit.series.patchfile import touched_paths
from patchkit.store.state import read_state

KIMI = "KimiK25ForConditionalGeneration"


def rule_set(tmp_path: Path, needed_by: str) -> Path:
    directory = tmp_path / "own"
    (directory / "1.0").mkdir(parents=True)
    (directory / "1.0" / "series").write_text("")
    (directory / "set.toml").write_text(f'name = "own"\n\n{needed_by}\n[[releases]]\nversions = ">=1.0"\ndir = "1.0"\n')
    return directory


# --- 1. a rule's version range -------------------------------------------------------------------


def test_a_when_entry_s_versions_range_asks_only_on_its_releases(tmp_path):
    rule = load_set(
        rule_set(
            tmp_path,
            '[needed_by]\ntool_call_parsers = ["a"]\n\n'
            '[[needed_by.when]]\ntool_call_parsers = ["b"]\nversions = ">=2.1,<3"\n',
        )
    ).needed_by
    assert rule is not None
    assert rule.needs(LaunchFacts(tool_call_parser="a", version=Version("9.0")))
    assert rule.needs(LaunchFacts(tool_call_parser="b", version=Version("2.1.0")))
    assert rule.needs(LaunchFacts(tool_call_parser="b", version=Version("2.5.1rc1")))  # its release's range
    assert not rule.needs(LaunchFacts(tool_call_parser="b", version=Version("2.0.9")))
    assert not rule.needs(LaunchFacts(tool_call_parser="b", version=Version("3.0")))
    assert rule.needs(LaunchFacts(tool_call_parser="b"))  # the tree's vLLM not known: asked
    assert rule.described() == "--tool-call-parser a or --tool-call-parser b on vLLM <3,>=2.1"


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ('[[needed_by.when]]\ntool_call_parsers = ["b"]\nversions = "soon"\n', "`versions` must be a version range"),
        ('[[needed_by.when]]\ntool_call_parsers = ["b"]\nversions = [">=1"]\n', "`versions` must be a version range"),
        ('[[needed_by.when]]\nversions = ">=1"\n', "names no launch"),
        ('[needed_by]\ntool_call_parsers = ["b"]\nversions = ">=1"\n', "has no key 'versions'"),
    ],
)
def test_a_bad_versions_range_in_a_rule_is_refused_with_what_it_takes(tmp_path, table, said):
    with pytest.raises(BadInput, match=said):
        load_set(rule_set(tmp_path, table if table.startswith("[needed_by]") else "[needed_by]\n" + table))


# Which proposer loads a method's drafter (gpu_model_runner: uses_draft_model(), then use_eagle())
PROPOSERS = {
    "eagle": ("vllm/v1/spec_decode/eagle.py", "EagleProposer"),
    "mtp": ("vllm/v1/spec_decode/eagle.py", "EagleProposer"),
    "draft_model": ("vllm/v1/spec_decode/draft_model.py", "DraftModelProposer"),
}
BASE_LOADER = "vllm/v1/spec_decode/eagle.py"  # SpecDecodeBaseProposer.load_model: patch 0002's image token


def defines(source: str, class_name: str, method: str) -> bool:
    found = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name]
    assert found, class_name
    return any(isinstance(n, ast.FunctionDef) and n.name == method for n in found[0].body)


@pytest.mark.release
@pytest.mark.parametrize("release", ["0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1"])  # those with kimi_k25.py
def test_eagle3_s_rule_asks_a_kimi_k25_launch_exactly_when_the_base_proposer_loads_its_drafter(release):
    eagle3 = load_set(LIBRARY / "eagle3")
    selection = select(eagle3, Version(release))
    assert BASE_LOADER in touched_paths(selection.patches)
    tree = release_tree(release, sorted({path for path, _ in PROPOSERS.values()}))
    assert eagle3.needed_by is not None
    for method, (path, proposer) in PROPOSERS.items():
        base_loads = not defines((tree / path).read_text(encoding="utf-8"), proposer, "load_model")
        launch = LaunchFacts(method, None, (KIMI,), Version(release))
        assert eagle3.needed_by.needs(launch) == base_loads, f"{release} {method}"
    assert eagle3.needed_by.needs(LaunchFacts("eagle3", None, (), Version(release)))


TOOL_PARSERS = "vllm/tool_parsers"  # from 0.13.0: _TOOL_PARSERS_TO_REGISTER names each parser's module


def registry(tree: Path) -> dict[str, tuple[str, str]]:
    """Parser name -> (module file, class) as the release registers it."""
    module = ast.parse((tree / TOOL_PARSERS / "__init__.py").read_text(encoding="utf-8"))
    table = next(
        n.value
        for n in module.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_TOOL_PARSERS_TO_REGISTER"
    )
    return {name: (f"{TOOL_PARSERS}/{file}.py", cls) for name, (file, cls) in ast.literal_eval(table).items()}


def class_files(release: str, path: str, class_name: str) -> set[str]:
    """The files of a parser class and of the tool-parser classes it derives from."""
    tree = release_tree(release, [path])
    module = ast.parse((tree / path).read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name: n.module
        for n in module.body
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(TOOL_PARSERS.replace("/", "."))
        for alias in n.names
    }
    found = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    files = {path}
    for base in (b.id for b in found.bases if isinstance(b, ast.Name) and b.id in imported):
        files |= class_files(release, imported[base].replace(".", "/") + ".py", base)
    return files


@pytest.mark.release
@pytest.mark.parametrize("release", ["0.13.0", "0.18.1", "0.19.0", "0.20.0", "0.22.1", "0.23.0", "0.24.0", "0.34.0"])
def test_deepseek_tool_calls_rule_asks_a_parser_exactly_when_the_series_patches_its_class(release):
    deepseek = load_set(LIBRARY / "deepseek-tool-calls")
    rule = deepseek.needed_by
    assert rule is not None
    patched = set(touched_paths(select(deepseek, Version(release)).patches))
    registered = registry(release_tree(release, [f"{TOOL_PARSERS}/__init__.py"]))
    names = {*rule.tool_call_parsers, *(n for entry in rule.when for n in entry.tool_call_parsers)}
    assert {"deepseek_v3", "deepseek_v31", "deepseek_v32"} <= set(registered)
    for name in sorted(names & set(registered)):
        changed = bool(class_files(release, *registered[name]) & patched)
        assert rule.needs(LaunchFacts(None, name, (), Version(release))) == changed, f"{release} {name}"


def unused(done) -> dict[str, str]:
    return json.loads(done.stdout)["unused_sets"]


@pytest.mark.release
def test_a_kimi_k25_draft_model_launch_on_0_15_needs_no_eagle3_and_on_0_16_does(tmp_path):
    kimi = write_model(tmp_path / "kimi", KIMI_K25)
    # a Llama drafter of Kimi's vocabulary: a DeepSeek-V3 checkpoint is served as mtp whatever the method written
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024}
    drafter = write_model(tmp_path / "drafter", {**llama, "num_hidden_layers": 2, "vocab_size": 163840})
    spec = json.dumps({"method": "draft_model", "model": str(drafter), "num_speculative_tokens": 1})
    launch = ["vllm", "serve", str(kimi), "--trust-remote-code", "--speculative-config", spec]
    for release, needed in (("0.15.0", False), ("0.15.1", False), ("0.16.0", True)):
        site = lay_out_release(release, sorted({*files_for(release), REGISTRY}), tmp_path / release)
        done = run_cli_read_only(
            "preflight", "--target", site, "--no-import", "--set", "eagle3", "--format", "json", "--", *launch
        )
        said = f"{release}: {done.stdout} {done.stderr}"
        if needed:
            assert done.returncode == 1 and "eagle3" not in unused(done), said
        else:
            assert done.returncode == 0 and unused(done) == {"eagle3": "not applied"}, said


@pytest.mark.release
def test_a_deepseek_v32_launch_needs_deepseek_tool_calls_below_0_23_only(tmp_path):
    model = write_model(tmp_path / "deepseek", DEEPSEEK_V3)
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}  # run's exec fails (exit 4): it got that far
    for release, needed in (("0.22.1", True), ("0.23.0", False)):
        site = lay_out_release(release, sorted({*files_for(release), REGISTRY}), tmp_path / release)
        for parser in ("deepseek_v32", "deepseek_v4"):
            launch = ["vllm", "serve", str(model), "--enable-auto-tool-choice", "--tool-call-parser", parser]
            done = run_cli_read_only("preflight", "--target", site, "--no-import", "--format", "json", "--", *launch)
            said = f"{release} {parser}: {done.stdout} {done.stderr}"
            if needed:
                assert done.returncode == 1 and "deepseek-tool-calls" not in unused(done), said
            else:
                assert done.returncode == 0 and unused(done)["deepseek-tool-calls"] == "not applied", said
            ran = run_cli("run", "--target", site, "--", *launch, env=no_vllm)
            assert ran.returncode == (1 if needed else 4), f"{said} {ran.stdout} {ran.stderr}"


# --- 4. the guard's fix after a vLLM upgrade names the recorded sets --------------------------------

OTHER = "vllm/other.py"


def test_the_guard_s_fix_after_a_vllm_upgrade_applies_the_recorded_sets_only(tmp_path):
    tree, library = three_sets(tmp_path)
    pip_install(tree, "0.17.0", {SPEC: SPEC_PY, MODEL: MODEL_PY, OTHER: "x = 1\n"})
    recorded = f"`patchkit apply --target {tree} --patches {library} --set model --set spec`"
    for chosen in ((), ("--set", "spec")):
        status = run_cli_read_only("status", "--target", tree, "--patches", library, *chosen)
        said = status.stdout + status.stderr
        assert status.returncode == 1 and f"fix: run {recorded} (it records" in said, said
        assert said.count(f"fix: {recorded} discards them") == 1, said  # the stale records' one warning
    fixed = run_cli_judged(*shlex.split(recorded.strip("`"))[1:], "--no-import")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert run_cli_read_only("status", "--target", tree, "--patches", library, "--set", "spec").returncode == 0
    assert sorted(e.set_name for e in read_state(tree).entries) == ["model", "spec"]  # `other` left alone
    assert (tree / OTHER).read_text() == "x = 1\n"


# --- 3. the guard pip uninstalled ------------------------------------------------------------------


def three_sets(tmp_path: Path) -> tuple[Path, Path]:
    """A tree of three files and a library of one set for each; spec and model applied."""
    tree = write_tree(tmp_path / "site", files={SPEC: SPEC_PY, MODEL: MODEL_PY, OTHER: "x = 1\n"})
    library = tmp_path / "lib"
    for name, path, content in (
        ("spec", SPEC, patched_spec()),
        ("model", MODEL, EAGLE_MODEL),
        ("other", OTHER, "x = 2\n"),
    ):
        patch = make_patch(tmp_path, tree, {path: content})
        write_library(library, {"0.16.0": [patch]}, versions={"0.16.0": ">=0.16.0"}, upstream=None, name=name)
    applied = run_cli_writing(
        "apply", "--target", tree, "--patches", library, "--set", "spec", "--set", "model", "--no-import"
    )
    assert applied.returncode == 0, applied.stderr
    return tree, library


def pip_uninstall_guard(tree: Path) -> None:
    """What `pip uninstall patchkit-guard` removes: the files its RECORD lists."""
    (tree / "patchkit_guard.py").unlink()
    for info in tree.glob("patchkit_guard-*.dist-info"):
        shutil.rmtree(info)


def retarget_guard(tree: Path) -> None:
    """The guard's entry point made to load another module: vLLM runs no guard."""
    (info,) = tree.glob("patchkit_guard-*.dist-info")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\npatchkit_guard = os:getcwd\n")


@pytest.mark.parametrize(("breaks", "then"), [(pip_uninstall_guard, 0), (pip_uninstall_guard, 1), (retarget_guard, 0)])
def test_a_guard_that_no_longer_loads_is_said_by_status_and_fails_a_launch_until_apply_settles_it(
    tmp_path, breaks, then
):
    tree, library = three_sets(tmp_path)
    breaks(tree)
    model = write_model(tmp_path / "model", DEEPSEEK_V3)
    one = ("--target", tree, "--patches", library, "--set", "spec")  # each takes one --set
    status = run_cli_read_only("status", *one)
    said = status.stdout + status.stderr
    assert (
        status.returncode == 0 and "unguarded warning: the launch guard an apply installed no longer loads" in said
    ), said
    fixes = re.findall(r"`patchkit ([^`]*)`", said.split("fix: ")[1])
    guard = " --guard" * (breaks is retarget_guard)  # apply keeps a guard file changed since: --guard replaces it
    sets = f"apply --target {tree} --patches {library} --set model --set spec"
    assert fixes == [sets + guard, sets + " --no-guard"], said
    guard = json.loads(run_cli_read_only("status", *one, "--format", "json").stdout)["guard"]
    assert guard["missing"].startswith("the launch guard an apply installed no longer loads") and guard["refuses"] == []
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}  # run's exec fails (exit 4): it got that far
    launch = ["vllm", "serve", str(model)]
    for command in (["preflight", "--no-import"], ["run"]):
        done = run_cli_judged(*command, *one, "--", *launch, env=no_vllm)
        assert (
            done.returncode == 1 and "tree-state: the launch guard an apply installed no longer loads" in done.stdout
        ), done.stdout
    off = run_cli("run", *one, "--", "env", "PATCHKIT_GUARD=off", *launch, env=no_vllm)
    assert off.returncode == 4, off.stdout + off.stderr  # a launch that turns the guard off loses nothing
    fixed = run_cli_judged(*shlex.split(fixes[then]), "--no-import")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert is_installed(tree) == (not then)
    status = run_cli_read_only("status", *one)
    assert status.returncode == 0 and "unguarded" not in status.stdout + status.stderr, status.stdout
    ran = run_cli("run", *one, "--", *launch, env=no_vllm)
    assert ran.returncode == 4, ran.stdout + ran.stderr
    assert (tree / OTHER).read_text() == "x = 1\n"


# --- 2. a set --set leaves out, judged from the record -----------------------------------------------


@pytest.mark.parametrize("command", ["preflight", "run"])
def test_a_needed_set_left_out_by_set_passes_when_the_record_shows_it_whole_and_fails_once_edited(
    request, tmp_path, command
):
    tree, lib, target, drafter = request.getfixturevalue("setup")
    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}  # run's exec fails (exit 4): it got that far
    options = ("--no-import",) if command == "preflight" else ()
    launch = ["--", *serve(target, drafter, *TOOLS)]
    done = run_cli_judged(
        command, "--target", tree, "--patches", lib, *options, "--set", "eagle3", *launch, env=no_vllm
    )
    assert done.returncode == (0 if command == "preflight" else 4), done.stdout + done.stderr
    note = "note: this launch needs tools (--tool-call-parser demo/demo_v2), left out by --set: its record says applied, no drift"
    assert note in done.stderr.splitlines(), done.stderr
    (tree / PARSER).write_text((tree / PARSER).read_text() + "# edited\n")
    edited = run_cli_judged(
        command, "--target", tree, "--patches", lib, *options, "--set", "eagle3", *launch, env=no_vllm
    )
    assert edited.returncode == 1 and LEFT_OUT in edited.stdout, edited.stdout + edited.stderr
    # preflight takes one --set: its fix runs it again with the other set (added, it was a usage error)
    add = "run it again with `--set tools` instead" if command == "preflight" else "add `--set tools`"
    assert f"{add}, or give no --set" in edited.stdout, edited.stdout
    other = ("--set", "tools") if command == "preflight" else ("--set", "eagle3", "--set", "tools")
    fixed = run_cli_judged(command, "--target", tree, "--patches", lib, *options, *other, *launch, env=no_vllm)
    assert fixed.returncode == 1 and "changed after patchkit wrote them" in fixed.stdout, fixed.stdout + fixed.stderr


# --- review 10a L1, L2: apply of several sets says the guard's fate once, after the last set ----------


def test_apply_of_several_sets_judges_the_guard_once_after_the_last_set_settled_the_record(tmp_path):
    """L1: a local version label added under two applied sets: the first set's "already applied"
    warned that the guard still refused (the second's record not yet moved) and named this apply."""
    tree, library = three_sets(tmp_path)
    meta = tree / "vllm-0.16.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.16.0", "Version: 0.16.0+cu129"))
    assert run_cli_read_only("status", "--target", tree, "--patches", library, "--set", "spec").returncode == 1
    done = run_cli_writing(
        "apply", "--target", tree, "--patches", library, "--set", "spec", "--set", "model", "--no-import"
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "refuses" not in said, said
    assert "model: already applied; record updated\nspec: already applied; record updated" in said, said
    assert run_cli_read_only("status", "--target", tree, "--patches", library, "--set", "spec").returncode == 0


def test_apply_of_several_sets_does_not_say_the_guard_removed_when_a_later_set_installs_it(tmp_path):
    """L2: after an upgrade to the release one set calls upstream, that set dropped every stale record
    and the guard ("launch guard removed"), then the next set applied and installed it again."""
    tree = write_tree(tmp_path / "site", files={SPEC: SPEC_PY, MODEL: MODEL_PY})
    library = tmp_path / "lib"
    for name, path, content, upstream in (
        ("spec", SPEC, patched_spec(), ">=0.17.0"),
        ("model", MODEL, EAGLE_MODEL, None),
    ):
        patch = make_patch(tmp_path, tree, {path: content})
        versions = {"0.16.0": "==0.16.0" if upstream else ">=0.16.0"}
        write_library(library, {"0.16.0": [patch]}, versions=versions, upstream=upstream, name=name)
    (library / "library.toml").write_text('order = ["spec", "model"]\n')
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    pip_install(tree, "0.17.0", {SPEC: patched_spec(), MODEL: MODEL_PY})
    done = run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import")
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "guard removed" not in said, said
    assert "model: applied 1 patch(es): 1 file(s) changed; launch guard installed" in said, said
    assert run_cli_read_only("status", "--target", tree, "--patches", library).returncode == 0


# --- review 10a L5: a fifo, directory or device where a patched file was ------------------------------


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_special_file_in_place_of_a_patched_file_is_refused_with_a_fix_that_ends_healthy(tmp_path, kind):
    tree, library = three_sets(tmp_path)
    (tree / SPEC).unlink()
    if kind == "fifo":
        os.mkfifo(tree / SPEC)
    elif kind == "directory":
        (tree / SPEC).mkdir()
    else:
        (tree / SPEC).symlink_to("/dev/null")
    selection = ("--target", tree, "--patches", library)
    for command in (("status", "--set", "spec"), ("revert",), ("verify", "--no-import", "--set", "spec")):
        done = run_cli_judged(*command, *selection)
        assert done.returncode == 2 and f"hint: remove {tree / SPEC} (rm -r for a directory)" in done.stderr, (
            command,
            done.stderr,
        )
    shutil.rmtree(tree / SPEC) if kind == "directory" else (tree / SPEC).unlink()
    status = run_cli_read_only("status", *selection, "--set", "spec")
    said = status.stdout + status.stderr
    assert (
        status.returncode == 1 and f"`patchkit revert --target {tree} --patches {library} --set spec --force`" in said
    )
    assert run_cli_writing("revert", *selection, "--force").returncode == 0
    assert run_cli_writing("apply", *selection, "--set", "spec", "--set", "model", "--no-import").returncode == 0
    assert run_cli_read_only("status", *selection, "--set", "spec").returncode == 0
    assert (tree / SPEC).read_text() == patched_spec()


def test_the_note_of_a_tree_with_some_sets_applied_names_a_status_command_that_runs(tmp_path):
    """launch24's note said `status --set model --set spec`, which status refuses (one --set)."""
    tree, library = three_sets(tmp_path)
    assert run_cli_writing("revert", "--target", tree, "--patches", library).returncode == 0
    (library / "library.toml").write_text('order = ["model", "spec", "other"]\n')
    (tree / OTHER).write_text("y = 1\n")  # other's patch does not apply: the apply stops there
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 1
    (tree / OTHER).write_text("x = 1\n")  # stock again: other, chosen, is simply not applied
    status = run_cli_read_only("status", "--target", tree, "--patches", library)
    note = status.stdout + status.stderr
    assert status.returncode == 1 and "if your launches use only model, spec:" in note, note
    commands = [c for c in re.findall(r"`patchkit ([^`]*)`", note) if c.startswith("status")]
    assert len(commands) == 2, note  # one per set applied (read25: each runs)
    for command in commands:
        done = run_cli_judged(*shlex.split(command))
        assert done.returncode == 0, done.stdout + done.stderr
