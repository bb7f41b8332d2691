"""The compatibility matrix (issue 22): `verify --all --format markdown` prints one Markdown table,
releases by set, each cell applied / upstream / conflict / failed; `list` shows the same matrix for
the library, from its series, nothing fetched."""

from __future__ import annotations

import pytest
from helpers import (
    SPEC_PY,
    Releases,
    assert_clean_failure,
    cli_runner,
    make_patch,
    patched_spec,
    run_cli,
    run_cli_read_only,
    write_library,
    write_tree,
)
from packaging.version import Version

from patchkit.base.enums import ReleaseOutcome
from patchkit.cli.ui.matrix import from_releases, markdown
from patchkit.releases.check import ReleaseResult

SPEC = "vllm/config/spec.py"
OTHER_SPEC = SPEC_PY.replace('"llama",', '"mistral",')  # context the patch does not find


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def library(tmp_path, scratch):
    """A set covering 0.16.x with one series (upstream from 0.18.0)."""
    tree = write_tree(tmp_path / "base")
    patch = make_patch(scratch, tree, {SPEC: patched_spec()})
    return write_library(tmp_path / "lib", {"0.16.0": [patch]}, versions={"0.16.0": ">=0.16.0,<0.17"})


def test_verify_all_as_markdown_is_one_table_of_releases_by_set(tmp_path, monkeypatch, library):
    releases = Releases(tmp_path / "index", monkeypatch)
    for version, spec in [("0.16.0", SPEC_PY), ("0.16.1", OTHER_SPEC), ("0.18.0", patched_spec())]:
        releases.add(version, {SPEC: spec})
    result = cli_runner()("verify", "--all", "--patches", library, "--format", "markdown")
    assert result.exit_code == 1  # 0.16.1 conflicts
    assert result.stdout == (
        "| vLLM | demo |\n| --- | --- |\n| 0.16.0 | applied |\n| 0.16.1 | conflict |\n| 0.18.0 | upstream |\n"
    )


def test_releases_named_one_by_one_make_the_same_table(tmp_path, monkeypatch, library):
    """Several --vllm-version (a tuple in the selection hints carry): the table, not an internal error."""
    releases = Releases(tmp_path / "index", monkeypatch)
    for version, spec in [("0.16.0", SPEC_PY), ("0.18.0", patched_spec())]:
        releases.add(version, {SPEC: spec})
    named = ["--vllm-version", "0.16.0", "--vllm-version", "0.18.0"]
    result = cli_runner()("verify", *named, "--patches", library, "--format", "markdown")
    assert result.exit_code == 0, result.output
    assert result.stdout == "| vLLM | demo |\n| --- | --- |\n| 0.16.0 | applied |\n| 0.18.0 | upstream |\n"


def release(outcome: str, **details) -> ReleaseResult:
    return ReleaseResult(Version("0.16.0"), ReleaseOutcome(outcome), "detail", **details)


@pytest.mark.parametrize(
    ("result", "cell"),
    [
        (release("patched"), "applied"),
        (release("upstream"), "upstream"),
        (release("conflict"), "conflict"),
        (release("check-failed"), "failed"),
        (release("upstream", upstream_regression=True), "failed"),
        (release("patched", reverted_identical=False), "failed"),
        (release("unsupported"), "unsupported"),
    ],
)
def test_each_cell_says_what_verify_found(result, cell):
    assert markdown(from_releases("eagle3", [result])) == f"| vLLM | eagle3 |\n| --- | --- |\n| 0.16.0 | {cell} |\n"


def test_markdown_is_for_releases_not_a_target(tree, library):
    done = run_cli_read_only("verify", "--target", tree, "--patches", library, "--format", "markdown")
    assert_clean_failure(done, 2)
    assert "compatibility matrix of releases" in done.stderr and done.stdout == ""


def test_list_shows_the_matrix_from_the_library_without_fetching(library, monkeypatch, tmp_path):
    second = library / "demo" / "0.17.0"
    second.mkdir()
    (second / "0001-change.patch").write_bytes(b"not a patch\n")  # damaged: its release fails
    (second / "series").write_text("0001-change.patch\n")
    with (library / "demo" / "set.toml").open("a") as f:
        f.write('\n[[releases]]\nversions = "==0.17.0"\ndir = "0.17.0"\n')
    done = run_cli("list", "--patches", library, env={"PIP_INDEX_URL": "http://127.0.0.1:9/unreachable/"})
    assert done.returncode == 1, done.stderr  # a damaged patch
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("releases by set"))
    assert [line.split() for line in lines[start + 1 :]] == [
        ["vLLM", "demo"],
        ["0.16.0", "applied"],
        ["0.17.0", "failed"],
        [">=0.18.0", "upstream"],
    ]


def test_lists_matrix_has_a_row_per_release_named_each_cell_true_for_it(tmp_path, scratch):
    """New-user trial 14, item 8: the library's matrix had a set's range as a row, and the other
    sets' cells there said `-` (not covered) for releases they cover: `>=0.11.1,<0.13.0  -  applied`
    under eagle3's `0.11.1  applied`. Each row is a release the library names (or those after the
    last), and each set's cell is what it holds for that release."""
    tree = write_tree(tmp_path / "base")
    patch = make_patch(scratch, tree, {SPEC: patched_spec()})
    pinned = write_library(
        tmp_path / "lib", {"0.11.1": [patch], "0.12.0": [patch]}, versions={"0.11.1": "==0.11.1"}, name="pinned"
    )
    write_library(
        pinned,
        {"0.11.1": [patch], "0.13.0": [patch]},
        versions={"0.11.1": ">=0.11.1,<0.13.0", "0.13.0": ">=0.13.0"},
        upstream=None,
        name="ranged",
    )
    (pinned / "library.toml").write_text('order = ["pinned", "ranged"]\n')
    done = run_cli("list", "--patches", pinned)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("releases by set"))
    assert [line.split() for line in lines[start + 1 :]] == [
        ["vLLM", "pinned", "ranged"],
        ["0.11.1", "applied", "applied"],
        ["0.12.0", "applied", "applied"],  # was `>=0.11.1,<0.13.0  -  applied`
        ["0.13.0", "-", "applied"],
        [">=0.18.0", "upstream", "applied"],  # upstream from 0.18.0 (write_library's), ranged open-ended
    ]


def test_a_failed_release_is_counted_in_its_row_and_said_once_below(tmp_path, monkeypatch, scratch):
    """verify against releases as text: the row counts the failed checks, each said once below it
    with its file and line, then the verdict."""
    stock = write_tree(tmp_path / "base")
    broken = patched_spec().replace("def accepts(model_type: str) -> bool:", "def accepts(model_type: str) -> bool")
    library = write_library(tmp_path / "bad", {"0.16.0": [make_patch(scratch, stock, {SPEC: broken})]})
    Releases(tmp_path / "index", monkeypatch).add("0.16.0", {SPEC: SPEC_PY})
    result = cli_runner()("verify", "--vllm-version", "0.16.0", "--patches", library)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    row = next(line for line in lines if line.startswith("0.16.0"))
    assert row.split()[1] == "check-failed" and row.endswith("1 check(s) failed (below)"), lines
    said = [line for line in lines if "expected ':'" in line or "invalid syntax" in line]
    assert len(said) == 1 and said[0].startswith(f"{SPEC}:11: 0.16.0 syntax: "), lines
    assert lines[-1].startswith("verify: FAILED on 0.16.0")


def test_list_says_a_cell_is_what_the_library_holds_not_that_anything_is_applied(library):
    """A new user read `applied` beside every release as "is applied here": the legend says what
    each cell word means, before the matrix."""
    done = run_cli("list", "--patches", library)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("releases by set"))
    legend = " ".join(" ".join(lines[:start]).split())
    assert "what the library holds for that release (list applies nothing)" in legend, legend
    assert "applied = a series of the set patches it" in legend and "- = the set does not cover it" in legend
    assert "upstream = vLLM has the change" in legend and "failed = a damaged patch" in legend
