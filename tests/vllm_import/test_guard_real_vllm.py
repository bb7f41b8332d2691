"""Opt-in (`make test-vllm`): the launch guard on the real vLLM wheel.

apply installs it; on the healthy tree `vllm --version`, `--help` and `bench --help` do as they do
without it; vLLM itself loads it (EngineArgs.__post_init__ calls
vllm.plugins.load_general_plugins(), which calls every vllm.general_plugins entry point); a file
changed after apply stops `EngineArgs(...)` with the guard's message; revert leaves site-packages
as it was, guard included. Each test patches an overlay of the real venv (vllm_overlay.py), whose
`vllm` script is the real one run by the overlay's interpreter: the real venv is never written to.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import MODEL_PY, make_patch, write_tree
from vllm_overlay import VLLM_PYTHON, overlay_venv, patchkit, site_packages

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

EDITED = "vllm/config/speculative.py"  # a file every supported release's series patches
ENGINE_ARGS = "from vllm.engine.arg_utils import EngineArgs; EngineArgs(model={model!r})"


@pytest.fixture
def python(tmp_path: Path) -> Path:
    """The interpreter of an overlay of the real venv: patchkit and the edits write there only."""
    return overlay_venv(str(VLLM_PYTHON), tmp_path / "venv")


def engine_args(python: Path, model: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    clean = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "VLLM_PLUGINS")}
    started = time.monotonic()
    done = subprocess.run(
        [str(python), "-c", ENGINE_ARGS.format(model=str(model))],
        capture_output=True,
        text=True,
        timeout=600,
        env={**clean, **env},
        cwd=os.path.abspath(os.sep),
    )
    return done, time.monotonic() - started


def vllm_cli(python: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The venv's own `vllm` script, as a user runs it."""
    script = python.with_name("vllm")
    clean = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "VLLM_PLUGINS")}
    return subprocess.run(
        [str(script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**clean, **env},
        cwd=os.path.abspath(os.sep),
    )


def assert_unchanged_by_the_guard(python: Path, command: list[str]) -> None:
    """It works; or, where vLLM itself fails it (0.16.0's `--version` and `--help` need a device: on a
    machine without a GPU they stop on "Failed to infer device type"), it fails the same way with no
    plugin loaded (VLLM_PLUGINS empty)."""
    guarded = vllm_cli(python, *command)
    assert "TreeChanged" not in guarded.stderr and "patchkit guard" not in guarded.stderr, (
        command,
        guarded.stderr[-2000:],
    )
    if guarded.returncode != 0:
        unguarded = vllm_cli(python, *command, VLLM_PLUGINS="")
        assert guarded.returncode == unguarded.returncode, (command, guarded.stderr[-2000:])
        assert guarded.stderr.splitlines()[-1:] == unguarded.stderr.splitlines()[-1:], command


def top_level(site: Path) -> dict[str, list[str]]:
    """What a revert must leave as it found it beside vllm/: the names in site-packages and its __pycache__/."""
    cache = site / "__pycache__"
    return {
        "site": sorted(p.name for p in site.iterdir() if p.name != ".patchkit"),
        "__pycache__": sorted(p.name for p in cache.iterdir()) if cache.is_dir() else [],
    }


def record_is_true(info: Path, site: Path) -> bool:
    for path, digest, size in csv.reader((info / "RECORD").read_text().splitlines()):
        if path.endswith("/RECORD"):
            continue
        data = (site / path).read_bytes()
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if (digest, int(size)) != (f"sha256={expected}", len(data)):
            return False
    return True


def test_the_guard_stops_a_changed_tree_and_revert_removes_it(tmp_path, python):
    site = site_packages(python)
    before = top_level(site)
    model = tmp_path / "model"
    model.mkdir()
    applied = patchkit(python, "apply", "--no-import")
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    edited = site / EDITED
    original = edited.read_bytes()
    try:
        [info] = site.glob("patchkit_guard-*.dist-info")
        assert (site / "patchkit_guard.py").is_file() and record_is_true(info, site)

        healthy, _ = engine_args(python, model)
        assert "patchkit guard" not in healthy.stdout + healthy.stderr
        for command in (["--version"], ["--help"], ["bench", "--help"]):
            assert_unchanged_by_the_guard(python, command)

        edited.write_bytes(original + b"# changed after apply\n")
        stopped, took = engine_args(python, model)
        assert stopped.returncode != 0
        assert "TreeChanged" in stopped.stderr and EDITED in stopped.stderr and "patchkit status" in stopped.stderr
        assert took < 120, f"the guard stopped the launch after {took:.0f} s"

        warned, _ = engine_args(python, model, PATCHKIT_GUARD="warn")
        assert "TreeChanged" not in warned.stderr and EDITED in warned.stdout + warned.stderr
        allowed_others_only, _ = engine_args(python, model, VLLM_PLUGINS="some_other_plugin")
        assert "TreeChanged" not in allowed_others_only.stderr  # an allow-list without patchkit_guard skips it
    finally:
        edited.write_bytes(original)
        reverted = patchkit(python, "revert")
    assert reverted.returncode == 0, reverted.stdout[-3000:] + reverted.stderr[-3000:]
    assert top_level(site) == before


# vLLM imported from its venv, then a second site directory put on the path after it, holding a
# launch guard (a user site, PYTHONPATH's or a second venv's): vLLM's own loader runs that guard.
LOAD_WITH_A_GUARD_ELSEWHERE = """
import sys
import vllm.plugins
sys.path.append(sys.argv[1])
vllm.plugins.load_general_plugins()
print("loaded", vllm.__file__)
"""


def guarded_elsewhere(tmp_path: Path) -> Path:
    """A small vLLM-shaped site, patched by an ad-hoc diff with the guard installed (healthy)."""
    other = write_tree(tmp_path / "other-site")
    diff = tmp_path / "other.diff"
    diff.write_bytes(make_patch(tmp_path, other, {"vllm/models/model.py": MODEL_PY.replace("x", "y")}))
    done = subprocess.run(
        [sys.executable, "-m", "patchkit", "apply", "--target", str(other), "--patch", str(diff), "--no-import"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and (other / "patchkit_guard.py").is_file(), done.stdout + done.stderr
    return other


def load_with_guard_in(python: Path, other: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "VLLM_PLUGINS", "PYTHONPATH")}
    return subprocess.run(
        [str(python), "-c", LOAD_WITH_A_GUARD_ELSEWHERE, str(other)],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean,
        cwd=os.path.abspath(os.sep),
    )


def test_a_guard_in_another_site_does_not_judge_its_own_tree_for_the_vllm_vllm_imported(tmp_path, python):
    site = site_packages(python)
    assert not list(site.glob("patchkit_guard-*.dist-info")) and not (site / ".patchkit").exists()  # a new overlay
    other = guarded_elsewhere(tmp_path)
    (other / "vllm/models/model.py").write_text("# changed after apply\n")  # its own tree: refused
    done = load_with_guard_in(python, other)
    assert done.returncode == 0 and "TreeChanged" not in done.stderr, done.stderr[-3000:]
    assert f"loaded {site / 'vllm' / '__init__.py'}" in done.stdout


def test_a_guard_in_another_site_judges_the_vllm_vllm_imported_by_its_record(tmp_path, python):
    site = site_packages(python)
    other = guarded_elsewhere(tmp_path)  # healthy
    applied = patchkit(
        python, "apply", "--no-import", "--no-guard"
    )  # the venv's vLLM patched, recorded, no guard of its own
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    edited = site / EDITED
    original = edited.read_bytes()
    try:
        assert not list(site.glob("patchkit_guard-*.dist-info"))
        assert load_with_guard_in(python, other).returncode == 0
        edited.write_bytes(original + b"# changed after apply\n")
        stopped = load_with_guard_in(python, other)
        assert stopped.returncode != 0 and "TreeChanged" in stopped.stderr
        assert f"left in {site}: {EDITED} was changed" in stopped.stderr, stopped.stderr[-3000:]
    finally:
        edited.write_bytes(original)
        reverted = patchkit(python, "revert")
    assert reverted.returncode == 0, reverted.stdout[-3000:] + reverted.stderr[-3000:]


REPO = Path(__file__).resolve().parents[2]
WHITELIST = "0001-speculative-accept-deepseek-kimi-eagle3-targets.patch"  # eagle3's gate in 0.16.0's series


def test_an_older_patchkits_eagle3_whitelist_alone_is_stopped_before_the_load(tmp_path, python):
    """eagle3's whitelist patch applied alone through --patch by a patchkit from before --patch diffs
    were held to the sets' contracts (its record has no "held" mark): vLLM's own plugin loading stops
    it in the guard's words, where vLLM would have refused EAGLE-3 only after the model load; this
    patchkit's apply of it refuses, naming the revert and the whole set, which clear it."""
    site = site_packages(python)
    before = top_level(site)
    whitelist = REPO / "patches/eagle3/0.16.0" / WHITELIST
    plain = tmp_path / "plain"  # a library without eagle3: no contract held the diff, as an older patchkit held none
    shutil.copytree(REPO / "patches/deepseek-tool-calls", plain / "deepseek-tool-calls")
    (plain / "library.toml").write_text('order = ["deepseek-tool-calls"]\n')
    applied = patchkit(python, "apply", "--no-import", "--patches", str(plain), "--patch", str(whitelist))
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    record = site / ".patchkit/state.json"
    state = json.loads(record.read_text())
    assert [entry.pop("held") for entry in state["entries"]] == [True]
    record.write_text(json.dumps(state))
    model = tmp_path / "model"
    model.mkdir()
    try:
        stopped, took = engine_args(python, model)
        assert stopped.returncode != 0 and "TreeChanged" in stopped.stderr, stopped.stderr[-3000:]
        assert WHITELIST in stopped.stderr and "did not hold --patch diffs" in stopped.stderr, stopped.stderr[-3000:]
        assert took < 120, f"the guard stopped the launch after {took:.0f} s"
        again = patchkit(python, "apply", "--no-import", "--patch", str(whitelist))
        said = " ".join((again.stdout + again.stderr).split())
        assert again.returncode == 1 and "patchkit revert" in said and "--set eagle3" in said, said[-3000:]
        assert patchkit(python, "revert", "--patch", str(whitelist)).returncode == 0
        whole = patchkit(python, "apply", "--no-import", "--set", "eagle3")
        assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
        healthy, _ = engine_args(python, model)
        assert "patchkit guard" not in healthy.stdout + healthy.stderr, healthy.stderr[-3000:]
    finally:
        reverted = patchkit(python, "revert")
    assert reverted.returncode == 0, reverted.stdout[-3000:] + reverted.stderr[-3000:]
    assert top_level(site) == before
