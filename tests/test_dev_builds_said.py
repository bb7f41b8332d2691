"""A .dev build comes before its release, and is said so (audit23 H1); a series range is shown as
set.toml writes it; on a dev build of a release where the set is upstream, a failing stock check
first names --vllm-version of the release it derives from (audit23 H2)."""

from __future__ import annotations

from helpers import MODEL, MODEL_PY, SPEC, make_patch, patched_spec, write_library, write_tree


def test_a_dev_build_is_a_build_before_its_release(run, tmp_path, tree, scratch):
    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})
    dev = write_tree(tmp_path / "dev", version="0.18.0.dev12+gabc1234")  # upstream from 0.18.0
    said = run("status", "--target", dev, "--patches", library)
    text = " ".join(said.output.split())  # as wrapped for the terminal
    assert "local version label +gabc1234; 0.18.0.dev12 is a build before release 0.18.0" in text, text
    assert "is a build of release" not in text


def test_a_series_range_is_shown_as_set_toml_writes_it(run, tmp_path, scratch):
    tree = write_tree(tmp_path / "site", version="0.17.1.dev12+gabc1234")
    spec = make_patch(scratch, tree, {SPEC: patched_spec()})
    library = write_library(scratch / "lib", {"0.16.0": [spec]}, versions={"0.16.0": ">=0.16.0,<0.17.1"}, upstream=None)
    said = run("apply", "--dry-run", "--target", tree, "--patches", library)
    assert said.exit_code == 0, said.output
    assert "the series >=0.16.0,<0.17.1 [0.16.0] is the newest" in " ".join(said.output.split()), said.output


def test_a_dev_build_of_the_upstream_release_is_told_to_name_the_release_below_first(run, tree, tmp_path, scratch):
    """The set is upstream from 0.18.0; a 0.18.0.dev3 build whose files fail the set's checks may
    hold an earlier release's files: --vllm-version of that release is named before a regression."""
    library = write_library(scratch / "lib", {"0.17.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})
    broken = patched_spec().replace('    "deepseek",\n', '    "deepseek",,\n')
    dev = write_tree(tmp_path / "dev", "0.18.0.dev3", {SPEC: broken, MODEL: MODEL_PY})
    said = run("status", "--target", dev, "--patches", library)
    assert said.exit_code == 1, said.output
    text = " ".join(said.output.split())
    assert "--vllm-version RELEASE" in text and "the last before 0.18.0" in text, text
