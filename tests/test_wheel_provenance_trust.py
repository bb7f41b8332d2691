"""A patched wheel's provenance (`vllm-*.dist-info/patchkit.json` and its patch texts) is read back
from the tree: believed only in the dist-info a patched wheel's install has (the version labelled as
the record says, a RECORD listing its patched hashes), a library set it names held to the library's
own series, and even then `revert` deletes or overwrites nothing on its word alone without keeping
a copy. Planted records of each kind, and `patchkit wheel`'s own output installed, round trip."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from helpers import run_cli_judged

from helpers import (  # isort: skip
    MODEL,
    MODEL_PY,
    OFFLINE,
    SPEC,
    SPEC_PY,
    STOCK_FILES,
    assert_clean_failure,
    install,
    make_patch,
    patched_spec,
    record_rows,
    run_cli,
    run_cli_writing,
    run_cli_read_only,
    snapshot,
    stock_files_fetched,
    write_library,
    write_tree,
    write_wheel,
)
from index_server import IndexServer, build_wheel, isolate_cache, use_index  # isort: skip

VERSION = "0.16.0"
HOOK = "vllm/site_hooks.py"  # a user's own module under vllm/, no file of vLLM's
HOOK_PY = "ON_START = ['warm the cache']\n"


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


class Planted:
    """A stock install (RECORD true to its files) with a provenance written into its dist-info."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.site = write_tree(tmp / "site", VERSION)
        self.dist = f"vllm-{VERSION}.dist-info"
        (self.site / self.dist / "RECORD").write_text(record_rows(self.site, self.dist))
        self.library = write_library(
            tmp / "lib", {VERSION: [make_patch(tmp, write_tree(tmp / "clean", VERSION), {SPEC: patched_spec()})]}
        )

    def plant(
        self,
        patch: bytes,
        files: dict[str, tuple[str | None, str | None]],
        set_name: str | None,
        name: str = "0001-mine.patch",
    ) -> None:
        """patchkit.json naming `patch` (as `name`) and `files` (path -> (stock, patched) content, None: absent)."""
        label = f"patchkit.{set_name or 'mine'}"
        (self.site / self.dist / "patchkit").mkdir(exist_ok=True)
        (self.site / self.dist / "patchkit" / name).write_bytes(patch)
        record = {
            "schema_version": 1,
            "patchkit": "0.1.0",
            "vllm_version": VERSION,
            "label": label,
            "set": set_name,
            "patches": [{"name": name, "sha256": sha(patch)}],
            "files": {
                path: {"stock_sha256": None if a is None else sha(a), "patched_sha256": None if b is None else sha(b)}
                for path, (a, b) in files.items()
            },
        }
        (self.site / self.dist / "patchkit.json").write_text(json.dumps(record))

    def relabel(self, *, record: bool = True) -> None:
        """The dist-info renamed as `patchkit wheel` names it, METADATA's version with it, and
        (`record`) RECORD written again from the files as they are (what pip would list)."""
        label = json.loads((self.site / self.dist / "patchkit.json").read_text())["label"]
        new = f"vllm-{VERSION}+{label}.dist-info"
        (self.site / self.dist).rename(self.site / new)
        self.dist = new
        metadata = self.site / new / "METADATA"
        metadata.write_text(metadata.read_text().replace(f"Version: {VERSION}\n", f"Version: {VERSION}+{label}\n"))
        if record:
            (self.site / new / "RECORD").write_text(record_rows(self.site, new, whole_site=True))

    def cli(self, *args: object, env: dict[str, str] | None = None):
        return run_cli_judged(*args, "--target", self.site, "--patches", self.library, env={**OFFLINE, **(env or {})})


def created_by_a_patch(tmp: Path, path: str, content: str) -> bytes:
    """A diff that creates `path` with `content` (from a tree without it)."""
    bare = write_tree(tmp / f"bare-{sha(path)[:8]}", VERSION, files={SPEC: SPEC_PY})
    (bare / MODEL).unlink(missing_ok=True)
    return make_patch(tmp, bare, {path: content})


# --------------------------------------------------------------------------- not a patched wheel's install


def test_a_record_planted_in_a_stock_install_deletes_no_file(tmp_path):
    """A provenance in the stock dist-info that says the wheel created a user's module and one of
    vLLM's own: status and revert refuse it (exit 2), naming the command that removes it; no file
    is touched, and once it is removed the tree is the plain install it is."""
    tree = Planted(tmp_path)
    (tree.site / HOOK).write_text(HOOK_PY)
    patch = (
        created_by_a_patch(tmp_path, HOOK, HOOK_PY)
        + created_by_a_patch(tmp_path, MODEL, MODEL_PY).split(b"---\n", 1)[1]
    )
    tree.plant(patch, {HOOK: (None, HOOK_PY), MODEL: (None, MODEL_PY)}, None)
    before = snapshot(tree.site)
    for command in ("status", "revert", "verify"):
        done = tree.cli(command, *(["--no-import"] if command == "verify" else []))
        assert_clean_failure(done, 2)
        assert "is no patched wheel's" in done.stderr and "not believed" in done.stderr, done.stderr
    assert snapshot(tree.site) == before
    assert not (tree.site / ".patchkit").exists()
    remove = re.search(r"`(rm -rf -- [^`]+)`", done.stderr)
    assert remove is not None, done.stderr
    subprocess.run(remove.group(1), shell=True, check=True)
    done = tree.cli("status", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "not-applied"
    assert snapshot(tree.site) == before


def test_a_record_naming_a_library_set_with_patches_of_its_own_is_not_that_set(tmp_path):
    """A provenance that says set `demo` (the library's) was applied, with a patch of its own whose
    reverse puts other bytes into vLLM's stock model.py: in the stock dist-info, or in one relabelled
    with a RECORD true to the files (an earlier series of the set, status exit 1: never a pass), status
    refuses or fails and revert writes nothing: only the release's own files vouch for an original."""
    tree = Planted(tmp_path)
    planted = MODEL_PY + "import os; os.system('true')\n"
    # a diff from the planted bytes to the stock ones: reversed on the tree, it writes the planted ones
    forwards = make_patch(
        tmp_path, write_tree(tmp_path / "planted", VERSION, {SPEC: SPEC_PY, MODEL: planted}), {MODEL: MODEL_PY}
    )
    tree.plant(forwards, {MODEL: (planted, MODEL_PY)}, "demo")
    before = snapshot(tree.site)
    for relabelled in (False, True):
        if relabelled:
            tree.relabel()
        for command in ("status", "revert"):
            done = tree.cli(command)
            # relabelled: status fails (an earlier series), revert cannot fetch the stock file (exit 4)
            assert_clean_failure(done, (1 if command == "status" else 4) if relabelled else 2)
            said = (
                ("applied from another library" if command == "status" else "nothing was reverted")
                if relabelled
                else "is no patched wheel's"
            )
            assert said in done.stdout + done.stderr, done.stdout + done.stderr
        assert snapshot(tree.site) == before


def test_a_record_its_dist_infos_record_does_not_bear_out_is_not_believed(tmp_path):
    """A labelled dist-info whose RECORD lists spec.py with other bytes than the record's patched
    ones (the file and the record changed after pip installed it): exit 2, nothing written."""
    tree = Planted(tmp_path)
    patch = make_patch(tmp_path, tree.site, {SPEC: patched_spec()})
    tree.plant(patch, {SPEC: (SPEC_PY, patched_spec())}, None)
    tree.relabel()  # RECORD lists the stock spec.py
    (tree.site / SPEC).write_text(patched_spec())
    for command in ("status", "revert"):
        done = tree.cli(command)
        assert_clean_failure(done, 2)
        assert f"says the wheel installed the patched file at {SPEC}, but" in done.stderr, done.stderr
        assert "--force-reinstall" in done.stderr
    assert (tree.site / SPEC).read_text() == patched_spec()


# --------------------------------------------------------------------------- revert keeps what only the wheel vouches for


def test_revert_keeps_a_copy_of_what_only_the_wheels_own_texts_vouch_for(tmp_path):
    """An install that passes every check (labelled, RECORD true) of `--patch` files: nothing but
    its own texts says the release lacks the module it created, or what spec.py held, so revert
    (offline: the texts reversed) keeps a copy of each file it deletes or overwrites, and says so."""
    tree = Planted(tmp_path)
    patch = (
        created_by_a_patch(tmp_path, HOOK, HOOK_PY)
        + make_patch(tmp_path, tree.site, {SPEC: patched_spec()}).split(b"---\n", 1)[1]
    )
    stock = snapshot(tree.site)
    (tree.site / HOOK).write_text(HOOK_PY)
    (tree.site / SPEC).write_text(patched_spec())
    tree.plant(patch, {HOOK: (None, HOOK_PY), SPEC: (SPEC_PY, patched_spec())}, None)
    tree.relabel()
    assert json.loads(tree.cli("status", "--format", "json").stdout)["state"] == "applied"
    done = tree.cli("revert")
    assert done.returncode == 0, done.stderr
    assert snapshot(tree.site) == stock
    saved = tree.site / ".patchkit" / "saved"
    kept = {p.name: p.read_text() for p in saved.rglob("*.py")}
    assert kept == {"site_hooks.py": HOOK_PY, "spec.py": patched_spec()}
    assert "saved under" in done.stderr and "2 file(s) with the series' hunks reversed" in done.stdout, done.stdout


def test_a_file_that_is_the_releases_own_is_never_overwritten(tmp_path, monkeypatch):
    """A record (labelled, RECORD true) that says spec.py was patched while it holds the release's
    own bytes, and names other bytes as its stock: the release's file, fetched, shows the record
    false; revert is exit 2 and writes nothing."""
    tree = Planted(tmp_path)
    other = SPEC_PY.replace("qwen", "qwen-x")
    forwards = make_patch(
        tmp_path, write_tree(tmp_path / "other", VERSION, {SPEC: other, MODEL: MODEL_PY}), {SPEC: SPEC_PY}
    )
    tree.plant(forwards, {SPEC: (other, SPEC_PY)}, None)
    tree.relabel()
    server = IndexServer()
    try:
        isolate_cache(tmp_path, monkeypatch)
        wheel = build_wheel(snapshot(tree.site), version=VERSION, blob_size=0)
        server.publish(f"vllm-{VERSION}-py3-none-manylinux_2_17_x86_64.whl", wheel)
        use_index(monkeypatch, server.index())
        env = {k: os.environ[k] for k in ("PATCHKIT_CACHE_DIR", "PIP_INDEX_URL", "PIP_CONFIG_FILE")}
        done = run_cli_writing(
            "revert", "--target", tree.site, "--patches", tree.library, env={**env, "PIP_NO_INDEX": ""}
        )
    finally:
        server.stop()
    assert_clean_failure(done, 2)
    assert f"says the wheel patched {SPEC}, but it holds vLLM {VERSION}'s own file" in done.stderr, done.stderr
    assert (tree.site / SPEC).read_text() == SPEC_PY


def test_revert_keeps_a_hotfix_a_record_of_the_librarys_own_set_calls_patched(tmp_path):
    """A labelled dist-info (RECORD true to the files) naming the library's set with the library's
    own patch, whose record calls a user's hotfixed spec.py, and a user's module the set would
    create with other bytes, "patched": neither is what the set makes of the stock files, so revert
    refuses (exit 1) and writes nothing; --force gives the stock files and keeps a copy of each."""
    tree = Planted(tmp_path)
    write_wheel(tmp_path / "in")  # the release, published to the test's cache
    stock_files_fetched({SPEC: SPEC_PY.encode()})  # its own spec.py: no reverse-apply needed
    mine = "ON_START = ['my own hook']\n"
    patch = (
        created_by_a_patch(tmp_path, HOOK, HOOK_PY)
        + make_patch(tmp_path, tree.site, {SPEC: patched_spec()}).split(b"---\n", 1)[1]
    )
    tree.library = write_library(tmp_path / "lib-hooks", {VERSION: [patch]})
    stock = snapshot(tree.site)
    hotfix = SPEC_PY + "# hotfix: keep the retry loop\n"
    (tree.site / SPEC).write_text(hotfix)
    (tree.site / HOOK).write_text(mine)
    tree.plant(patch, {HOOK: (None, mine), SPEC: (SPEC_PY, hotfix)}, "demo", name="0001-change.patch")
    tree.relabel()
    mine_now = snapshot(tree.site)
    for dry_run in (("--dry-run",), ()):
        done = tree.cli("revert", *dry_run)
        assert_clean_failure(done, 1)
        assert "are not what the wheel's patches make of vLLM" in done.stderr, done.stderr
        assert f"\n  {SPEC}\n  {HOOK}\n" in done.stderr, done.stderr
        assert "keeping your version" in done.stderr and "--force` restores the stock file" in done.stderr, done.stderr
        assert snapshot(tree.site) == mine_now
    done = tree.cli("revert", "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    assert snapshot(tree.site) == stock
    kept = {p.name: p.read_text() for p in (tree.site / ".patchkit" / "saved").rglob("*.py")}
    assert kept == {"site_hooks.py": mine, "spec.py": hotfix}
    assert "saved under" in done.stderr, done.stderr


def test_a_genuine_wheel_of_a_library_set_reverts_with_no_copies_offline(tmp_path):
    """`patchkit wheel --set demo` (a set that patches spec.py and creates a module), installed, and
    reverted with no release files at hand (the set's patches reversed): stock, no copy kept."""
    stock_wheel = write_wheel(tmp_path / "in")
    stock = {p: d for p, d in STOCK_FILES.items() if p.startswith("vllm/")}
    patch = make_patch(tmp_path, write_tree(tmp_path / "t", files=stock), {HOOK: HOOK_PY, SPEC: patched_spec()})
    library = write_library(tmp_path / "lib", {VERSION: [patch]})
    done = run_cli("wheel", stock_wheel, "--out", tmp_path / "out", "--patches", library, "--set", "demo")
    assert done.returncode == 0, done.stderr
    (built,) = (tmp_path / "out").iterdir()
    site = install(built, tmp_path / "prefix")
    assert (site / HOOK).read_text() == HOOK_PY
    done = run_cli_writing("revert", "--target", site, "--patches", library, env=OFFLINE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert snapshot(site) == stock
    assert not (site / ".patchkit" / "saved").exists()
    assert "saved under" not in done.stderr, done.stderr


# --------------------------------------------------------------------------- patchkit wheel's own output


def test_patchkit_wheels_own_output_round_trips(tmp_path):
    """A wheel `patchkit wheel` built, installed: status applied, verify passes, revert takes it to
    stock. The library's set: no copy kept (its patches vouch). `--patch` files that create a
    module: the created module's copy kept, spec.py the release's own file (from the cache)."""
    stock_wheel = write_wheel(tmp_path / "in")
    stock = {p: d for p, d in STOCK_FILES.items() if p.startswith("vllm/")}
    stock_files_fetched(stock)  # the release's own files: revert takes spec.py from there
    library = write_library(
        tmp_path / "lib", {VERSION: [make_patch(tmp_path, write_tree(tmp_path / "t"), {SPEC: patched_spec()})]}
    )
    adhoc = tmp_path / "0001-hooks.patch"
    adhoc.write_bytes(
        make_patch(tmp_path, write_tree(tmp_path / "t2", files=stock), {HOOK: HOOK_PY, SPEC: patched_spec()})
    )
    for chosen, copies in ((("--set", "demo"), set()), (("--patch", adhoc), {"site_hooks.py"})):
        out = tmp_path / f"out-{chosen[0]}"
        done = run_cli("wheel", stock_wheel, "--out", out, "--patches", library, *chosen)
        assert done.returncode == 0, done.stderr
        (built,) = out.iterdir()
        site = install(built, tmp_path / f"prefix-{chosen[0]}")
        common = ("--target", site, "--patches", library, *chosen)
        report = json.loads(run_cli_read_only("status", *common, "--format", "json").stdout)
        assert report["state"] == "applied", report
        done = run_cli_read_only("verify", *common, "--no-import")
        assert done.returncode == 0, done.stdout + done.stderr
        done = run_cli_writing("revert", *common, env=OFFLINE)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "reverse-applying" not in done.stderr, done.stderr
        assert snapshot(site) == stock
        saved = site / ".patchkit" / "saved"
        assert {p.name for p in saved.rglob("*.py")} == copies
        if copies:
            assert "saved under" in done.stderr
        shutil.rmtree(site / ".patchkit", ignore_errors=True)
        report = json.loads(run_cli_read_only("status", *common, "--format", "json").stdout)
        assert report["state"] == "not-applied", report


def test_a_local_label_wheels_record_proves_no_file_stock(tmp_path):
    """A wheel built with `--local-label corp1` (no "patchkit" in its label), installed: its RECORD
    lists the patched files, so it is no evidence of stock. revert, with the release's own files in
    the cache, gives stock and says so (it called the restored spec.py "not stock" by that RECORD);
    after apply installed the guard too; status and verify call the install applied."""
    stock_wheel = write_wheel(tmp_path / "in")
    stock = {p: d for p, d in STOCK_FILES.items() if p.startswith("vllm/")}
    stock_files_fetched(stock)
    library = write_library(
        tmp_path / "lib", {VERSION: [make_patch(tmp_path, write_tree(tmp_path / "t"), {SPEC: patched_spec()})]}
    )
    done = run_cli(
        "wheel", stock_wheel, "--out", tmp_path / "out", "--patches", library, "--set", "demo", "--local-label", "corp1"
    )
    assert done.returncode == 0, done.stderr
    (built,) = (tmp_path / "out").iterdir()
    assert "+corp1-" in built.name
    for guarded in (False, True):
        site = install(built, tmp_path / f"prefix-{guarded}")
        common = ("--target", site, "--patches", library)
        if guarded:
            assert run_cli_writing("apply", *common, "--no-import").returncode == 0
        report = json.loads(run_cli_read_only("status", *common, "--format", "json").stdout)
        assert report["state"] == "applied" and report["ok"], report
        done = run_cli_read_only("verify", *common, "--no-import")
        assert done.returncode == 0, done.stdout + done.stderr
        done = run_cli_writing("revert", *common, env=OFFLINE)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "not stock" not in done.stdout, done.stdout
        assert "1 file(s) restored to stock" in done.stdout, done.stdout
        assert {p: d for p, d in snapshot(site).items() if p.startswith("vllm/")} == stock
