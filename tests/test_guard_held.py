"""The launch guard's distribution version and the guard's half of the --patch contract (issue 20).

The guard's dist-info carries a local version label (0.1.0+patchkit): `pip freeze` in a patched site
prints a pin no public index serves, so `pip install -r` of it never installs an index's package of
that name. A guard an older patchkit wrote (0.1.0, an earlier check format) is replaced by apply and
removed by revert byte for byte, also when either is killed at any step.

A --patch apply is held to the library sets' contracts (engine/held.py) and its record says so
("held"); the record of an older patchkit's --patch apply has no mark, so the guard cannot judge
whether it left a set half-applied (a gate admitting what the set's model lacks: vLLM fails after the
model load) and refuses it; status names this patchkit's apply of the same diffs, which marks it
held or refuses naming the set it breaks and its fix (revert it, apply the whole set).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import GATED_CONTRACT as CONTRACT
from helpers import GATED_EAGLE_MODEL as EAGLE_MODEL
from helpers import GATED_MODEL as MODEL
from helpers import GATED_SPEC as SPEC
from helpers import GATED_STOCK_MODEL as STOCK_MODEL
from helpers import GATED_STOCK_SPEC as STOCK_SPEC
from helpers import GATED_WIDE_SPEC as WIDE_SPEC
from helpers import (
    load_plugins_like_vllm,
    make_patch,
    pip_install,
    run_cli,
    run_cli_in_process,
    run_cli_read_only,
    run_cli_writing,
    sweep_trials,
    write_library,
)

from patchkit import __version__
from patchkit._target import guard as target_guard
from patchkit.engine import guard as guard_words
from patchkit.engine import inspection
from patchkit.engine.guard import GUARD_VERSION, dist_info

OLD_INFO = f"patchkit_guard-{__version__}.dist-info"  # what patchkit wrote before the label


def write_site(root: Path) -> Path:
    """A vLLM 0.16.0 site-packages of the toy files (vllm/, its dist-info): the guard goes in."""
    for rel, text in {"vllm/__init__.py": "", SPEC: STOCK_SPEC, MODEL: STOCK_MODEL}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "vllm-0.16.0.dist-info").mkdir()
    (root / "vllm-0.16.0.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n")
    return root


@pytest.fixture
def toy(tmp_path: Path) -> dict[str, Path]:
    """The gated library (0001 the whitelist, its gate; 0002 the model), the same set with no contract
    (what an older patchkit held a --patch apply to: nothing), a diff of the model alone, and a site."""
    stock = write_site(tmp_path / "stock")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    whitelist = make_patch(scratch, stock, {SPEC: WIDE_SPEC})
    model = make_patch(scratch, stock, {MODEL: EAGLE_MODEL})
    lib = write_library(tmp_path / "lib", {"0.16.0": [whitelist, model]}, name="gated")
    text = (lib / "gated/set.toml").read_text()
    head, releases = text.split("\n[[releases]]", 1)
    (lib / "gated/set.toml").write_text(f"{head}\n{CONTRACT}\n[[releases]]{releases}")
    plain = write_library(tmp_path / "plain", {"0.16.0": [whitelist, model]}, name="gated")
    files = {"lib": lib, "plain": plain, "whitelist": lib / "gated/0.16.0/0001-change.patch"}
    files["model_only"] = tmp_path / "model_only.patch"
    files["model_only"].write_bytes(make_patch(scratch, stock, {MODEL: STOCK_MODEL + "# site tweak\n"}))
    files["site"] = write_site(tmp_path / "site")
    return files


def older_patchkits_patch_apply(toy: dict[str, Path], diff: Path) -> None:
    """The record an older patchkit's `apply --patch` left: held to no contract, no "held" mark."""
    done = run_cli_writing("apply", "--no-import", "--target", toy["site"], "--patches", toy["plain"], "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    path = toy["site"] / ".patchkit/state.json"
    state = json.loads(path.read_text())
    for entry in state["entries"]:
        entry.pop("held", None)
    path.write_text(json.dumps(state))


def cli(toy: dict[str, Path], *args: object):
    no_import = ("--no-import",) if args[0] == "apply" else ()
    return run_cli_writing(args[0], *no_import, "--target", toy["site"], "--patches", toy["lib"], *args[1:])


def status(toy: dict[str, Path]):
    return run_cli_read_only("status", "--target", toy["site"], "--patches", toy["lib"], "--format", "json")


def test_an_older_patchkits_whitelist_alone_is_refused_at_launch_and_the_fix_named_clears_it(toy):
    older_patchkits_patch_apply(toy, toy["whitelist"])
    refused = load_plugins_like_vllm(toy["site"])
    assert refused.returncode != 0 and target_guard.UNHELD in refused.stderr, refused.stderr[-2000:]
    assert "0001-change.patch" in refused.stderr and "patchkit status" in refused.stderr
    said = status(toy)
    assert said.returncode == 1, said.stdout + said.stderr
    fix = json.loads(said.stdout)["guard"]["fix"]
    assert fix.startswith("run `patchkit revert ") and f"--patch {toy['whitelist']}`" in fix, fix
    assert "set gated half-applied" in fix and fix.endswith("--set gated`"), fix  # judged: it breaks gated
    before = (toy["site"] / SPEC).read_bytes(), (toy["site"] / ".patchkit/state.json").read_bytes()
    again = cli(toy, "apply", "--patch", toy["whitelist"])  # this patchkit holds it, and refuses it
    words = " ".join((again.stdout + again.stderr).split())
    assert again.returncode == 1 and "gate" in words and MODEL in words, words
    revert, apply = words.index("`patchkit revert "), words.index("`patchkit apply ")
    assert revert < apply and f"--patch {toy['whitelist']}`" in words[revert:apply] and "--set gated`" in words[apply:]
    assert ((toy["site"] / SPEC).read_bytes(), (toy["site"] / ".patchkit/state.json").read_bytes()) == before
    assert cli(toy, "revert", "--patch", toy["whitelist"]).returncode == 0
    assert cli(toy, "apply", "--set", "gated").returncode == 0
    assert load_plugins_like_vllm(toy["site"]).returncode == 0
    assert status(toy).returncode == 0


def test_an_older_patchkits_harmless_patch_is_held_by_applying_it_again(toy):
    older_patchkits_patch_apply(toy, toy["model_only"])
    assert load_plugins_like_vllm(toy["site"]).returncode != 0  # the guard cannot judge it
    said = status(toy)
    assert said.returncode == 1 and "--patch" in json.loads(said.stdout)["guard"]["fix"], said.stdout
    done = cli(toy, "apply", "--patch", toy["model_only"])
    assert done.returncode == 0, done.stdout + done.stderr
    [entry] = json.loads((toy["site"] / ".patchkit/state.json").read_text())["entries"]
    assert entry["held"] is True and (toy["site"] / MODEL).read_text().endswith("# site tweak\n")
    assert load_plugins_like_vllm(toy["site"]).returncode == 0
    assert status(toy).returncode == 0


def test_an_older_patchkits_patch_record_of_no_sets_file_is_held_by_the_apply_of_a_set(toy, tmp_path):
    (toy["site"] / "vllm/envs.py").write_text("X = 1\n")  # a site fix to a file no set writes
    sitefix = tmp_path / "sitefix.patch"
    sitefix.write_text("--- a/vllm/envs.py\n+++ b/vllm/envs.py\n@@ -1 +1,2 @@\n X = 1\n+Y = 2\n")
    older_patchkits_patch_apply(toy, sitefix)
    dry = cli(toy, "apply", "--set", "gated", "--dry-run")
    assert dry.returncode == 0 and "still refuses" not in dry.stdout + dry.stderr, dry.stdout + dry.stderr
    done = cli(toy, "apply", "--set", "gated")
    words = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0 and "still refuses" not in words, words
    entries = json.loads((toy["site"] / ".patchkit/state.json").read_text())["entries"]
    assert [(e["set"].startswith("adhoc-"), e.get("held")) for e in entries] == [(True, True), (False, None)]
    assert load_plugins_like_vllm(toy["site"]).returncode == 0  # the tree launches, as it did before the apply
    assert status(toy).returncode == 0
    assert (toy["site"] / "vllm/envs.py").read_text() == "X = 1\nY = 2\n"


def test_an_older_patchkits_record_that_breaks_a_set_stays_unheld_and_the_fix_reverts_it_then_applies_the_set(
    toy, tmp_path
):
    older_patchkits_patch_apply(toy, toy["whitelist"])  # the gate admits, the model lacks its part
    addon = tmp_path / "addon.patch"
    addon.write_text("--- /dev/null\n+++ b/vllm/my_addon.py\n@@ -0,0 +1 @@\n+ADDON = 1\n")
    done = cli(toy, "apply", "--patch", addon)
    words = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and "the launch guard still refuses the tree" in words, words
    revert, apply = words.index("`patchkit revert "), words.index("`patchkit apply ")
    assert revert < apply and f"--patch {toy['whitelist']}`" in words[revert:apply], words
    assert "set gated half-applied" in words and "--set gated`" in words[apply:], words
    held = {e["set"]: e.get("held") for e in json.loads((toy["site"] / ".patchkit/state.json").read_text())["entries"]}
    assert sorted(held.values(), key=str) == [None, True], held  # the addon held, the whitelist alone not
    assert load_plugins_like_vllm(toy["site"]).returncode != 0
    said = status(toy)
    fix = json.loads(said.stdout)["guard"]["fix"]
    assert said.returncode == 1 and f"--patch {toy['whitelist']}`" in fix and "--set gated`" in fix, said.stdout
    assert cli(toy, "revert", "--patch", toy["whitelist"]).returncode == 0
    assert cli(toy, "apply", "--set", "gated").returncode == 0
    assert load_plugins_like_vllm(toy["site"]).returncode == 0 and status(toy).returncode == 0


def test_an_older_patchkits_record_that_undoes_a_recorded_sets_change_stays_unheld(toy, tmp_path):
    """A set without gates is held to what its recorded apply made hold: an older --patch record that
    undid its change (judged against the original that record saved) is not marked held."""
    tooled = STOCK_MODEL + "TOOL = 1\n"
    scratch = tmp_path / "tools_scratch"
    scratch.mkdir()
    libs = {}
    for name, contract in (
        ("lib", f'contract = [{{file = "{MODEL}", kind = "imported", names = ["TOOL"]}}]\n'),
        ("plain", ""),
    ):
        lib = write_library(
            tmp_path / f"tools_{name}", {"0.16.0": [make_patch(scratch, toy["site"], {MODEL: tooled})]}, name="tools"
        )
        text = (lib / "tools/set.toml").read_text()
        head, releases = text.split("\n[[releases]]", 1)
        (lib / "tools/set.toml").write_text(f"{head}\n{contract}\n[[releases]]{releases}")
        libs[name] = lib
    site = toy["site"]
    assert run_cli_writing("apply", "--no-import", "--target", site, "--patches", libs["lib"]).returncode == 0
    undo = tmp_path / "undo.patch"
    undo.write_bytes(make_patch(scratch, site, {MODEL: STOCK_MODEL + "# no tool\n"}))
    older_patchkits_patch_apply({**toy, "plain": libs["plain"]}, undo)
    addon = tmp_path / "addon.patch"
    addon.write_text("--- /dev/null\n+++ b/vllm/my_addon.py\n@@ -0,0 +1 @@\n+ADDON = 1\n")
    done = run_cli_writing("apply", "--no-import", "--target", site, "--patches", libs["lib"], "--patch", addon)
    words = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and "the launch guard still refuses the tree" in words, words
    assert f"--patch {undo}`" in words and "set tools half-applied" in words and "--set tools`" in words, words
    held = [e.get("held") for e in json.loads((site / ".patchkit/state.json").read_text())["entries"]]
    assert held == [None, None, True], held  # tools (a library set), the undo (unmarked), the addon


def test_an_apply_that_marks_an_older_record_held_killed_at_any_step_ends_as_before_or_done(toy, tmp_path):
    addon = tmp_path / "addon.patch"
    addon.write_text("--- /dev/null\n+++ b/vllm/my_addon.py\n@@ -0,0 +1 @@\n+ADDON = 1\n")
    older_patchkits_patch_apply(toy, addon)

    def unmarked(site: Path, step: int) -> None:
        entries = json.loads((site / ".patchkit/state.json").read_text())["entries"]
        assert [e.get("held") for e in entries] == [None], (step, entries)  # the record as before, unmarked

    site = toy["site"]
    killed = killed_at_each_step(toy, tmp_path, ["apply", "--no-import", "--set", "gated"], unmarked)
    assert killed >= 2, killed
    entries = json.loads((site / ".patchkit/state.json").read_text())["entries"]
    assert [e.get("held") for e in entries] == [True, None] and load_plugins_like_vllm(site).returncode == 0


def test_a_patch_this_patchkit_applies_is_recorded_held_and_launches(toy):
    done = cli(toy, "apply", "--patch", toy["model_only"])
    assert done.returncode == 0, done.stdout + done.stderr
    [entry] = json.loads((toy["site"] / ".patchkit/state.json").read_text())["entries"]
    assert entry["set"].startswith("adhoc-") and entry["held"] is True
    assert load_plugins_like_vllm(toy["site"]).returncode == 0


def test_a_held_mark_that_is_no_bool_is_damaged_for_the_guard_and_the_commands(toy):
    assert cli(toy, "apply", "--patch", toy["model_only"]).returncode == 0
    path = toy["site"] / ".patchkit/state.json"
    state = json.loads(path.read_text())
    state["entries"][0]["held"] = "yes"
    path.write_text(json.dumps(state))
    refused = load_plugins_like_vllm(toy["site"])
    assert refused.returncode != 0 and "'held' is not true or false" in refused.stderr, refused.stderr[-2000:]
    said = status(toy)
    assert said.returncode == 2 and "'held' is not true or false" in said.stdout + said.stderr


# -- the guard's version --------------------------------------------------------------------------


def _pip(*args: str) -> subprocess.CompletedProcess:
    """pip of this interpreter with no user or site configuration (no index but the one given)."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _index_serving(where: Path, version: str) -> Path:
    """A find-links index holding a wheel `patchkit-guard` of `version` (a package of that name)."""
    where.mkdir()
    info = f"patchkit_guard-{version}.dist-info"
    members = {
        "patchkit_guard.py": b"def check():\n    pass\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: patchkit-guard\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in members.items()
    ]
    with zipfile.ZipFile(where / f"patchkit_guard-{version}-py3-none-any.whl", "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{info}/RECORD", "\n".join([*rows, f"{info}/RECORD,,"]) + "\n")
    return where


def test_pip_freeze_of_a_guarded_site_pins_a_guard_no_index_serves(toy, tmp_path):
    assert cli(toy, "apply", "--set", "gated").returncode == 0
    assert (toy["site"] / dist_info()).is_dir() and "+" in dist_info()
    frozen = _pip("freeze", "--path", str(toy["site"]))
    assert frozen.returncode == 0, frozen.stderr
    [pin] = [line for line in frozen.stdout.splitlines() if line.startswith("patchkit-guard")]
    assert pin == f"patchkit-guard=={__version__}+patchkit" == f"patchkit-guard=={GUARD_VERSION}"
    index = _index_serving(tmp_path / "index", __version__)  # an index with a package of the guard's name
    (tmp_path / "requirements.txt").write_text(pin + "\n")
    install = ("install", "--dry-run", "--no-deps", "--no-index", "--find-links", str(index))
    pinned = _pip(*install, "-r", str(tmp_path / "requirements.txt"))
    assert pinned.returncode != 0 and f"No matching distribution found for {pin}" in pinned.stderr, pinned.stderr
    public = _pip(*install, f"patchkit-guard=={__version__}")  # the unlabelled pin that index serves
    assert public.returncode == 0 and f"Would install patchkit-guard-{__version__}" in public.stdout, public.stderr


def _older_guard(site: Path) -> dict[str, bytes]:
    """The applied site's guard made the one patchkit wrote before its version had the label, of
    the check format before this one's, recorded as it recorded it: its files, path -> bytes."""
    module = site / "patchkit_guard.py"
    own = f"GUARD_FORMAT = {target_guard.GUARD_FORMAT}\n".encode()
    module.write_bytes(module.read_bytes().replace(own, f"GUARD_FORMAT = {target_guard.GUARD_FORMAT - 1}\n".encode()))
    (site / dist_info()).rename(site / OLD_INFO)
    metadata = site / OLD_INFO / "METADATA"
    metadata.write_text(metadata.read_text().replace(f"Version: {GUARD_VERSION}\n", f"Version: {__version__}\n"))
    names = [module, *(site / OLD_INFO / name for name in ("METADATA", "INSTALLER", "entry_points.txt"))]
    rows = []
    for path in names:
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path.relative_to(site).as_posix()},sha256={digest},{len(data)}")
    (site / OLD_INFO / "RECORD").write_text("\n".join([*rows, f"{OLD_INFO}/RECORD,,"]) + "\n")
    files = {p.relative_to(site).as_posix(): p.read_bytes() for p in [*names, site / OLD_INFO / "RECORD"]}
    state = json.loads((site / ".patchkit/state.json").read_text())
    state["guard"] = {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}
    (site / ".patchkit/state.json").write_text(json.dumps(state))
    assert load_plugins_like_vllm(site).returncode == 0
    return files


def everything(site: Path) -> dict[str, bytes]:
    """Every file of the site outside .patchkit/ and bytecode caches, for byte-for-byte comparisons."""
    return {
        p.relative_to(site).as_posix(): p.read_bytes()
        for p in sorted(site.rglob("*"))
        if p.is_file() and ".patchkit" not in p.parts and "__pycache__" not in p.parts
    }


def killed_at_each_step(toy: dict[str, Path], tmp_path: Path, args: list[str], judge: Callable) -> int:
    """The CLI's `args` on the toy's site (and library), run from the site as it is now killed after step
    1, 2, ... until a run finishes (a share of the steps under the fast profile: sweep_trials): after each
    kill, status recovers the site as it was, and `judge(site, step)` holds. How many runs were killed."""
    site, origin = toy["site"], tmp_path / "origin"
    shutil.copytree(site, origin, symlinks=True)
    as_before = everything(origin)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHKIT_FAULT")} | {"PATCHKIT_FAULT_MODE": "kill"}
    for killed, step in enumerate(sweep_trials(range(1, 200))):
        shutil.rmtree(site)
        shutil.copytree(origin, site, symlinks=True)
        done = run_cli(args[0], *args[1:], "--target", site, "--patches", toy["lib"],
                       env={**env, "PATCHKIT_FAULT_AFTER": str(step)})  # fmt: skip
        if done.returncode == 0:
            return killed
        assert done.returncode == -9, done.stdout + done.stderr
        said = run_cli_read_only("status", "--target", site, "--patches", toy["lib"])  # recovers first
        assert everything(site) == as_before, (step, said.stdout + said.stderr)
        judge(site, step)
    pytest.fail(f"the {args[0]} never finished")


def test_an_older_patchkits_unlabelled_guard_is_replaced_by_apply_and_removed_by_revert(toy, tmp_path):
    before = everything(toy["site"])
    assert cli(toy, "apply", "--set", "gated").returncode == 0
    older = _older_guard(toy["site"])
    said = status(toy)
    assert said.returncode == 1 and "older patchkit's launch guard" in said.stdout, said.stdout
    copy = tmp_path / "copy"
    shutil.copytree(toy["site"], copy, symlinks=True)
    done = cli(toy, "apply")
    assert done.returncode == 0 and "launch guard updated" in done.stdout, done.stdout + done.stderr
    assert not (toy["site"] / OLD_INFO).exists() and (toy["site"] / dist_info()).is_dir()
    assert load_plugins_like_vllm(toy["site"]).returncode == 0 and status(toy).returncode == 0
    reverted = run_cli_writing("revert", "--target", copy, "--patches", toy["lib"])
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert everything(copy) == before and not set(older) & set(everything(copy))


@pytest.mark.parametrize("verb", ["apply", "revert"])
def test_apply_or_revert_of_an_older_unlabelled_guard_killed_at_any_step_ends_as_before_or_done(toy, tmp_path, verb):
    stock = everything(toy["site"])
    assert cli(toy, "apply", "--set", "gated").returncode == 0
    older = _older_guard(toy["site"])

    def older_kept(site: Path, step: int) -> None:
        assert all((site / path).read_bytes() == data for path, data in older.items()), step

    site = toy["site"]
    no_import = ["--no-import"] if verb == "apply" else []
    killed = killed_at_each_step(toy, tmp_path, [verb, *no_import], older_kept)
    assert killed >= 2, killed
    if verb == "apply":
        assert not (site / OLD_INFO).exists() and (site / dist_info()).is_dir()
        assert load_plugins_like_vllm(site).returncode == 0
    else:
        assert everything(site) == stock


# -- an older patchkit's `wheel --patch` build -----------------------------------------------------


def older_patchkits_patch_wheel(toy: dict[str, Path], *diffs: Path) -> None:
    """What `pip install` of an older patchkit's `wheel --patch` build of `diffs` leaves in the toy site:
    the patched files, the labelled version, a provenance naming no set and no mark of the contracts."""
    site, stock = toy["site"], {SPEC: STOCK_SPEC, MODEL: STOCK_MODEL}
    texts = [diff.read_bytes() for diff in diffs]
    new = {
        SPEC: WIDE_SPEC if any(b"bigmodel" in text for text in texts) else STOCK_SPEC,
        MODEL: EAGLE_MODEL if any(b"SupportsEagle3" in text for text in texts) else STOCK_MODEL,
    }
    if any(b"# site tweak" in text for text in texts):
        new[MODEL] += "# site tweak\n"
    patches = [{"name": d.name, "sha256": hashlib.sha256(t).hexdigest()} for d, t in zip(diffs, texts, strict=True)]
    label = "patchkit.adhoc." + hashlib.sha256("\n".join(p["sha256"] for p in patches).encode()).hexdigest()[:12]
    files = {
        rel: {"stock_sha256": _sha(stock[rel]), "patched_sha256": _sha(new[rel])}
        for rel in stock
        if new[rel] != stock[rel]
    }
    provenance = {"schema_version": 1, "patchkit": "0.1.0", "vllm_version": "0.16.0", "label": label, "set": None,
                  "patches": patches, "files": files}  # fmt: skip
    shipped = {f"patchkit/{diff.name}": text for diff, text in zip(diffs, texts, strict=True)}
    pip_install(
        site,
        f"0.16.0+{label}",
        {"vllm/__init__.py": "", **new},
        {"patchkit.json": json.dumps(provenance).encode(), **shipped},
    )


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _guard_fix(said: subprocess.CompletedProcess) -> str:
    """The guard's fix in status's JSON, of one set or the first of several."""
    data = json.loads(said.stdout)
    return str((data["sets"][0] if "sets" in data else data)["guard"]["fix"])


def _addon(tmp_path: Path) -> Path:
    addon = tmp_path / "addon.patch"
    addon.write_text("--- /dev/null\n+++ b/vllm/my_addon.py\n@@ -0,0 +1 @@\n+ADDON = 1\n")
    return addon


def test_an_older_patchkits_patch_wheel_that_breaks_a_set_is_refused_at_launch_and_the_fix_named_clears_it(
    toy, tmp_path
):
    """M6: a wheel of the gate alone (eagle3's whitelist without the model's support) passed the guard
    any apply installed; now the guard refuses it as it refuses such a record, apply and status say so
    and name the fix (the wheel's files back to stock, then the whole set), and following it launches."""
    older_patchkits_patch_wheel(toy, toy["whitelist"])
    tools = b"--- /dev/null\n+++ b/vllm/tools.py\n@@ -0,0 +1 @@\n+TOOL = 1\n"
    write_library(toy["lib"], {"0.16.0": [tools]}, name="tools")
    done = cli(toy, "apply", "--set", "tools")  # any apply installs the guard
    words = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and "the launch guard still refuses the tree" in words, words
    assert "set gated half-applied" in words and words.index("`patchkit revert ") < words.index("--set gated`"), words
    assert "wheel_held" not in json.loads((toy["site"] / ".patchkit/state.json").read_text())
    refused = load_plugins_like_vllm(toy["site"])
    assert refused.returncode != 0 and target_guard.UNHELD_WHEEL in refused.stderr, refused.stderr[-2000:]
    assert "0001-change.patch" in refused.stderr and "patchkit status" in refused.stderr
    for verb in ("status", "verify"):
        said = run_cli_read_only(verb, "--target", toy["site"], "--patches", toy["lib"], "--format", "json")
        assert said.returncode == 1, (verb, said.stdout + said.stderr)
    fix = _guard_fix(status(toy))
    assert (
        fix.startswith("run `patchkit revert ") and "set gated half-applied" in fix and fix.endswith("--set gated`")
    ), fix
    undone = cli(toy, "revert")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert (toy["site"] / SPEC).read_text() == STOCK_SPEC
    assert cli(toy, "apply", "--set", "gated").returncode == 0
    assert load_plugins_like_vllm(toy["site"]).returncode == 0 and status(toy).returncode == 0


def test_a_patch_wheel_no_library_judges_is_fixed_by_the_revert_status_names(toy, tmp_path, monkeypatch):
    """The guard refuses an older patchkit's `wheel --patch` build; where no library at hand can judge
    its files (held finds no set to hold them to), status names the revert that puts the wheel's files
    back to stock. Run as printed, the guard then passes and status too."""
    older_patchkits_patch_wheel(toy, toy["whitelist"])
    tools = b"--- /dev/null\n+++ b/vllm/tools.py\n@@ -0,0 +1 @@\n+TOOL = 1\n"
    write_library(toy["lib"], {"0.16.0": [tools]}, name="tools")
    assert cli(toy, "apply", "--set", "tools").returncode == 1  # the guard installed, and refusing
    with monkeypatch.context() as unread:
        unread.setattr(inspection, "_sets_at_hand", tuple)  # the library's sets not to be had
        said = run_cli_in_process(
            "status", "--target", toy["site"], "--patches", toy["lib"], "--set", "tools", "--format", "json"
        )
    assert said.returncode == 1, said.stdout + said.stderr
    fix = _guard_fix(said)
    assert fix.startswith("run `patchkit revert ") and "no library at hand judges them" in fix, fix
    [revert] = re.findall(r"`(patchkit revert [^`]*)`", fix)
    undone = run_cli_writing(*shlex.split(revert)[1:])
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert (toy["site"] / SPEC).read_text() == STOCK_SPEC
    assert load_plugins_like_vllm(toy["site"]).returncode == 0 and status(toy).returncode == 0


def test_an_older_patchkits_harmless_patch_wheel_is_recorded_held_by_any_apply(toy, tmp_path):
    """A wheel that breaks no set's contract launches under the guard the apply installs: the apply
    records its patchkit.json held; another wheel installed since is refused until an apply holds it."""
    older_patchkits_patch_wheel(toy, toy["model_only"])
    done = cli(toy, "apply", "--patch", _addon(tmp_path))
    words = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0 and "still refuses" not in words, words
    provenance = next(toy["site"].glob("vllm-*.dist-info/patchkit.json")).read_bytes()
    state = json.loads((toy["site"] / ".patchkit/state.json").read_text())
    assert state["wheel_held"] == hashlib.sha256(provenance).hexdigest()
    assert load_plugins_like_vllm(toy["site"]).returncode == 0 and status(toy).returncode == 0
    older_patchkits_patch_wheel(toy, toy["lib"] / "gated/0.16.0/0002-change.patch")  # the model alone
    refused = load_plugins_like_vllm(toy["site"])
    assert refused.returncode != 0 and target_guard.UNHELD_WHEEL in refused.stderr, refused.stderr[-2000:]
    said = status(toy)
    fix = json.loads(said.stdout)["guard"]["fix"]
    assert said.returncode == 1 and fix.startswith("run `patchkit apply ") and "records the wheel held" in fix, fix
    again = cli(toy, "apply")
    assert again.returncode == 0, again.stdout + again.stderr
    assert load_plugins_like_vllm(toy["site"]).returncode == 0 and status(toy).returncode == 0


def test_a_wheel_held_mark_that_is_no_digest_is_damaged_for_the_guard_and_the_commands(toy, tmp_path):
    older_patchkits_patch_wheel(toy, toy["model_only"])
    assert cli(toy, "apply", "--patch", _addon(tmp_path)).returncode == 0
    path = toy["site"] / ".patchkit/state.json"
    state = json.loads(path.read_text())
    state["wheel_held"] = "yes"
    path.write_text(json.dumps(state))
    refused = load_plugins_like_vllm(toy["site"])
    assert refused.returncode != 0 and "'wheel_held' is not a sha256 hex digest" in refused.stderr, refused.stderr
    said = status(toy)
    assert said.returncode == 2 and "'wheel_held' is not a sha256 hex digest" in said.stdout + said.stderr


def test_the_commands_know_the_guards_words_for_an_unheld_wheel():
    assert guard_words.UNHELD_WHEEL == target_guard.UNHELD_WHEEL and guard_words.UNHELD == target_guard.UNHELD


def test_an_apply_that_records_a_patch_wheel_held_killed_at_any_step_ends_as_before_or_done(toy, tmp_path):
    """The wheel's held mark goes into the record in the apply's one transaction: killed at any step,
    the tree is as before (no record of it, no guard), or done (held, and the guard lets it launch)."""
    older_patchkits_patch_wheel(toy, toy["model_only"])

    def unmarked(site: Path, step: int) -> None:
        record = site / ".patchkit/state.json"
        assert not record.exists() or "wheel_held" not in json.loads(record.read_text()), step

    killed = killed_at_each_step(toy, tmp_path, ["apply", "--no-import", "--patch", _addon(tmp_path)], unmarked)
    assert killed >= 2, killed
    assert "wheel_held" in json.loads((toy["site"] / ".patchkit/state.json").read_text())
    assert load_plugins_like_vllm(toy["site"]).returncode == 0


def test_an_apply_that_writes_its_set_and_leaves_the_guard_refusing_fails_as_status_does(tmp_path):
    """lows33 F3: apply exits 1 when the launch guard it leaves still refuses the tree. An apply that
    wrote its set judged the guard only for an older patchkit's --patch record: with another set's
    file edited by hand it said "applied" in green, exit 0, and its own status then FAILED. It says
    what the guard refuses and the fix (exit 1, JSON "guard"), and the fix ends it."""
    site = write_site(tmp_path / "site")
    library = tmp_path / "lib"
    edits = {"spec": {SPEC: STOCK_SPEC + "# spec set\n"}, "model": {MODEL: STOCK_MODEL + "# model set\n"}}
    for name, edit in edits.items():
        write_library(library, {"0.16.0": [make_patch(tmp_path, site, edit)]}, name=name)
    chosen = ["--target", site, "--patches", library]
    assert run_cli_writing("apply", *chosen, "--set", "spec", "--no-import").returncode == 0
    (site / SPEC).write_text(STOCK_SPEC + "# spec set\n# tuned by hand\n")
    done = run_cli_writing("apply", *chosen, "--set", "model", "--no-import", "--format", "json")
    document = json.loads(done.stdout)
    assert done.returncode == 1 and document["result"] == "applied", done.stdout + done.stderr
    assert document["guard"]["refuses"] and SPEC in document["guard"]["refuses"][0], document["guard"]
    assert run_cli_read_only("status", *chosen).returncode == 1
    fix = re.findall(r"`([^`]+)`", document["guard"]["fix"])
    for command in fix:
        assert run_cli_writing(*shlex.split(command)[1:]).returncode == 0, command
    assert run_cli_read_only("status", *chosen).returncode == 0
