"""The launch guard and the commands agree (issue 20, item 2): on every tree state of a catalogue
(stock, applied, vLLM upgraded in place by pip to a covered, an upstream and an uncovered release,
a patched wheel installed over an applied tree, the guard uninstalled by pip, the record or the
guard's files edited...), the guard patchkit installs, run as vLLM runs it, refuses a launch
exactly when `status`, `verify`, `preflight` and `run` fail; and the command `status` names (else
`apply`) brings the tree to one the guard lets launch.

The trees are hand-made site-packages (no vLLM source); pip's changes are simulated with the files
pip leaves: the new release's vllm/ and dist-info (with a true RECORD) over the old ones, the guard's
RECORD files removed.
"""

from __future__ import annotations

import _imp
import base64
import hashlib
import importlib.util
import json
import os
import py_compile
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import (
    LOAD_LIKE_VLLM,
    MODEL_PY,
    SPEC_PY,
    load_plugins_as_another_user,
    load_plugins_like_vllm,
    make_patch,
    make_venv,
    pip_install,
    purelib,
    run_cli,
    run_cli_in_process,
    run_cli_judged,
    run_cli_read_only,
    run_cli_writing,
    sweep_trials,
    warm_pycache_prefix,
    write_library,
    write_tree,
)
from launch_fixtures import write_model

from patchkit import __version__
from patchkit.engine.guard import GUARD_VERSION, dist_info

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
INFO = dist_info()
SET = "demo"


def stock_files(version: str) -> dict[str, str]:
    """Each release's own stock files (0.18.0 ships the change: upstream)."""
    spec = SPEC_PY.replace('"qwen",\n', '"qwen",\n    "gemma",\n') if version >= "0.18" else SPEC_PY
    return {SPEC: spec + f"# vllm {version}\n", MODEL: MODEL_PY + f"# vllm {version}\n"}


def patched(files: dict[str, str]) -> dict[str, str]:
    return {**files, SPEC: files[SPEC].replace('"qwen",\n', '"qwen",\n    "gemma",\n')}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


READ_ONLY = ("status", "verify")


@dataclass
class Tree:
    site: Path
    library: Path
    model: Path
    bin: Path

    def cli(self, *args: str):
        """A command on the tree, judged here by its exit code, output and files alone: status and verify run
        in this process, apply and revert too where the fork would be the session's (CONTRIBUTING)."""
        if args[0] in READ_ONLY:
            return run_cli_in_process(*args, "--target", self.site, "--patches", self.library)
        return run_cli_judged(*args, "--target", self.site, "--patches", self.library)

    def launch(self, command: str):
        """preflight (in this process, as status) or run on `vllm serve MODEL`, `vllm` being a stand-in that exits 0."""
        launch = ("--", str(self.bin / "vllm"), "serve", str(self.model))
        if command == "preflight":
            return run_cli_in_process(
                "preflight", "--target", self.site, "--patches", self.library, "--no-import", *launch
            )
        return run_cli("run", "--target", self.site, "--patches", self.library, *launch)

    def state(self) -> dict:
        return json.loads((self.site / ".patchkit/state.json").read_text())

    def write_state(self, data: dict) -> None:
        (self.site / ".patchkit/state.json").write_text(json.dumps(data))


def _tree(tmp_path: Path) -> Tree:
    library_trees = tmp_path / "stock"
    series = {}
    for version in ("0.16.0", "0.17.0"):
        stock = write_tree(library_trees / version, version, stock_files(version))
        series[version] = [make_patch(tmp_path, stock, patched(stock_files(version)))]
    library = write_library(tmp_path / "lib", series, upstream=">=0.18.0", name=SET)
    site = tmp_path / "site"
    pip_install(site, "0.16.0", stock_files("0.16.0"))
    model = write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "vllm").chmod(0o755)
    return Tree(site, library, model, bin_dir)


def _applied(tree: Tree) -> None:
    done = tree.cli("apply", "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree.site / "patchkit_guard.py").exists()


# -- the catalogue: each builds a state from a stock 0.16.0 tree ------------------------------------


def stock(tree: Tree) -> None:
    pass


def applied(tree: Tree) -> None:
    _applied(tree)


def applied_without_guard(tree: Tree) -> None:
    assert tree.cli("apply", "--no-import", "--no-guard").returncode == 0


def upgraded_to_covered(tree: Tree) -> None:
    _applied(tree)
    pip_install(tree.site, "0.17.0", stock_files("0.17.0"))


def upgraded_to_upstream(tree: Tree) -> None:
    _applied(tree)
    pip_install(tree.site, "0.18.0", stock_files("0.18.0"))


def upgraded_to_uncovered(tree: Tree) -> None:
    _applied(tree)
    pip_install(tree.site, "0.17.5", stock_files("0.17.5"))


def upgraded_to_a_release_without_a_patched_file(tree: Tree) -> None:
    """pip installs a release that no longer ships a file the record replaced: pip removed it."""
    _applied(tree)
    pip_install(tree.site, "0.18.0", {MODEL: stock_files("0.18.0")[MODEL]})


def downgraded_to_a_release_without_a_patched_file(tree: Tree) -> None:
    """pip installs an older release the record's set covers, which lacks a file the record replaced."""
    _applied(tree)
    pip_install(tree.site, "0.15.0", {MODEL: stock_files("0.15.0")[MODEL]})


ADDON = "vllm/my_addon.py"


def _added_a_file(tree: Tree) -> None:
    """An ad-hoc --patch that only creates a file, on an applied tree: a record of no original."""
    _applied(tree)
    addon = tree.site.parent / "addon.patch"
    addon.write_text(f"--- /dev/null\n+++ b/{ADDON}\n@@ -0,0 +1 @@\n+ADDON = 1\n")
    done = run_cli_writing("apply", "--no-import", "--target", tree.site, "--patch", addon)
    assert done.returncode == 0, done.stdout + done.stderr


def added_a_file_by_an_older_patchkit(tree: Tree) -> None:
    """An older patchkit's --patch apply: its record has no "held" mark (no set's contract held it), so
    the guard cannot judge it; status names this patchkit's apply of the same diff, which marks it."""
    _added_a_file(tree)
    state = tree.state()
    for entry in state["entries"]:
        entry.pop("held", None)
    tree.write_state(state)


def added_a_file_by_an_older_patchkit_then_upgraded(tree: Tree) -> None:
    added_a_file_by_an_older_patchkit(tree)
    pip_install(tree.site, "0.17.0", stock_files("0.17.0"))


def added_a_file_by_an_older_patchkit_under_its_guard(tree: Tree) -> None:
    """An older patchkit's --patch record under the guard that patchkit installed, which had no rule for
    it (the tree launched): the apply that updates the guard judges the record as a new diff is judged,
    and marks it held where it breaks no set's contract, so the tree launches after it as before."""
    added_a_file_by_an_older_patchkit(tree)
    _rebuilt_guard(tree, _before_held_marks)


def _before_held_marks(module: bytes) -> bytes:
    """A guard of the check format before the "held" mark: an unmarked --patch record passes it."""
    older = module.replace(b"raise TreeChanged(_unheld(unheld[0]))", b"pass")
    assert older != module
    return re.sub(rb"\nGUARD_FORMAT = ([0-9]+)\n", lambda m: b"\nGUARD_FORMAT = %d\n" % (int(m[1]) - 1), older)


def added_a_file_then_upgraded(tree: Tree) -> None:
    _added_a_file(tree)
    pip_install(tree.site, "0.17.0", stock_files("0.17.0"))


def added_a_file_then_upgraded_keeping_it(tree: Tree) -> None:
    """pip never lists a file patchkit created: it stays through the upgrade."""
    _added_a_file(tree)
    pip_install(tree.site, "0.17.0", {**stock_files("0.17.0"), ADDON: "ADDON = 1\n"})
    record = tree.site / "vllm-0.17.0.dist-info/RECORD"
    record.write_text("".join(line for line in record.read_text().splitlines(True) if not line.startswith(ADDON)))


def patched_wheel(tree: Tree) -> None:
    """What `pip install` of the wheel `patchkit wheel` built leaves: the patched files, the version
    labelled, the provenance and the patches in the dist-info."""
    stock, new = stock_files("0.16.0"), patched(stock_files("0.16.0"))
    patch = (tree.library / SET / "0.16.0" / "0001-change.patch").read_bytes()
    provenance = {
        "schema_version": 1,
        "patchkit": __version__,
        "vllm_version": "0.16.0",
        "label": f"patchkit.{SET}",
        "set": SET,
        "patches": [{"name": "0001-change.patch", "sha256": hashlib.sha256(patch).hexdigest()}],
        "files": {SPEC: {"stock_sha256": sha(stock[SPEC]), "patched_sha256": sha(new[SPEC])}},
    }
    dist_files = {"patchkit.json": json.dumps(provenance).encode(), "patchkit/0001-change.patch": patch}
    pip_install(tree.site, f"0.16.0+patchkit.{SET}", new, dist_files)


def _patch_wheel(tree: Tree, tweak: str) -> None:
    """What `pip install` of an older patchkit's `wheel --patch` build leaves (a provenance naming no
    set: its diff was held to no set's contract), the set's change plus `tweak`."""
    stock = stock_files("0.16.0")
    new = {**patched(stock), SPEC: patched(stock)[SPEC] + tweak}
    patch = make_patch(tree.site.parent, tree.library.parent / "stock" / "0.16.0", {SPEC: new[SPEC]})
    digest = hashlib.sha256(patch).hexdigest()
    label = "patchkit.adhoc." + hashlib.sha256(digest.encode()).hexdigest()[:12]
    provenance = {
        "schema_version": 1,
        "patchkit": "0.1.0",
        "vllm_version": "0.16.0",
        "label": label,
        "set": None,
        "patches": [{"name": "tweak.patch", "sha256": digest}],
        "files": {SPEC: {"stock_sha256": sha(stock[SPEC]), "patched_sha256": sha(new[SPEC])}},
    }
    dist_files = {"patchkit.json": json.dumps(provenance).encode(), "patchkit/tweak.patch": patch}
    pip_install(tree.site, f"0.16.0+{label}", new, dist_files)


def unheld_patch_wheel_under_the_guard(tree: Tree) -> None:
    """An older patchkit's `wheel --patch` build installed by pip over the one an apply guarded (and
    recorded held): the guard cannot judge the new one until an apply of this patchkit holds it."""
    _patch_wheel(tree, "# tweak 1\n")
    _applied(tree)
    _patch_wheel(tree, "# tweak 2\n")


def patched_wheel_over_applied(tree: Tree) -> None:
    _applied(tree)
    patched_wheel(tree)


def patched_wheel_over_another_release(tree: Tree) -> None:
    """0.17.0 applied without the guard (or by `run --apply`), then the patched 0.16.0 wheel installed
    over it: the 0.17.0 record is stale, as after a stock install."""
    pip_install(tree.site, "0.17.0", stock_files("0.17.0"))
    assert tree.cli("apply", "--no-import", "--no-guard").returncode == 0
    patched_wheel(tree)


def guarded_patched_wheel(tree: Tree) -> None:
    """The patched wheel installed, then `apply` installs the guard on it (docs/wheels.md's way)."""
    patched_wheel(tree)
    _applied(tree)


def guarded_patched_wheel_then_stock(tree: Tree) -> None:
    """pip reinstalls the stock release over the guarded patched wheel: its provenance goes with
    its dist-info, and the patches with its files."""
    guarded_patched_wheel(tree)
    pip_install(tree.site, "0.16.0", stock_files("0.16.0"))


def guarded_patched_wheel_then_covered(tree: Tree) -> None:
    guarded_patched_wheel(tree)
    pip_install(tree.site, "0.17.0", stock_files("0.17.0"))


def guarded_patched_wheel_then_upstream(tree: Tree) -> None:
    guarded_patched_wheel(tree)
    pip_install(tree.site, "0.18.0", stock_files("0.18.0"))


def guarded_patched_wheel_then_uncovered(tree: Tree) -> None:
    guarded_patched_wheel(tree)
    pip_install(tree.site, "0.17.5", stock_files("0.17.5"))


GUARDED_WHEEL_REPLACED = [
    guarded_patched_wheel_then_stock,
    guarded_patched_wheel_then_covered,
    guarded_patched_wheel_then_upstream,
    guarded_patched_wheel_then_uncovered,
]


def guard_uninstalled_by_pip(tree: Tree) -> None:
    """`pip uninstall patchkit-guard`: every file its RECORD lists, and the module's bytecode."""
    _applied(tree)
    (tree.site / "patchkit_guard.py").unlink()
    shutil.rmtree(tree.site / INFO)
    for pyc in (tree.site / "__pycache__").glob("patchkit_guard.*.pyc") if (tree.site / "__pycache__").is_dir() else []:
        pyc.unlink()


def reinstalled_same_version(tree: Tree) -> None:
    """`pip install --force-reinstall vllm==0.16.0` over the applied tree: the stock files back."""
    _applied(tree)
    pip_install(tree.site, "0.16.0", stock_files("0.16.0"))


def _another_build(files: dict[str, str]) -> dict[str, str]:
    """A vendor's build of the same release: spec.py holds a backport (pip's RECORD lists its bytes)."""
    return {**files, SPEC: "# acme build 3: a backported fix\n" + files[SPEC]}


def reinstalled_another_build(tree: Tree) -> None:
    """review32 F6: another build of the same version installed over the applied tree by pip: the
    recorded file is neither the original patchkit saved nor what it wrote, but pip's (RECORD)."""
    _applied(tree)
    pip_install(tree.site, "0.16.0", _another_build(stock_files("0.16.0")))


def reinstalled_another_build_unguarded(tree: Tree) -> None:
    applied_without_guard(tree)
    pip_install(tree.site, "0.16.0", _another_build(stock_files("0.16.0")))


def record_lost(tree: Tree) -> None:
    """.patchkit/ left behind by `cp -r tree/*`, `rsync --exclude '.*'` or a .dockerignore."""
    _applied(tree)
    shutil.rmtree(tree.site / ".patchkit")


def record_emptied(tree: Tree) -> None:
    _applied(tree)
    tree.write_state({"entries": [], "format": 1})


def record_names_another_version(tree: Tree) -> None:
    _applied(tree)
    state = tree.state()
    state["entries"][0]["vllm_version"] = "0.15.9"
    tree.write_state(state)


def record_chosen_a_string(tree: Tree) -> None:
    """Review 14 L2': a record every command calls damaged (exit 2), by a hand or another tool."""
    _applied(tree)
    tree.write_state({**tree.state(), "chosen": SET})


def record_of_another_format(tree: Tree) -> None:
    _applied(tree)
    tree.write_state({**tree.state(), "format": 2})


def record_mode_out_of_range(tree: Tree) -> None:
    _applied(tree)
    state = tree.state()
    state["entries"][0]["files"][SPEC]["mode"] = 0o4755
    tree.write_state(state)


def record_without_entries(tree: Tree) -> None:
    """A record with no "entries" key (the commands read it as none): the guard judges it as they do."""
    _applied(tree)
    state = tree.state()
    del state["entries"]
    tree.write_state(state)


def _unchecked_pyc(tree: Tree, source: str, name: str | None = None, magic: bytes | None = None) -> Path:
    """An unchecked-hash .pyc of `source` (PEP 552) where Python looks for SPEC's bytecode, as
    `compileall --invalidation-mode unchecked-hash` in an image build leaves it; `name` and `magic`:
    another interpreter's."""
    cache = tree.site / "vllm/config/__pycache__"
    cache.mkdir(exist_ok=True)
    scratch = tree.site.parent / "spec.py"
    scratch.write_text(source)
    pyc = Path(
        py_compile.compile(
            str(scratch),
            cfile=str(cache / (name or Path(importlib.util.cache_from_source(str(tree.site / SPEC))).name)),
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
    )
    if magic is not None:  # its hash keyed by that interpreter's magic number, as it writes it
        pyc.write_bytes(
            magic
            + pyc.read_bytes()[4:8]
            + _imp.source_hash(int.from_bytes(magic, "little"), source.encode())
            + pyc.read_bytes()[16:]
        )
    return pyc


def stock_bytecode_beside_the_patched_file(tree: Tree) -> None:
    """Review 13 L1: an image compiled the stock file (unchecked-hash) and kept the .pyc after apply:
    Python runs the stock code without reading the patched source."""
    _applied(tree)
    _unchecked_pyc(tree, stock_files("0.16.0")[SPEC])


def stock_bytecode_of_another_interpreter(tree: Tree) -> None:
    _applied(tree)
    _unchecked_pyc(
        tree, stock_files("0.16.0")[SPEC], "spec.cpython-310.opt-1.pyc", (3439).to_bytes(2, "little") + b"\r\n"
    )


def patched_bytecode_beside_the_patched_file(tree: Tree) -> None:
    """An unchecked-hash .pyc compiled from the patched file (an image built after apply): it runs
    the patched code, and passes."""
    _applied(tree)
    _unchecked_pyc(tree, (tree.site / SPEC).read_text())


def record_hash_edited(tree: Tree) -> None:
    _applied(tree)
    state = tree.state()
    state["entries"][0]["files"][SPEC]["after"] = sha("something else\n")
    tree.write_state(state)


def file_edited(tree: Tree) -> None:
    _applied(tree)
    with open(tree.site / SPEC, "a") as fh:
        fh.write("# tuned\n")


def guard_module_commented(tree: Tree) -> None:
    _applied(tree)
    with open(tree.site / "patchkit_guard.py", "a") as fh:
        fh.write("# read by someone\n")


def guard_module_refusing(tree: Tree) -> None:
    """The installed module edited (or an older build's) so that it refuses what this patchkit passes."""
    _applied(tree)
    module = tree.site / "patchkit_guard.py"
    text = module.read_text()
    module.write_text(text.replace("    problems = []\n", "    problems = ['an older guard build finds fault']\n", 1))


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _rebuilt_guard(tree: Tree, edit: Callable[[bytes], bytes]) -> None:
    """The installed module as another build wrote it (`edit` of this one's bytes), its RECORD and
    the tree's record (where there is one) holding its bytes."""
    module = tree.site / "patchkit_guard.py"
    module.write_bytes(edit(module.read_bytes()))
    record = tree.site / INFO / "RECORD"
    lines = record.read_text().splitlines()
    lines = [
        _record_line("patchkit_guard.py", module.read_bytes()) if line.startswith("patchkit_guard.py,") else line
        for line in lines
    ]
    record.write_text("\n".join(lines) + "\n")
    if (tree.site / ".patchkit/state.json").exists():
        state = tree.state()
        state["guard"] |= {"patchkit_guard.py": sha(module.read_text()), f"{INFO}/RECORD": sha(record.read_text())}
        tree.write_state(state)


def guard_of_an_older_build(tree: Tree) -> None:
    """Review 13 M5: an older build of the same version installed the guard (its module's bytes
    differ, its RECORD and the record hold them): the guard passes, so must the commands."""
    _applied(tree)
    _rebuilt_guard(tree, lambda module: module + b"\n# built from an older commit\n")


def _of_other_checks(module: bytes) -> bytes:
    """A build from before the guard's checks were numbered, which refuses more (a 32 MiB file limit)."""
    module = re.sub(rb"\nGUARD_FORMAT = [0-9]+\n", b"\n", module)
    return module.replace(b"MAX_FILE_BYTES = 64 *", b"MAX_FILE_BYTES = 32 *")


def guard_of_other_checks(tree: Tree) -> None:
    """An older build's guard, as it wrote it, whose checks are not this build's: what it refuses
    cannot be told, so the commands fail until `apply` updates it."""
    _applied(tree)
    _rebuilt_guard(tree, _of_other_checks)


def guard_of_an_older_build_record_lost(tree: Tree) -> None:
    """guard27: an older build's guard where .patchkit/ was lost: known by its RECORD alone."""
    guard_of_an_older_build(tree)
    shutil.rmtree(tree.site / ".patchkit")


def guard_of_other_checks_record_lost(tree: Tree) -> None:
    guard_of_other_checks(tree)
    shutil.rmtree(tree.site / ".patchkit")


def guard_of_another_patchkit(tree: Tree) -> None:
    """A guard another patchkit installed (its own dist-info, not recorded here) that refuses."""
    assert tree.cli("apply", "--no-import", "--no-guard").returncode == 0
    (tree.site / "patchkit_guard.py").write_text("def check():\n    raise RuntimeError('another guard refuses')\n")
    info = tree.site / "patchkit_guard-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: patchkit-guard\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\npatchkit_guard = patchkit_guard:check\n")


def guard_entry_point_emptied(tree: Tree) -> None:
    _applied(tree)
    (tree.site / INFO / "entry_points.txt").write_text("")


def guard_dist_info_upper_case_then_upgraded(tree: Tree) -> None:
    """importlib.metadata finds a `.DIST-INFO` as well: vLLM loads the guard, which refuses the upgrade."""
    upgraded_to_covered(tree)
    (tree.site / INFO).rename(tree.site / INFO.replace(".dist-info", ".DIST-INFO"))


def guard_entry_point_respelled_then_upgraded(tree: Tree) -> None:
    upgraded_to_covered(tree)
    (tree.site / INFO / "entry_points.txt").write_text("[vllm.general_plugins]\npatchkit_guard=patchkit_guard:check\n")


def guard_declared_by_an_egg_info_then_upgraded(tree: Tree) -> None:
    upgraded_to_covered(tree)
    egg = tree.site / "patchkit_guard.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text((tree.site / INFO / "METADATA").read_text())
    (egg / "entry_points.txt").write_text((tree.site / INFO / "entry_points.txt").read_text())
    shutil.rmtree(tree.site / INFO)


def guard_module_symlinked_to_a_copy(tree: Tree) -> None:
    """The guard module a symlink to a true copy of it: Python imports the copy, which passes."""
    _applied(tree)
    copy = tree.site.parent / "guard-copy.py"
    copy.write_bytes((tree.site / "patchkit_guard.py").read_bytes())
    (tree.site / "patchkit_guard.py").unlink()
    (tree.site / "patchkit_guard.py").symlink_to(copy)


def record_closed_by_an_older_patchkit(tree: Tree) -> None:
    """An older patchkit rewrote the record under umask 077: 0600, in a 0700 .patchkit/."""
    _applied(tree)
    (tree.site / ".patchkit/state.json").chmod(0o600)
    (tree.site / ".patchkit").chmod(0o700)


def guard_closed_by_an_older_patchkit(tree: Tree) -> None:
    """An older patchkit installed the guard under umask 077: vLLM run by another user never loads it."""
    _applied(tree)
    (tree.site / "patchkit_guard.py").chmod(0o600)
    for path in (tree.site / INFO).iterdir():
        path.chmod(0o600)
    (tree.site / INFO).chmod(0o700)


def created_file_closed_by_an_older_patchkit(tree: Tree) -> None:
    """A file an ad-hoc patch created, written 0600 by an older patchkit under umask 077."""
    _added_a_file(tree)
    (tree.site / ADDON).chmod(0o600)


def record_says_patchkit_created_a_stock_file(tree: Tree) -> None:
    """Review 12b L8: `"before": null` for a file vLLM's RECORD lists: status refuses the record as
    revert does (exit 2: reverting it would delete vLLM's file), while the guard let vLLM launch."""
    _applied(tree)
    state = tree.state()
    state["entries"][0]["files"][SPEC]["before"] = None
    tree.write_state(state)


def record_patch_named_as_a_path(tree: Tree) -> None:
    """review32 L1 s_pname: a recorded patch named `../../../etc/passwd`: no patch file's name."""
    _applied(tree)
    state = tree.state()
    state["entries"][0]["patches"][0]["name"] = "../../../etc/passwd"
    tree.write_state(state)


def _provenance(stock_version: str, label: str) -> dict:
    stock, new = stock_files(stock_version), patched(stock_files(stock_version))
    return {
        "schema_version": 1,
        "patchkit": __version__,
        "vllm_version": stock_version,
        "label": label,
        "set": None,
        "patches": [{"name": "0001-mine.patch", "sha256": "0" * 64}],
        "files": {SPEC: {"stock_sha256": sha(stock[SPEC]), "patched_sha256": sha(new[SPEC])}},
    }


def provenance_planted_in_the_applied_stock_install(tree: Tree) -> None:
    """A patchkit.json written into the stock dist-info of an applied tree, naming the applied file
    as patched: no patched wheel's install put it there (the dist-info is not labelled), so status
    refuses it (exit 2); the guard believed it and let vLLM launch."""
    _applied(tree)
    (tree.site / "vllm-0.16.0.dist-info/patchkit.json").write_text(json.dumps(_provenance("0.16.0", "patchkit.mine")))


def guarded_patched_wheel_its_record_relabelled(tree: Tree) -> None:
    """The guarded patched wheel's patchkit.json edited to name another label than its dist-info's."""
    guarded_patched_wheel(tree)
    path = tree.site / f"vllm-0.16.0+patchkit.{SET}.dist-info/patchkit.json"
    path.write_text(path.read_text().replace(f'"patchkit.{SET}"', '"patchkit.other"'))


def guarded_patched_wheel_its_record_unlike_pips(tree: Tree) -> None:
    """The guarded patched wheel's RECORD lists spec.py with its stock hash (what pip installed is
    not what the provenance says): status refuses the provenance (exit 2), the guard let it launch."""
    guarded_patched_wheel(tree)
    record = tree.site / f"vllm-0.16.0+patchkit.{SET}.dist-info/RECORD"
    stock = stock_files("0.16.0")[SPEC].encode()
    lines = [
        _record_line(SPEC, stock) if line.startswith(SPEC + ",") else line for line in record.read_text().splitlines()
    ]
    record.write_text("\n".join(lines) + "\n")


def guarded_patched_wheel_its_record_of_another_shape(tree: Tree) -> None:
    """The guarded patched wheel's patchkit.json without its "patchkit" field: status refuses it as
    damaged (exit 2); the guard read only its files and let vLLM launch."""
    guarded_patched_wheel(tree)
    path = tree.site / f"vllm-0.16.0+patchkit.{SET}.dist-info/patchkit.json"
    data = json.loads(path.read_text())
    del data["patchkit"]
    path.write_text(json.dumps(data))


def guarded_patched_wheel_its_patch_text_edited(tree: Tree) -> None:
    """The patch the guarded patched wheel ships (its series, read back by revert) edited: status
    refuses it, its sha256 not the recorded one (exit 2); the guard never read it and let vLLM launch."""
    guarded_patched_wheel(tree)
    [patch] = (tree.site / f"vllm-0.16.0+patchkit.{SET}.dist-info/patchkit").iterdir()
    patch.write_bytes(patch.read_bytes() + b"\n")


def recorded_file_a_symlink_to_its_copy(tree: Tree) -> None:
    """A recorded file replaced by an in-tree symlink to the very bytes patchkit wrote."""
    _applied(tree)
    spec = tree.site / SPEC
    copy = spec.with_name("spec_copy.py")
    spec.rename(copy)
    spec.symlink_to(copy.name)


def recorded_file_an_absolute_symlink_to_its_copy_in_another_package(tree: Tree) -> None:
    """The same bytes, in another package of the tree, reached by an absolute link (a dedup tool's)."""
    _applied(tree)
    spec = tree.site / SPEC
    copy = tree.site / "vllm" / "models" / "spec_dedup.py"
    spec.rename(copy)
    spec.symlink_to(copy)


def recorded_files_directory_a_symlink_to_its_copy(tree: Tree) -> None:
    """The recorded file's directory, vllm/config, a symlink to an in-tree copy of it (same files)."""
    _applied(tree)
    config = tree.site / "vllm" / "config"
    config.rename(config.with_name("config_real"))
    config.symlink_to("config_real", target_is_directory=True)


def vllm_a_symlink_to_an_edited_copy(tree: Tree) -> None:
    """vllm/ a symlink to a copy elsewhere, where a recorded file was then edited: a drift of the
    files under the moved vllm/, judged, refused and fixed there."""
    _applied(tree)
    elsewhere = tree.site.parent / "elsewhere"
    elsewhere.mkdir()
    (tree.site / "vllm").rename(elsewhere / "vllm")
    (tree.site / "vllm").symlink_to(elsewhere / "vllm")
    with open(elsewhere / SPEC, "a") as fh:
        fh.write("# tuned\n")


def vllm_moved_elsewhere(tree: Tree) -> None:
    """vllm/ moved to another volume after apply, a symlink in its place: the same files, guarded."""
    _applied(tree)
    elsewhere = tree.site.parent / "elsewhere"
    elsewhere.mkdir()
    (tree.site / "vllm").rename(elsewhere / "vllm")
    (tree.site / "vllm").symlink_to(elsewhere / "vllm")


def vllm_moved_elsewhere_holding_a_symlink_out(tree: Tree) -> None:
    """Under the moved vllm/, a recorded file a symlink out of it: still no file patchkit wrote."""
    vllm_moved_elsewhere(tree)
    spec = tree.site.parent / "elsewhere" / SPEC
    copy = tree.site.parent / "spec_copy.py"
    copy.write_bytes(spec.read_bytes())
    spec.unlink()
    spec.symlink_to(copy)


def vllm_dist_info_a_symlink_out_of_the_tree(tree: Tree) -> None:
    _applied(tree)
    elsewhere = tree.site.parent / "elsewhere"
    elsewhere.mkdir()
    info = tree.site / "vllm-0.16.0.dist-info"
    info.rename(elsewhere / info.name)
    info.symlink_to(elsewhere / info.name)


def objects_a_symlink_out_of_the_tree(tree: Tree) -> None:
    """Review 6 L4: status refused (exit 2) while the guard passed."""
    _applied(tree)
    elsewhere = tree.site.parent / "objects-elsewhere"
    (tree.site / ".patchkit/objects").rename(elsewhere)
    (tree.site / ".patchkit/objects").symlink_to(elsewhere)


def journal_a_directory(tree: Tree) -> None:
    _applied(tree)
    (tree.site / ".patchkit/journal.json").mkdir()


def saved_a_symlink_out_of_the_tree(tree: Tree) -> None:
    _applied(tree)
    elsewhere = tree.site.parent / "saved-elsewhere"
    elsewhere.mkdir()
    (tree.site / ".patchkit/saved").symlink_to(elsewhere)


def created_file_closed_then_vllm_moved(tree: Tree) -> None:
    """A file an older patchkit created 0600, then vllm/ moved to another volume: another user's
    launch is refused for it there too."""
    created_file_closed_by_an_older_patchkit(tree)
    elsewhere = tree.site.parent / "elsewhere"
    elsewhere.mkdir()
    (tree.site / "vllm").rename(elsewhere / "vllm")
    (tree.site / "vllm").symlink_to(elsewhere / "vllm")


# a recorded file a symlink to a copy of its bytes: a tree state (exit 1) whose fix is the hand
# repair status names (apply refuses to write through the link, exit 2)
RECORDED_SYMLINKS = [
    recorded_file_a_symlink_to_its_copy,
    recorded_file_an_absolute_symlink_to_its_copy_in_another_package,
    recorded_files_directory_a_symlink_to_its_copy,
    vllm_moved_elsewhere_holding_a_symlink_out,  # where a symlink leads is never resolved (review36 N14-b)
]

SYMLINKED = [
    vllm_dist_info_a_symlink_out_of_the_tree,
    objects_a_symlink_out_of_the_tree,
    journal_a_directory,
    saved_a_symlink_out_of_the_tree,
]

# records no command acts on (exit 2, its hint to inspect or remove the record): the guard refuses
REFUSED_RECORDS = [
    record_says_patchkit_created_a_stock_file,
    record_patch_named_as_a_path,
    record_chosen_a_string,
    record_of_another_format,
    record_mode_out_of_range,
    provenance_planted_in_the_applied_stock_install,
    guarded_patched_wheel_its_record_relabelled,
    guarded_patched_wheel_its_record_unlike_pips,
    guarded_patched_wheel_its_record_of_another_shape,
    guarded_patched_wheel_its_patch_text_edited,
]


CLOSED_TO_OTHERS = [
    record_closed_by_an_older_patchkit,
    guard_closed_by_an_older_patchkit,
    created_file_closed_by_an_older_patchkit,
    created_file_closed_then_vllm_moved,
]


CATALOGUE: list[Callable[[Tree], None]] = [
    stock,
    applied,
    applied_without_guard,
    upgraded_to_covered,
    upgraded_to_upstream,
    upgraded_to_uncovered,
    upgraded_to_a_release_without_a_patched_file,
    downgraded_to_a_release_without_a_patched_file,
    added_a_file_by_an_older_patchkit,
    added_a_file_by_an_older_patchkit_then_upgraded,
    added_a_file_by_an_older_patchkit_under_its_guard,
    added_a_file_then_upgraded,
    added_a_file_then_upgraded_keeping_it,
    patched_wheel,
    patched_wheel_over_applied,
    patched_wheel_over_another_release,
    guarded_patched_wheel,
    *GUARDED_WHEEL_REPLACED,
    unheld_patch_wheel_under_the_guard,
    guard_uninstalled_by_pip,
    reinstalled_same_version,
    reinstalled_another_build,
    reinstalled_another_build_unguarded,
    record_lost,
    record_emptied,
    record_without_entries,
    record_names_another_version,
    record_hash_edited,
    file_edited,
    stock_bytecode_beside_the_patched_file,
    stock_bytecode_of_another_interpreter,
    patched_bytecode_beside_the_patched_file,
    guard_module_commented,
    guard_module_refusing,
    guard_of_another_patchkit,
    guard_of_an_older_build,
    guard_of_other_checks,
    guard_of_an_older_build_record_lost,
    guard_of_other_checks_record_lost,
    guard_entry_point_emptied,
    guard_dist_info_upper_case_then_upgraded,
    guard_entry_point_respelled_then_upgraded,
    guard_declared_by_an_egg_info_then_upgraded,
    guard_module_symlinked_to_a_copy,
    vllm_moved_elsewhere,
    vllm_a_symlink_to_an_edited_copy,
    *CLOSED_TO_OTHERS,
    *RECORDED_SYMLINKS,
    *SYMLINKED,
    *REFUSED_RECORDS,
]


def _not_this_patchkits_guard(site: Path) -> bool:
    """An installed guard module that is not this patchkit's: the commands cannot tell what it
    refuses, so they fail as if it refused (and its fix replaces it). An older build's as it wrote
    it, of this build's checks (GUARD_FORMAT), refuses what this one does."""
    from importlib import resources

    module = site / "patchkit_guard.py"
    own = resources.files("patchkit._target").joinpath("guard.py").read_bytes()
    declared = any(
        "patchkit_guard:check" in p.read_text() for p in site.glob("patchkit_guard-*.dist-info/entry_points.txt")
    )
    if not (declared and module.exists()) or module.read_bytes() == own:
        return False
    return not (_record_holds_module(site) and _format(module.read_bytes()) == _format(own))


def _format(module: bytes) -> bytes | None:
    found = re.search(rb"^GUARD_FORMAT = ([0-9]+)$", module, re.MULTILINE)
    return found.group(1) if found else None


def _record_holds_module(site: Path) -> bool:
    """An older build's guard as it wrote it: its RECORD (and the tree's record, where one is left)
    hold its module's bytes."""
    record = site / INFO / "RECORD"
    data = (site / "patchkit_guard.py").read_bytes()
    state = site / ".patchkit/state.json"
    recorded = json.loads(state.read_text()).get("guard", {}) if state.exists() else {}
    held = record.exists() and _record_line("patchkit_guard.py", data) in record.read_text().splitlines()
    return (
        held and recorded.get("patchkit_guard.py", hashlib.sha256(data).hexdigest()) == hashlib.sha256(data).hexdigest()
    )


def _fails_another_user(site: Path, guard) -> bool:
    """The guard refuses a launch by another user, or does not load for them where it loads for the
    owner (a launch unguarded while status says guarded)."""
    other = load_plugins_as_another_user(site)
    if other is None:
        return False
    return other.returncode != 0 or ("patchkit_guard" in guard.stdout and "patchkit_guard" not in other.stdout)


def _fixes(status_json: dict) -> list[list[str]]:
    """The commands `status` names as the fix (`patchkit X`, in order); else apply. `list` and a
    maintainer's `port` are named beside a fix as where to look, and act on no tree: not steps of it."""
    guard = status_json.get("guard") or {}
    named = re.findall(r"`patchkit ([^`]*)`", guard.get("fix") or status_json.get("hint") or "")
    steps = [command.split() for command in named if command.split()[0] not in ("list", "port")]
    return steps or [["apply"]]


def _repaired_by_hand(tree: Tree, status: subprocess.CompletedProcess) -> None:
    """status fails with the repair (the symlink replaced by a copy), as the other commands and the
    guard do; once made, each passes."""
    said = {command: tree.launch(command).returncode for command in ("preflight", "run")}
    said.update(status=status.returncode, verify=tree.cli("verify", "--no-import").returncode)
    assert said == {"status": 1, "verify": 1, "preflight": 1, "run": 1}, said
    fix = json.loads(status.stdout)["guard"]["fix"]
    link = next(p for p in (tree.site / SPEC, (tree.site / SPEC).parent) if p.is_symlink())
    assert fix.startswith(f"replace the symlink {link} with a "), fix
    copy = link.resolve()
    link.unlink()
    (shutil.copytree if copy.is_dir() else shutil.copy2)(copy, link)
    assert load_plugins_like_vllm(tree.site).returncode == 0
    assert [tree.cli("status").returncode, tree.launch("run").returncode] == [0, 0]


@pytest.mark.parametrize("build", CATALOGUE, ids=lambda build: build.__name__)
def test_the_guard_refuses_exactly_when_the_commands_fail_and_the_named_fix_clears_it(open_tmp_path, build):
    tree = _tree(open_tmp_path)  # another user loads the guard too
    build(tree)
    guard = load_plugins_like_vllm(tree.site)
    refuses = guard.returncode != 0 or _not_this_patchkits_guard(tree.site) or _fails_another_user(tree.site, guard)
    status = tree.cli("status", "--format", "json")
    if build in SYMLINKED + REFUSED_RECORDS:  # a tree no command writes to (exit 2, a hand repair): the guard refuses
        assert status.returncode == 2 and refuses, (status.stdout, guard.stderr[-600:])
        launched = {command: tree.launch(command) for command in ("preflight", "run")}
        assert all(done.returncode != 0 for done in launched.values()), {
            c: d.stdout + d.stderr for c, d in launched.items()
        }
        return
    assert status.returncode in (0, 1, 3), status.stdout + status.stderr
    if build in RECORDED_SYMLINKS:
        _repaired_by_hand(tree, status)
        return
    said = {
        "status": status.returncode,
        "verify": tree.cli("verify", "--no-import").returncode,
        "preflight": tree.launch("preflight").returncode,
        "run": tree.launch("run").returncode,
    }
    failing = {command for command, code in said.items() if code != 0}
    # a launch of a tree the series is not applied to fails preflight and run, guard or not
    assert failing == set(said) if refuses else not failing & {"status", "verify"}, (guard.stderr[-600:], said)
    for fix in _fixes(json.loads(status.stdout)):
        done = tree.cli(*fix)
        assert done.returncode in (0, 3), (fix, done.stdout + done.stderr)
    after = load_plugins_like_vllm(tree.site)
    assert after.returncode == 0, after.stderr[-600:]
    assert not _fails_another_user(tree.site, after), "another user's launch is still refused or unguarded"
    status = tree.cli("status")
    assert status.returncode in (0, 3), status.stdout + status.stderr  # 3: an uncovered vLLM, guard gone


@pytest.mark.parametrize(
    "build",
    [
        upgraded_to_covered,
        upgraded_to_upstream,
        patched_wheel_over_applied,
        record_names_another_version,
        added_a_file_by_an_older_patchkit,
        guarded_patched_wheel_then_stock,
        guarded_patched_wheel_then_upstream,
    ],
    ids=lambda build: build.__name__,
)
def test_run_apply_settles_a_tree_the_guard_refuses_and_launches(tmp_path, build):
    tree = _tree(tmp_path)
    build(tree)
    assert load_plugins_like_vllm(tree.site).returncode != 0
    launch = ("--", str(tree.bin / "vllm"), "serve", str(tree.model))
    done = run_cli("run", "--apply", "--target", tree.site, "--patches", tree.library, *launch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert load_plugins_like_vllm(tree.site).returncode == 0


def test_a_tree_an_older_patchkits_patch_record_launched_launches_after_an_apply(tmp_path):
    """The apply that updates an older guard (which had no rule for an unmarked --patch record) marks
    a record that breaks no set held: a tree that launched before it launches after it."""
    tree = _tree(tmp_path)
    added_a_file_by_an_older_patchkit_under_its_guard(tree)
    assert load_plugins_like_vllm(tree.site).returncode == 0
    done = tree.cli("apply", "--no-import")
    assert done.returncode == 0 and "still refuses" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert load_plugins_like_vllm(tree.site).returncode == 0
    assert [tree.cli(command).returncode for command in ("status", "verify")] == [0, 0]
    assert (tree.site / ADDON).read_text() == "ADDON = 1\n"


@pytest.mark.parametrize("build", GUARDED_WHEEL_REPLACED, ids=lambda build: build.__name__)
def test_the_guard_installed_on_a_patched_wheel_refuses_once_pip_replaced_the_wheel(tmp_path, build):
    """The guard the user installed on a patched wheel is not inert once pip put another vLLM in
    its place: the patches it guarded are gone, and it says so."""
    tree = _tree(tmp_path)
    guarded_patched_wheel(tree)
    assert load_plugins_like_vllm(tree.site).returncode == 0
    build(tree)
    refused = load_plugins_like_vllm(tree.site)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert f"0.16.0+patchkit.{SET}" in refused.stderr, refused.stderr[-600:]


def test_an_upgrade_mixed_with_edits_is_told_to_reinstall_not_to_revert(tmp_path):
    """vLLM upgraded under the record and a file then edited: the record is not recognisably stale,
    and no original patchkit saved belongs on the new release; status says to reinstall it, then apply."""
    tree = _tree(tmp_path)
    upgraded_to_upstream(tree)
    with open(tree.site / SPEC, "a") as fh:
        fh.write("# tuned\n")
    status = tree.cli("status", "--format", "json")
    assert status.returncode == 1, status.stdout
    fix = json.loads(status.stdout)["guard"]["fix"]
    assert "pip install --force-reinstall --no-deps vllm==VERSION" in fix and "revert" not in fix
    pip_install(tree.site, "0.18.0", stock_files("0.18.0"))  # the reinstall
    assert tree.cli("apply").returncode == 0
    assert load_plugins_like_vllm(tree.site).returncode == 0


def test_a_patched_wheel_over_another_releases_record_is_stale_and_revert_keeps_that_release_out(tmp_path):
    """The record of 0.17.0 under a patched 0.16.0 wheel: status says stale (not "edited"), and
    neither apply nor revert writes a 0.17.0 original onto the 0.16.0 files."""
    tree = _tree(tmp_path)
    patched_wheel_over_another_release(tree)
    wheel_files = {path: (tree.site / path).read_text() for path in (SPEC, MODEL)}
    status = tree.cli("status", "--format", "json")
    assert status.returncode == 0 and "stale" in status.stdout and "edited" not in status.stdout, status.stdout
    reverted = tree.cli("revert")
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert {path: (tree.site / path).read_text() for path in (SPEC, MODEL)} == stock_files("0.16.0")
    assert not tree.state()["entries"]
    patched_wheel_over_another_release(_tree(tmp_path / "again"))
    again = tmp_path / "again/site"
    applied = run_cli_writing("apply", "--no-import", "--target", again, "--patches", tmp_path / "again/lib")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert {path: (again / path).read_text() for path in (SPEC, MODEL)} == wheel_files


@pytest.mark.parametrize(
    "build",
    [
        upgraded_to_a_release_without_a_patched_file,
        downgraded_to_a_release_without_a_patched_file,
        added_a_file_then_upgraded,
        added_a_file_then_upgraded_keeping_it,
    ],
    ids=lambda build: build.__name__,
)
def test_a_record_pip_replaced_the_release_of_is_stale_and_apply_or_revert_drops_it(tmp_path, build):
    """A record whose files pip's install of another release accounts for (stock, or gone and not
    shipped; a file patchkit only created says nothing) is stale: apply and revert drop it, write
    none of the other release's originals, and the guard then lets vLLM launch."""
    for command in ("apply", "revert"):
        tree = _tree(tmp_path / command)
        build(tree)
        before = {p.relative_to(tree.site).as_posix(): p.read_bytes() for p in (tree.site / "vllm").rglob("*.py")}
        status = tree.cli("status", "--format", "json")
        assert "stale" in status.stdout or status.returncode == 3, status.stdout  # 3: a release no set covers
        done = tree.cli(command, *(["--no-import"] if command == "apply" else []))
        if done.returncode == 3 and command == "apply":  # a release no set covers: status names revert
            continue
        assert done.returncode == 0, done.stdout + done.stderr
        # a revert that leaves nothing recorded removes .patchkit/ (issue 22 item 8): no entries
        entries = tree.state()["entries"] if (tree.site / ".patchkit/state.json").exists() else []
        assert not any(e["vllm_version"] == "0.16.0" for e in entries)
        if SPEC not in before:
            assert not (tree.site / SPEC).exists()  # the 0.16.0 original is not put back
        assert load_plugins_like_vllm(tree.site).returncode == 0


def test_revert_force_never_writes_another_releases_originals(tmp_path):
    """pip installed 0.17.0 under the 0.16.0 record and a file was then edited: not stale, and
    `revert --force` refuses to put 0.16.0's original over 0.17.0 (it names the reinstall)."""
    tree = _tree(tmp_path)
    upgraded_to_covered(tree)
    with open(tree.site / SPEC, "a") as fh:
        fh.write("# tuned\n")
    before = {path: (tree.site / path).read_text() for path in (SPEC, MODEL)}
    for force in ([], ["--force"]):
        done = tree.cli("revert", *force)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "vllm==0.17.0" in done.stdout + done.stderr
        assert {path: (tree.site / path).read_text() for path in (SPEC, MODEL)} == before


def test_an_older_patchkits_recorded_guard_is_a_note_that_apply_updates(tmp_path):
    """The guard an older patchkit installed and recorded (its own module bytes and dist-info): this
    patchkit's check of the same record stands for it, so status passes, with a note naming apply,
    which updates it. (A module not as recorded stays a failure: the catalogue's edited guards.)"""
    tree = _tree(tmp_path)
    _applied(tree)
    older = _older_guard_installed(tree)
    status = tree.cli("status", "--format", "json")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "patchkit apply" in " ".join(json.loads(status.stdout)["guard_notes"])
    assert tree.cli("apply", "--no-import").returncode == 0
    assert not json.loads(tree.cli("status", "--format", "json").stdout)["guard_notes"]
    assert (tree.site / INFO).is_dir() and not (tree.site / older).exists()


OLDER_GUARD = "patchkit_guard-0.0.9.dist-info"


def _older_guard_installed(tree: Tree) -> str:
    """The applied tree's guard made an older patchkit's, recorded as that patchkit recorded it (its
    module's bytes and its own dist-info): the state of every tree after a patchkit upgrade."""
    module = tree.site / "patchkit_guard.py"
    module.write_bytes(module.read_bytes().replace(b"MAX_FILE_BYTES = 64", b"MAX_FILE_BYTES = 32"))
    (tree.site / INFO).rename(tree.site / OLDER_GUARD)
    metadata = tree.site / OLDER_GUARD / "METADATA"
    metadata.write_text(metadata.read_text().replace(f"Version: {GUARD_VERSION}", "Version: 0.0.9"))
    record = tree.site / OLDER_GUARD / "RECORD"  # as that patchkit wrote it: its own dist-info's rows
    record.write_text(record.read_text().replace(INFO, OLDER_GUARD))
    state = tree.state()
    files = [module, *(tree.site / OLDER_GUARD).iterdir()]
    state["guard"] = {p.relative_to(tree.site).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    tree.write_state(state)
    assert load_plugins_like_vllm(tree.site).returncode == 0
    return OLDER_GUARD


def test_an_apply_killed_replacing_an_older_guard_is_rolled_back_to_that_guard(tmp_path):
    """The first apply after a patchkit upgrade replaces the tree's guard. SIGKILLed at each step of it, the
    next command's recovery puts the older guard back, byte for byte, as every other original: the journal
    is this user's own (its sealed marker covers it), not one that may choose what the guard becomes."""
    tree = _tree(tmp_path)
    _applied(tree)
    _older_guard_installed(tree)
    guard_files = sorted(tree.state()["guard"])
    before = {path: (tree.site / path).read_bytes() for path in guard_files}
    origin = tmp_path / "origin"
    shutil.copytree(tree.site, origin, symlinks=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHKIT_FAULT")} | {"PATCHKIT_FAULT_MODE": "kill"}
    killed_after_the_guard = 0
    for step in sweep_trials(range(1, 200)):
        shutil.rmtree(tree.site)
        shutil.copytree(origin, tree.site, symlinks=True)
        apply = run_cli("apply", "--no-import", "--target", tree.site, "--patches", tree.library,
                        env={**env, "PATCHKIT_FAULT_AFTER": str(step)})  # fmt: skip
        if apply.returncode == 0:
            break
        assert apply.returncode == -9, apply.stdout + apply.stderr
        killed_after_the_guard += (tree.site / "patchkit_guard.py").read_bytes() != before["patchkit_guard.py"]
        status = tree.cli("status")
        said = status.stdout + status.stderr
        assert {path: (tree.site / path).read_bytes() for path in guard_files} == before, (step, said)
        assert not (tree.site / INFO).exists(), (step, said)  # this patchkit's dist-info, which it created
        assert status.returncode == 0 and load_plugins_like_vllm(tree.site).returncode == 0, (step, said)
    else:
        pytest.fail("the apply never finished")
    assert killed_after_the_guard >= 2, killed_after_the_guard  # the steps that matter were reached


def test_no_guard_removes_this_patchkits_guard_after_the_record_was_removed(tmp_path):
    """state.json removed by hand (the damaged-record hint): `apply --no-guard` still knows this
    patchkit's guard by its bytes and removes it, as --no-guard promises."""
    tree = _tree(tmp_path)
    _applied(tree)
    (tree.site / ".patchkit/state.json").unlink()
    done = tree.cli("apply", "--no-import", "--no-guard")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tree.site / "patchkit_guard.py").exists() and not (tree.site / INFO).exists()
    assert tree.state()["no_guard"] is True


def test_status_names_the_guards_refusal_and_its_fix_once(tmp_path):
    tree = _tree(tmp_path)
    upgraded_to_upstream(tree)
    status = tree.cli("status")
    assert status.returncode == 1
    fix = json.loads(tree.cli("status", "--format", "json").stdout)["guard"]["fix"]
    assert (status.stdout + status.stderr).count(fix) == 1, status.stdout + status.stderr


def test_a_record_an_older_patchkit_left_0600_fails_status_and_apply_opens_it(tmp_path):
    """status names apply for the record other users cannot read; apply makes it readable and says
    so, never "nothing to do"."""
    tree = _tree(tmp_path)
    record_closed_by_an_older_patchkit(tree)
    status = tree.cli("status", "--format", "json")
    assert status.returncode == 1, status.stdout
    said = json.loads(status.stdout)["guard"]
    assert any(".patchkit/state.json (0600)" in problem for problem in said["refuses"]), said
    assert "patchkit apply" in said["fix"] and "readable" in said["fix"], said
    done = tree.cli("apply")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing to do" not in done.stdout and "readable" in done.stdout + done.stderr, done.stdout
    assert (tree.site / ".patchkit/state.json").stat().st_mode & 0o777 == 0o644
    assert (tree.site / ".patchkit").stat().st_mode & 0o777 == 0o755
    assert tree.cli("status").returncode == 0


def test_a_local_edit_inside_a_hunk_of_a_tree_never_applied_fails_the_commands_not_the_guard(tmp_path):
    """The state `conflict` (new-user 20, 1): nothing applied or recorded, so no guard refuses a
    launch, but the series does not apply: status and verify fail, naming it, and so do preflight
    and run (the launch needs the set). The stock file back, the fix named, apply settles it."""
    tree = _tree(tmp_path)
    edited = stock_files("0.16.0")[SPEC].replace('"qwen",\n', '"qwen", "mymodel",\n')
    (tree.site / SPEC).write_text(edited)
    assert load_plugins_like_vllm(tree.site).returncode == 0
    status = tree.cli("status", "--format", "json")
    assert status.returncode == 1 and json.loads(status.stdout)["state"] == "conflict", status.stdout
    said = {
        "verify": tree.cli("verify", "--no-import"),
        "preflight": tree.launch("preflight"),
        "run": tree.launch("run"),
    }
    assert {command: done.returncode for command, done in said.items()} == dict.fromkeys(said, 1), said
    assert f"{SPEC} differs from stock vLLM 0.16.0" in " ".join(said["verify"].stdout.split())
    fix = " ".join(tree.cli("status").stdout.split())
    assert "put the stock file back, apply: `cp -p" in fix and " && patchkit apply" in fix, fix
    (tree.site / SPEC).write_text(stock_files("0.16.0")[SPEC])
    assert tree.cli("apply", "--no-import").returncode == 0
    assert load_plugins_like_vllm(tree.site).returncode == 0 and tree.cli("status").returncode == 0


def test_an_older_builds_guard_is_a_note_and_apply_updates_it(tmp_path):
    """Review 13 M5: two builds of one version write different guard modules; the older one's guard,
    as it wrote it, is no refusal (status, preflight and run pass): a note names `apply`, which
    puts this build's guard in."""
    tree = _tree(tmp_path)
    guard_of_an_older_build(tree)
    status = tree.cli("status")
    assert status.returncode == 0, status.stdout + status.stderr
    said = " ".join((status.stdout + status.stderr).split())
    assert f"the launch guard is an older build of patchkit {__version__}'s" in said and "refuses" not in said, said
    assert tree.launch("preflight").returncode == 0 and tree.launch("run").returncode == 0
    assert tree.cli("apply", "--no-import").returncode == 0
    assert _record_holds_module(tree.site) and not _not_this_patchkits_guard(tree.site)
    assert "older build" not in tree.cli("status").stdout


def test_an_edited_guard_whose_record_was_rewritten_fails_without_saying_it_refuses(tmp_path):
    """The other side: the module edited and the tree's record rewritten to match, but not the
    guard's own RECORD: not a guard as a patchkit wrote it. A failure, said as what it is."""
    tree = _tree(tmp_path)
    _applied(tree)
    module = tree.site / "patchkit_guard.py"
    module.write_bytes(module.read_bytes() + b"\n# edited\n")
    state = tree.state()
    state["guard"]["patchkit_guard.py"] = sha(module.read_text())
    tree.write_state(state)
    for command in ("status", "verify"):
        done = tree.cli(command, *(["--no-import"] if command == "verify" else []))
        assert done.returncode == 1, done.stdout + done.stderr
        said = " ".join((done.stdout + done.stderr).split())
        assert "the installed launch guard is not this patchkit's" in said and "refuses the tree" not in said, said


def _symlink_out(tree: Tree, rel: str) -> Path:
    """Move site/rel out of the tree and leave a symlink to it in its place; the moved copy."""
    moved = tree.site.parent / "elsewhere" / rel.replace("/", "_")
    moved.parent.mkdir(exist_ok=True)
    (tree.site / rel).rename(moved)
    (tree.site / rel).symlink_to(moved)
    return moved


@pytest.mark.parametrize("rel", [SPEC, "vllm/config"], ids=["file", "directory"])
def test_a_patched_file_reached_through_a_symlink_gets_the_fix_that_replaces_it(tmp_path, rel):
    """Review 13 M2: preflight and run named `apply` for a recorded file reached through a symlink,
    and apply refuses to write through one (exit 2). The fix is the hand repair status names: a real
    file (or directory) in the symlink's place; following it, the launch passes."""
    tree = _tree(tmp_path)
    _applied(tree)
    moved = _symlink_out(tree, rel)
    what = "a real directory holding a copy of what it points to" if rel == "vllm/config" else "a copy of the file"
    for command in ("preflight", "run"):
        done = tree.launch(command)
        said = " ".join((done.stdout + done.stderr).split())
        assert done.returncode == 1 and f"replace the symlink {tree.site / rel} with {what}" in said, said
        assert "patchkit apply" not in said, said
    status = tree.cli("status")  # the guard's refusal with the repair (where the symlink leads is never resolved)
    assert status.returncode == 1 and f"replace the symlink {tree.site / rel} with {what}" in " ".join(
        status.stdout.split()
    )
    (tree.site / rel).unlink()
    if rel == "vllm/config":
        shutil.copytree(moved, tree.site / rel)
    else:
        shutil.copy2(moved, tree.site / rel)
    assert tree.cli("status").returncode == 0 and tree.launch("preflight").returncode == 0


def test_several_vllm_dist_infos_keep_the_guard_and_status_never_calls_the_tree_unguarded_fine(tmp_path):
    """Review 12b L4: on a tree of two vllm-*.dist-info, `apply --vllm-version X` removed the guard
    (it would stop every launch) and `status --vllm-version X` then said applied, exit 0, no word of
    it; the guard said "vLLM None is installed". apply refuses and keeps the guard; status names the
    fix; a tree left unguarded so is said to launch unchecked."""
    tree = _tree(tmp_path)
    _applied(tree)
    stale = tree.site / "vllm-0.15.2.dist-info"
    shutil.copytree(tree.site / "vllm-0.16.0.dist-info", stale)
    (stale / "METADATA").write_text((stale / "METADATA").read_text().replace("0.16.0", "0.15.2"))
    record, guard = tree.state(), (tree.site / "patchkit_guard.py").read_bytes()

    applied = tree.cli("apply", "--vllm-version", "0.16.0", "--no-import")
    assert applied.returncode == 4 and "nothing was written" in applied.stderr, applied.stdout + applied.stderr
    assert tree.state() == record and (tree.site / "patchkit_guard.py").read_bytes() == guard
    refused = load_plugins_like_vllm(tree.site)
    assert refused.returncode != 0 and "vLLM None" not in refused.stderr
    assert "vllm-0.15.2.dist-info, vllm-0.16.0.dist-info" in refused.stderr
    status = tree.cli("status", "--vllm-version", "0.16.0")
    assert status.returncode == 1 and "remove the stale vllm-*.dist-info directories" in status.stdout, status.stdout

    shutil.rmtree(tree.site / dist_info())  # as an older patchkit's apply left it
    (tree.site / "patchkit_guard.py").unlink()
    tree.write_state({**record, "guard": {}})
    status = tree.cli("status", "--vllm-version", "0.16.0")
    assert "launches this tree unchecked" in status.stdout + status.stderr, status.stdout + status.stderr
    assert "remove the stale vllm-*.dist-info directories" in status.stdout + status.stderr

    shutil.rmtree(stale)  # the fix named, then apply
    assert tree.cli("apply", "--no-import").returncode == 0
    assert load_plugins_like_vllm(tree.site).returncode == 0 and (tree.site / "patchkit_guard.py").exists()
    assert tree.cli("status").returncode == 0


def test_a_guard_of_other_checks_fails_status_until_apply_updates_it(tmp_path):
    """guard27's gap: an older build's guard as it wrote it, whose checks differ from this build's
    (its GUARD_FORMAT), may refuse more or less: status cannot stand for it, so it fails, naming
    `apply`, which updates it (no --guard: it is a patchkit's guard, unedited)."""
    tree = _tree(tmp_path)
    guard_of_other_checks(tree)
    status = tree.cli("status")
    assert status.returncode == 1, status.stdout + status.stderr
    assert "is an older patchkit's launch guard (patchkit" in status.stdout
    # review 16 L3: said as what it is, an upgrade of patchkit, in the guard line and the verdict
    assert "guard: the launch guard is from before an upgrade of patchkit: " in status.stdout, status.stdout
    assert "applied; the launch guard is from before an upgrade of patchkit" in status.stdout, status.stdout
    assert "fix: run `patchkit apply " in status.stdout and "--guard" not in status.stdout
    dry = tree.cli("apply", "--no-import", "--dry-run")
    assert "launch guard would be updated to this patchkit's (it was" in dry.stdout, dry.stdout
    assert "still refuses" not in dry.stdout + dry.stderr, dry.stdout + dry.stderr
    done = tree.cli("apply", "--no-import")
    # review 16 L2: the apply says it updated the guard, not "already applied" alone
    assert done.returncode == 0 and "already applied; launch guard updated to this patchkit's (it was" in done.stdout
    assert (tree.site / "patchkit_guard.py").read_bytes() == (
        Path(__file__).parents[1] / "patchkit/_target/guard.py"
    ).read_bytes()
    assert tree.cli("status").returncode == 0


def test_a_newer_builds_guard_is_called_newer_and_apply_says_it_replaced_it(tmp_path):
    """Review 16 L4: a guard of a higher check format (a newer build applied the tree, this older
    one runs now) was called "an older patchkit's" and apply said it "updates" it."""
    tree = _tree(tmp_path)
    _applied(tree)
    _rebuilt_guard(tree, lambda module: re.sub(rb"\nGUARD_FORMAT = [0-9]+\n", b"\nGUARD_FORMAT = 999\n", module))
    status = tree.cli("status")
    said = status.stdout + status.stderr
    assert status.returncode == 1 and "older" not in said, said
    assert "guard: the launch guard is a newer patchkit build's: " in said and "check format 999" in said, said
    assert "fix: use the newer patchkit that applied this tree, or run `patchkit apply " in said, said
    done = tree.cli("apply", "--no-import")
    assert done.returncode == 0 and "launch guard replaced with this patchkit's, of older checks" in done.stdout
    assert tree.cli("status").returncode == 0


def test_an_older_builds_guard_whose_record_was_lost_is_known_by_its_record_and_apply_updates_it(tmp_path):
    """guard27's other gap: .patchkit/ lost, an older patchkit's guard (its own version's dist-info,
    its RECORD true) is a patchkit's guard, not a user's: status passes with the note, and apply
    updates it, removing the older dist-info, without --guard."""
    tree = _tree(tmp_path)
    _applied(tree)
    older = "patchkit_guard-0.0.9.dist-info"
    (tree.site / INFO).rename(tree.site / older)
    metadata = tree.site / older / "METADATA"
    metadata.write_text(metadata.read_text().replace(f"Version: {GUARD_VERSION}", "Version: 0.0.9"))
    module = tree.site / "patchkit_guard.py"
    module.write_bytes(module.read_bytes() + b"\n# patchkit 0.0.9\n")
    rows = [_record_line(p.relative_to(tree.site).as_posix(), p.read_bytes()) for p in (module, metadata)]
    rows += [
        _record_line(f"{older}/{name}", (tree.site / older / name).read_bytes())
        for name in ("INSTALLER", "entry_points.txt")
    ]
    (tree.site / older / "RECORD").write_text("\n".join([*rows, f"{older}/RECORD,,"]) + "\n")
    shutil.rmtree(tree.site / ".patchkit")
    status = tree.cli("status", "--format", "json")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "not this patchkit's" not in status.stdout
    done = tree.cli("apply", "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tree.site / older).exists() and (tree.site / INFO).is_dir()
    assert load_plugins_like_vllm(tree.site).returncode == 0
    status = tree.cli("status", "--format", "json")
    assert status.returncode == 0 and not json.loads(status.stdout)["guard_notes"], status.stdout


def test_apply_fixes_the_stale_bytecode_the_guard_refuses_and_says_no_refusal_is_left(tmp_path):
    """An applied tree whose only fault is a stale unchecked-hash .pyc: apply (and its dry run) has
    nothing to write but recompiles it, so neither says the guard still refuses the tree."""
    tree = _tree(tmp_path)
    stock_bytecode_beside_the_patched_file(tree)
    assert load_plugins_like_vllm(tree.site).returncode != 0
    for args in (("--dry-run",), ()):
        done = tree.cli("apply", "--no-import", *args)
        assert done.returncode == 0 and "still refuses" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert load_plugins_like_vllm(tree.site).returncode == 0


def test_stale_bytecode_through_a_symlinked_pycache_fails_and_an_overfull_pycache_names_a_fix_that_works(tmp_path):
    """Review 16 L5: a symlinked __pycache__ holding a stale unchecked-hash .pyc was passed by the
    guard and status (never followed), while Python follows it and the patch never runs (gate29: a
    symlinked __pycache__ is refused whatever it holds, and never followed: Python makes none). L1: a
    __pycache__ of over 65,536 entries was refused with `apply` as the fix, which leaves it. Each
    fails with a fix that clears it (apply writes no bytecode through a symlink, nor empties a
    directory it did not write)."""
    tree = _tree(tmp_path)
    _applied(tree)
    cache = _unchecked_pyc(tree, stock_files("0.16.0")[SPEC]).parent
    shutil.move(cache, tmp_path / "elsewhere")
    cache.symlink_to(tmp_path / "elsewhere")
    for _ in range(2):
        status = tree.cli("status")
        said = " ".join(status.stdout.split())
        assert status.returncode == 1 and "vllm/config/__pycache__ is a symlink, which Python never writes" in said
        assert f"fix: run `rm -f -- {cache}` (Python then compiles the source), then run `patchkit status" in said
        assert load_plugins_like_vllm(tree.site).returncode != 0
        assert tree.cli("apply", "--no-import").returncode in (0, 1)  # not the fix: it leaves the link
    cache.unlink()
    assert tree.cli("status").returncode == 0 and load_plugins_like_vllm(tree.site).returncode == 0

    cache.mkdir()
    for index in range(65_537):  # the empty files touch() makes, for a third of its CPU
        os.mknod(f"{cache}/x{index}")
    status = tree.cli("status")
    said = " ".join(status.stdout.split())
    assert status.returncode == 1 and f"{cache} holds more than 65536 files" in said, said
    assert f"fix: remove {cache} (Python writes its bytecode there again), then run `patchkit status" in said, said
    shutil.rmtree(cache)
    assert tree.cli("status").returncode == 0 and load_plugins_like_vllm(tree.site).returncode == 0


# -- launches under a pycache prefix (PYTHONPYCACHEPREFIX, -X pycache_prefix): Python reads a source's
# bytecode there alone, never __pycache__; each state is judged with the prefix in patchkit's own
# environment (the launch inherits it) and with the prefix set by the launch alone (`env VAR=...`)


def _prefix(tree: Tree) -> Path:
    prefix = tree.site.parent / "pfx"
    return prefix if prefix.exists() else warm_pycache_prefix(prefix)


def _prefixed_pyc(tree: Tree, rel: str, source: str) -> Path:
    """An unchecked-hash .pyc of `source` where Python under the prefix reads `rel`'s bytecode."""
    mirror = _prefix(tree) / str(tree.site.resolve() / rel).lstrip("/")
    mirror.parent.mkdir(parents=True, exist_ok=True)
    scratch = tree.site.parent / "scratch.py"
    scratch.write_text(source)
    cfile = mirror.parent / f"{mirror.stem}.{sys.implementation.cache_tag}.pyc"
    mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
    return Path(py_compile.compile(str(scratch), cfile=str(cfile), doraise=True, invalidation_mode=mode))


def _prefixed_env(tree: Tree) -> dict[str, str]:
    return {"PYTHONPYCACHEPREFIX": str(_prefix(tree))}


def _model_patched_ad_hoc(tree: Tree, env: dict[str, str] | None = None) -> None:
    """A --patch apply changing MODEL: a record beside the set's, which the guard judges too."""
    addon = tree.site.parent / "model.patch"
    addon.write_bytes(make_patch(tree.site.parent, tree.site, {MODEL: (tree.site / MODEL).read_text() + "TUNED = 1\n"}))
    done = run_cli_writing("apply", "--no-import", "--target", tree.site, "--patch", addon, env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def prefix_holds_stock_bytecode_of_the_sets_file(tree: Tree) -> None:
    _applied(tree)
    _prefixed_pyc(tree, SPEC, stock_files("0.16.0")[SPEC])


def prefix_holds_stock_bytecode_of_another_records_file(tree: Tree) -> None:
    """The launch needs the set; the guard refuses for another record's file (an ad-hoc --patch's)."""
    _applied(tree)
    _model_patched_ad_hoc(tree)
    _prefixed_pyc(tree, MODEL, stock_files("0.16.0")[MODEL])


def prefix_holds_bytecode_of_the_patched_file(tree: Tree) -> None:
    _applied(tree)
    _prefixed_pyc(tree, SPEC, (tree.site / SPEC).read_text())


def pycache_holds_stock_bytecode_unread_under_the_prefix(tree: Tree) -> None:
    stock_bytecode_beside_the_patched_file(tree)


def prefix_held_stock_bytecode_before_apply(tree: Tree) -> None:
    """An image compiled vLLM under its prefix, then `apply` ran in that environment."""
    _prefixed_pyc(tree, SPEC, stock_files("0.16.0")[SPEC])
    done = run_cli_writing(
        "apply", "--no-import", "--target", tree.site, "--patches", tree.library, env=_prefixed_env(tree)
    )
    assert done.returncode == 0, done.stdout + done.stderr


def prefix_held_stock_bytecode_before_another_records_apply(tree: Tree) -> None:
    _applied(tree)
    _prefixed_pyc(tree, MODEL, stock_files("0.16.0")[MODEL])
    _model_patched_ad_hoc(tree, _prefixed_env(tree))


PREFIXED_LAUNCHES: list[Callable[[Tree], None]] = [
    applied,
    prefix_holds_stock_bytecode_of_the_sets_file,
    prefix_holds_stock_bytecode_of_another_records_file,
    prefix_holds_bytecode_of_the_patched_file,
    pycache_holds_stock_bytecode_unread_under_the_prefix,
    prefix_held_stock_bytecode_before_apply,
    prefix_held_stock_bytecode_before_another_records_apply,
]


def _named_commands(text: str) -> list[list[str]]:
    """The commands a fix names in backquotes, as words."""
    return [shlex.split(found) for found in re.findall(r"`([^`]*)`", " ".join(text.split()))]


@pytest.mark.parametrize("build", PREFIXED_LAUNCHES, ids=lambda build: build.__name__)
def test_under_a_pycache_prefix_the_guard_refuses_exactly_when_the_commands_fail_and_the_fix_clears_it(tmp_path, build):
    tree = _tree(tmp_path)
    build(tree)
    env = _prefixed_env(tree)
    refuses = load_plugins_like_vllm(tree.site, **env).returncode != 0
    status = run_cli_read_only("status", "--format", "json", "--target", tree.site, "--patches", tree.library, env=env)
    assert status.returncode in (0, 1), status.stdout + status.stderr
    own = ("--target", tree.site, "--patches", tree.library)
    launch = (str(tree.bin / "vllm"), "serve", str(tree.model))
    prefixed = ("env", *(f"{k}={v}" for k, v in env.items()), *launch)
    said = {
        "status": status.returncode,
        "preflight": run_cli_read_only("preflight", *own, "--no-import", "--", *launch, env=env).returncode,
        "preflight, the prefix the launch's own": run_cli_read_only(
            "preflight", *own, "--no-import", "--", *prefixed
        ).returncode,
        "run": run_cli("run", *own, "--", *launch, env=env).returncode,
        "run, the prefix the launch's own": run_cli("run", *own, "--", *prefixed).returncode,
    }
    failing = {command for command, code in said.items() if code != 0}
    assert failing == (set(said) if refuses else set()), (refuses, said, status.stdout)
    if build in (prefix_held_stock_bytecode_before_apply, prefix_held_stock_bytecode_before_another_records_apply):
        assert not refuses  # apply in that environment removed the .pyc its write made stale
    if build is pycache_holds_stock_bytecode_unread_under_the_prefix:
        assert not refuses  # Python under a prefix never reads __pycache__: the patched source runs
    for words in _named_commands((json.loads(status.stdout).get("guard") or {}).get("fix") or ""):
        done = run_cli_judged(*words[1:], env=env) if words[0] == "patchkit" else subprocess.run(words, check=False)
        assert done.returncode == 0, words
    assert load_plugins_like_vllm(tree.site, **env).returncode == 0
    assert run_cli("run", *own, "--", *prefixed).returncode == 0


PLANTED_PROVENANCE = [
    provenance_planted_in_the_applied_stock_install,
    guarded_patched_wheel_its_record_relabelled,
    guarded_patched_wheel_its_record_unlike_pips,
]


@pytest.mark.parametrize("build", PLANTED_PROVENANCE, ids=lambda build: build.__name__)
def test_the_guard_judges_a_wheels_provenance_as_status_does(tmp_path, build):
    """A provenance no patched wheel's install put there (the dist-info unlabelled or labelled
    otherwise, its RECORD unlike it): status refuses it (exit 2, its fix named), and so does the
    guard, in the same words, pointing to status; it let vLLM launch before."""
    from patchkit._target import guard

    tree = _tree(tmp_path)
    build(tree)
    status = tree.cli("status")
    assert status.returncode == 2 and "not believed" in status.stderr, status.stderr
    problems = guard.find_problems(str(tree.site))
    assert len(problems) == 1 and problems[0].endswith("not believed"), problems
    said = status.stderr.split("error: ", 1)[-1].split(": not believed")[0].split("patchkit.json ", 1)[1]
    assert said in problems[0], (said, problems)
    refused = load_plugins_like_vllm(tree.site)
    assert refused.returncode != 0 and f"patchkit status --target {tree.site}" in refused.stderr


VERSIONS = [
    "0.16.0",
    "0.16",
    "0.16.0.0",
    "v0.16.0",
    "1!0.16.0",
    "0.16.0rc1",
    "0.16.0-RC.1",
    "0.16.0c1",
    "0.16.0.post1",
    "0.16.0-1",
    "0.16.0.dev0",
    "0.16.0dev",
    "0.16.0a0.post0.dev0",
    "0.16.0+cu129",
    "0.16.0+CU_129",
    "0.16.0+cu129.01",
    "0.16.0+cu129.1",
    "0.16.0.x",
    "0.16.0+",
    "",
    " 0.16.0 ",
]
LABELS = ["patchkit.eagle3", "corp1", "Corp-1", "patchkit_x.01", "", "a+b", "..", "patchkit.eagle3.deepseek.tool.calls"]


def test_the_guards_version_rule_is_packagings():
    """The guard (stdlib only) tells versions equal exactly when packaging.version does, and names
    the version `patchkit wheel` labels a release with as installed_wheel._labelled does."""
    from packaging.version import InvalidVersion, Version

    from patchkit._target import guard
    from patchkit.distinfo.installed_wheel import _labelled

    def parsed(text):
        try:
            return Version(text)
        except InvalidVersion:
            return None

    for a in VERSIONS:
        assert (guard._version_key(a) is None) == (parsed(a) is None), a
        for b in VERSIONS:
            if parsed(a) is not None and parsed(b) is not None:
                assert (guard._version_key(a) == guard._version_key(b)) == (parsed(a) == parsed(b)), (a, b)
        for label in LABELS:
            expected = _labelled(a, label) if parsed(a) is not None else None
            key = guard._labelled_key(a, label)
            assert (key is None) == (expected is None), (a, label)
            if expected is not None:
                assert key == guard._version_key(str(expected)), (a, label)


# -- the same property for a venv judged through its interpreter (--python): what its start-up does
# (a .pth line setting sys.pycache_prefix) and where its vllm/ really is (moved to another volume,
# a symlink in its place) are the launch's, and the guard's in it


@dataclass
class Venv:
    python: Path
    site: Path
    library: Path
    model: Path
    by: str = "--python"  # how the commands name it: --python, or --target its site-packages

    def own(self) -> tuple[object, ...]:
        return (self.by, self.python if self.by == "--python" else self.site, "--patches", self.library)

    def cli(self, *args: object):
        """status and verify through run_cli_read_only (in this process where a fork would serve them as the
        session: the venv's own start-up is its interpreter's, asked by the command), the others as processes."""
        return run_cli_judged(*args, *self.own())

    def launch(self, command: str):
        extra = ("--no-import",) if command == "preflight" else ()
        stand_in = str(self.python.parent / "vllm")
        return run_cli_judged(command, *self.own(), *extra, "--", stand_in, "serve", str(self.model))

    def guard(self) -> subprocess.CompletedProcess:
        """The guard as vLLM loads it, in the venv's own interpreter (its start-up, its .pth files)."""
        clean = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "PYTHONDONTWRITEBYTECODE")}
        command = [str(self.python), "-c", LOAD_LIKE_VLLM, str(self.site)]
        return subprocess.run(command, capture_output=True, text=True, env=clean, timeout=60, check=False)


def _venv(tmp_path: Path, by: str = "--python") -> Venv:
    tree = _tree(tmp_path)
    make_venv(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    site = purelib(python)
    pip_install(site, "0.16.0", stock_files("0.16.0"))
    (python.parent / "vllm").write_text("#!/bin/sh\nexit 0\n")
    (python.parent / "vllm").chmod(0o755)
    return Venv(python, site, tree.library, tree.model, by)


def _venv_applied(venv: Venv) -> None:
    done = venv.cli("apply", "--no-import")
    assert done.returncode == 0 and (venv.site / "patchkit_guard.py").exists(), done.stdout + done.stderr


def _move_vllm(venv: Venv) -> Path:
    """vllm/ moved to another volume, a symlink left in its place (`site-packages/vllm -> /data/vllm`)."""
    volume = venv.site.parents[3] / "volume"
    volume.mkdir()
    (venv.site / "vllm").rename(volume / "vllm")
    (venv.site / "vllm").symlink_to(volume / "vllm", target_is_directory=True)
    return volume / "vllm"


def venv_applied(venv: Venv) -> None:
    _venv_applied(venv)


def vllm_moved_to_another_volume(venv: Venv) -> None:
    _venv_applied(venv)
    _move_vllm(venv)


def vllm_moved_to_another_volume_then_edited(venv: Venv) -> None:
    _venv_applied(venv)
    with open(_move_vllm(venv) / "config/spec.py", "a") as fh:
        fh.write("# tuned\n")


def vllm_moved_to_another_volume_before_apply(venv: Venv) -> None:
    _move_vllm(venv)
    _venv_applied(venv)


def vllm_moved_then_applied_at_its_volume_and_at_its_site(venv: Venv) -> None:
    """An older patchkit applied the moved vllm/ as a tree of its own (its record beside it, no
    dist-info there, no guard); this one records the site and installs the guard there: the record
    left at the volume is no tree's the interpreter runs, for the guard as for the commands."""
    volume = _move_vllm(venv).parent
    done = run_cli_writing(
        "apply", "--no-import", "--target", volume, "--patches", venv.library, "--vllm-version", "0.16.0"
    )
    assert done.returncode == 0 and (volume / ".patchkit").is_dir(), done.stdout + done.stderr
    done = venv.cli("apply", "--no-import")
    assert done.returncode == 0 and (venv.site / "patchkit_guard.py").exists(), done.stdout + done.stderr


def _startup_prefix(venv: Venv) -> Path:
    """A .pth line that sets the pycache prefix at start-up, as an image's sitecustomize may."""
    prefix = venv.site.parents[3] / "pfx"
    (venv.site / "zz_prefix.pth").write_text(f"import sys; sys.pycache_prefix = {str(prefix)!r}\n")
    return prefix


def _prefixed_unchecked_pyc(venv: Venv, prefix: Path, source: str) -> Path:
    """An unchecked-hash .pyc of `source` where Python under `prefix` reads SPEC's bytecode: keyed by
    the path it imports SPEC by (the site's, through a moved vllm/'s symlink)."""
    mirror = prefix / str(venv.site / SPEC).lstrip("/")
    mirror.parent.mkdir(parents=True, exist_ok=True)
    scratch = venv.site.parents[3] / "scratch.py"
    scratch.write_text(source)
    cfile = mirror.parent / f"{mirror.stem}.{sys.implementation.cache_tag}.pyc"
    mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
    return Path(py_compile.compile(str(scratch), cfile=str(cfile), doraise=True, invalidation_mode=mode))


def startup_prefix_holds_stock_bytecode(venv: Venv) -> None:
    _venv_applied(venv)
    _prefixed_unchecked_pyc(venv, _startup_prefix(venv), stock_files("0.16.0")[SPEC])


def startup_prefix_holds_patched_bytecode(venv: Venv) -> None:
    _venv_applied(venv)
    _prefixed_unchecked_pyc(venv, _startup_prefix(venv), (venv.site / SPEC).read_text())


def sitecustomize_prefix_holds_stock_bytecode(venv: Venv) -> None:
    _venv_applied(venv)
    prefix = venv.site.parents[3] / "pfx"
    (venv.site / "sitecustomize.py").write_text(f"import sys\nsys.pycache_prefix = {str(prefix)!r}\n")
    _prefixed_unchecked_pyc(venv, prefix, stock_files("0.16.0")[SPEC])


def vllm_moved_and_startup_prefix_holds_stock_bytecode(venv: Venv) -> None:
    vllm_moved_to_another_volume(venv)
    _prefixed_unchecked_pyc(venv, _startup_prefix(venv), stock_files("0.16.0")[SPEC])


VENV_CATALOGUE: list[Callable[[Venv], None]] = [
    venv_applied,
    vllm_moved_to_another_volume,
    vllm_moved_to_another_volume_then_edited,
    vllm_moved_to_another_volume_before_apply,
    vllm_moved_then_applied_at_its_volume_and_at_its_site,
    startup_prefix_holds_stock_bytecode,
    startup_prefix_holds_patched_bytecode,
    sitecustomize_prefix_holds_stock_bytecode,
    vllm_moved_and_startup_prefix_holds_stock_bytecode,
]


@pytest.mark.parametrize("by", ["--python", "--target"])
@pytest.mark.parametrize("build", VENV_CATALOGUE, ids=lambda build: build.__name__)
def test_in_a_venv_the_guard_refuses_exactly_when_the_commands_fail_and_the_fix_clears_it(tmp_path, build, by):
    """--target names the venv's site-packages: its interpreter is asked too where its start-up code
    names pycache_prefix."""
    venv = _venv(tmp_path, by)
    build(venv)
    refuses = venv.guard().returncode != 0
    status = venv.cli("status", "--format", "json")
    assert status.returncode in (0, 1), status.stdout + status.stderr
    said = {
        "status": status.returncode,
        "verify": venv.cli("verify", "--no-import").returncode,
        "preflight": venv.launch("preflight").returncode,
        "run": venv.launch("run").returncode,
    }
    failing = {command for command, code in said.items() if code != 0}
    assert failing == (set(said) if refuses else set()), (refuses, said, status.stdout)
    report = json.loads(status.stdout)
    for words in _named_commands((report.get("guard") or {}).get("fix") or report.get("hint") or ""):
        done = run_cli_judged(*words[1:]) if words[0] == "patchkit" else subprocess.run(words, check=False)
        assert done.returncode == 0, (words, getattr(done, "stdout", ""))
    after = venv.guard()
    assert after.returncode == 0 and "patchkit_guard" in after.stdout, after.stderr[-600:]
    assert venv.cli("status").returncode == 0 and venv.launch("run").returncode == 0


def _prefix_from_a_variable(venv: Venv) -> Path:
    """A .pth line that sets the pycache prefix from a variable only the launch's `env` gives, holding
    the stock bytecode of the set's file."""
    _venv_applied(venv)
    (venv.site / "zz_myprefix.pth").write_text(
        "import os, sys; p = os.environ.get('MYPREFIX'); p and setattr(sys, 'pycache_prefix', p)\n"
    )
    prefix = venv.site.parents[3] / "pp8"
    _prefixed_unchecked_pyc(venv, prefix, stock_files("0.16.0")[SPEC])
    return prefix


def _launch_with(venv: Venv, command: str, *env_prefix: str, cwd: str | None = None):
    extra = ("--no-import",) if command == "preflight" else ()
    launch = ["env", *env_prefix, str(venv.python), "-m", "vllm.entrypoints.cli.main", "serve", str(venv.model)]
    return run_cli_judged(command, *venv.own(), *extra, "--", *launch, cwd=None if cwd is None else Path(cwd))


@pytest.mark.parametrize("by", ["--python", "--target"])
def test_a_startup_prefix_given_by_the_launchs_env_is_judged_as_the_guard_judges_it(tmp_path, by):
    """The start-up prefix is asked for in the launch's environment (its `env VAR=...`): there the
    guard refuses the stale bytecode, so preflight and run fail naming it."""
    venv = _venv(tmp_path, by)
    prefix = _prefix_from_a_variable(venv)
    guard = [str(venv.python), "-c", LOAD_LIKE_VLLM, str(venv.site)]
    clean = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "PYTHONDONTWRITEBYTECODE")}
    refused = subprocess.run(guard, capture_output=True, text=True, env={**clean, "MYPREFIX": str(prefix)}, check=False)
    assert refused.returncode != 0 and "pp8" in refused.stderr, refused.stderr[-600:]
    assert venv.cli("status").returncode == 0  # patchkit's own environment sets no prefix
    for command in ("preflight", "run"):
        done = _launch_with(venv, command, f"MYPREFIX={prefix}")
        assert done.returncode == 1 and "pp8" in done.stdout + done.stderr, (command, done.stdout + done.stderr)


@pytest.mark.parametrize("by", ["--python", "--target"])
def test_a_startup_prefix_set_outside_the_site_on_the_launchs_path_is_judged(tmp_path, by):
    """A sitecustomize on a PYTHONPATH only the launch's `env` gives (outside the site, whose own
    start-up files name no prefix) sets the pycache prefix where the set's stock bytecode is: the
    guard refuses it, so preflight and run fail naming it."""
    venv = _venv(tmp_path, by)
    _venv_applied(venv)
    prefix, custom = venv.site.parents[3] / "pp9", venv.site.parents[3] / "custom"
    custom.mkdir()
    (custom / "sitecustomize.py").write_text(f"import sys\nsys.pycache_prefix = {str(prefix)!r}\n")
    _prefixed_unchecked_pyc(venv, prefix, stock_files("0.16.0")[SPEC])
    guard = [str(venv.python), "-c", LOAD_LIKE_VLLM, str(venv.site)]
    clean = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "PYTHONDONTWRITEBYTECODE")}
    refused = subprocess.run(
        guard, capture_output=True, text=True, env={**clean, "PYTHONPATH": str(custom)}, check=False
    )
    assert refused.returncode != 0 and "pp9" in refused.stderr, refused.stderr[-600:]
    assert venv.cli("status").returncode == 0  # patchkit's own environment sets no prefix
    for command in ("preflight", "run"):
        done = _launch_with(venv, command, f"PYTHONPATH={custom}")
        assert done.returncode == 1 and "pp9" in done.stdout + done.stderr, (command, done.stdout + done.stderr)


def test_a_startup_prefix_the_launchs_env_i_drops_is_not_held_against_it(tmp_path, monkeypatch):
    """patchkit's own environment gives the variable, the launch's `env -i` drops it: its start-up
    sets no prefix and the guard passes, so preflight passes too (no fix to remove bytecode it never reads)."""
    venv = _venv(tmp_path)
    prefix = _prefix_from_a_variable(venv)
    monkeypatch.setenv("MYPREFIX", str(prefix))
    assert venv.cli("status").returncode == 1  # as patchkit itself would start it: the bytecode is read
    done = _launch_with(venv, "preflight", "-i")
    assert done.returncode == 0, done.stdout + done.stderr


def _launch_adds_startup_code(venv: Venv, form: str, prefix: Path) -> tuple[list[str], str | None]:
    """Start-up code that sets `prefix` where only the launch's own `env` puts it: the `env`
    arguments, and the directory the launch runs in (None: patchkit's)."""
    code = f"import sys; sys.pycache_prefix = {str(prefix)!r}\n"
    outside = venv.site.parents[3] / "outside"
    if form == "a sitecustomize setting it by a built name":  # no `pycache_prefix` in its text
        (outside / "hooks").mkdir(parents=True)
        (outside / "hooks" / "sitecustomize.py").write_text(
            f"import sys\nsetattr(sys, 'pycache' + '_prefix', {str(prefix)!r})\n"
        )
        return [f"PYTHONPATH={outside / 'hooks'}"], None
    if form == "sitecustomize on PYTHONPATH":
        (outside / "hooks").mkdir(parents=True)
        (outside / "hooks" / "sitecustomize.py").write_text(code)
        return [f"PYTHONPATH={outside / 'hooks'}"], None
    if form == "a sitecustomize package on a relative PYTHONPATH":
        (outside / "hooks" / "sitecustomize").mkdir(parents=True)
        (outside / "hooks" / "sitecustomize" / "__init__.py").write_text(code)
        return ["-C", str(outside), "PYTHONPATH=hooks"], str(outside)  # patchkit runs there too
    if form == "a module the site's .pth imports, on PYTHONPATH":
        (venv.site / "zz_hook.pth").write_text("import zz_tuning\n")
        (venv.site / "zz_tuning.py").write_text("TUNED = True\n")  # the site's own sets nothing
        (outside / "hooks").mkdir(parents=True)
        (outside / "hooks" / "zz_tuning.py").write_text(code)
        return [f"PYTHONPATH={outside / 'hooks'}"], None
    # a user site the launch's environment names, in a venv that has one (system site-packages)
    cfg = venv.python.parents[1] / "pyvenv.cfg"
    cfg.write_text(
        cfg.read_text().replace("include-system-site-packages = false", "include-system-site-packages = true")
    )
    base = outside / "home" / ".local" if form == "the user site of HOME" else outside / "userbase"
    lib = base / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    lib.mkdir(parents=True)
    (lib / "zz_prefix.pth").write_text(code)
    return [f"HOME={outside / 'home'}" if form == "the user site of HOME" else f"PYTHONUSERBASE={base}"], None


@pytest.mark.parametrize(
    ("form", "by"),
    [
        ("sitecustomize on PYTHONPATH", "--python"),
        ("sitecustomize on PYTHONPATH", "--target"),
        ("a sitecustomize setting it by a built name", "--python"),
        ("a sitecustomize package on a relative PYTHONPATH", "--python"),
        ("a module the site's .pth imports, on PYTHONPATH", "--python"),
        ("the user site of PYTHONUSERBASE", "--target"),
        ("the user site of HOME", "--python"),
    ],
)
def test_start_up_code_only_the_launchs_env_adds_is_asked_as_the_guard_judges_it(tmp_path, form, by):
    """The launch's `env` puts start-up code on its interpreter's path that the site does not hold
    and that never names pycache_prefix where patchkit reads: its interpreter is asked with the
    launch's environment and directory, and preflight and run fail naming the stale bytecode."""
    venv = _venv(tmp_path, by)
    _venv_applied(venv)
    prefix = tmp_path / "pq7"
    env_words, cwd = _launch_adds_startup_code(venv, form, prefix)
    _prefixed_unchecked_pyc(venv, prefix, stock_files("0.16.0")[SPEC])
    clean = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "PYTHONDONTWRITEBYTECODE")}
    guard = ["env", *env_words, str(venv.python), "-c", LOAD_LIKE_VLLM, str(venv.site)]
    refused = subprocess.run(guard, capture_output=True, text=True, env=clean, cwd=cwd, check=False)
    assert refused.returncode != 0 and "pq7" in refused.stderr, refused.stderr[-600:]
    assert venv.cli("status").returncode == 0  # patchkit's own environment runs none of it
    for command in ("preflight", "run"):
        done = _launch_with(venv, command, *env_words, cwd=cwd)
        assert done.returncode == 1 and "pq7" in done.stdout + done.stderr, (command, done.stdout + done.stderr)


@pytest.mark.parametrize(
    "shebang",
    [
        "{python} -Xpycache_prefix={prefix}",
        "{python} -sXpycache_prefix={prefix}",
        "/usr/bin/env -S {python} -E -X pycache_prefix={prefix}",
        "/usr/bin/env -S {python} --check-hash-based-pycs never",
    ],
)
def test_the_vllm_scripts_own_bytecode_options_are_judged_as_the_guard_judges_them(tmp_path, shebang):
    """A `vllm` script whose #! line gives its Python a pycache prefix, or has it load checked-hash
    bytecode unchecked, holding stale stock bytecode there: read as a `python -X...` launch's
    options are, so preflight and run fail naming it, as the guard refuses it."""
    venv = _venv(tmp_path)
    _venv_applied(venv)
    prefix = tmp_path / "px5"
    stock = stock_files("0.16.0")[SPEC]
    if "never" in shebang:  # checked-hash bytecode of the stock file where Python looks for it
        scratch = tmp_path / "scratch.py"
        scratch.write_text(stock)
        pyc = venv.site / "vllm" / "config" / "__pycache__" / f"spec.{sys.implementation.cache_tag}.pyc"
        mode = py_compile.PycInvalidationMode.CHECKED_HASH
        py_compile.compile(str(scratch), cfile=str(pyc), doraise=True, invalidation_mode=mode)
        options = ["--check-hash-based-pycs", "never"]
    else:
        _prefixed_unchecked_pyc(venv, prefix, stock)
        options = [f"-Xpycache_prefix={prefix}"]
    script = venv.python.parent / "vllm"
    script.write_text(f"#!{shebang.format(python=venv.python, prefix=prefix)}\nimport sys\nsys.exit(0)\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "PYTHONDONTWRITEBYTECODE")}
    guard = [str(venv.python), *options, "-c", LOAD_LIKE_VLLM, str(venv.site)]
    refused = subprocess.run(guard, capture_output=True, text=True, env=clean, check=False)
    assert refused.returncode != 0 and "spec.py" in refused.stderr, refused.stderr[-600:]
    assert venv.cli("status").returncode == 0
    for command in ("preflight", "run"):
        done = venv.launch(command)
        said = done.stdout + done.stderr
        assert done.returncode == 1 and "spec" in said and "cannot judge" not in said, (command, said)


def test_apply_updating_the_guard_leaves_no_unchecked_hash_pyc_of_the_old_guard(tmp_path):
    """Review: an image compiled with unchecked-hash .pycs: `apply` updated patchkit_guard.py, but
    the old guard's __pycache__/patchkit_guard.cpython-*.pyc stayed, and that is what vLLM ran."""
    import importlib.util
    import py_compile

    tree = _tree(tmp_path)
    guard_of_other_checks(tree)
    source = tree.site / "patchkit_guard.py"
    old = source.read_bytes()
    compiled = Path(importlib.util.cache_from_source(str(source)))
    py_compile.compile(str(source), str(compiled), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    assert tree.cli("apply", "--no-import").returncode == 0
    assert source.read_bytes() != old
    for pyc in compiled.parent.glob("patchkit_guard.*.pyc") if compiled.parent.is_dir() else []:
        data = pyc.read_bytes()
        flags = int.from_bytes(data[4:8], "little")
        stale = flags & 0b1 and not flags & 0b10 and data[8:16] != importlib.util.source_hash(source.read_bytes())
        assert not stale, f"{pyc}: the old guard's unchecked-hash bytecode stayed"


def _guard_compiled_from_other_bytes(tree: Tree, prefixed: bool) -> Path:
    """An unchecked-hash .pyc of patchkit_guard.py compiled from an older text of it (an image built
    with `compileall --invalidation-mode unchecked-hash`), where the launch reads the guard's bytecode:
    __pycache__, or under the pycache prefix."""
    source = tree.site / "patchkit_guard.py"
    older = source.read_text() + "\nOLDER_GUARD = True\n"
    if prefixed:
        return _prefixed_pyc(tree, "patchkit_guard.py", older)
    current = source.read_bytes()
    source.write_text(older)
    compiled = py_compile.compile(
        str(source), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    source.write_bytes(current)
    return Path(compiled)


@pytest.mark.parametrize("prefixed", [False, True], ids=["pycache", "prefix"])
def test_stale_bytecode_of_the_guard_itself_fails_the_commands_and_the_named_fix_clears_it(tmp_path, prefixed):
    """Review: vLLM runs an unchecked-hash .pyc of patchkit_guard.py compiled from other bytes in place
    of the installed guard, which cannot judge itself (it is that bytecode): status, verify, preflight
    and run fail naming the .pyc; the fix they name clears it. A status-only failure: the guard passes."""
    tree = _tree(tmp_path)
    env = _prefixed_env(tree) if prefixed else {}
    own = ("--target", tree.site, "--patches", tree.library)
    done = run_cli_writing("apply", "--no-import", *own, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    compiled = _guard_compiled_from_other_bytes(tree, prefixed)
    assert compiled.is_file()
    launch = (str(tree.bin / "vllm"), "serve", str(tree.model))
    said = {
        "status": run_cli_read_only("status", *own, env=env),
        "verify": run_cli_read_only("verify", "--no-import", *own, env=env),
        "preflight": run_cli_read_only("preflight", *own, "--no-import", "--", *launch, env=env),
        "run": run_cli("run", *own, "--", *launch, env=env),
    }
    for command, result in said.items():
        text = " ".join((result.stdout + result.stderr).split())
        assert result.returncode == 1 and "patchkit_guard." in text and compiled.name in text, (command, text)
        assert "guard vLLM runs is stale bytecode" in text and "guard refuses" not in text, (command, text)
    status = run_cli_read_only("status", "--format", "json", *own, env=env)
    fix = (json.loads(status.stdout).get("guard") or {}).get("fix") or ""
    named = _named_commands(fix)
    assert named, fix
    if prefixed:
        assert ["rm", "-f", "--", str(compiled)] in named, fix
    else:
        assert any(words[:2] == ["patchkit", "apply"] for words in named), fix
    for words in named:
        done = (
            run_cli_judged(*words[1:], *own, env=env) if words[0] == "patchkit" else subprocess.run(words, check=False)
        )
        assert done.returncode == 0, words
    status = run_cli_read_only("status", *own, env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert run_cli("run", *own, "--", *launch, env=env).returncode == 0


def test_another_build_reinstalled_under_the_record_is_said_as_pips_and_apply_moves_the_record_forward(tmp_path):
    """review32 F6: pip installed another build of the recorded version (a vendor's spec.py, which its
    RECORD lists): status, verify, preflight, run and the guard say pip wrote it, never "edited";
    the fix is apply (no revert, no --force), which patches the installed build's file and records
    it as the original, so a revert then gives the installed build's file back, never the old one."""
    tree = _tree(tmp_path)
    reinstalled_another_build(tree)
    vendor = _another_build(stock_files("0.16.0"))[SPEC]
    guard = load_plugins_like_vllm(tree.site)
    assert guard.returncode != 0 and "pip" in guard.stderr and "changed after" not in guard.stderr, guard.stderr[-600:]
    status = tree.cli("status", "--format", "json")
    said = json.loads(status.stdout)
    assert status.returncode == 1 and not said["drifted"], status.stdout
    assert "reinstalled" in " ".join(said["guard"]["refuses"]), said["guard"]
    assert _fixes(said) == [["apply", "--target", str(tree.site), "--patches", str(tree.library)]], said["guard"]
    for command in ("status", "verify"):
        done = tree.cli(command, *(["--no-import"] if command == "verify" else []))
        assert "edited" not in done.stdout + done.stderr and "revert" not in done.stdout, done.stdout
    for command in ("preflight", "run"):
        done = tree.launch(command)
        assert done.returncode == 1 and f"vLLM was reinstalled (pip wrote {SPEC}" in done.stdout, done.stdout
        assert "revert" not in done.stdout + done.stderr, done.stdout
    applied = tree.cli("apply", "--no-import")
    assert applied.returncode == 0 and "written by pip" in applied.stderr, applied.stdout + applied.stderr
    assert (tree.site / SPEC).read_text() == patched({SPEC: vendor})[SPEC]
    assert tree.state()["entries"][0]["files"][SPEC]["before"] == sha(vendor)
    assert load_plugins_like_vllm(tree.site).returncode == 0
    assert tree.cli("status").returncode == 0
    reverted = tree.cli("revert")
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert (tree.site / SPEC).read_text() == vendor


def test_revert_keeps_the_file_pip_wrote_and_drops_its_record(tmp_path):
    """A revert of a tree where pip reinstalled another build under the record puts no old original
    over the installed build's file: it keeps it, drops the record, and says so (its dry run too)."""
    tree = _tree(tmp_path)
    reinstalled_another_build(tree)
    vendor = _another_build(stock_files("0.16.0"))[SPEC]
    for args in (["--dry-run"], [], ["--force"]):
        done = tree.cli("revert", *args)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (tree.site / SPEC).read_text() == vendor
        if not args:
            assert "written by pip" in done.stderr and "kept as installed" in done.stderr, done.stderr
            assert not (tree.site / ".patchkit/saved").exists()
            assert load_plugins_like_vllm(tree.site).returncode == 0
            reinstalled_another_build(tree)  # again, for --force


def test_the_guard_and_the_commands_say_a_file_pip_wrote_in_the_same_words():
    """status tells the guard's refusal for a file pip wrote by its words (inspection.STOCK_AGAIN_WORDS)."""
    from patchkit._target import guard
    from patchkit.engine import stale

    assert (guard.PIP_WROTE, guard.PIP_WROTE_ALL) == (stale.PIP_WROTE, stale.PIP_WROTE_ALL)
