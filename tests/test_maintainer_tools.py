"""workspace → edit → refresh, and port, on small trees (the release source is faked)."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import git
import pytest
from helpers import MODEL_PY, SPEC_PY, make_patch, write_library, write_tree

from patchkit.base.enums import StepState
from patchkit.base.errors import FetchError
from patchkit.maintainer.gitrepo import git_diff
from patchkit.maintainer.merge import conflict_lines, merge_file
from patchkit.maintainer.meta import META
from patchkit.maintainer.patchtext import split_header
from patchkit.series import library as library_mod
from patchkit.series.library import PATCH, load_set, select
from patchkit.series.patchfile import parse_patch
from patchkit.series.plan import plan_apply
from patchkit.tree.version import parse

TODAY = datetime.date.today().isoformat()
OLD_DATE = "2020-01-01"

SPEC_PATCHED = SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "deepseek",\n')
MODEL_PATCHED = MODEL_PY.replace(
    "import SupportsLoRA, SupportsPP", "import SupportsEagle3, SupportsLoRA, SupportsPP"
).replace("class Model(SupportsLoRA", "class Model(SupportsEagle3, SupportsLoRA")
STOCK = {"vllm/config/spec.py": SPEC_PY, "vllm/models/model.py": MODEL_PY}
SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"


def header(title: str) -> str:
    return (
        f"Description: {title}\n A longer explanation\n over two lines.\nOrigin: patchkit\n"
        f"Forwarded: not-needed\nLast-Update: {OLD_DATE}\n"
    )


@pytest.fixture
def releases(tmp_path, monkeypatch):
    """Fake release sources: version -> files, served as patchkit.fetch.release_tree would."""
    trees: dict[str, dict] = {}

    def release_tree(version, paths=(), *, all_python=False, progress=None):
        if version not in trees:
            raise FetchError(f"no vLLM {version} on the (fake) index")
        root = tmp_path / "releases" / version
        if not root.exists():
            write_tree(root, version, trees[version])
        return root

    monkeypatch.setattr("patchkit.fetch.release_tree", release_tree)
    trees["0.16.0"] = dict(STOCK)
    return trees


@pytest.fixture
def library(tmp_path, releases) -> Path:
    """Set `demo`: 0.16.0 has 0001 (spec.py) and 0002 (model.py), diffs as git writes them."""
    stock = write_tree(tmp_path / "stock-0.16.0", "0.16.0", STOCK)
    patches = [
        make_patch(tmp_path, stock, {SPEC: SPEC_PATCHED}, header("Accept deepseek")),
        make_patch(tmp_path, stock, {MODEL: MODEL_PATCHED}, header("Model supports eagle3")),
    ]
    root = write_library(tmp_path / "lib", {"0.16.0": patches})
    text = (root / "demo" / "set.toml").read_text()
    (root / "demo" / "set.toml").write_text(
        "# the demo set\n"
        + text.replace('versions = "==0.16.0"', 'versions = "==0.16.0"   # a comment that must survive')
    )
    return root


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def series_patches(lib: Path, version: str):
    selection = select(load_set(lib / "demo"), parse(version, "v"))
    assert selection.kind == PATCH
    return selection


def apply_library(lib: Path, version: str, stock: dict[str, str]) -> dict[str, bytes]:
    """The library's series for `version` applied by the engine to that release's stock files."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = write_tree(Path(tmp), version, stock)
        plan = plan_apply(tree, series_patches(lib, version).patches)
        assert [s.state for s in plan.steps] == [StepState.WILL_CHANGE] * len(plan.steps)
        return {path: plan.content(path) for path in sorted(set(stock) | set(plan.changes))}


def make_workspace(run, lib: Path, where: Path, version: str = "0.16.0") -> Path:
    result = run("workspace", version, where, "--patches", lib)
    assert result.exit_code == 0, result.output
    return where


def refresh(run, ws: Path, *args):
    result = run("refresh", ws, "--format", "json", *args)
    return result, (json.loads(result.stdout) if result.stdout.strip().startswith("{") else None)


# -- workspace -------------------------------------------------------------------------------------


def test_workspace_is_a_stock_commit_then_the_series(run, library, tmp_path):
    ws = make_workspace(run, library, tmp_path / "ws")
    repo = git.Repo(ws)
    commits = list(repo.iter_commits())
    assert [c.message.splitlines()[0] for c in commits] == ["demo series for vllm 0.16.0", "stock vllm 0.16.0"]
    stock, patched = commits[1], commits[0]
    assert repo.tags["stock"].commit == stock
    assert stock.tree[SPEC].data_stream.read() == SPEC_PY.encode()
    assert patched.tree[SPEC].data_stream.read() == SPEC_PATCHED.encode()
    assert patched.tree[MODEL].data_stream.read() == MODEL_PATCHED.encode()
    assert (ws / "vllm-0.16.0.dist-info" / "METADATA").is_file()  # usable as --target
    assert not repo.is_dirty(untracked_files=True)  # the record is git-ignored

    meta = json.loads((ws / META).read_text())
    assert meta["version"] == "0.16.0" and meta["set_name"] == "demo"
    assert meta["series_dir"] == str((library / "demo" / "0.16.0").resolve())
    assert meta["stock_commit"] == stock.hexsha
    assert [(p["name"], p["files"]) for p in meta["patches"]] == [
        ("0001-change.patch", [SPEC]),
        ("0002-change.patch", [MODEL]),
    ]
    assert meta["patches"][0]["header"] == header("Accept deepseek")


def test_workspace_status_sees_the_series_applied(run, library, tmp_path):
    ws = make_workspace(run, library, tmp_path / "ws")
    result = run("status", "--target", ws, "--patches", library, "--format", "json")
    assert json.loads(result.stdout)["state"] == "applied"


def test_workspace_defaults_to_vllm_version_workspace_and_refuses_a_non_empty_dir(run, library, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run("workspace", "0.16.0", "--patches", library).exit_code == 0
    assert (tmp_path / "vllm-0.16.0-workspace" / ".git").is_dir()

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    result = run("workspace", "0.16.0", busy, "--patches", library)
    assert result.exit_code == 2
    assert "not an empty directory" in result.output
    assert files_of(busy) == {"keep.txt": b"mine"}


def test_workspace_all_takes_every_python_file(run, library, releases, tmp_path):
    releases["0.16.0"]["vllm/other/untouched.py"] = "X = 1\n"
    result = run("workspace", "0.16.0", tmp_path / "ws", "--patches", library, "--all")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ws" / "vllm" / "other" / "untouched.py").read_text() == "X = 1\n"


def test_workspace_for_an_upstream_or_unknown_release_is_refused(run, library, tmp_path):
    assert run("workspace", "0.18.0", tmp_path / "a", "--patches", library).exit_code == 3
    assert run("workspace", "0.16.5", tmp_path / "b", "--patches", library).exit_code == 3
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_workspace_that_cannot_be_made_leaves_no_half_made_directory(run, library, releases, tmp_path):
    releases["0.16.0"][SPEC] = SPEC_PY.replace('"qwen"', '"qwen2"')  # the series no longer applies
    result = run("workspace", "0.16.0", tmp_path / "ws", "--patches", library)
    assert result.exit_code == 1
    assert "does not apply to stock vLLM 0.16.0" in result.output
    assert not (tmp_path / "ws").exists()


# -- refresh ---------------------------------------------------------------------------------------


def test_refresh_without_edits_leaves_the_library_byte_identical(run, library, tmp_path):
    ws = make_workspace(run, library, tmp_path / "ws")
    before = files_of(library)
    result, report = refresh(run, ws)
    assert result.exit_code == 0, result.output
    assert [p["state"] for p in report["patches"]] == ["unchanged", "unchanged"]
    assert files_of(library) == before  # even though git's own diffs there carry `index` lines


def test_refresh_writes_the_edit_into_its_patch_keeping_the_header(run, library, tmp_path):
    ws = make_workspace(run, library, tmp_path / "ws")
    series_dir = library / "demo" / "0.16.0"
    untouched = (series_dir / "0002-change.patch").read_bytes()
    edited = SPEC_PATCHED.replace('    "deepseek",\n', '    "deepseek",\n    "kimi",\n')
    (ws / SPEC).write_text(edited)  # not committed

    result, report = refresh(run, ws)
    assert result.exit_code == 0, result.output
    assert [(p["name"], p["state"]) for p in report["patches"]] == [
        ("0001-change.patch", "updated"),
        ("0002-change.patch", "unchanged"),
    ]
    text = (series_dir / "0001-change.patch").read_text()
    head, body = split_header(text)
    assert head == header("Accept deepseek").replace(OLD_DATE, TODAY)
    assert text.startswith(
        head + "---\ndiff --git a/vllm/config/spec.py b/vllm/config/spec.py\n"
        "--- a/vllm/config/spec.py\n+++ b/vllm/config/spec.py\n@@ "
    )
    assert "\nindex " not in text
    assert '+    "kimi",\n' in body
    assert (series_dir / "0002-change.patch").read_bytes() == untouched

    recorded = dict(line.split() for line in (series_dir / "series").read_text().splitlines())
    for name in ("0001-change.patch", "0002-change.patch"):
        assert recorded[name] == "sha256:" + hashlib.sha256((series_dir / name).read_bytes()).hexdigest()
    assert apply_library(library, "0.16.0", STOCK) == {SPEC: edited.encode(), MODEL: MODEL_PATCHED.encode()}

    result, report = refresh(run, ws)  # a second refresh has nothing to do
    assert [p["state"] for p in report["patches"]] == ["unchanged", "unchanged"]


def test_workspace_on_the_installed_library_is_refused_before_anything_with_a_copy_that_works(
    run, library, tmp_path, monkeypatch
):
    """New-user trial 16, item 4: `workspace 0.16.0 --set eagle3` on the pip-installed library made the
    workspace, then warned "work on a copy: `cp -r .../_library patches`, then `patchkit workspace
    0.16.0 --patches patches`": pasted, that failed twice (no --set; the directory it had made)."""
    package = tmp_path / "site-packages" / "patchkit"
    package.mkdir(parents=True)
    library.rename(package / "_library")
    monkeypatch.setattr(library_mod, "PACKAGE_DIR", package)
    monkeypatch.delenv("PATCHKIT_LIBRARY", raising=False)
    work = tmp_path / "work"
    (work / "patches").mkdir(parents=True)  # a directory of that name already there: the copy goes beside it
    monkeypatch.chdir(work)
    refused = run("workspace", "0.16.0", "--set", "demo", "--patches", package / "_library")
    assert refused.exit_code == 2, refused.output
    assert sorted(p.name for p in work.iterdir()) == ["patches"]  # nothing made
    said = " ".join(refused.output.split())
    assert "error: the library installed with patchkit is not to be edited" in said, said
    copy, again = re.findall(r"`([^`]*)`", said.split("hint: ", 1)[1])
    assert copy == f"cp -r {package / '_library'} patches-2", said
    assert again == "patchkit workspace 0.16.0 --set demo --patches patches-2", said
    subprocess.run(shlex.split(copy), check=True)  # pasted as printed
    made = run(*shlex.split(again)[1:])
    assert made.exit_code == 0, made.output
    assert (work / "vllm-0.16.0-workspace" / SPEC).read_text() == SPEC_PATCHED


def test_refresh_into_the_installed_library_says_so(run, library, tmp_path, monkeypatch):
    """New-user trial 14, item 26: refresh wrote into the pip-installed package's library without a
    word (every later apply used the edit; a reinstall of patchkit silently undid it). A workspace
    made before workspace refused the installed library (newuser16 4) may still do it."""
    package = tmp_path / "site-packages" / "patchkit"
    package.mkdir(parents=True)
    installed = library.rename(package / "_library")
    assert run("workspace", "0.16.0", tmp_path / "ws", "--patches", installed).exit_code == 0
    monkeypatch.setattr(library_mod, "PACKAGE_DIR", package)  # installed from now on
    monkeypatch.chdir(tmp_path)
    ws = tmp_path / "ws"
    (ws / SPEC).write_text(SPEC_PATCHED.replace('    "deepseek",\n', '    "deepseek",\n    "kimi",\n'))
    result = run("refresh", ws)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "warning: that is the library installed with patchkit" in said, said
    copy = f"`cp -r {package / '_library'} patches`, then "
    assert copy + "`patchkit workspace 0.16.0 vllm-0.16.0-workspace --set demo --patches patches`" in said, said
    assert "installed with patchkit" not in run("refresh", ws).output  # nothing written: nothing to say


def test_refresh_takes_committed_changes_and_works_from_a_subdirectory(run, library, tmp_path):
    ws = make_workspace(run, library, tmp_path / "ws")
    (ws / MODEL).write_text(MODEL_PATCHED + "\n\nEXTRA = True\n")
    repo = git.Repo(ws)
    repo.git.add("-A")
    repo.index.commit("my edit")
    result, report = refresh(run, ws / "vllm" / "models")
    assert result.exit_code == 0, result.output
    assert [p["state"] for p in report["patches"]] == ["unchanged", "updated"]
    assert apply_library(library, "0.16.0", STOCK)[MODEL] == (MODEL_PATCHED + "\n\nEXTRA = True\n").encode()


def test_refresh_dry_run_writes_nothing(run, library, tmp_path):
    ws = make_workspace(run, library, tmp_path / "ws")
    (ws / SPEC).write_text(SPEC_PY)
    before = files_of(library)
    result, report = refresh(run, ws, "--dry-run")
    assert result.exit_code == 0
    assert report["dry_run"] and report["changed"]
    assert files_of(library) == before


def test_refresh_puts_a_newly_changed_file_in_the_last_patch(run, library, tmp_path):
    ws = make_workspace(run, library, tmp_path / "ws")
    (ws / "vllm" / "new_module.py").write_text("VALUE = 1\n")
    result, report = refresh(run, ws)
    assert result.exit_code == 0, result.output
    assert report["patches"][-1] == {
        "name": "0002-change.patch",
        "state": "updated",
        "files": [MODEL, "vllm/new_module.py"],
    }
    assert any("no patch touched it" in note for note in report["notes"])
    text = (library / "demo" / "0.16.0" / "0002-change.patch").read_text()
    assert "diff --git a/vllm/new_module.py b/vllm/new_module.py\nnew file mode 100644\n--- /dev/null\n" in text
    assert apply_library(library, "0.16.0", STOCK)["vllm/new_module.py"] == b"VALUE = 1\n"


def test_refresh_new_patch_option_starts_a_new_patch(run, library, tmp_path):
    ws = make_workspace(run, library, tmp_path / "ws")
    (ws / "vllm" / "new_module.py").write_text("VALUE = 1\n")
    result, report = refresh(run, ws, "--new-patch", "add new module")
    assert result.exit_code == 0, result.output
    assert [(p["name"], p["state"]) for p in report["patches"]] == [
        ("0001-change.patch", "unchanged"),
        ("0002-change.patch", "unchanged"),
        ("0003-add-new-module.patch", "new"),
    ]
    series_dir = library / "demo" / "0.16.0"
    assert [line.split()[0] for line in (series_dir / "series").read_text().splitlines()] == [
        "0001-change.patch",
        "0002-change.patch",
        "0003-add-new-module.patch",
    ]
    text = (series_dir / "0003-add-new-module.patch").read_text()
    assert text.startswith(
        f"Description: add new module\nOrigin: patchkit\nForwarded: not-needed\n"
        f"Last-Update: {TODAY}\n---\ndiff --git a/vllm/new_module.py"
    )


def test_refresh_drops_a_patch_whose_change_was_undone(run, library, tmp_path):
    ws = make_workspace(run, library, tmp_path / "ws")
    (ws / MODEL).write_text(MODEL_PY)
    result, report = refresh(run, ws)
    assert result.exit_code == 0, result.output
    assert report["patches"][1]["state"] == "removed"
    series_dir = library / "demo" / "0.16.0"
    assert not (series_dir / "0002-change.patch").exists()
    assert [line.split()[0] for line in (series_dir / "series").read_text().splitlines()] == ["0001-change.patch"]


def test_refresh_refuses_conflict_markers(run, library, tmp_path):
    ws = make_workspace(run, library, tmp_path / "ws")
    (ws / SPEC).write_text(
        SPEC_PATCHED.replace('    "deepseek",\n', '<<<<<<< ours\n    "deepseek",\n=======\n>>>>>>> theirs\n')
    )
    before = files_of(library)
    result, _ = refresh(run, ws)
    assert result.exit_code == 1
    assert "conflict markers" in result.output and "spec.py line 7, 10" in result.output
    assert files_of(library) == before


def test_refresh_outside_a_workspace_is_bad_input(run, tmp_path):
    result = run("refresh", tmp_path)
    assert result.exit_code == 2
    assert "not inside a patchkit workspace" in result.output
    assert "create one with `patchkit workspace VERSION`" in result.output


def test_workspace_says_its_next_step_as_one_command_and_refresh_above_it_names_it(run, library, tmp_path):
    """newuser17 5a: `next` split the refresh command across lines, bare; its first line alone, run
    where workspace was run, said "not inside a patchkit workspace … create one", though one was there."""
    made = run("workspace", "0.16.0", tmp_path / "ws", "--patches", library)
    assert made.exit_code == 0, made.output
    assert f"next       edit the files, then: `patchkit refresh {tmp_path / 'ws'}`" in made.output, made.output
    above = run("refresh", tmp_path)
    assert above.exit_code == 2, above.output
    said = " ".join(above.output.split())
    assert f"it holds {tmp_path / 'ws'}" in said and f"`patchkit refresh {tmp_path / 'ws'}`" in said, said
    assert "create one" not in said, said


def test_refresh_splits_a_file_two_patches_change(run, tmp_path, releases):
    """0002 and 0003 both change spec.py: an edit near 0003's lines stays in 0003, 0002 is kept."""
    stock = write_tree(tmp_path / "stock", "0.16.0", STOCK)
    first = SPEC_PY.replace("import os\n", "import os\nimport sys\n")
    both = first.replace("return any(", "return bool(model_type) and any(")
    patches = [
        make_patch(tmp_path, stock, {MODEL: MODEL_PATCHED}, header("model")),
        make_patch(tmp_path, stock, {SPEC: first}, header("import sys")),
        make_patch(
            tmp_path, write_tree(tmp_path / "mid", "0.16.0", {**STOCK, SPEC: first}), {SPEC: both}, header("guard")
        ),
    ]
    lib = write_library(tmp_path / "lib", {"0.16.0": patches})
    ws = make_workspace(run, lib, tmp_path / "ws")
    assert (ws / SPEC).read_text() == both
    edited = both.replace("return bool(model_type)", "return len(model_type) > 0")
    (ws / SPEC).write_text(edited)
    result, report = refresh(run, ws)
    assert result.exit_code == 0, result.output
    assert [p["state"] for p in report["patches"]] == ["unchanged", "unchanged", "updated"]
    assert apply_library(lib, "0.16.0", STOCK)[SPEC] == edited.encode()


def shared_library(tmp_path, releases, other_spec: str) -> Path:
    """0.16.0 and 0.16.1 share the directory 0.16.0; 0.16.1's spec.py is `other_spec`."""
    releases["0.16.1"] = {**STOCK, SPEC: other_spec}
    stock = write_tree(tmp_path / "stock", "0.16.0", STOCK)
    patches = [make_patch(tmp_path, stock, {SPEC: SPEC_PATCHED}, header("Accept deepseek"))]
    lib = write_library(tmp_path / "lib", {"0.16.0": patches})
    manifest = lib / "demo" / "set.toml"
    manifest.write_text(manifest.read_text() + '\n[[releases]]\nversions = "==0.16.1"\ndir = "0.16.0"\n')
    return lib


def test_refresh_checks_the_releases_sharing_the_series(run, tmp_path, releases):
    # 0.16.1 differs from 0.16.0 only in spec.py's first line, outside the patch's context
    lib = shared_library(tmp_path, releases, SPEC_PY.replace("A stand-in for", "The 0.16.1"))
    result = run("workspace", "0.16.0", tmp_path / "ws", "--patches", lib, "--format", "json")
    assert json.loads(result.stdout)["shared_with"] == ["0.16.1"]
    ws = tmp_path / "ws"
    (ws / SPEC).write_text(SPEC_PATCHED.replace('"deepseek"', '"deepseek_v3"'))
    result, report = refresh(run, ws)
    assert result.exit_code == 0, result.output
    assert report["shared"] == [{"version": "0.16.1", "state": "applies", "detail": ""}]

    # an edit next to the lines 0.16.1 changed no longer applies there: reported, exit 1
    (ws / SPEC).write_text(SPEC_PATCHED.replace("import os\n", "import os  # needed\n"))
    result, report = refresh(run, ws)
    assert result.exit_code == 1
    assert report["shared"][0]["version"] == "0.16.1" and report["shared"][0]["state"] == "conflict"
    assert "does not apply" in report["shared"][0]["detail"]
    text = run("refresh", ws).output  # the text report names it too (nothing left to write)
    assert "vllm 0.16.1 shares this series: conflict" in text


def test_a_new_sets_first_series_starts_empty_and_refresh_names_its_first_patch(run, releases, tmp_path):
    """A set made from nothing (docs/own-set.md): a series directory with an empty `series` file.
    workspace makes it (--all: the files are not named yet); refresh without --new-patch says to
    name the first patch, with it writes 0001-NAME.patch, which apply then applies."""
    root = tmp_path / "lib" / "demo"
    (root / "0.16.0").mkdir(parents=True)
    (root / "set.toml").write_text('name = "demo"\n\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n')
    (root / "0.16.0" / "series").write_text("")
    made = run("workspace", "0.16.0", tmp_path / "ws", "--patches", tmp_path / "lib", "--all")
    assert made.exit_code == 0, made.output
    assert "no patch yet" in made.stdout and "--new-patch NAME" in made.stdout
    ws = tmp_path / "ws"
    (ws / SPEC).write_text(SPEC_PATCHED)
    unnamed = run("refresh", ws)
    assert unnamed.exit_code == 2 and "no patch yet" in unnamed.output
    assert f"`patchkit refresh {ws} --new-patch NAME`" in unnamed.output
    named = run("refresh", ws, "--new-patch", "accept-deepseek")
    assert named.exit_code == 0, named.output
    assert (root / "0.16.0" / "series").read_text().startswith("0001-accept-deepseek.patch sha256:")
    tree = write_tree(tmp_path / "site", "0.16.0", STOCK)
    assert run("apply", "--target", tree, "--patches", tmp_path / "lib").exit_code == 0
    assert (tree / SPEC).read_text() == SPEC_PATCHED


# -- port ------------------------------------------------------------------------------------------


def shifted(text: str) -> str:
    """What a new release typically does: lines added above the patched region."""
    return text.replace("import os\n", "import os\nimport re\nimport typing\n")


def test_port_clean_writes_the_new_series_and_a_release_entry(run, library, releases, tmp_path):
    releases["0.17.0"] = {SPEC: shifted(SPEC_PY), MODEL: MODEL_PY + "\n\nNEW_IN_017 = 1\n"}
    manifest = library / "demo" / "set.toml"
    before = manifest.read_text()
    result = run("port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["outcome"] == "ported"
    assert {(m["path"], m["conflicts"]) for m in report["merges"]} == {(SPEC, 0), (MODEL, 0)}
    assert manifest.read_text() == before + '\n[[releases]]\nversions = "==0.17.0"\ndir = "0.17.0"\n'

    ported = series_patches(library, "0.17.0")
    assert [p.name for p in ported.patches] == ["0001-change.patch", "0002-change.patch"]
    assert [[f.path for f in p.files] for p in ported.patches] == [[SPEC], [MODEL]]
    v1 = {p.name: p for p in series_patches(library, "0.16.0").patches}
    for patch in ported.patches:
        assert {k: v for k, v in patch.header.items() if k != "Last-Update"} == {
            k: v for k, v in v1[patch.name].header.items() if k != "Last-Update"
        }
    assert ported.patches[0].header["Last-Update"] == TODAY  # its hunk moved: a new diff
    assert apply_library(library, "0.17.0", releases["0.17.0"]) == {
        SPEC: shifted(SPEC_PATCHED).encode(),
        MODEL: (MODEL_PATCHED + "\n\nNEW_IN_017 = 1\n").encode(),
    }
    assert run("list", "--patches", library).exit_code == 0


def test_port_out_leaves_the_library_alone(run, library, releases, tmp_path):
    releases["0.17.0"] = {SPEC: shifted(SPEC_PY), MODEL: MODEL_PY}
    before = files_of(library)
    out = tmp_path / "out"
    result = run("port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library, "--out", out)
    assert result.exit_code == 0, result.output
    assert files_of(library) == before
    assert sorted(files_of(out)) == ["0001-change.patch", "0002-change.patch", "series"]
    # 0002's diff is unchanged (model.py is the same): copied byte for byte, header and all
    assert (out / "0002-change.patch").read_bytes() == (library / "demo" / "0.16.0" / "0002-change.patch").read_bytes()


def test_port_conflict_leaves_a_workspace_then_refresh_finishes(run, library, releases, tmp_path):
    theirs = SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "mistral",\n')
    releases["0.17.0"] = {SPEC: theirs, MODEL: MODEL_PY}
    before = files_of(library)
    ws = tmp_path / "ws"
    result = run("port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library, "--workspace", ws)
    assert result.exit_code == 1
    assert "1 file(s) conflict" in result.output and f"patchkit refresh {ws}" in result.output
    assert re.search(r"vllm/config/spec\.py\s+0001-change\.patch\s+1 conflict", result.output)
    assert files_of(library) == before  # nothing written until the conflict is resolved

    text = (ws / SPEC).read_text()
    assert conflict_lines(text.encode())
    assert (ws / MODEL).read_text() == MODEL_PATCHED
    assert git.Repo(ws).tags["stock"].commit.tree[SPEC].data_stream.read() == theirs.encode()
    result, _ = refresh(run, ws)
    assert result.exit_code == 1  # markers left

    resolved = theirs.replace('    "mistral",\n', '    "mistral",\n    "deepseek",\n')
    (ws / SPEC).write_text(resolved)
    result, report = refresh(run, ws)
    assert result.exit_code == 0, result.output
    assert [p["state"] for p in report["patches"]] == ["new", "new"]
    assert 'versions = "==0.17.0"' in report["registered"]
    assert apply_library(library, "0.17.0", releases["0.17.0"]) == {
        SPEC: resolved.encode(),
        MODEL: MODEL_PATCHED.encode(),
    }
    assert (library / "demo" / "set.toml").read_text().count('versions = "==0.17.0"') == 1


def test_two_ports_resolved_twice_register_the_release_once(run, library, releases, tmp_path):
    theirs = SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "mistral",\n')
    releases["0.17.0"] = {SPEC: theirs, MODEL: MODEL_PY}
    for ws in (tmp_path / "ws1", tmp_path / "ws2"):
        assert run("port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library, "--workspace", ws).exit_code == 1
    for ws in (tmp_path / "ws1", tmp_path / "ws2"):
        (ws / SPEC).write_text(upstream_then_ours((ws / SPEC).read_text()))
        result, report = refresh(run, ws)
        assert result.exit_code == 0, result.output
    assert any("already has an entry" in note for note in report["notes"])
    assert (library / "demo" / "set.toml").read_text().count('versions = "==0.17.0"') == 1
    assert (
        apply_library(library, "0.17.0", releases["0.17.0"])[SPEC]
        == theirs.replace('    "mistral",\n', '    "mistral",\n    "deepseek",\n').encode()
    )


def test_port_to_a_release_that_has_the_change_writes_nothing(run, library, releases, tmp_path):
    releases["0.17.0"] = {SPEC: SPEC_PATCHED, MODEL: MODEL_PATCHED}
    before = files_of(library)
    result = run("port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outcome"] == "upstream"
    assert files_of(library) == before


def test_port_merge_equal_to_the_new_stock_is_upstream(run, library, releases, tmp_path):
    # upstream took the change and moved on: the series no longer reverse-applies, the merge is a no-op
    upstream = shifted(SPEC_PATCHED)
    releases["0.17.0"] = {SPEC: upstream, MODEL: MODEL_PATCHED.replace("return x", "return x  # upstream")}
    result = run("port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["outcome"] == "upstream"
    assert all(m["present"] for m in report["merges"])
    assert not (library / "demo" / "0.17.0").exists()


def test_port_with_the_same_stock_files_points_at_the_old_directory(run, library, releases, tmp_path):
    releases["0.16.1"] = dict(STOCK)
    result = run("port", "--from", "0.16.0", "--to", "0.16.1", "--patches", library)
    assert result.exit_code == 0, result.output
    assert "same series as 0.16.0" in result.output
    assert not (library / "demo" / "0.16.1").exists()
    assert (
        (library / "demo" / "set.toml")
        .read_text()
        .endswith('\n[[releases]]\nversions = "==0.16.1"      # same series as 0.16.0\ndir = "0.16.0"\n')
    )
    assert series_patches(library, "0.16.1").release.directory.name == "0.16.0"


def test_port_refuses_a_release_the_library_already_covers(run, library, releases, tmp_path):
    releases["0.17.0"] = {SPEC: shifted(SPEC_PY), MODEL: MODEL_PY}
    assert run("port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library).exit_code == 0
    result = run("port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library)
    assert result.exit_code == 2
    assert "already has a series" in result.output


def test_port_to_a_release_missing_a_patched_file_is_a_conflict(run, library, releases, tmp_path):
    releases["0.17.0"] = {SPEC: shifted(SPEC_PY)}
    result = run("port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library)
    assert result.exit_code == 1
    assert "missing in vLLM 0.17.0: vllm/models/model.py" in result.output


# -- the git helpers -------------------------------------------------------------------------------


def test_git_diff_is_in_the_library_form_for_new_changed_and_deleted_files():
    diffs = git_diff(
        {
            "vllm/a.py": (None, b"x\n"),
            "vllm/b.py": (b"1\n2\n", b"1\n3"),
            "vllm/c.py": (b"z\n", None),
            "vllm/same.py": (b"s\n", b"s\n"),
        }
    )
    assert set(diffs) == {"vllm/a.py", "vllm/b.py", "vllm/c.py"}
    assert diffs["vllm/a.py"] == (
        "diff --git a/vllm/a.py b/vllm/a.py\nnew file mode 100644\n--- /dev/null\n+++ b/vllm/a.py\n@@ -0,0 +1 @@\n+x\n"
    )
    assert diffs["vllm/b.py"] == (
        "diff --git a/vllm/b.py b/vllm/b.py\n--- a/vllm/b.py\n+++ b/vllm/b.py\n"
        "@@ -1,2 +1,2 @@\n 1\n-2\n+3\n\\ No newline at end of file\n"
    )
    assert diffs["vllm/c.py"].startswith("diff --git a/vllm/c.py b/vllm/c.py\ndeleted file mode 100644\n")
    patch = parse_patch("".join(diffs.values()).encode(), "all")
    assert [f.kind for f in patch.files] == ["add", "modify", "delete"]


def test_merge_file_merges_or_marks_conflicts():
    base = b"a\nb\nc\nd\ne\nf\n"
    merged, conflicts = merge_file(b"a\nB\nc\nd\ne\nf\n", base, b"a\nb\nc\nd\ne\nF\n", ("ours", "base", "theirs"))
    assert (merged, conflicts) == (b"a\nB\nc\nd\ne\nF\n", 0)
    merged, conflicts = merge_file(b"a\nX\nc\n", b"a\nb\nc\n", b"a\nY\nc\n", ("ours", "base", "theirs"))
    assert conflicts == 1
    assert merged == b"a\n<<<<<<< ours\nX\n=======\nY\n>>>>>>> theirs\nc\n"
    assert conflict_lines(merged) == [2, 6]


# -- real releases ---------------------------------------------------------------------------------


def upstream_then_ours(text: str) -> str:
    """Resolve each conflict block by keeping the new release's lines, then the patch's: the
    resolution for "both sides appended to the same list" (how the library's 0.17.0 series reads)."""
    return re.sub(
        r"<<<<<<< [^\n]*\n(.*?)=======\n(.*?)>>>>>>> [^\n]*\n", lambda m: m.group(2) + m.group(1), text, flags=re.S
    )


CONFLICT = r"<<<<<<< [^\n]*\n(.*?)=======\n(.*?)>>>>>>> [^\n]*\n"


def theirs_then_the_layers_backend(text: str) -> str:
    """Resolve each conflict block by keeping the new release's lines, where 0.17 passes the engine's
    backend straight to the cache (0.16.0 named it backend_enum first, the line 0006 changes): the
    patch's helper then takes the backend's place there, as the library's 0.17.0 series reads."""
    text = re.sub(CONFLICT, lambda m: m.group(2), text, flags=re.S)
    engine = "backend=vllm_config.attention_config.backend,"
    assert text.count(engine) == 1, text
    return text.replace(engine, "backend=_engine_backend_for_layer(vllm_config, attn_selector_config),")


# how each file the real 0.16.0 -> 0.17.x port conflicts in is resolved by hand
RESOLUTIONS = {
    "vllm/config/speculative.py": upstream_then_ours,  # 0.17 appended "nemotron_h" where 0.16.0's patch appends
    "vllm/v1/attention/selector.py": theirs_then_the_layers_backend,
}


def test_port_help_says_a_library_of_several_sets_needs_set(run):
    # port carries one set: with the installed library's three it refuses to guess ("choose one with --set")
    result = run("port", "--help")
    assert result.exit_code == 0
    said = " ".join(result.output.split())
    assert "needed when the library holds several" in said and "every set that covers" not in said, said


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.17.0", "0.17.1"])
def test_porting_the_real_0_16_0_set_gives_the_library_series(run, tmp_path, version, capsys):
    from patchkit.fetch import release_tree
    from patchkit.series.library import default_root

    out, ws = tmp_path / "out", tmp_path / "ws"
    args = ("--from", "0.16.0", "--to", version, "--set", "eagle3", "--out", out, "--workspace", ws)
    result = run("port", *args, "--format", "json")
    report = json.loads(result.stdout)
    conflicted = {m["path"] for m in report["merges"] if m["conflicts"]}
    assert conflicted <= set(RESOLUTIONS), report["merges"]
    if conflicted:
        assert result.exit_code == 1 and report["outcome"] == "conflicts"
        for path in conflicted:
            (ws / path).write_text(RESOLUTIONS[path]((ws / path).read_text()))
        result = run("refresh", ws)
    assert result.exit_code == 0, result.output

    library = series_patches_of(default_root() / "eagle3", version)
    ported = [
        parse_patch((out / name).read_bytes(), name)
        for name in (line.split()[0] for line in (out / "series").read_text().splitlines())
    ]
    assert [(p.name, [f.path for f in p.files]) for p in ported] == [
        (p.name, [f.path for f in p.files]) for p in library
    ]

    tree = release_tree(version, sorted({f.path for p in library for f in p.files}))
    ours, theirs = plan_apply(tree, ported), plan_apply(tree, library)
    assert [s.state for s in ours.steps] == [StepState.WILL_CHANGE] * len(library)
    assert set(ours.changes) == set(theirs.changes)
    for path in theirs.changes:
        assert ours.content(path) == theirs.content(path), path  # byte-identical patched files

    same_hunks = all(a.files == b.files for a, b in zip(ported, library, strict=False))
    same_text = all(
        split_header(a.raw.decode())[1] == split_header(b.raw.decode())[1]
        for a, b in zip(ported, library, strict=False)
    )
    same_headers = all(
        {k: v for k, v in a.header.items() if k != "Last-Update"}
        == {k: v for k, v in b.header.items() if k != "Last-Update"}
        for a, b in zip(ported, library, strict=False)
    )
    assert same_hunks and same_headers
    with capsys.disabled():
        print(
            f"\nport 0.16.0 -> {version}: conflicts in {sorted(conflicted) or 'none'}; patched files "
            f"byte-identical; diff texts identical to the library's: {same_text}"
        )


def series_patches_of(set_dir: Path, version: str):
    selection = select(load_set(set_dir), parse(version, "v"))
    assert selection.kind == PATCH
    return selection.patches


def test_maintainer_json_carries_the_schema_version(run, library, releases, tmp_path):
    workspace = run("workspace", "0.16.0", tmp_path / "ws", "--patches", library, "--format", "json")
    _, refreshed = refresh(run, tmp_path / "ws", "--dry-run")
    releases["0.17.0"] = {SPEC: shifted(SPEC_PY), MODEL: MODEL_PY}
    ported = run("port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library, "--format", "json")
    documents = [json.loads(workspace.stdout), refreshed, json.loads(ported.stdout)]
    assert [d["schema_version"] for d in documents] == [1, 1, 1]
    assert (documents[0]["version"], documents[2]["outcome"]) == ("0.16.0", "ported")


def test_port_whose_diffs_come_out_the_same_says_the_patches_are_shared_not_written(run, library, releases, tmp_path):
    # stock differs far from every hunk: the ported diffs are the old ones, and the entry points at them
    releases["0.16.1"] = {SPEC: SPEC_PY + "\n\n\n\n\nLATER = 1\n", MODEL: MODEL_PY}
    result = run("port", "--from", "0.16.0", "--to", "0.16.1", "--patches", library)
    assert result.exit_code == 0, result.output
    assert "nothing copied" in result.output and "written" not in result.output, result.output
    assert "shared (not copied)" in result.output
    assert not (library / "demo" / "0.16.1").exists()
