"""A vLLM installed from a wheel one library built, judged with another whose series of the same
set changed since (a patchkit upgrade changed a patch): the install is that set's older series,
patchkit's own work, never "bad input" (exit 2). status and verify fail (exit 1) naming the fix:
apply replaces the earlier series with the library's in one step, over the release's own stock
files; revert puts those back (never the wheel's texts reversed alone)."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    STOCK_FILES,
    TAGS,
    install,
    load_plugins_like_vllm,
    make_patch,
    patched_spec,
    snapshot,
    stock_files_fetched,
    write_library,
    write_tree,
    write_wheel,
)
from launch_fixtures import write_model

from index_server import IndexServer, build_wheel, isolate_cache, use_index  # isort: skip

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
LATER_SPEC = patched_spec().replace('    "deepseek",\n', '    "deepseek",\n    "mimo",\n')


@pytest.fixture
def libraries(tmp_path):
    """`spec` patches 0.16.0 in both; the later library's 0001 adds one more model."""
    tree = write_tree(tmp_path / "stock")
    old = write_library(tmp_path / "old", {"0.16.0": [make_patch(tmp_path, tree, {SPEC: patched_spec()})]}, name="spec")
    new = write_library(tmp_path / "new", {"0.16.0": [make_patch(tmp_path, tree, {SPEC: LATER_SPEC})]}, name="spec")
    return old, new


def installed(run, tmp_path, library):
    done = run("wheel", write_wheel(tmp_path / "in"), "--out", tmp_path / "out", "--patches", library)
    assert done.exit_code == 0, done.output
    return install(next((tmp_path / "out").iterdir()), tmp_path / "prefix")


def test_status_and_verify_call_it_the_older_series_with_the_fix(run, tmp_path, libraries):
    old, new = libraries
    site = installed(run, tmp_path, old)
    assert run("status", "--target", site, "--patches", old).exit_code == 0

    status = run("status", "--target", site, "--patches", new, "--format", "json")
    assert status.exit_code == 1, status.output
    document = json.loads(status.stdout)
    assert document["other_library"]["changed"] == ["0001"], document
    assert document["other_library"]["fix"].endswith(" updates it"), document  # apply, in one step

    said = run("status", "--target", site, "--patches", new)
    assert said.exit_code == 1 and "not believed" not in said.output, said.output
    assert "applied from another library (0001 changed)" in " ".join(said.output.split()), said.output
    verify = run("verify", "--target", site, "--patches", new, "--no-import")
    assert verify.exit_code == 1, verify.output

    model = write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    launch = ["--", "vllm", "serve", str(model)]
    said = run("preflight", "--target", site, "--patches", new, "--no-import", "--format", "json", *launch)
    assert said.exit_code == 1, said.output
    failed = [f for f in json.loads(said.output)["findings"] if not f["ok"]]
    assert any("applied from another library (0001 changed)" in f["message"] for f in failed), failed
    assert all("patchkit apply " in f["fix"] for f in failed if "another library" in f["message"]), failed


def test_revert_puts_stock_back_from_the_wheels_own_texts(run, tmp_path, libraries):
    old, new = libraries
    site = installed(run, tmp_path, old)
    stock_files_fetched({SPEC: SPEC_PY.encode()})  # the release's own file vouches for the original
    done = run("revert", "--target", site, "--patches", new)
    assert done.exit_code == 0, done.output
    assert (site / SPEC).read_text() == SPEC_PY
    reverted = run("status", "--target", site, "--patches", new)
    assert "another library" not in reverted.output, reverted.output
    assert run("apply", "--target", site, "--patches", new).exit_code == 0
    assert (site / SPEC).read_text() == LATER_SPEC
    assert run("status", "--target", site, "--patches", new).exit_code == 0


def test_a_wheel_whose_own_text_does_not_match_its_sha256_is_still_refused(run, tmp_path, libraries):
    old, new = libraries
    site = installed(run, tmp_path, old)
    text = next(site.glob("vllm-*.dist-info/patchkit/**/0001-*.patch"))
    text.write_bytes(text.read_bytes() + b"\n")
    done = run("status", "--target", site, "--patches", new)
    assert done.exit_code == 2, done.output


def test_revert_does_not_put_back_what_only_the_wheels_texts_vouch_for(run, tmp_path, libraries):
    """The release's stock files not at hand: the wheel's texts reversed are a record read back from
    the tree, naming the library's set over another series; nothing is written (exit 4, the fetch)."""
    old, new = libraries
    site = installed(run, tmp_path, old)
    before = snapshot(site)
    done = run("revert", "--target", site, "--patches", new)
    assert done.exit_code == 4, done.output
    assert "could not be fetched" in done.output and "`patchkit revert " in done.output, done.output
    assert snapshot(site) == before


def test_revert_offline_names_a_command_that_reverts_once_the_index_is_reachable(run, tmp_path, libraries, monkeypatch):
    """The hint of the offline refusal is a command that works: run as printed once the index serves
    the release, it puts the stock files back (it used to be `patchkit fetch --patches NEW 0.16.0`,
    which fetches what the library at hand needs, not what the wheel patched)."""
    old, new = libraries
    site = installed(run, tmp_path, old)
    refused = run("revert", "--target", site, "--patches", new)
    assert refused.exit_code == 4, refused.output
    hint = re.search(r"run `(patchkit [^`]*)` again", " ".join(refused.output.split()))
    assert hint, refused.output
    server = IndexServer()
    try:
        isolate_cache(tmp_path, monkeypatch)
        server.publish(f"vllm-0.16.0-{TAGS}.whl", build_wheel(STOCK_FILES, version="0.16.0", blob_size=0))
        use_index(monkeypatch, server.index())
        done = run(*shlex.split(hint.group(1))[1:])
    finally:
        server.stop()
    assert done.exit_code == 0, done.output
    assert (site / SPEC).read_text() == SPEC_PY


def test_revert_refuses_a_wheel_whose_recorded_stock_file_is_not_the_releases(run, tmp_path, libraries):
    """An earlier series' wheel whose record names a stock sha256 the release's own file does not have:
    only the release's files vouch for its originals, so nothing is written (exit 2), and the fix is the
    stock release reinstalled (no --patches DIR makes that file the release's)."""
    old, new = libraries
    site = installed(run, tmp_path, old)
    provenance = next(site.glob("vllm-*.dist-info/patchkit.json"))
    record = json.loads(provenance.read_text())
    record["files"][SPEC]["stock_sha256"] = hashlib.sha256(SPEC_PY.encode() + b"# another build\n").hexdigest()
    provenance.write_text(json.dumps(record))
    stock_files_fetched({SPEC: SPEC_PY.encode()})  # the release's own file, which the record does not name
    before = snapshot(site)
    done = run("revert", "--target", site, "--patches", new)
    words = " ".join(done.output.split())
    assert done.exit_code == 2, done.output
    assert f"records a stock {SPEC} that is not vLLM 0.16.0's own file: not believed" in words, words
    assert "pip install --force-reinstall --no-deps vllm==0.16.0" in words and "--patches DIR" not in words, words
    assert snapshot(site) == before


def test_apply_replaces_the_wheels_earlier_series_in_one_step(run, tmp_path, libraries):
    """M7: apply over an earlier series' wheel plans the library's series on the release's stock files
    (as revert would put them back) and writes it in one transaction; the record's originals are the
    release's, so revert then puts the stock files back; the guard it installs lets the tree launch."""
    old, new = libraries
    site = installed(run, tmp_path, old)
    stock_files_fetched({SPEC: SPEC_PY.encode()})
    said = run("status", "--target", site, "--patches", new, "--format", "json")
    assert said.exit_code == 1 and "apply" in json.loads(said.stdout)["other_library"]["fix"], said.output
    dry = run("apply", "--target", site, "--patches", new, "--dry-run")
    assert dry.exit_code == 0 and (site / SPEC).read_text() == patched_spec(), dry.output
    done = run("apply", "--target", site, "--patches", new)
    assert done.exit_code == 0 and "updated" in done.output, done.output
    said = " ".join(done.output.split())  # the header's note: the wheel's series is not this library's
    assert "its series is read from there (an earlier library's: this library's series of it differs)" in said, said
    assert (site / SPEC).read_text() == LATER_SPEC
    assert run("status", "--target", site, "--patches", new).exit_code == 0
    assert load_plugins_like_vllm(site).returncode == 0
    assert run("revert", "--target", site, "--patches", new).exit_code == 0
    assert (site / SPEC).read_text() == SPEC_PY


def test_apply_over_the_wheels_earlier_series_offline_writes_nothing_and_names_itself(run, tmp_path, libraries):
    old, new = libraries
    site = installed(run, tmp_path, old)
    before = snapshot(site)
    done = run("apply", "--target", site, "--patches", new)
    words = " ".join(done.output.split())
    assert done.exit_code == 4 and "could not be fetched" in words and "nothing was applied" in words, words
    assert re.search(r"run `patchkit apply [^`]*` again", words), words
    assert snapshot(site) == before


def test_apply_replaces_one_sets_earlier_series_of_a_wheel_of_several_in_one_step(run, tmp_path):
    """A wheel of every set (what `patchkit wheel` builds by default), one set's series changed since:
    apply replaces that set's series over the release's files of it; the other set, unchanged, stays
    the wheel's; revert puts every stock file back."""
    tree = write_tree(tmp_path / "stock")
    model = MODEL_PY + "# tuned\n"
    libraries = []
    for name, spec in (("old", patched_spec()), ("new", LATER_SPEC)):
        lib = write_library(tmp_path / name, {"0.16.0": [make_patch(tmp_path, tree, {SPEC: spec})]}, name="spec")
        write_library(lib, {"0.16.0": [make_patch(tmp_path, tree, {MODEL: model})]}, name="model")
        libraries.append(lib)
    old, new = libraries
    site = installed(run, tmp_path, old)
    stock_files_fetched({SPEC: SPEC_PY.encode(), MODEL: MODEL_PY.encode()})
    said = run("status", "--target", site, "--patches", new)
    assert said.exit_code == 1 and "updates it" in said.output, said.output
    done = run("apply", "--target", site, "--patches", new)
    assert done.exit_code == 0, done.output
    assert ((site / SPEC).read_text(), (site / MODEL).read_text()) == (LATER_SPEC, model)
    said = run("status", "--target", site, "--patches", new)
    assert said.exit_code == 0, said.output
    assert load_plugins_like_vllm(site).returncode == 0
    assert run("revert", "--target", site, "--patches", new).exit_code == 0
    assert ((site / SPEC).read_text(), (site / MODEL).read_text()) == (SPEC_PY, MODEL_PY)


def test_an_earlier_series_wheel_of_a_local_build_names_its_reinstall(run, tmp_path, libraries):
    """A wheel built from a local build (`0.16.0+lab`): no public index serves its stock files, so
    "once the index is reachable" would never come; the hint is the build's reinstall, then apply,
    and following it (pip's uninstall and install of the build) the library's series applies."""
    old, new = libraries
    stock = write_wheel(tmp_path / "in", "0.16.0+lab", published=False)
    done = run("wheel", stock, "--out", tmp_path / "out", "--patches", old)
    assert done.exit_code == 0, done.output
    site = install(next((tmp_path / "out").iterdir()), tmp_path / "prefix")
    before = snapshot(site)
    refused = run("apply", "--target", site, "--patches", new)
    words = " ".join(refused.output.split())
    assert refused.exit_code == 4 and "pip install --force-reinstall --no-deps vllm==0.16.0+lab" in words, words
    assert "once the package index is reachable" not in words and snapshot(site) == before, words
    shutil.rmtree(site / "vllm")  # pip's --force-reinstall: the patched wheel uninstalled, the build installed
    shutil.rmtree(next(site.glob("vllm-*.dist-info")))
    (tmp_path / "prefix/scripts/vllm").unlink()
    install(stock, tmp_path / "prefix")
    assert run("apply", "--target", site, "--patches", new).exit_code == 0
    assert (site / SPEC).read_text() == LATER_SPEC


def test_status_names_the_reinstall_of_a_local_builds_earlier_series_wheel_and_it_works(run, tmp_path, libraries):
    """status names the fix apply can carry out: of a local build's wheel (no public index serves its
    stock files, so apply and revert exit 4) that is the build's reinstall, then apply, run as printed."""
    old, new = libraries
    stock = write_wheel(tmp_path / "in", "0.16.0+lab", published=False)
    assert run("wheel", stock, "--out", tmp_path / "out", "--patches", old).exit_code == 0
    site = install(next((tmp_path / "out").iterdir()), tmp_path / "prefix")
    said = run("status", "--target", site, "--patches", new)
    words = " ".join(said.output.split())
    assert said.exit_code == 1 and "pip install --force-reinstall --no-deps vllm==0.16.0+lab" in words, words
    assert "updates it" not in words, words
    apply = re.search(r"vllm==0\.16\.0\+lab`.*?, then (?:run )?`(patchkit apply [^`]*)`", words)
    assert apply, words
    shutil.rmtree(site / "vllm")  # the named pip --force-reinstall: the patched wheel uninstalled, the build installed
    shutil.rmtree(next(site.glob("vllm-*.dist-info")))
    (tmp_path / "prefix/scripts/vllm").unlink()
    install(stock, tmp_path / "prefix")
    done = run(*shlex.split(apply.group(1))[1:])
    assert done.exit_code == 0, done.output
    assert (site / SPEC).read_text() == LATER_SPEC
    assert run("status", "--target", site, "--patches", new).exit_code == 0
