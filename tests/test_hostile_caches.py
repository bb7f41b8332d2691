"""Caches and workspace records are untrusted input: hostile entries never change a verdict, never
make patchkit write outside where it writes, never end in a traceback.

The catalogue: the verify result cache (<cache>/verify-results/), the pyflakes cache
(<cache>/pyflakes/) and the workspace record (.patchkit-workspace.json), each fed hostile
entries while a sentinel directory outside is fingerprinted before and after.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    Releases,
    assert_clean_failure,
    cli_runner,
    fingerprint,
    make_patch,
    patched_spec,
    release_of,
    run_cli,
    run_cli_read_only,
    verify,
    write_library,
    write_tree,
)

from patchkit.checks import names
from patchkit.distinfo.record import record_hash
from patchkit.maintainer.meta import META

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
# context the library's patch does not find: that release conflicts
MOVED_SPEC = SPEC_PY.replace('"qwen",', '"qwen2",')


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def sentinel(tmp_path) -> Path:
    """A directory outside every tree and cache, holding what hostile state points at."""
    root = tmp_path / "sentinel"
    root.mkdir()
    (root / "secret.txt").write_text("do not read me into a patch\n")
    (root / "profile").write_text("export PATH=/usr/bin\n")
    return root


@pytest.fixture
def releases(tmp_path, monkeypatch) -> Releases:
    return Releases(tmp_path / "index", monkeypatch)


@pytest.fixture
def library(tmp_path, releases) -> Path:
    """Set `demo`: one patch on spec.py for 0.16.0, which 0.16.1 shares."""
    stock = releases.add("0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    patch = make_patch(tmp_path, stock, {SPEC: patched_spec()})
    root = write_library(tmp_path / "lib", {"0.16.0": [patch]}, supported=">=0.16.0")
    with (root / "demo" / "set.toml").open("a") as manifest:
        manifest.write('\n[[releases]]\nversions = "==0.16.1"\ndir = "0.16.0"\n')
    return root


def result_entries(cache: Path) -> list[Path]:
    return sorted((cache / "verify-results").glob("*.json"))


# --------------------------------------------------------------------------- the verify result cache


def test_a_cached_result_edited_to_pass_is_not_believed_in_any_format(library, releases, cache):
    releases.add("0.16.1", {SPEC: MOVED_SPEC, MODEL: MODEL_PY})
    first = verify(library, "0.16.1")
    assert first.exit_code == 1 and release_of(first)["outcome"] == "conflict"
    (entry,) = result_entries(cache)
    forged = json.loads(entry.read_text())
    forged["result"].update(outcome="upstream", ok=True, detail="vLLM ships the change; all good", checks=[])
    entry.write_text(json.dumps(forged))

    as_json = verify(library, "0.16.1")
    assert as_json.exit_code == 1
    truth = release_of(as_json)
    assert (truth["outcome"], truth["ok"], truth["cached"]) == ("conflict", False, False)
    assert "not believed" in truth["detail"] and "all good" not in as_json.stdout

    as_text = verify(library, "0.16.1", "text")
    assert as_text.exit_code == 1 and "conflict" in as_text.output and "all good" not in as_text.output

    as_junit = verify(library, "0.16.1", "junit")
    assert as_junit.exit_code == 1
    failures = ET.fromstring(as_junit.stdout).findall(".//failure")
    assert [f.get("type") for f in failures] == ["conflict"]


def test_the_note_of_a_result_not_believed_is_said_once_never_kept(library, releases, cache):
    """New-user trial 14, item 12: the note "a cached result ... was not believed ...: run again" went
    into the result kept in its place, so every later run (each JUnit testcase of the README's CI
    command) replayed it, though they believed that result. The run that re-checked says so; the
    entry it keeps holds the release's own detail."""
    first = verify(library, "0.16.0")
    assert first.exit_code == 0 and "not believed" not in release_of(first)["detail"]
    (entry,) = result_entries(cache)
    foreign = json.loads(entry.read_text())
    foreign["seal"] = "0" * 64  # as a cache restored from another runner would be
    entry.write_text(json.dumps(foreign))

    rechecked = release_of(verify(library, "0.16.0"))
    assert rechecked["cached"] is False and "re-checked: a cached result" in rechecked["detail"]
    assert "run again" not in rechecked["detail"]
    for _ in range(2):
        again = release_of(verify(library, "0.16.0"))
        assert again["cached"] is True and again["detail"] == release_of(first)["detail"], again


def test_a_releases_detail_counts_every_check_reported_with_it(library, cache):
    """New-user trial 14, item 18: the detail said "6 check(s) passed, 1 skipped" where the checks
    reported with it (JSON, JUnit) held 10 passes: the stock files' integrity and the behaviour
    test were not counted."""
    release = release_of(verify(library, "0.16.0"))
    passed = sum(c["ok"] and c["level"] == "error" for c in release["checks"])
    skipped = sum(c["ok"] and c["level"] == "warning" for c in release["checks"])
    assert any(c["check"] == "integrity" for c in release["checks"]), release["checks"]
    counted = f"{passed} check(s) passed" + (f", {skipped} skipped" if skipped else "")
    assert counted in release["detail"], (counted, release["detail"])


def test_a_sealed_result_of_another_release_replayed_is_not_believed(library, releases, cache):
    releases.add("0.16.1", {SPEC: MOVED_SPEC, MODEL: MODEL_PY})
    assert verify(library, "0.16.0").exit_code == 0
    (passing,) = result_entries(cache)
    assert verify(library, "0.16.1").exit_code == 1
    (conflicting,) = [e for e in result_entries(cache) if e != passing]
    conflicting.write_bytes(passing.read_bytes())  # a genuine seal, for another key

    again = verify(library, "0.16.1")
    assert again.exit_code == 1 and release_of(again)["outcome"] == "conflict"


def test_an_invented_outcome_and_version_are_refused_and_run_again(library, releases, cache):
    releases.add("0.16.1", {SPEC: MOVED_SPEC, MODEL: MODEL_PY})
    verify(library, "0.16.1")
    (entry,) = result_entries(cache)
    data = json.loads(entry.read_text())
    data["result"].update(outcome="flawless", vllm_version="99.0.0")
    entry.write_text(json.dumps(data))

    again = verify(library, "0.16.1", "text")
    assert again.exit_code == 1
    assert "flawless" not in again.output and "99.0.0" not in again.output
    assert release_of(verify(library, "0.16.1"))["cached"] is True  # the run again was sealed and kept


@pytest.mark.parametrize(
    "hostile",
    ["symlink-out", "directory", "fifo", "not-json", "a-list", "no-seal", "huge-detail"],
)
def test_catalogue_verify_result_cache(library, releases, cache, sentinel, hostile):
    releases.add("0.16.1", {SPEC: MOVED_SPEC, MODEL: MODEL_PY})
    verify(library, "0.16.1")
    (entry,) = result_entries(cache)
    data = json.loads(entry.read_text())
    entry.unlink()
    if hostile == "symlink-out":
        entry.symlink_to(sentinel / "secret.txt")
    elif hostile == "directory":
        entry.mkdir()
    elif hostile == "fifo":
        os.mkfifo(entry)
    elif hostile == "not-json":
        entry.write_bytes(b"\xff\xfe{")
    elif hostile == "a-list":
        entry.write_text("[1, 2]")
    elif hostile == "no-seal":
        entry.write_text(json.dumps({"result": {**data["result"], "outcome": "patched"}}))
    else:
        entry.write_text(json.dumps({**data, "result": {**data["result"], "detail": "x" * 100_000}}))
    before = fingerprint(sentinel)

    again = verify(library, "0.16.1")  # in-process (the fake index): an exception would propagate
    assert again.exit_code == 1 and release_of(again)["outcome"] == "conflict"
    assert not release_of(again)["cached"]
    assert fingerprint(sentinel) == before


# --------------------------------------------------------------------------- integrity in CI mode


def test_ci_mode_runs_integrity_and_a_file_record_disowns_is_not_blamed_on_the_library(library, releases, cache):
    tree = releases.add("0.16.1", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    passing = release_of(verify(library, "0.16.1"))
    assert passing["outcome"] == "patched"
    assert [c["ok"] for c in passing["checks"] if c["check"] == "integrity"] == [True]

    # The cached file no longer the release's, and this fake index cannot fetch it anew: the copy
    # into the scratch tree checks it against RECORD and names the cache, never the library.
    (tree / SPEC).write_text(MOVED_SPEC)
    damaged = verify(library, "0.16.1")
    said = damaged.stdout + (damaged.stderr or "")
    assert damaged.exit_code == 4, said
    assert "damaged" in said and SPEC in said and "conflict" not in said


def test_ci_mode_runs_integrity_on_an_upstream_release(library, releases, cache):
    releases.add("0.18.0", {SPEC: patched_spec(), MODEL: MODEL_PY})
    upstream = release_of(verify(library, "0.18.0"))
    assert upstream["outcome"] == "upstream"
    assert any(c["check"] == "integrity" and c["ok"] for c in upstream["checks"])


# --------------------------------------------------------------------------- the pyflakes cache

UNDEFINED = b"class Model(SupportsEagle3):\n    pass\n"


def pyflakes_entry(cache: Path, source: bytes) -> Path:
    import hashlib

    digest = hashlib.sha256(source).hexdigest()
    (entry,) = (cache / "pyflakes").glob(f"*/{digest[:2]}/{digest}.json")
    return entry


def test_a_forged_no_findings_pyflakes_entry_does_not_hide_an_undefined_name(cache, monkeypatch):
    monkeypatch.setattr(names, "_SEEN", {})
    assert [f.kind for f in names.findings(UNDEFINED)] == ["UndefinedName"]
    entry = pyflakes_entry(cache, UNDEFINED)
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "findings": []}))

    monkeypatch.setattr(names, "_SEEN", {})
    assert [f.kind for f in names.findings(UNDEFINED)] == ["UndefinedName"]


@pytest.mark.parametrize("hostile", ["symlink-out", "unsealed-empty", "directory", "fifo", "garbage"])
def test_catalogue_pyflakes_cache(cache, sentinel, tmp_path, monkeypatch, hostile):
    monkeypatch.setattr(names, "_SEEN", {})
    names.findings(UNDEFINED)
    entry = pyflakes_entry(cache, UNDEFINED)
    entry.unlink()
    if hostile == "symlink-out":
        (sentinel / "fake.json").write_text('{"findings": [], "seal": "0"}')
        entry.symlink_to(sentinel / "fake.json")
    elif hostile == "unsealed-empty":
        entry.write_text('{"findings": []}')
    elif hostile == "directory":
        entry.mkdir()
    elif hostile == "fifo":
        os.mkfifo(entry)
    else:
        entry.write_bytes(b"\x00" * 64)
    before = fingerprint(sentinel)

    site = write_tree(tmp_path / "site", "0.16.0", {SPEC: SPEC_PY})
    patch = tmp_path / "bad.patch"
    patch.write_bytes(make_patch(tmp_path, site, {SPEC: UNDEFINED}))  # the very content of the entry
    done = run_cli_read_only(
        "verify", "--target", site, "--patch", patch, "--no-import", env={"PATCHKIT_CACHE_DIR": str(cache)}
    )
    assert_clean_failure(done, 1)
    assert "undefined name 'SupportsEagle3'" in done.stdout
    assert fingerprint(sentinel) == before


# --------------------------------------------------------------------------- the workspace record


@pytest.fixture
def own_library(tmp_path, releases) -> Path:
    """Set `demo` whose 0.16.0 series no other release shares (refresh has nothing to fetch)."""
    stock = releases.add("0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    patch = make_patch(tmp_path, stock, {SPEC: patched_spec()})
    return write_library(tmp_path / "own-lib", {"0.16.0": [patch]}, supported=">=0.16.0")


@pytest.fixture
def workspace(own_library, releases, tmp_path) -> Path:
    ws = tmp_path / "ws"
    result = cli_runner()("workspace", "0.16.0", ws, "--patches", own_library)
    assert result.exit_code == 0, result.output
    return ws


def edit_record(ws: Path, change) -> None:
    data = json.loads((ws / META).read_text())
    change(data)
    (ws / META).write_text(json.dumps(data))


def hostile_record(ws: Path, sentinel: Path, library: Path, hostile: str) -> None:
    def first_patch(**fields):
        return lambda d: d["patches"][0].update(fields)

    changes = {
        "patch-name-climbs-out": first_patch(name="../../sentinel/profile"),
        "patch-name-absolute": first_patch(name=str(sentinel / "profile")),
        "patch-name-not-a-patch": first_patch(name="series"),
        "file-outside-roots": first_patch(files=["../sentinel/secret.txt"]),
        "series-dir-outside-the-set": lambda d: d.update(series_dir=str(sentinel)),
        "series-dir-climbs-out": lambda d: d.update(series_dir=d["set_dir"] + "/../../../sentinel"),
        "set-dir-elsewhere": lambda d: d.update(set_dir=str(sentinel), series_dir=str(sentinel)),
        "another-set-name": lambda d: d.update(set_name="other"),
        "version-not-a-version": lambda d: d.update(version="sixteen"),
        "roots-climb-out": lambda d: d.update(roots=[".."]),
        "stock-commit-an-option": lambda d: d.update(stock_commit="--output=/tmp/x"),
        "patches-not-a-list": lambda d: d.update(patches={"name": "0001-x.patch"}),
        "register-elsewhere": lambda d: d.update(register={"versions": ">=0", "dir": "../../sentinel"}),
        "an-unknown-field": lambda d: d.update(execute="rm -rf ~"),
    }
    if hostile == "series-dir-symlinked-out":
        link = library / "demo" / "elsewhere"
        link.symlink_to(sentinel, target_is_directory=True)
        edit_record(ws, lambda d: d.update(series_dir=str(link)))
    elif hostile == "record-is-a-symlink":
        (sentinel / "record.json").write_text((ws / META).read_text())
        (ws / META).unlink()
        (ws / META).symlink_to(sentinel / "record.json")
    elif hostile == "record-not-an-object":
        (ws / META).write_text("[]")
    else:
        edit_record(ws, changes[hostile])


HOSTILE_RECORDS = [
    "patch-name-climbs-out",
    "patch-name-absolute",
    "patch-name-not-a-patch",
    "file-outside-roots",
    "series-dir-outside-the-set",
    "series-dir-climbs-out",
    "series-dir-symlinked-out",
    "set-dir-elsewhere",
    "another-set-name",
    "version-not-a-version",
    "roots-climb-out",
    "stock-commit-an-option",
    "patches-not-a-list",
    "register-elsewhere",
    "an-unknown-field",
    "record-is-a-symlink",
    "record-not-an-object",
]


@pytest.mark.parametrize("hostile", HOSTILE_RECORDS)
def test_catalogue_workspace_record(workspace, own_library, sentinel, hostile):
    (workspace / SPEC).write_text(patched_spec().replace('"deepseek",', '"deepseek",\n    "kimi_k2",'))
    hostile_record(workspace, sentinel, own_library, hostile)
    before, library_before = fingerprint(sentinel), fingerprint(own_library)

    done = run_cli("refresh", workspace)
    assert_clean_failure(done, 2)
    assert fingerprint(sentinel) == before and fingerprint(own_library) == library_before
    assert len((done.stdout + done.stderr).strip().splitlines()) <= 2  # the error, and maybe a hint


def test_a_workspace_record_as_patchkit_wrote_it_still_refreshes(workspace, own_library):
    (workspace / SPEC).write_text(patched_spec().replace('"deepseek",', '"deepseek",\n    "kimi_k2",'))
    done = run_cli("refresh", workspace)
    assert done.returncode == 0, done.stderr
    assert b"kimi_k2" in (own_library / "demo" / "0.16.0" / "0001-change.patch").read_bytes()


def test_a_workspace_moved_elsewhere_keeps_working_inside_its_set(workspace, own_library, tmp_path):
    moved = tmp_path / "moved-ws"
    workspace.rename(moved)  # its seal was for the old place: the record is judged by the rules alone
    (moved / SPEC).write_text(patched_spec().replace('"deepseek",', '"deepseek",\n    "kimi_k25",'))
    done = run_cli("refresh", moved)
    assert done.returncode == 0, done.stderr
    assert b"kimi_k25" in (own_library / "demo" / "0.16.0" / "0001-change.patch").read_bytes()


def test_unsealed_record_of_a_port_out_workspace_is_refused_but_sealed_one_refreshes(library, releases, tmp_path):
    releases.add("0.17.0", {SPEC: SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "granite",\n'), MODEL: MODEL_PY})
    out, ws = tmp_path / "out", tmp_path / "port-ws"
    run = cli_runner()
    assert (
        run(
            "port", "--from", "0.16.0", "--to", "0.17.0", "--patches", library, "--out", out, "--workspace", ws
        ).exit_code
        == 1
    )
    text = (ws / SPEC).read_text()
    (ws / SPEC).write_text(
        text.split("<<<<<<<")[0] + '    "granite",\n    "deepseek",\n' + text.split(">>>>>>>")[1].split("\n", 1)[1]
    )
    record = (ws / META).read_bytes()
    edit_record(ws, lambda d: d.update(seal="0" * 64))
    refused = run_cli("refresh", ws)
    assert_clean_failure(refused, 2)
    assert "not inside the set's directory" in refused.stderr and not out.exists()

    (ws / META).write_bytes(record)
    done = run_cli("refresh", ws)
    assert done.returncode == 0, done.stderr
    assert b"granite" in (out / "0001-change.patch").read_bytes()


def test_the_seal_key_is_private_and_outside_the_cache(library, releases, cache):
    from patchkit.base import seal

    verify(library, "0.16.0")
    key = seal.key_path()
    assert key.is_file() and not key.is_symlink()
    assert os.stat(key).st_mode & 0o077 == 0
    assert cache.resolve() not in key.resolve().parents


# --------------------------------------------------------------------------- the workspace's files


@pytest.mark.parametrize("where", [MODEL, "vllm/extra/linked.py", "vllm/models"])
def test_refresh_refuses_a_symlink_in_the_workspace(workspace, own_library, sentinel, where):
    target = workspace / where
    if target.is_dir():
        import shutil

        shutil.rmtree(target)
        target.symlink_to(sentinel, target_is_directory=True)  # vllm/models/model.py now reads the sentinel
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        target.symlink_to(sentinel / "secret.txt")
    library_before = fingerprint(own_library)

    done = run_cli("refresh", workspace)
    assert_clean_failure(done, 2)
    assert "symlink" in done.stderr and where.split("/")[-1] in done.stderr
    assert fingerprint(own_library) == library_before
    assert b"do not read me" not in b"".join(p.read_bytes() for p in own_library.rglob("*") if p.is_file())


def test_refresh_refuses_a_fifo_in_the_workspace(workspace, own_library):
    (workspace / SPEC).unlink()
    os.mkfifo(workspace / SPEC)  # a file the series patches: refresh would read it
    library_before = fingerprint(own_library)
    done = run_cli("refresh", workspace)
    assert_clean_failure(done, 2)
    assert f"{SPEC} (not a regular file)" in done.stderr
    assert fingerprint(own_library) == library_before


def test_refresh_reports_the_changes_it_cannot_carry(workspace, own_library):
    metadata = workspace / "vllm-0.16.0.dist-info" / "METADATA"
    metadata.write_text(metadata.read_text() + "Summary: edited\n")
    (workspace / "setup_notes.txt").write_text("outside vllm/\n")
    (workspace / SPEC).write_text(patched_spec().replace('"deepseek",', '"deepseek",\n    "glm4",'))

    done = run_cli("refresh", workspace, "--format", "json")
    assert done.returncode == 0, done.stderr
    (note,) = [n for n in json.loads(done.stdout)["notes"] if "not carried" in n]
    assert "vllm-0.16.0.dist-info/METADATA" in note and "setup_notes.txt" in note
    assert b"glm4" in (own_library / "demo" / "0.16.0" / "0001-change.patch").read_bytes()
    assert b"edited" not in b"".join(p.read_bytes() for p in own_library.rglob("*") if p.is_file())


def _git(ws: Path, *args: str, check: bool = True) -> None:
    import subprocess

    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", *args], cwd=ws, env=env, check=check, capture_output=True)


def test_a_workspace_whose_stock_commit_is_gone_is_one_line(workspace, own_library):
    stock = json.loads((workspace / META).read_text())["stock_commit"]
    _git(workspace, "checkout", "-q", "--orphan", "rewritten")
    _git(workspace, "commit", "-qm", "history rewritten")
    for branch in ("master", "main"):  # whichever the default branch is
        _git(workspace, "branch", "-q", "-D", branch, check=False)
    _git(workspace, "tag", "-d", "stock")
    _git(workspace, "reflog", "expire", "--expire=now", "--all")
    _git(workspace, "gc", "-q", "--prune=now")
    library_before = fingerprint(own_library)

    done = run_cli("refresh", workspace)
    assert_clean_failure(done, 2)
    first = done.stderr.strip().splitlines()[0]
    assert stock in first and "'stock' is gone" in first
    assert fingerprint(own_library) == library_before


def test_a_workspace_whose_stock_tag_moved_names_both(workspace):
    data = json.loads((workspace / META).read_text())
    data["stock_commit"] = "0123456789abcdef0123456789abcdef01234567"
    (workspace / META).write_text(json.dumps(data))
    done = run_cli("refresh", workspace)
    assert_clean_failure(done, 2)
    assert "0123456789abcdef0123456789abcdef01234567" in done.stderr and "now names" in done.stderr


# --------------------------------------------------------------------------- a damaged fetch cache


def _wheel(version: str, files: dict[str, bytes]) -> bytes:
    """A small real wheel: the files, METADATA, WHEEL and a RECORD of sha256 hashes."""
    import io
    import zipfile

    dist = f"vllm-{version}.dist-info"
    members = dict(files)
    members[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode()
    members[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    rows = [f"{name},{record_hash(data)},{len(data)}" for name, data in members.items()] + [f"{dist}/RECORD,,"]
    members[f"{dist}/RECORD"] = ("\n".join(rows) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """A package index on localhost serving one vllm wheel (no range support: whole downloads)."""
    import functools
    import hashlib
    import http.server
    import threading

    root = tmp_path / "www"
    (root / "simple" / "vllm").mkdir(parents=True)
    (root / "files").mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    def publish(version: str, files: dict[str, bytes]) -> None:
        name = f"vllm-{version}-py3-none-any.whl"
        data = _wheel(version, files)
        (root / "files" / name).write_bytes(data)
        link = f'<a href="{url}/files/{name}#sha256={hashlib.sha256(data).hexdigest()}">{name}</a>'
        (root / "simple" / "vllm" / "index.html").write_text(f"<!DOCTYPE html><html><body>{link}</body></html>")

    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"{url}/simple/")
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_CERT", "PIP_PROXY"):
        monkeypatch.delenv(var, raising=False)
    yield publish
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("damage", ["flipped-byte", "truncated", "symlink-out"])
def test_ci_mode_reports_the_truth_over_a_damaged_cached_release_file(tmp_path, cache, sentinel, local_index, damage):
    stock = write_tree(tmp_path / "stock", "0.16.0", {SPEC: SPEC_PY})
    patch = make_patch(tmp_path, stock, {SPEC: patched_spec()})
    lib = write_library(tmp_path / "lib", {"0.16.0": [patch]}, supported=">=0.16.0")
    local_index("0.16.0", {"vllm/__init__.py": b"", SPEC: SPEC_PY.encode()})
    run = cli_runner()
    first = run("verify", "--patches", lib, "--vllm-version", "0.16.0", "--format", "json")
    assert release_of(first)["outcome"] == "patched", first.output

    cached = cache / "releases" / "0.16.0" / "tree" / SPEC
    assert cached.is_file()
    if damage == "flipped-byte":
        cached.write_bytes(cached.read_bytes().replace(b'"llama"', b'"llamb"'))
    elif damage == "truncated":
        cached.write_bytes(cached.read_bytes()[:40])
    else:
        cached.unlink()
        cached.symlink_to(sentinel / "secret.txt")
    before = fingerprint(sentinel)

    as_json = run("verify", "--patches", lib, "--vllm-version", "0.16.0", "--format", "json")
    as_text = run("verify", "--patches", lib, "--vllm-version", "0.16.0")
    as_junit = run("verify", "--patches", lib, "--vllm-version", "0.16.0", "--format", "junit")
    assert fingerprint(sentinel) == before
    assert [r.exit_code for r in (as_json, as_text, as_junit)] == [0, 0, 0]
    assert release_of(as_json)["outcome"] == "patched"
    assert "patched" in as_text.output and "conflict" not in as_text.output
    assert ET.fromstring(as_junit.stdout).findall(".//failure") == []


@pytest.mark.parametrize("damage", ["flipped-byte", "symlink-out"])
def test_ci_mode_never_blames_the_library_for_a_damaged_cached_release_file(
    tmp_path, cache, sentinel, local_index, damage
):
    """Whether the cache re-fetches the file (patched) or not (integrity fails, naming RECORD): never a conflict."""
    stock = write_tree(tmp_path / "stock", "0.16.0", {SPEC: SPEC_PY})
    patch = make_patch(tmp_path, stock, {SPEC: patched_spec()})
    lib = write_library(tmp_path / "lib", {"0.16.0": [patch]}, supported=">=0.16.0")
    local_index("0.16.0", {"vllm/__init__.py": b"", SPEC: SPEC_PY.encode()})
    run = cli_runner()
    assert release_of(run("verify", "--patches", lib, "--vllm-version", "0.16.0", "--format", "json"))["ok"]
    cached = cache / "releases" / "0.16.0" / "tree" / SPEC
    if damage == "flipped-byte":
        cached.write_bytes(cached.read_bytes().replace(b'"qwen"', b'"qwem"'))
    else:
        cached.unlink()
        cached.symlink_to(sentinel / "secret.txt")

    report = release_of(run("verify", "--patches", lib, "--vllm-version", "0.16.0", "--format", "json"))
    assert report["outcome"] != "conflict"
    if report["outcome"] != "patched":
        assert report["outcome"] == "check-failed" and "RECORD" in report["detail"]


def test_refresh_replaces_a_symlinked_series_file_instead_of_writing_through_it(tmp_path):
    from patchkit.series.library import write_series

    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    series_dir = tmp_path / "lib" / "demo" / "0.16.0"
    series_dir.mkdir(parents=True)
    (series_dir / "0001-x.patch").write_bytes(b"patch bytes\n")
    (series_dir / "series").symlink_to(outside)
    write_series(series_dir, ["0001-x.patch"])
    assert outside.read_text() == "keep me\n"
    assert not (series_dir / "series").is_symlink()
    assert (series_dir / "series").read_text().startswith("0001-x.patch sha256:")
