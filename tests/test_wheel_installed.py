"""A vLLM installed from a wheel `patchkit wheel` built: no .patchkit/ in the tree, a dist-info whose
version carries the label, whose RECORD lists the patched files' hashes, and whose patchkit.json says
what was applied. status/verify call it applied, revert takes it back to stock (originals from the
fetch cache or the index, else the shipped patches reversed, always held to the stock sha256), the
launch guard reads it, and a damaged provenance is refused like any untrusted record."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import shutil
from importlib import metadata
from pathlib import Path

import pytest

from patchkit._target import guard
from patchkit.base import hints
from patchkit.base.options import Options
from patchkit.distinfo import installed_record
from patchkit.distinfo.record import parse_record
from patchkit.tree.target import stock_files_command

from helpers import (  # isort: skip
    MODEL_PY,
    OFFLINE,
    SPEC_PY,
    assert_clean_failure,
    crash_after_the_first_replace,
    follow_hints,
    fingerprint,
    make_patch,
    patched_spec,
    patchkit_faulted,
    pip_install,
    record_rows,
    run_cli_judged,
    snapshot,
    write_library,
    write_tree,
)
from index_server import IndexServer, build_wheel, isolate_cache, use_index  # isort: skip

STOCK = "0.14.1"
MODEL_PATCHED = MODEL_PY + "\n    def aux_layers(self):\n        return (2, 4)\n"
CHANGES = {"vllm/config/spec.py": patched_spec(), "vllm/models/model.py": MODEL_PATCHED}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class WheelTree:
    """A site-packages as pip leaves it after installing a patched wheel, built by hand: the stock
    tree, the series applied, the dist-info renamed to the labelled version, provenance, RECORD."""

    def __init__(
        self, tmp: Path, *, stock_version: str = STOCK, set_name: str | None = "demo", label: str | None = None
    ):
        self.tmp = tmp
        self.stock_version = stock_version
        stock = write_tree(tmp / "stock", stock_version)
        self.stock = snapshot(stock)
        self.patch = make_patch(tmp, stock, CHANGES, header="Description: demo change\n")
        self.library = write_library(tmp / "lib", {stock_version.split("+")[0]: [self.patch]}, name="demo")
        label = label or f"patchkit.{set_name or 'adhoc'}"  # `wheel --local-label`'s, else patchkit's
        base, _, local = stock_version.partition("+")
        self.version = f"{base}+{local + '.' if local else ''}{label}"
        self.site = write_tree(tmp / "site", self.version, files=CHANGES)
        self.dist = f"vllm-{self.version}.dist-info"
        dist = self.site / self.dist
        (dist / "patchkit").mkdir()
        (dist / "patchkit" / "0001-change.patch").write_bytes(self.patch)
        self.provenance = {
            "schema_version": 1,
            "patchkit": "9.9.9",
            "vllm_version": stock_version,
            "label": label,
            "set": set_name,
            "patches": [{"name": "0001-change.patch", "sha256": sha(self.patch)}],
            "files": {
                path: {"stock_sha256": sha(self.stock[path]), "patched_sha256": sha(new.encode())}
                for path, new in CHANGES.items()
            },
        }
        self.write_provenance()

    def write_provenance(self, data: object | None = None) -> None:
        dist = self.site / self.dist
        (dist / "patchkit.json").write_text(json.dumps(self.provenance if data is None else data))
        (dist / "RECORD").write_text(record_rows(self.site, self.dist, whole_site=True))

    def cli(self, *args: object, env: dict[str, str] | None = None):
        """status, verify, apply and revert through run_cli_judged (CONTRIBUTING), the others as processes."""
        return run_cli_judged(*args, "--target", self.site, "--patches", self.library, env=env)

    def dist_info_files(self) -> dict[str, bytes]:
        dist = self.site / self.dist
        return {p.relative_to(dist).as_posix(): p.read_bytes() for p in sorted(dist.rglob("*")) if p.is_file()}


@pytest.fixture
def wheel(tmp_path) -> WheelTree:
    return WheelTree(tmp_path)


def test_status_and_verify_call_it_applied(wheel):
    done = wheel.cli("status", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["state"] == "applied" and report["drifted"] == []
    assert report["vllm_version"] == wheel.version  # 0.14.1+patchkit.demo, judged as 0.14.1
    assert any("as its dist-info's patchkit.json says" in note for note in report["notes"])
    done = wheel.cli("verify", "--no-import", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    integrity = [c for c in json.loads(done.stdout)["checks"] if c["check"] == "integrity"]
    assert len(integrity) == 2 and all(c["ok"] for c in integrity)
    assert all("stock hashes from patchkit.json" in c["message"] for c in integrity)


def test_without_provenance_the_patched_record_fails_integrity(wheel):
    """What the provenance changes: the same tree without it is files that are not stock."""
    (wheel.site / wheel.dist / "patchkit.json").unlink()
    done = wheel.cli("verify", "--no-import")
    assert done.returncode == 1 and "differs from the stock file" in done.stdout


def test_a_wheel_naming_a_set_the_library_holds_otherwise_is_its_older_series(wheel, tmp_path):
    """The library's set of that name has another series for the release: the wheel is judged by
    its own texts as an earlier series of the set (status exit 1, never a pass), and revert puts
    back no original that only those texts (read back from the tree) vouch for; a set the library
    lacks is the wheel's own texts."""
    other = make_patch(tmp_path, tmp_path / "stock", {"vllm/config/spec.py": SPEC_PY + "# other\n"})
    shutil.rmtree(wheel.library)
    write_library(wheel.library, {STOCK: [other]}, name="demo")
    status = wheel.cli("status")
    assert_clean_failure(status, 1)
    assert "applied from another library (0001 changed)" in status.stdout, status.stdout
    revert = wheel.cli("revert")
    assert revert.returncode in (2, 4) and "nothing was reverted" in revert.stderr + revert.stdout, revert
    assert {p: wheel.site.joinpath(p).read_text() for p in CHANGES} == CHANGES
    shutil.rmtree(wheel.library)
    write_library(wheel.library, {STOCK: [other]}, name="another")
    report = json.loads(wheel.cli("status", "--format", "json").stdout)
    assert report["state"] == "applied" and report["set"] == "demo" and report["series"] is None
    assert any("read from there" in note for note in report["notes"])
    assert [p["name"] for p in report["patches"]] == ["0001-change.patch"]


def test_an_adhoc_wheel_and_an_existing_local_label(tmp_path):
    wheel = WheelTree(tmp_path, stock_version=f"{STOCK}+cu129", set_name=None)
    assert wheel.version == f"{STOCK}+cu129.patchkit.adhoc"
    report = json.loads(wheel.cli("status", "--format", "json").stdout)
    assert report["state"] == "applied" and report["set"].startswith("adhoc-")


def test_an_edited_file_is_drift(wheel, monkeypatch, tmp_path):
    target = wheel.site / "vllm/models/model.py"
    target.write_text(MODEL_PATCHED + "# my edit\n")
    done = wheel.cli("status", "--format", "json")
    assert done.returncode == 1 and json.loads(done.stdout)["drifted"] == ["vllm/models/model.py"]
    before = snapshot(wheel.site)
    assert_clean_failure(wheel.cli("revert", env=OFFLINE), 1)
    assert snapshot(wheel.site) == before
    # Offline, the edited file has no stock original: reversing the patches keeps the edit.
    done = wheel.cli("revert", "--force", env=OFFLINE)
    assert_clean_failure(done, 2)
    assert "no stock original of vllm/models/model.py" in done.stderr and snapshot(wheel.site) == before
    server = IndexServer()
    try:
        done = wheel.cli("revert", "--force", env=serve_stock(server, wheel, monkeypatch, tmp_path, wheel.stock))
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert snapshot(wheel.site) == wheel.stock
    kept = list((wheel.site / ".patchkit" / "saved").rglob("model.py"))
    assert [p.read_text() for p in kept] == [MODEL_PATCHED + "# my edit\n"]


def serve_stock(server: IndexServer, wheel: WheelTree, monkeypatch, tmp_path, files: dict[str, bytes]):
    isolate_cache(tmp_path, monkeypatch)
    name = f"vllm-{STOCK}-py3-none-manylinux_2_17_x86_64.whl"
    server.publish(name, build_wheel(files, version=STOCK, blob_size=0))
    use_index(monkeypatch, server.index())
    return {k: os.environ[k] for k in ("PATCHKIT_CACHE_DIR", "PIP_INDEX_URL", "PIP_CONFIG_FILE")}


def test_revert_takes_the_stock_files_from_the_release(wheel, monkeypatch, tmp_path):
    server = IndexServer()
    try:
        env = serve_stock(server, wheel, monkeypatch, tmp_path, wheel.stock)
        dist_before = wheel.dist_info_files()
        done = wheel.cli("revert", env=env)
        fetched = [path for _cmd, path, _range in server.log if "/files/" in path]
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert fetched, "the originals came from the index"
    assert "reverse-applying" not in done.stderr
    assert snapshot(wheel.site) == wheel.stock
    # The dist-info is left as pip installed it: every RECORD path is there for pip uninstall.
    assert wheel.dist_info_files() == dist_before
    dist = next(metadata.distributions(path=[str(wheel.site)]))
    assert all((wheel.site / str(f)).is_file() for f in dist.files or [])
    assert not (wheel.site / ".patchkit").exists()  # nothing recorded: the revert removed .patchkit/
    report = json.loads(wheel.cli("status", "--format", "json").stdout)
    assert report["state"] == "not-applied" and report["drifted"] == []
    # and back: apply (integrity holds the stock files to patchkit.json's hashes), revert again
    done = wheel.cli("apply", "--no-import", "--no-guard")
    assert done.returncode == 0, done.stdout + done.stderr
    assert {p: wheel.site.joinpath(p).read_text() for p in CHANGES} == CHANGES
    assert wheel.cli("revert").returncode == 0
    assert snapshot(wheel.site) == wheel.stock


def test_a_release_file_that_is_not_the_recorded_stock_is_not_used(wheel, monkeypatch, tmp_path):
    """A wheel built from another build of the release (a vendor's): the index's file differs from
    the stock sha256 the provenance records, so the shipped patches are reversed instead."""
    server = IndexServer()
    try:
        other = {**wheel.stock, "vllm/config/spec.py": wheel.stock["vllm/config/spec.py"] + b"# vendor\n"}
        done = wheel.cli("revert", env=serve_stock(server, wheel, monkeypatch, tmp_path, other))
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert "vllm/config/spec.py: restored by reverse-applying" in done.stderr
    assert snapshot(wheel.site) == wheel.stock


def test_revert_offline_reverses_the_shipped_patches(wheel):
    done = wheel.cli("revert", env=OFFLINE)
    assert done.returncode == 0, done.stderr
    assert "could not be fetched" in done.stderr
    assert snapshot(wheel.site) == wheel.stock
    assert wheel.cli("revert", env=OFFLINE).returncode == 0  # nothing left to do


def test_the_guard_reads_the_provenance(wheel):
    site = str(wheel.site)
    assert guard.find_problems(site) == []
    (wheel.site / "vllm/config/spec.py").write_text(SPEC_PY + "# edited\n")
    assert guard.find_problems(site) == ["vllm/config/spec.py was changed after patchkit patched it"]
    for path, data in wheel.stock.items():  # every file stock again: what revert leaves
        (wheel.site / path).write_bytes(data)
    assert guard.find_problems(site) == []


def test_the_guard_refuses_a_damaged_provenance(wheel):
    (wheel.site / wheel.dist / "patchkit.json").write_text("{")
    assert "is not JSON" in guard.find_problems(str(wheel.site))[0]


def hostile(wheel: WheelTree, case: str, outside: Path) -> None:
    dist = wheel.site / wheel.dist
    prov = json.loads(json.dumps(wheel.provenance))
    if case == "symlink":
        (outside / "prov.json").write_text(json.dumps(prov))
        (dist / "patchkit.json").unlink()
        (dist / "patchkit.json").symlink_to(outside / "prov.json")
        return
    if case == "dist-info-symlink":  # the whole dist-info, provenance and all, planted outside
        shutil.move(dist, outside / "dist")
        dist.symlink_to(outside / "dist", target_is_directory=True)
        return
    if case == "not-json":
        (dist / "patchkit.json").write_bytes(b"\xff{")
        return
    if case == "path-outside":
        prov["files"]["../outside/victim.py"] = prov["files"].pop("vllm/models/model.py")
    elif case == "dist-info-path":
        prov["files"][f"{wheel.dist}/RECORD"] = prov["files"].pop("vllm/models/model.py")
    elif case == "bad-digest":
        prov["files"]["vllm/config/spec.py"]["stock_sha256"] = "abc"
    elif case == "patch-name":
        prov["patches"][0]["name"] = "../../outside/victim.py"
    elif case == "patch-text":
        (dist / "patchkit" / "0001-change.patch").write_bytes(wheel.patch + b"# tampered\n")
    elif case == "patch-symlink":
        (outside / "p.patch").write_bytes(wheel.patch)
        (dist / "patchkit" / "0001-change.patch").unlink()
        (dist / "patchkit" / "0001-change.patch").symlink_to(outside / "p.patch")
    elif case == "wrong-release":
        prov["vllm_version"] = "0.13.0"
    elif case == "huge":
        prov["padding"] = "x" * (17 << 20)
    elif case == "untouched-file":  # revert would delete a file the series never touches
        victim = "vllm/__init__.py"
        prov["files"][victim] = {"stock_sha256": None, "patched_sha256": sha((wheel.site / victim).read_bytes())}
    elif case == "stock-file-as-created":  # revert would delete a stock file the series modifies
        prov["files"]["vllm/config/spec.py"]["stock_sha256"] = None
    elif case == "deeply-nested":
        (dist / "patchkit.json").write_text("[" * 200_000 + "]" * 200_000)
        return
    wheel.write_provenance(prov)


@pytest.mark.parametrize(
    "case",
    [
        "symlink",
        "dist-info-symlink",
        "not-json",
        "path-outside",
        "dist-info-path",
        "bad-digest",
        "patch-name",
        "patch-text",
        "patch-symlink",
        "wrong-release",
        "huge",
        "untouched-file",
        "stock-file-as-created",
        "deeply-nested",
    ],
)
@pytest.mark.parametrize("command", ["status", "apply", "revert"])
def test_a_damaged_provenance_is_refused_cleanly(tmp_path, case, command):
    wheel = WheelTree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.py").write_text("keep me\n")
    hostile(wheel, case, outside)
    before, tree_before = fingerprint(outside), snapshot(wheel.site)
    done = wheel.cli(command, env=OFFLINE)
    assert_clean_failure(done, 2)
    assert any(name in done.stderr for name in ("patchkit.json", "0001-change.patch", f"{wheel.dist}/METADATA"))
    assert fingerprint(outside) == before and snapshot(wheel.site) == tree_before


def test_record_rows_of_the_hand_made_wheel_are_true(wheel):
    """The fixture itself: its RECORD is what a real install leaves (every hash true)."""
    rows = parse_record((wheel.site / wheel.dist / "RECORD").read_bytes())
    for path, (digest, size) in rows.items():
        if digest:
            data = (wheel.site / path).read_bytes()
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)


# -- the launch guard on a tree installed from the patched wheel (issue 20, item 9) ----------------


def test_apply_installs_the_guard_on_a_patched_wheel_tree_and_it_guards_the_wheels_files(wheel):
    from helpers import load_plugins_like_vllm

    done = wheel.cli("apply", "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "launch guard installed" in done.stdout
    assert (wheel.site / "patchkit_guard.py").exists()
    assert load_plugins_like_vllm(wheel.site).returncode == 0
    again = wheel.cli("apply", "--no-import")
    assert again.returncode == 0 and "already applied: nothing to do" in again.stdout, again.stdout
    with open(wheel.site / "vllm/models/model.py", "a") as fh:
        fh.write("# edited under the wheel\n")
    refused = load_plugins_like_vllm(wheel.site)
    assert refused.returncode != 0 and "vllm/models/model.py was changed" in refused.stderr


def test_no_guard_is_remembered_until_guard_is_asked_for(wheel):
    guard_module = wheel.site / "patchkit_guard.py"
    assert wheel.cli("apply", "--no-import", "--no-guard").returncode == 0
    assert not guard_module.exists()
    assert json.loads((wheel.site / ".patchkit/state.json").read_text())["no_guard"] is True
    done = wheel.cli("apply", "--no-import")
    assert done.returncode == 0 and not guard_module.exists(), done.stdout + done.stderr
    done = wheel.cli("apply", "--no-import", "--guard")
    assert done.returncode == 0 and "launch guard installed" in done.stdout and guard_module.exists()
    assert "no_guard" not in json.loads((wheel.site / ".patchkit/state.json").read_text())


def test_status_says_a_patched_wheel_installs_no_guard_and_what_does(wheel):
    """review 6 L10: the README promises a guard; a wheel installs none, and status said nothing of it."""
    done = wheel.cli("status")
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "a patched wheel installs no launch guard: `patchkit apply" in said, said
    assert wheel.cli("apply", "--no-import").returncode == 0  # the command the note names
    done = wheel.cli("status", "--format", "json")
    assert done.returncode == 0 and json.loads(done.stdout)["guard_notes"] == [], done.stdout


def test_the_installed_record_says_whether_it_is_a_patched_wheels(wheel, tmp_path):
    """Closing 17's last read: the reader of the installed RECORD says it (its own dist-info labelled
    `+patchkit…`), with or without the provenance, so no caller asks it whether a file is stock."""
    record, _ = installed_record(wheel.site, wheel.version)
    assert record is not None and record.patched_wheel
    (wheel.site / wheel.dist / "patchkit.json").unlink()
    record, _ = installed_record(wheel.site, wheel.version)
    assert record is not None and record.patched_wheel
    plain = tmp_path / "plain"
    pip_install(plain, STOCK, {"vllm/config/spec.py": "X = 1\n"})
    record, _ = installed_record(plain, STOCK)
    assert record is not None and not record.patched_wheel


def test_a_provenance_path_holding_a_newline_is_said_on_one_line(tmp_path):
    """A path read back from the installed wheel's patchkit.json is quoted escaped in the damage it
    is refused for: the error stays one line (the newline split it)."""
    wheel = WheelTree(tmp_path)
    prov = json.loads(json.dumps(wheel.provenance))
    prov["files"]["vllm/a\nb\u202e.py"] = {"stock_sha256": None, "patched_sha256": None}
    wheel.write_provenance(prov)
    done = wheel.cli("status", env=OFFLINE)
    assert_clean_failure(done, 2)
    assert "the entry of vllm/a\\x0ab\\u202e.py records neither" in done.stderr, done.stderr
    assert not any(line.startswith("b") for line in done.stderr.splitlines()), done.stderr


def test_a_revert_cut_short_whose_patched_original_is_damaged_is_made_again_from_the_wheels_patches(wheel):
    """A revert of the wheel's set cut short after it wrote spec.py's stock bytes, the saved original it
    needs to roll back (the wheel's patched spec.py) then damaged. The rebuild looked only at records in
    state.json (a wheel's set has none there), so every command refused, naming a pip install of the
    wheel's own +patchkit label, which no index has. The original is made again from the patches the
    wheel ships (sha256 checked): the rollback ends, and the revert then takes the tree to stock."""
    spec = "vllm/config/spec.py"
    patched = snapshot(wheel.site)
    command: list[object] = ["revert", "--target", wheel.site, "--patches", wheel.library]
    crash_after_the_first_replace(wheel.site, command, spec, wheel.stock[spec])
    obj = wheel.site / ".patchkit/objects" / sha(CHANGES[spec].encode())
    obj.unlink()
    obj.write_bytes(b"damaged\n")
    done = patchkit_faulted("status", "--target", wheel.site, "--patches", wheel.library)
    said = " ".join(done.stderr.split())
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"the saved original of {spec} was damaged or missing: made again from the patches the installed" in said
    assert snapshot(wheel.site) == patched and not (wheel.site / ".patchkit/journal.json").exists()
    assert wheel.cli("revert", env=OFFLINE).returncode == 0
    assert snapshot(wheel.site) == wheel.stock


@pytest.mark.parametrize("stock_version", [STOCK, f"{STOCK}+cu129"])
def test_the_stock_files_hint_of_a_patched_wheels_install_names_its_release(tmp_path, stock_version):
    """Every stock_files_command/pip_reinstall hint on a tree whose vLLM is patchkit's own wheel named
    `pip install --force-reinstall --no-deps vllm==X+patchkit.<set>` (or a fetch of it): no index has
    that version. It names the release the wheel was built from (its own local label kept: cu129)."""
    wheel = WheelTree(tmp_path, stock_version=stock_version)
    (wheel.site / wheel.dist / "INSTALLER").write_text("pip\n")  # pip installed it
    with hints.selected(Options(target_dir=str(wheel.site), python="/venv/bin/python")):
        said = [stock_files_command(wheel.site, None), hints.pip_reinstall(wheel.version)]
    expected = f"`/venv/bin/python -m pip install --force-reinstall --no-deps vllm=={stock_version}`"
    assert said == [expected, expected]


def test_a_wheel_revert_cut_short_its_shipped_patch_damaged_names_a_way_that_ends(wheel):
    """The same cut-short revert, its saved original damaged, and the patch the wheel ships damaged
    too: nothing makes the original again. The hint named the stock files' reinstall, then
    `recover`, which after the reinstall refused again as before (each file holds what the revert
    wrote: its original is still needed). The revert was taking them to stock: once the reinstall put
    every file there, the journal's removal ends it."""
    spec = "vllm/config/spec.py"
    (wheel.site / wheel.dist / "INSTALLER").write_text("pip\n")  # pip installed it
    crash_after_the_first_replace(
        wheel.site, ["revert", "--target", wheel.site, "--patches", wheel.library], spec, wheel.stock[spec]
    )
    (wheel.site / ".patchkit/objects" / sha(CHANGES[spec].encode())).write_bytes(b"damaged\n")
    shipped = wheel.site / wheel.dist / "patchkit" / "0001-change.patch"
    shipped.write_bytes(shipped.read_bytes() + b"\n")
    refused = patchkit_faulted("recover", "--target", wheel.site)
    assert refused.returncode == 2 and f"the saved original of {spec} is damaged" in refused.stderr, refused.stderr

    def reinstalled(line: str) -> bool:  # pip's reinstall of the stock release: its files and dist-info
        words = shlex.split(line)
        if words[1:4] != ["-m", "pip", "install"]:
            return False
        assert words[-1] == f"vllm=={STOCK}", line
        for name in ("vllm", wheel.dist):
            shutil.rmtree(wheel.site / name)
        for name in ("vllm", f"vllm-{STOCK}.dist-info"):
            shutil.copytree(wheel.tmp / "stock" / name, wheel.site / name)
        return True

    done, run = follow_hints(refused, f"patchkit recover --target {wheel.site}", by_hand=reinstalled)
    assert shlex.split(run[-1])[1] == "status" and done.returncode != 2, (run, done.stdout + done.stderr)
    assert snapshot(wheel.site) == wheel.stock and not (wheel.site / ".patchkit/journal.json").exists()
    assert not list(wheel.site.rglob("*.patchkit-*.tmp"))
    assert wheel.cli("status").returncode == 0  # its library's set: not applied, the tree stock


@pytest.mark.parametrize("label", [None, "corp1"])
def test_the_stock_files_hint_of_a_local_labelled_wheels_install_names_its_release(tmp_path, scratch, label):
    """A wheel built with `--local-label corp1` has no "patchkit" in its version (0.14.1+corp1): the
    hints that put its stock files back named `pip ... vllm==0.14.1+corp1`, which no index has. The
    provenance (held to the dist-info's name) gives the release: they name vllm==0.14.1."""
    wheel = WheelTree(tmp_path, label=label)
    (wheel.site / wheel.dist / "INSTALLER").write_text("pip\n")  # pip installed it
    (wheel.site / "vllm/__init__.py").write_text("# edited\n")  # RECORD lists it otherwise: not stock
    diff = tmp_path / "init.diff"
    diff.write_bytes(make_patch(scratch, wheel.site, {"vllm/__init__.py": "# edited\nX = 1\n"}))
    refused = run_cli_judged("apply", "--target", wheel.site, "--patch", diff, "--no-import")
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1 and "Put the stock files back (" in said, refused.stdout + refused.stderr
    assert f"vllm=={STOCK}`" in said and "vllm==0.14.1+" not in said, said


def test_a_local_builds_wheel_whose_provenance_is_not_believed_is_reinstalled_from_where_it_came(tmp_path):
    """A `wheel --patch` install of a local build (0.14.1+lab) whose RECORD lists a patched file
    otherwise than its provenance: refused, not believed. Its hint named `pip ... vllm==0.14.1+lab`
    as if an index had it; it says, as status's fix for such a build does, that a local build is on
    no public index and is reinstalled from where it came."""
    wheel = WheelTree(tmp_path, stock_version=f"{STOCK}+lab", set_name=None)
    (wheel.site / wheel.dist / "INSTALLER").write_text("pip\n")  # pip installed it
    record = wheel.site / wheel.dist / "RECORD"
    rows = [
        f"vllm/config/spec.py,sha256={'A' * 43},1" if row.startswith("vllm/config/spec.py,") else row
        for row in record.read_text().splitlines()
    ]
    record.write_text("\n".join(rows) + "\n")
    for command in ("status", "revert"):
        refused = run_cli_judged(command, "--target", wheel.site)
        said = " ".join(refused.stderr.split())
        assert refused.returncode == 2 and "not believed" in said, refused.stdout + refused.stderr
        assert "a local build is on no public index: reinstall it from where it came (`" in said, said
        assert f"vllm=={STOCK}+lab`" in said, said
