"""The hint loop (issue 20, review 4): a hint that names a patchkit command carries what the user chose
(the tree, --vllm-version, the library, the set or the ad-hoc patches), so following it acts on the
same tree and set; every such hint is built by patchkit/base/hints.py, never spelled by hand."""

from __future__ import annotations

import ast
import json
import re
import shlex
import venv
from pathlib import Path

import pytest
from helpers import make_patch, patched_spec, run_cli, run_cli_read_only, run_cli_writing, write_library, write_tree
from launch_fixtures import write_model

from patchkit.base import hints
from patchkit.base.options import Options

ROOT = Path(__file__).resolve().parent.parent
# a command that takes a tree, named where a user would read it as one to run
HAND_SPELLED = re.compile(r"patchkit (?:status|apply|revert|verify|recover|diff|preflight|run|fetch|list)(?=[\s`]|$)")
ALLOWED = {
    # stdlib-only, copied into the target's site-packages and run by vLLM: it cannot import patchkit,
    # and spells its one command (with the tree's own interpreter) itself
    "patchkit/_target/guard.py",
}
KEPT_NAMES = {
    # the guard's METADATA Summary (engine/guard.py): prose in a file installed beside vLLM
    "\nSummary: patchkit's launch guard: refuses a vLLM tree that changed since `patchkit apply`\n",
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def hand_spelled(path: Path) -> list[str]:
    """The string literals (not docstrings; f-strings' literal parts included) that spell a command."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and node.value not in KEPT_NAMES
        and HAND_SPELLED.search(node.value)
    ]


def _sources() -> list[Path]:
    """patchkit's modules and the library's launch scripts (which patchkit runs: their fixes are hints too)."""
    files = sorted((ROOT / "patchkit").rglob("*.py")) + sorted((ROOT / "patches").glob("*/*.py"))
    return [p for p in files if p.relative_to(ROOT).as_posix() not in ALLOWED | {"patchkit/base/hints.py"}]


def test_no_hint_names_a_patchkit_command_by_hand():
    found = [line for path in _sources() for line in hand_spelled(path)]
    assert not found, "build these with patchkit.base.hints.command():\n" + "\n".join(found)


def test_the_static_test_finds_a_hand_spelled_hint(tmp_path):
    """The check above can fail: a hint spelled by hand (an f-string's part too) is found, a docstring is not."""
    source = ROOT / "patchkit" / "planted.py"
    probe = tmp_path / "planted.py"
    probe.write_text(
        '"""`patchkit apply` in a docstring is prose."""\n'
        'A = "run `patchkit revert --target x`"\n'
        'def f(t):\n    """Run `patchkit status`."""\n    return f"then patchkit apply --target {t}"\n'
    )
    lines = hand_spelled_at(probe, source)
    assert [line.split(":")[1] for line in lines] == ["2", "5"], lines


def hand_spelled_at(path: Path, as_if: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    return [
        f"{as_if.name}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        if HAND_SPELLED.search(node.value)
    ]


# --------------------------------------------------------------------------- the helper


def test_a_command_carries_the_selection_as_that_command_takes_it():
    chosen = Options("/x y", "/venv/bin/python", "0.16.0", "/lib", ("/p/a.diff", "/p/b c.diff"), None)
    apply = hints.command("apply", "--force", chosen=chosen)
    assert shlex.split(apply.strip("`")) == [
        "patchkit", "apply", "--target", "/x y", "--python", "/venv/bin/python", "--vllm-version", "0.16.0",
        "--patches", "/lib", "--patch", "/p/a.diff", "--patch", "/p/b c.diff", "--force",
    ]  # fmt: skip
    assert hints.command("recover", chosen=chosen) == "`patchkit recover --target '/x y' --python /venv/bin/python`"
    assert "--patch " not in hints.command("diff", chosen=chosen)  # diff takes the library's series only
    assert hints.command("fetch 0.16.0", chosen=chosen) == "`patchkit fetch 0.16.0 --patches /lib`"  # no tree
    wheel = (
        "`patchkit wheel 0.16.0 --patches /lib --patch /p/a.diff --patch '/p/b c.diff'`"  # no tree: it builds a file
    )
    assert hints.command("wheel 0.16.0", chosen=chosen) == wheel
    assert hints.command("workspace", chosen=chosen) == "`patchkit workspace`"  # a verb not listed: bare
    assert hints.command("preflight", "--", "COMMAND", chosen=Options(python="/p")).endswith("--python /p -- COMMAND`")


def test_the_selection_is_the_running_commands_and_another_set_replaces_its_set():
    assert hints.command("apply") == "`patchkit apply`"
    with hints.selected(Options(target_dir="/t", library="/lib", set_name="mine")):
        assert hints.command("status") == "`patchkit status --target /t --patches /lib --set mine`"
        other = hints.command("revert", chosen=hints.for_set("theirs"))
        assert other == "`patchkit revert --target /t --patches /lib --set theirs`"
        adhoc = hints.command("revert", chosen=hints.for_set(None, ("/d/fix.diff",)))
        assert adhoc == "`patchkit revert --target /t --patch /d/fix.diff`"
    assert hints.command("apply") == "`patchkit apply`"


def test_a_commands_paths_are_absolute_so_it_works_from_any_directory(tmp_path, monkeypatch):
    """newuser15 11l: `--target vllm-edit` in a fix failed when pasted in another directory."""
    monkeypatch.chdir(tmp_path)
    with hints.selected(Options(target_dir="tree", library="lib", python="venv/bin/python", adhoc=("a.diff",))):
        said = shlex.split(hints.command("apply").strip("`"))
    assert said == [
        "patchkit", "apply", "--target", f"{tmp_path}/tree", "--python", f"{tmp_path}/venv/bin/python",
        "--patches", f"{tmp_path}/lib", "--patch", f"{tmp_path}/a.diff",
    ]  # fmt: skip
    with hints.selected(Options(python="python3")):  # a name PATH finds stays a name
        assert hints.command("status") == "`patchkit status --python python3`"


def test_the_pip_hint_runs_the_trees_own_interpreter():
    with hints.selected(Options(python="/v/bin/python")):
        assert (
            hints.pip_reinstall("0.16.0") == "`/v/bin/python -m pip install --force-reinstall --no-deps vllm==0.16.0`"
        )
    with hints.selected(Options(target_dir="/t", vllm_version="0.16.0")):
        assert hints.pip_reinstall(None).endswith("vllm==0.16.0` (with the Python of that environment)")


# --------------------------------------------------------------------------- the loop, end to end


@pytest.fixture
def tree_and_library(tmp_path) -> tuple[Path, Path]:
    stock = write_tree(tmp_path / "stock")
    library = write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, stock, {"vllm/config/spec.py": patched_spec()})]}
    )
    return write_tree(tmp_path / "site"), library


def _hinted(text: str) -> list[list[str]]:
    """Each backquoted patchkit command in `text`, as words."""
    return [shlex.split(found) for found in re.findall(r"`(patchkit [^`]*)`", text)]


def test_status_on_an_edited_tree_names_the_commands_on_that_tree_and_library(tmp_path, tree_and_library):
    tree, library = tree_and_library
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    with (tree / "vllm/config/spec.py").open("a") as fh:
        fh.write("# an edit\n")
    done = run_cli_read_only("status", "--target", tree, "--patches", library)
    assert done.returncode == 1, done.stdout + done.stderr
    named = _hinted(done.stdout + done.stderr)
    assert [words[1] for words in named][:2] == ["revert", "apply"], done.stdout + done.stderr
    for words in named:
        assert words[2:6] == ["--target", str(tree), "--patches", str(library)], done.stdout + done.stderr
    # followed as written, they end the loop: the tree is the library's, applied, and status passes
    for words in named[:2]:
        assert run_cli(*words[1:], "--no-import" if words[1] == "apply" else "--quiet").returncode == 0
    assert run_cli_read_only("status", "--target", tree, "--patches", library).returncode == 0


def test_a_preflight_finding_names_apply_on_the_tree_and_library_checked(tmp_path, tree_and_library):
    tree, library = tree_and_library
    model = write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(model),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    (finding,) = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "tree-state"]
    assert _hinted(finding["fix"]) == [["patchkit", "apply", "--target", str(tree), "--patches", str(library)]]


def test_a_preflight_without_a_tree_names_the_launchs_own_interpreter(tmp_path, tree_and_library):
    _, library = tree_and_library
    venv.create(tmp_path / "venv", with_pip=False, symlinks=True)
    [site] = (tmp_path / "venv").glob("lib/python*/site-packages")
    write_tree(site)
    python = tmp_path / "venv" / "bin" / "python"
    script = tmp_path / "venv" / "bin" / "vllm"
    script.write_text(f"#!{python}\nimport sys\n")
    script.chmod(0o755)
    model = write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    done = run_cli_read_only(
        "preflight", "--patches", library, "--no-import", "--format", "json", "--", str(script), "serve", str(model)
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (finding,) = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "tree-state"]
    (words,) = _hinted(finding["fix"])
    assert words[:3] == ["patchkit", "apply", "--python"] and Path(words[3]).parent == python.parent, words
    assert words[4:] == ["--patches", str(library)], words


# --------------------------------------------------------------------------- the guard's own refusal


def test_the_guards_refusal_names_the_tree_and_the_command_with_vllms_interpreter(tmp_path, tree_and_library):
    """Inside vLLM the guard names the tree it refuses and `patchkit status --target` that tree (not
    --python, which names it only where PYTHONPATH put it on the path: newuser15 11n); that command,
    followed, names the fix on the same tree."""
    import subprocess

    from helpers import LOAD_LIKE_VLLM

    _, library = tree_and_library
    venv.create(tmp_path / "venv with space", with_pip=False, symlinks=True)
    [site] = (tmp_path / "venv with space").glob("lib/python*/site-packages")
    write_tree(site)
    python = tmp_path / "venv with space" / "bin" / "python"
    assert run_cli_writing("apply", "--python", python, "--patches", library, "--no-import").returncode == 0
    with (site / "vllm/config/spec.py").open("a") as fh:
        fh.write("# an edit\n")
    env = {"PATH": "/usr/bin:/bin"}
    refused = subprocess.run([python, "-c", LOAD_LIKE_VLLM, site], capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode != 0
    message = " ".join(refused.stderr.split())
    assert f"is not the one `patchkit apply` left in {site}: " in message, message
    (words,) = _hinted(message.split(f"left in {site}")[1])
    assert words == ["patchkit", "status", "--target", str(site)], message
    done = run_cli(*words[1:], "--patches", library)
    assert done.returncode == 1, done.stdout + done.stderr
    named = _hinted(done.stdout + done.stderr)
    assert [w[1:4] for w in named][:2] == [["revert", "--target", str(site)], ["apply", "--target", str(site)]]


def test_the_interrupt_report_after_the_commit_point_names_the_users_tree():
    """The report is read after the command ended (its selection gone): the hint is spelled when the
    commit point passes, with the selection of that moment."""
    from patchkit.base import signals

    signals.new_run()
    with hints.selected(Options(target_dir="/t", set_name="s")):
        signals.note(signals.COMMITTED)
    message, hint = signals.interrupted_report()
    assert "it is in place" in message
    assert hint == "`patchkit verify --target /t --set s` checks it; `patchkit revert --target /t --set s` undoes it"
    signals.new_run()
    assert signals.interrupted_report()[1] is None


def test_the_pip_hint_of_a_verify_given_several_releases_names_none_of_them():
    """verify's --vllm-version repeats (Options.vllm_versions): the pip hint and the command hint
    name one release, or none (VERSION)."""
    several = Options.given(None, None, ("0.16.0", "0.17.0"), None, (), None)
    with hints.selected(several):
        assert "vllm==VERSION`" in hints.pip_reinstall(None)
        assert "--vllm-version" not in hints.command("verify")
    one = Options.given(None, None, ("0.16.0",), None, (), None)
    with hints.selected(one):
        assert "vllm==0.16.0`" in hints.pip_reinstall(None)
        assert hints.command("verify") == "`patchkit verify --vllm-version 0.16.0`"
