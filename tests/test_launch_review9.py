"""Review 9 of the launch and the guard: each finding's regression test, on inputs of its own.

H1: eagle3's patch 0002 (the image token in the proposer's shared load_model) is needed by a
Kimi-K2.5 launch whose drafter that load_model loads (eagle, mtp, draft_model), not only eagle3;
a DeepSeek-V3 mtp launch, which works on stock, still passes without the set. On fetched trees.
M4: after a vLLM upgrade under an applied tree, `run --apply` of a launch that needs no set clears the
guard's refusal again (the recorded set's apply moves its record to the installed release).
M3: a set whose rule names the launch, left out by --set, is a failed finding naming it, never dropped.
M1: --tool-call-parser deepseek_v4 (0.20.0-0.22.1: the V3.2 parser's class, whose streaming the
deepseek-tool-calls set patches) needs that set.
M2: the hint after an interrupted apply or run --apply names the tree (--target made absolute, or
the launch's --python) and works as printed from another directory.
L2: `status` after `run --apply` (only the sets the launch needs) says which sets are applied and
which not, not `partial`, and names the status of those sets. L3: status of several sets said the
guard's refusal once per set (the later ones with another set's fix) and put the first set's name
before every stale record."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from helpers import (
    EAGLE_MODEL,
    MODEL,
    MODEL_PY,
    SPEC,
    SPEC_PY,
    lay_out_release,
    make_patch,
    patched_spec,
    pip_install,
    run_cli,
    run_cli_read_only,
    run_cli_writing,
    write_library,
    write_tree,
)
from launch_fixtures import (
    DEEPSEEK_V3,
    KIMI_K25,
    LEFT_OUT,
    REGISTRY,
    TOOLS,
    eagle3_and_tools,  # noqa: F401  (the fixture `setup`)
    serve,
    write_model,
)

from patchkit.base.errors import BadInput
from patchkit.releases.files import files_for
from patchkit.series.library import load_set
from patchkit.store.state import read_state

PLAIN_DRAFTER = {  # a small model of the target's vocabulary: a draft_model or EAGLE drafter
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 7168,  # an EAGLE-1 head takes the target's hidden states as they are
    "num_hidden_layers": 2,
    "vocab_size": 163840,
}


def spec(method: str, drafter: Path | None) -> str:
    given: dict[str, object] = {"method": method, "num_speculative_tokens": 1}
    return json.dumps({**given, "model": str(drafter)} if drafter is not None else given)


def failed_checks(done) -> set[str]:
    return {f["check"] for f in json.loads(done.stdout)["findings"] if not f["ok"]}


# --- H1: which methods need eagle3's image token -------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "kimi": write_model(root / "kimi", KIMI_K25),
        "deepseek": write_model(root / "deepseek", DEEPSEEK_V3),
        "drafter": write_model(root / "drafter", PLAIN_DRAFTER),
        # draft_model's drafter shares the target's vocabulary (vLLM refuses another at start)
        "deepseek-drafter": write_model(root / "deepseek-drafter", {**PLAIN_DRAFTER, "vocab_size": 129280}),
    }


# (target, method, drafter?, whether the launch needs eagle3)
LAUNCHES = [
    ("kimi", "eagle", True, True),
    ("kimi", "draft_model", True, True),
    ("kimi", "mtp", False, True),
    ("kimi", "deepseek_mtp", False, True),  # vLLM renames it mtp
    ("kimi", "ngram", False, False),  # no drafter model: no proposer load
    ("deepseek", "mtp", False, False),  # no image token read for a text-only target: works on stock
    ("deepseek", "deepseek_mtp", False, False),
    ("deepseek", "eagle", True, False),
    ("deepseek", "draft_model", True, False),
]


@pytest.mark.release
@pytest.mark.parametrize("release", ["0.15.1", "0.16.0", "0.17.1"])
def test_a_kimi_k25_launch_through_the_proposer_needs_eagle3_and_its_image_token_check(tmp_path, models, release):
    site = lay_out_release(release, sorted({*files_for(release), REGISTRY}), tmp_path / "site")
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}  # run's exec fails (exit 4): it got that far
    for target, method, with_drafter, needs_it in LAUNCHES:
        # 0.15.x's DraftModelProposer loads its drafter itself (launch25: the rule's versions)
        needs = needs_it and not (method == "draft_model" and release == "0.15.1")
        extra = ["--speculative-config", spec(method, _drafter(models, target) if with_drafter else None)]
        launch = ["vllm", "serve", str(models[target]), "--trust-remote-code", *extra]
        done = run_cli_read_only("preflight", "--target", site, "--no-import", "--format", "json", "--", *launch)
        said = f"{release} {target} {method}: {done.stdout}"
        refused = _multimodal_refused(target, method, release)
        if needs:
            assert done.returncode == 1 and failed_checks(done) == {"tree-state", "image-token", *refused}, said
            fixes = {f["fix"] for f in json.loads(done.stdout)["findings"] if not f["ok"] and f["check"] not in refused}
            assert fixes == {f"run `patchkit apply --target {site} --set eagle3`"}, said
        else:
            assert done.returncode == (1 if refused else 0) and failed_checks(done) == refused, said
            assert json.loads(done.stdout)["unused_sets"]["eagle3"] == "not applied", said
        ran = run_cli("run", "--target", site, "--", *launch, env=no_vllm)
        assert ran.returncode == (1 if needs or refused else 4), f"{said} {ran.stdout} {ran.stderr}"
    # the launch's own `run --apply` applies eagle3 alone, and then every launch passes
    kimi_eagle = ["vllm", "serve", str(models["kimi"]), "--speculative-config", spec("eagle", models["drafter"])]
    applied = run_cli("run", "--apply", "--target", site, "--", *kimi_eagle, env=no_vllm)
    assert applied.returncode == 4 and "1 set(s) applied (eagle3)" in applied.stdout, applied.stdout + applied.stderr
    for target, method, with_drafter, _ in LAUNCHES:
        extra = ["--speculative-config", spec(method, _drafter(models, target) if with_drafter else None)]
        done = run_cli_read_only(
            "preflight", "--target", site, "--no-import", "--", "vllm", "serve", str(models[target]), *extra
        )
        assert done.returncode == (1 if _multimodal_refused(target, method, release) else 0), (
            f"{release} {target} {method}"
        )


def _drafter(models: dict[str, Path], target: str) -> Path:
    return models["deepseek-drafter" if target == "deepseek" else "drafter"]


def _multimodal_refused(target: str, method: str, release: str) -> set[str]:
    """The speculative-config failure of a draft_model launch of the multimodal Kimi-K2.5: vLLM's proposer
    refuses it when the model runner starts (0.16-0.17: _raise_if_multimodal), eagle3 applied or not; and of
    its mtp launch at start: the draft config is its own, model_type kimi_k25, which names no method
    ("Unsupported speculative method: 'mtp'", as vLLM 0.16.0 raises on it)."""
    refuses = (target, method) == ("kimi", "draft_model") and release != "0.15.1"
    own_mtp = target == "kimi" and method in ("mtp", "deepseek_mtp")
    return {"speculative-config"} if refuses or own_mtp else set()


@pytest.mark.parametrize(
    ("when", "said"),
    [
        ('when = "x"', "`when` must be an array of tables"),
        ("[[needed_by.when]]\nspeculative_methods = []", "entry 1 `speculative_methods` must be a non-empty array"),
        ("[[needed_by.when]]\ntarget_archs = ['X']", "entry 1 has no key 'target_archs'"),
        ("[[needed_by.when]]", "entry 1 names no launch"),
    ],
)
def test_a_malformed_when_entry_is_refused_naming_it(tmp_path, when, said):
    directory = tmp_path / "s"
    (directory / "0.16.0").mkdir(parents=True)
    (directory / "0.16.0" / "series").write_text("")
    (directory / "set.toml").write_text(
        f'name = "s"\n\n[needed_by]\nspeculative_methods = ["eagle3"]\n{when}\n\n'
        '[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n'
    )
    with pytest.raises(BadInput) as raised:
        load_set(directory)
    assert said in raised.value.message


def test_a_when_entry_alone_is_a_rule_and_needs_every_key_it_gives(tmp_path):
    directory = tmp_path / "s"
    (directory / "0.16.0").mkdir(parents=True)
    (directory / "0.16.0" / "series").write_text("")
    (directory / "set.toml").write_text(
        'name = "s"\n\n[[needed_by.when]]\nspeculative_methods = ["mtp"]\ntarget_architectures = ["A", "B"]\n\n'
        '[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n'
    )
    rule = load_set(directory).needed_by
    assert rule is not None
    assert rule.described() == "--speculative-config method mtp with target architecture A/B"


# --- M4: run --apply after an upgrade ------------------------------------------------------------


def upgraded(site: Path, release: str) -> None:
    """What pip leaves when it installs another vLLM over the tree: its files, .patchkit/ and the guard kept."""
    shutil.rmtree(site / "vllm")
    for old in site.glob("vllm-*.dist-info"):
        shutil.rmtree(old)
    lay_out_release(release, sorted({*files_for(release), REGISTRY}), site)


@pytest.mark.release
def test_run_apply_after_an_upgrade_clears_the_guards_refusal_for_a_launch_that_needs_no_set(tmp_path, models):
    site = lay_out_release("0.16.0", sorted({*files_for("0.16.0"), REGISTRY}), tmp_path / "site")
    assert run_cli_writing("apply", "--target", site, "--set", "eagle3", "--no-import").returncode == 0
    upgraded(site, "0.17.0")
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}
    launch = ["vllm", "serve", str(models["deepseek"])]
    refused = run_cli("run", "--target", site, "--", *launch, env=no_vllm)
    assert refused.returncode == 1 and "the launch guard refuses this tree" in refused.stdout, refused.stdout
    done = run_cli("run", "--apply", "--target", site, "--", *launch, env=no_vllm)
    assert done.returncode == 4 and "cannot run vllm" in done.stderr, done.stdout + done.stderr
    assert [(e.set_name, e.vllm_version) for e in read_state(site).entries] == [("eagle3", "0.17.0")]
    # the guard off in the launch: its refusal is a note, and run --apply leaves the record as it is
    upgraded(site, "0.17.1")
    off = run_cli("run", "--apply", "--target", site, "--", "env", "PATCHKIT_GUARD=off", *launch, env=no_vllm)
    assert off.returncode == 4 and "applied" not in off.stdout, off.stdout + off.stderr
    assert [(e.set_name, e.vllm_version) for e in read_state(site).entries] == [("eagle3", "0.17.0")]


# --- M3: --set leaves out a set the launch needs -------------------------------------------------


@pytest.mark.parametrize("apply_first", [(), ("--apply",)])
def test_run_with_a_set_that_leaves_out_one_the_launch_needs_says_so_and_launches_nothing(
    request, tmp_path, apply_first
):
    tree, lib, target, drafter = request.getfixturevalue("setup")
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}
    launch = serve(target, drafter, *TOOLS)  # needs eagle3 and tools
    run = ["run", *apply_first, "--target", tree, "--patches", lib]
    done = run_cli(*run, "--set", "eagle3", "--", *launch, env=no_vllm)
    assert done.returncode == 1 and LEFT_OUT in done.stdout, done.stdout + done.stderr
    assert "add `--set tools`, or give no --set" in done.stdout, done.stdout
    both = run_cli(*run, "--set", "eagle3", "--set", "tools", "--", *launch, env=no_vllm)
    assert both.returncode == (4 if apply_first else 1) and "leaves out" not in both.stdout, both.stdout


def test_preflight_names_the_left_out_set_and_a_launch_that_does_not_need_it_passes(request):
    """(launch25: a left-out set the record shows applied passes with a note, tests/test_launch25.py)"""
    tree, lib, target, drafter = request.getfixturevalue("setup")
    assert (
        run_cli_writing("apply", "--target", tree, "--patches", lib, "--set", "eagle3", "--no-import").returncode == 0
    )
    preflight = ["preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json"]
    done = run_cli(*preflight, "--set", "eagle3", "--", *serve(target, drafter, *TOOLS))
    failed = [f["message"] for f in json.loads(done.stdout)["findings"] if not f["ok"]]
    assert done.returncode == 1 and failed == [LEFT_OUT], done.stdout
    # a launch that does not name tools: --set eagle3 leaves out nothing it needs
    alone = run_cli(*preflight, "--set", "eagle3", "--", *serve(target, drafter))
    assert alone.returncode == 0, alone.stdout


# --- M1: deepseek_v4 --------------------------------------------------------------------------------


@pytest.mark.release
def test_a_deepseek_v4_tool_parser_launch_needs_the_deepseek_tool_calls_set(tmp_path, models):
    site = lay_out_release("0.20.0", sorted({*files_for("0.20.0"), REGISTRY}), tmp_path / "site")
    launch = [
        "vllm",
        "serve",
        str(models["deepseek"]),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "deepseek_v4",
    ]
    preflight = ["preflight", "--target", site, "--no-import", "--format", "json", "--", *launch]
    stock = run_cli(*preflight)
    failed = [f for f in json.loads(stock.stdout)["findings"] if not f["ok"]]
    assert stock.returncode == 1, stock.stdout
    assert [f["message"] for f in failed] == ["the deepseek-tool-calls series is not applied to vLLM 0.20.0"]
    assert failed[0]["fix"] == f"run `patchkit apply --target {site} --set deepseek-tool-calls`"
    assert run_cli_writing("apply", "--target", site, "--set", "deepseek-tool-calls", "--no-import").returncode == 0
    done = run_cli(*preflight)
    assert done.returncode == 0 and "deepseek-tool-calls" not in json.loads(done.stdout)["unused_sets"], done.stdout


# --- M2: the interrupt's hint, followed as printed -----------------------------------------------


def two_set_library(scratch: Path, tree: Path) -> Path:
    root = scratch / "lib"
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]}, name="model")
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]}, name="spec")
    (root / "library.toml").write_text('order = ["model", "spec"]\n')
    return root


def interrupted(cwd: Path, *args: object) -> subprocess.CompletedProcess:
    """patchkit ARGS in `cwd`, a SIGTERM at the first filesystem step of its first transaction."""
    env = {**os.environ, "PATCHKIT_FAULT_AFTER": "1:term"}
    words = [sys.executable, "-m", "patchkit", *map(str, args)]
    return subprocess.run(words, capture_output=True, text=True, env=env, cwd=cwd)


def followed(said: str, elsewhere: Path) -> list[str]:
    """The hint's `patchkit apply ...` command, run as printed in another directory (--no-import
    added: the small tree's modules do not import): its words."""
    (command,) = [c for c in re.findall(r"`(patchkit [^`]*)`", said) if c.startswith("patchkit apply")]
    words = shlex.split(command)
    run = [sys.executable, "-m", *words, "--no-import"]
    done = subprocess.run(run, capture_output=True, text=True, cwd=elsewhere)
    assert done.returncode == 0, command + done.stdout + done.stderr
    return words


def test_the_hint_of_an_interrupted_apply_names_the_tree_and_works_from_another_directory(tmp_path):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    tree = write_tree(work / "site")
    two_set_library(work, tree)
    done = interrupted(work, "apply", "--target", "site", "--patches", "lib", "--no-import")
    assert done.returncode == 143 and "not tried: spec" in done.stderr, done.stderr
    words = followed(done.stderr, elsewhere)
    assert words[1:6] == ["apply", "--target", str(tree), "--patches", str(work / "lib")], words
    assert [e.set_name for e in read_state(tree).entries] == ["model", "spec"]


def test_the_hint_of_an_interrupted_run_apply_names_the_launchs_python(tmp_path):
    root, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    venv.create(root, with_pip=False, symlinks=True)
    [site] = root.glob("lib/python*/site-packages")
    write_tree(site)
    library = two_set_library(tmp_path, site)
    script = root / "bin" / "vllm"
    script.write_text(f"#!{root / 'bin' / 'python'}\nimport sys\n")
    script.chmod(0o755)
    model = write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    done = interrupted(tmp_path, "run", "--apply", "--patches", library, "--", script, "serve", model)
    assert done.returncode == 143 and "not tried: spec" in done.stderr, done.stderr
    words = followed(done.stderr, elsewhere)
    assert words[1:3] == ["apply", "--python"] and Path(words[3]).parent == root / "bin", words
    assert [e.set_name for e in read_state(site).entries] == ["model", "spec"]


# --- L2, L3: what status says of several sets -------------------------------------------------------


def test_status_after_run_apply_says_which_sets_are_applied_and_how_to_judge_those(request, tmp_path):
    tree, lib, target, drafter = request.getfixturevalue("setup")
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}
    ran = run_cli("run", "--apply", "--target", tree, "--patches", lib, "--", *serve(target, drafter), env=no_vllm)
    assert ran.returncode == 4, ran.stdout + ran.stderr
    status = run_cli_read_only("status", "--target", tree, "--patches", lib)
    # run --apply chose eagle3 alone (what the launch needs): the tree is what it chose, exit 0, and
    # tools is a note with the command that applies it (new-user 14 item 4)
    assert status.returncode == 0 and "partial" not in status.stdout + status.stderr, status.stdout
    assert "status: applied: 1 of 2 set(s) applied (eagle3); not chosen: tools" in status.stdout, status.stdout
    (note,) = [line for line in status.stderr.splitlines() if line.startswith("note:")]
    assert "no apply chose tools;" in note, note
    (command,) = [c for c in re.findall(r"`(patchkit [^`]*)`", note) if c.startswith("patchkit apply")]
    assert shlex.split(command)[-2:] == ["--set", "tools"], command


def test_status_of_an_upgraded_tree_says_the_guards_refusal_once_with_the_fix_of_an_upgrade(tmp_path):
    tree = write_tree(tmp_path / "site")
    library = tmp_path / "lib"
    for name, path, content in (("spec", SPEC, patched_spec()), ("model", MODEL, EAGLE_MODEL)):
        patch = make_patch(tmp_path, tree, {path: content})
        write_library(library, {"0.16.0": [patch]}, versions={"0.16.0": ">=0.16.0"}, upstream=None, name=name)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    pip_install(tree, "0.17.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    status = run_cli_read_only("status", "--target", tree, "--patches", library)
    said = status.stdout + status.stderr
    assert status.returncode == 1 and said.count("the launch guard refuses this tree") == 1, said
    assert "another set's" not in said and "revert --target" not in said.split("stale")[0], said
    # one line for the records the upgrade made stale alike (new-user 14 item 17: one per set)
    stale = [line for line in said.splitlines() if "stale" in line and line.startswith("stale")]
    assert stale == [
        "stale warning: the records of model, spec: recorded 0.16.0, installed 0.17.0: the old records are stale"
    ], said
    assert "discards them;" in said, said
    # the upgrade replaced the files: counted once, not each "changed after patchkit patched it"
    assert "changed after patchkit patched it" not in said, said
    assert "2 files it patched no longer hold what it wrote (replaced by the upgrade, or edited)" in said, said


def test_preflight_of_an_upgraded_tree_counts_the_files_the_guard_names_on_one_short_line():
    """Review 15 L5: preflight's tree-state finding after an upgrade under the record listed every
    patched file ("... was changed after patchkit patched it; ...") on one line of ~900 characters;
    status counts them. Both: the count and the first few."""
    from types import SimpleNamespace

    from patchkit.launch.preflight import _guard_refusal

    files = [f"vllm/part{n}/module{n}.py" for n in range(9)]
    guard = ["vLLM 0.18.0 is installed, but the patches were applied to vLLM 0.16.0"]
    guard += [f"{path} was changed after patchkit patched it" for path in files]
    found = _guard_refusal(SimpleNamespace(guard=guard, guard_fix="run apply", restores=None, guard_installed=True))
    assert not found.ok and "changed after patchkit patched it" not in found.message, found.message
    assert found.message.endswith(
        f"9 files it patched no longer hold what it wrote (replaced by the upgrade, or edited): {files[0]}, {files[1]} +7 more"
    ), found.message
    assert len(found.message) < 300  # was ~900 characters for 9 files
