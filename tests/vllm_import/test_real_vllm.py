"""Opt-in (`make test-vllm`): patchkit on the real vLLM wheel installed in its own venv.

apply --python -> verify (with the import probe) -> revert, as a user runs them, on an overlay of
that venv (vllm_overlay.py: its own copy of the vllm package, the rest of the real venv through a
.pth), so the real venv is never written to, not even by a run stopped half-way. Each step is
judged from outside patchkit: vLLM's own supports_eagle3() in a fresh subprocess of the overlay's
Python (false on stock, true patched, false again after revert), and after revert every installed
file hashes as the wheel's RECORD says, in the overlay and in the real venv. Not collected by
`make test` (pyproject norecursedirs).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from packaging.version import Version
from vllm_overlay import VLLM_PYTHON, overlay_venv, patchkit, site_packages

VLLM_VERSION = Version(os.environ.get("VLLM_VERSION", "0.16.0"))

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

CLASSES = {
    "DeepseekV2ForCausalLM": "vllm.model_executor.models.deepseek_v2",
    "DeepseekV3ForCausalLM": "vllm.model_executor.models.deepseek_v2",
}
if Version("0.15.0") <= VLLM_VERSION:
    CLASSES["KimiK25ForConditionalGeneration"] = "vllm.model_executor.models.kimi_k25"

# vLLM logs to stdout: the answer is the line after the marker.
SUPPORTS = """
import importlib, json, sys
from vllm.model_executor.models.interfaces import supports_eagle3
classes = json.loads(sys.argv[1])
answer = {name: bool(supports_eagle3(getattr(importlib.import_module(module), name)))
          for name, module in classes.items()}
print("PATCHKIT-TEST-ANSWER")
print(json.dumps(answer))
"""


@pytest.fixture
def python(tmp_path: Path) -> Path:
    """The interpreter of an overlay of the real venv: patchkit writes there only."""
    return overlay_venv(str(VLLM_PYTHON), tmp_path / "venv")


def supports_eagle3(python: Path) -> dict[str, bool]:
    """vLLM's own verdict, in a fresh interpreter of the venv (no bytecode written)."""
    done = subprocess.run(
        [str(python), "-B", "-c", SUPPORTS, json.dumps(CLASSES)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.path.abspath(os.sep),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    return json.loads(lines[lines.index("PATCHKIT-TEST-ANSWER") + 1])


def record_mismatches(site: Path) -> list[str]:
    """Installed vllm/ files whose sha256 is not the one in the dist-info RECORD, or not listed there."""
    [record] = site.glob(f"vllm-{VLLM_VERSION}.dist-info/RECORD")
    listed = {}
    with record.open(newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            if row and row[0].startswith("vllm/") and row[1:2] and row[1].startswith("sha256="):
                listed[row[0]] = row[1]
    problems = [path for path, digest in listed.items() if _record_hash(site / path) != digest]
    on_disk = {
        p.relative_to(site).as_posix()
        for p in (site / "vllm").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    return sorted(problems + [f"{path} (not in RECORD)" for path in on_disk - set(listed)])


def _record_hash(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def probe_rows(output: str) -> list[dict]:
    """The probe's rows of every set the report holds (one report per covering set since issue 23)."""
    report = json.loads(output)
    sets = report.get("sets", [report])
    assert sets, report
    return [c for each in sets for c in each["checks"] if c["check"] == "probe"]


def test_apply_verify_revert_on_the_real_wheel(capsys, python: Path):
    real, site = site_packages(str(VLLM_PYTHON)), site_packages(python)
    timings = {}
    assert record_mismatches(real) == [], "the venv's vLLM is not stock: reinstall it (rm -r the venv)"
    assert record_mismatches(site) == []  # the overlay's copy too
    assert supports_eagle3(python) == {name: False for name in CLASSES}

    started = time.monotonic()
    applied = patchkit(python, "apply", "--format", "json")
    timings["apply"] = time.monotonic() - started
    try:
        assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
        rows = probe_rows(applied.stdout)
        assert rows and all(r["ok"] for r in rows), rows
        assert {f"{name}: supports_eagle3() is True" for name in CLASSES} <= {r["message"] for r in rows}
        assert supports_eagle3(python) == {name: True for name in CLASSES}
        assert record_mismatches(real) == []  # patched in the overlay only

        started = time.monotonic()
        verified = patchkit(python, "verify", "--format", "json")
        timings["verify"] = time.monotonic() - started
        assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
        report = json.loads(verified.stdout)
        assert report["state"] == "applied" and report["ok"]
        rows = probe_rows(verified.stdout)
        assert rows and all(r["ok"] for r in rows), rows
        timings["import vllm (probe)"] = next(r["message"] for r in rows if r["message"].startswith("import vllm"))

        started = time.monotonic()
        quick = patchkit(python, "verify", "--no-import", "--format", "json")
        timings["verify --no-import"] = time.monotonic() - started
        assert quick.returncode == 0 and {r["message"] for r in probe_rows(quick.stdout)} == {"not run (--no-import)"}
    finally:
        started = time.monotonic()
        reverted = patchkit(python, "revert")
        timings["revert"] = time.monotonic() - started
    assert reverted.returncode == 0, reverted.stdout[-3000:] + reverted.stderr[-3000:]
    assert supports_eagle3(python) == {name: False for name in CLASSES}
    assert record_mismatches(site) == []
    assert record_mismatches(real) == []

    with capsys.disabled():
        print(f"\nvLLM {VLLM_VERSION} at {site} (an overlay of {real}):")
        for step, value in timings.items():
            print(f"  {step}: {value if isinstance(value, str) else f'{value:.1f} s'}")
