"""Opt-in (`make test-vllm`): the tool-call sets (patches/, issue 23) on the real vLLM
install, in an overlay of its venv (vllm_overlay.py: the real venv is never written to).

For each set: its behaviour test against vLLM's real parser classes, in the venv's interpreter
(`behaviour.py --installed`), fails on stock naming the split and what was lost, and passes once
`patchkit apply --python` patched the install, and `verify --python` runs it so (one finding,
"vLLM's classes"); the release's own tool-parser tests, taken from its
sdist (fetched by patchkit's fetcher into the cache), pass on stock and still pass patched, with
`get_tokenizer` giving a stand-in whose vocabulary holds the markers (vllm_tests_conftest.py);
`revert` gives back the installed files of the real venv, byte for byte.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_overlay import overlay_venv, site_packages

from patchkit.base.enums import SelectionKind
from patchkit.fetch import release_sdist
from patchkit.series.library import load_library, select

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")
VLLM_VERSION = os.environ.get("VLLM_VERSION", "0.16.0")
LIBRARY = Path(__file__).resolve().parents[2] / "patches"
HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

TOOL_PARSERS = (
    "vllm/tool_parsers" if Version(VLLM_VERSION) >= Version("0.13.0") else "vllm/entrypoints/openai/tool_parsers"
)
SETS = {
    "deepseek-tool-calls": {
        "parsers": ["deepseekv3_tool_parser.py", "deepseekv31_tool_parser.py", "deepseekv32_tool_parser.py"],
        "own_tests": ["test_deepseekv31_tool_parser.py"],
    },
    "kimi-k2-tool-calls": {"parsers": ["kimi_k2_tool_parser.py"], "own_tests": ["test_kimi_k2_tool_parser.py"]},
}


def kind_on_this_release(set_name: str) -> SelectionKind:
    """What the set says of the venv's release: its series patches it, or upstream fixed it."""
    return select(load_library(LIBRARY)[set_name], Version(VLLM_VERSION)).kind


PATCHED_HERE = [name for name in SETS if kind_on_this_release(name) == SelectionKind.PATCH]
UPSTREAM_HERE = [name for name in SETS if kind_on_this_release(name) == SelectionKind.UPSTREAM]

# One interpreter judges every parser file of a set: vLLM imports once (about 10 s).
JUDGE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("behaviour", sys.argv[1])
behaviour = importlib.util.module_from_spec(spec)
sys.modules["behaviour"] = behaviour
spec.loader.exec_module(behaviour)
codes = [behaviour.main([parser, "--installed", *sys.argv[3:]]) for parser in json.loads(sys.argv[2])]
print("PATCHKIT-TEST-ANSWER", json.dumps(codes))
"""


def patchkit(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "patchkit", *args, "--patches", str(LIBRARY)]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


def judge(python: Path, set_name: str, parsers: list[Path], *options: str) -> tuple[list[int], list[str]]:
    """behaviour.py's exit code for each parser file, and its report lines (vLLM's log left out)."""
    script = LIBRARY / set_name / "behaviour.py"
    done = subprocess.run(
        [str(python), "-B", "-c", JUDGE, str(script), json.dumps([str(p) for p in parsers]), *options],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=os.path.abspath(os.sep),
    )
    lines = done.stdout.splitlines()
    answer = [line for line in lines if line.startswith("PATCHKIT-TEST-ANSWER ")]
    assert answer, done.stdout[-3000:] + done.stderr[-3000:]
    report = [line for line in lines if line.startswith(("PASS ", "FAIL ", "error: "))]
    return json.loads(answer[0].split(" ", 1)[1]), report


@pytest.fixture(scope="session")
def vllm_own_tests(tmp_path_factory) -> Path:
    """The release's tool-parser tests, out of its sdist, with the conftest that gives the stand-in
    tokenizer. Only the tests of the sets' parsers: the others need their models' tokenizers."""
    sdist = release_sdist(VLLM_VERSION)
    root = tmp_path_factory.mktemp("vllm-tests")
    prefix = f"vllm-{VLLM_VERSION}/tests/tool_parsers/"
    wanted = {"__init__.py", *(name for set_name in PATCHED_HERE for name in SETS[set_name]["own_tests"])}
    helpers = {"utils.py"}  # the tests' helpers (run_tool_extraction...), in the sdists that have them
    with tarfile.open(sdist) as archive:
        members = [
            m for m in archive.getmembers() if m.name.startswith(prefix) and m.name[len(prefix) :] in wanted | helpers
        ]
        assert sorted(m.name[len(prefix) :] for m in members if m.name[len(prefix) :] in wanted) == sorted(wanted), (
            sdist
        )
        for member in members:
            member.name = "tests/tool_parsers/" + member.name[len(prefix) :]
        archive.extractall(root, members=members, filter="data")
    shutil.copy(HERE / "vllm_tests_conftest.py", root / "conftest.py")
    return root


def run_vllm_own_tests(python: Path, root: Path, test_files: list[str]) -> subprocess.CompletedProcess[str]:
    scenarios = os.pathsep.join(str(LIBRARY / name / "scenario.py") for name in SETS)
    return subprocess.run(
        [str(python), "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root)]
        + [str(root / "tests" / "tool_parsers" / name) for name in test_files],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root,
        env={**os.environ, "PATCHKIT_SCENARIOS": scenarios},
    )


def installed_files(site: Path) -> dict[str, bytes]:
    """Every Python source of the vllm package (compiled extensions are links to the real venv's)."""
    return {p.relative_to(site).as_posix(): p.read_bytes() for p in sorted((site / "vllm").rglob("*.py"))}


@pytest.mark.parametrize("set_name", PATCHED_HERE)
def test_set_on_the_real_install_stock_fails_patched_passes_and_vllms_own_tests_still_pass(
    tmp_path, vllm_own_tests, set_name
):
    python = overlay_venv(VLLM_PYTHON, tmp_path / "venv")
    site = site_packages(python)
    real = installed_files(site_packages(VLLM_PYTHON))
    assert installed_files(site) == real
    parsers = [
        site / TOOL_PARSERS / name for name in SETS[set_name]["parsers"] if (site / TOOL_PARSERS / name).is_file()
    ]
    assert parsers
    own_tests = SETS[set_name]["own_tests"]

    codes, report = judge(python, set_name, parsers)
    assert codes == [1] * len(parsers), report
    failures = [line for line in report if line.startswith("FAIL ") and ", top-up " in line]
    splits = ("token(s) per delta", "all at once", "] deltas of [")  # even, whole, uneven (a cut inside a text)
    assert failures and all(any(split in f for split in splits) for f in failures)  # the split
    assert all(" lost" in f or "expected" in f or "raised" in f for f in failures)  # and what was lost
    stock_own = run_vllm_own_tests(python, vllm_own_tests, own_tests)
    assert stock_own.returncode == 0, stock_own.stdout[-3000:]  # the harness works: stock passes them

    applied = patchkit("apply", "--python", str(python), "--set", set_name)
    assert applied.returncode == 0, applied.stdout[-2000:] + applied.stderr[-2000:]
    assert installed_files(site) != real
    codes, report = judge(python, set_name, parsers, "--random", "20")
    assert codes == [0] * len(parsers), report
    assert all(line.startswith("PASS ") and ": 0 of " in line and f"read from {site}" in line for line in report)
    verified = patchkit("verify", "--python", str(python), "--set", set_name, "--format", "json")
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-2000:]
    behaviour = [c for c in json.loads(verified.stdout)["checks"] if c["check"] == "behaviour"]
    assert [(c["ok"], c["message"].endswith("(vLLM's classes)")) for c in behaviour] == [(True, True)], behaviour
    patched_own = run_vllm_own_tests(python, vllm_own_tests, own_tests)
    assert patched_own.returncode == 0, patched_own.stdout[-3000:]
    assert " passed" in patched_own.stdout and " failed" not in patched_own.stdout

    reverted = patchkit("revert", "--python", str(python), "--set", set_name)
    assert reverted.returncode == 0, reverted.stdout[-2000:] + reverted.stderr[-2000:]
    assert installed_files(site) == real


@pytest.mark.parametrize("set_name", UPSTREAM_HERE)
def test_a_release_the_set_calls_upstream_passes_its_behaviour_test_with_vllms_classes(tmp_path, set_name):
    """Where the set's range says upstream fixed it, the stock parser must pass with vLLM's real
    classes at every split (and 20 random ones). The stand-ins cannot load kimi_k2_tool_parser.py
    from 0.25.0 (it is built on vLLM's parser engine): on 0.33.0 only this judges it (PROOF.md).
    `verify --python` says so too: the release is upstream, and its finding is vLLM's classes'."""
    python = overlay_venv(VLLM_PYTHON, tmp_path / "venv")
    site = site_packages(python)
    real = installed_files(site_packages(VLLM_PYTHON))
    parsers = [
        site / TOOL_PARSERS / name for name in SETS[set_name]["parsers"] if (site / TOOL_PARSERS / name).is_file()
    ]
    assert parsers

    codes, report = judge(python, set_name, parsers, "--random", "20")
    assert codes == [0] * len(parsers), report
    summaries = [line for line in report if line.startswith(("PASS ", "FAIL "))]
    assert len(summaries) == len(parsers) and all(": 0 of 190 streamed runs differ" in line for line in summaries)
    assert all(line.startswith("PASS ") and f"read from {site}" in line for line in summaries)

    verified = patchkit("verify", "--python", str(python), "--set", set_name, "--format", "json")
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-2000:]
    document = json.loads(verified.stdout)
    assert document["state"] == "upstream", document
    behaviour = [c for c in document["checks"] if c["check"] == "behaviour"]
    assert [(c["ok"], c["message"]) for c in behaviour] == [(True, "0 of 70 runs differ (vLLM's classes)")], behaviour
    assert installed_files(site) == real  # judged, nothing written
