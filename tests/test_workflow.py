""".github/workflows/vllm-releases.yml: linted, and its `run:` steps run as GitHub would run them.

Marker `release`: the steps install patchkit from the package index and verify a real release.

What only GitHub provides is substituted, step by step:
- actions/checkout: a copy of the checkout's files (tracked and untracked, not ignored) in a temporary
  directory, which stands for ${{ github.workspace }};
- actions/setup-python: a fresh venv, its bin/ first on PATH (so `python` and `patchkit` are its own);
- actions/cache: .patchkit-cache in the workspace is a link to this machine's patchkit cache (a restored
  cache), so the release files are not fetched again;
- inputs.versions: `--vllm-version 0.16.0` (one release, to keep the test to a minute; the schedule uses --all);
- actions/upload-artifact: the test reads the file the step would upload and parses it as JUnit;
- $GITHUB_STEP_SUMMARY: a file the test reads back (the compatibility matrix in Markdown).
Each `run:` is run as GitHub's default shell on Linux runs it: bash --noprofile --norc -eo pipefail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from patchkit.base.usercache import cache_dir

pytestmark = pytest.mark.release

CHECKOUT = Path(__file__).resolve().parent.parent
WORKFLOW = CHECKOUT / ".github" / "workflows" / "vllm-releases.yml"
VERSION = "0.16.0"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def load() -> dict:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as true
    return workflow


def substitute(text: str, values: dict[str, str]) -> str:
    """Replace each ${{ expression }}; an expression the test does not know fails the test."""

    def value(match: re.Match) -> str:
        assert match.group(1) in values, f"the test does not know the expression {match.group(0)}"
        return values[match.group(1)]

    return EXPRESSION.sub(value, text)


def copy_checkout(dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=CHECKOUT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = CHECKOUT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def test_the_workflow_is_scheduled_and_manual_and_uploads_the_junit_report():
    workflow = load()
    assert set(workflow["on"]) == {"schedule", "workflow_dispatch"}
    assert "versions" in workflow["on"]["workflow_dispatch"]["inputs"]
    steps = workflow["jobs"]["verify"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    assert any("pip install ." in r for r in runs)
    assert any(r.startswith("patchkit verify ") and r.endswith("--format junit > verify.xml") for r in runs)
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["if"] == "always()" and upload["with"]["path"] == "verify.xml"
    (summary,) = [s for s in steps if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
    assert summary["if"] == "always()" and "--format markdown" in summary["run"]


def test_the_ci_page_quotes_the_workflow():
    page = (CHECKOUT / "docs" / "ci.md").read_text(encoding="utf-8")
    assert f"```yaml\n{WORKFLOW.read_text(encoding='utf-8')}```" in page


def test_zizmor_finds_nothing_in_the_workflow():
    zizmor = Path(sys.executable).parent / "zizmor"
    if not zizmor.exists():
        pytest.skip("zizmor is not installed (pip install -e '.[lint]', as `make` does)")
    done = subprocess.run([zizmor, "--offline", WORKFLOW], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_run_steps_install_patchkit_and_write_a_junit_report(tmp_path):
    workspace, venv = tmp_path / "workspace", tmp_path / "setup-python"
    copy_checkout(workspace)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    job = load()["jobs"]["verify"]
    values = {"github.workspace": str(workspace), "inputs.versions || '--all'": f"--vllm-version {VERSION}"}
    env = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_LIBRARY", "PATCHKIT_CACHE_DIR", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env.update({name: substitute(str(value), values) for name, value in job.get("env", {}).items()})
    env["GITHUB_STEP_SUMMARY"] = str(tmp_path / "step-summary.md")  # the job summary GitHub shows
    restored = cache_dir()
    restored.mkdir(parents=True, exist_ok=True)
    Path(env["PATCHKIT_CACHE_DIR"]).symlink_to(restored, target_is_directory=True)

    ran = 0
    for step in job["steps"]:
        if "run" not in step:
            continue
        step_env = {**env, **{k: substitute(str(v), values) for k, v in step.get("env", {}).items()}}
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", substitute(step["run"], values)],
            cwd=workspace,
            env=step_env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"{step['run']}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        ran += 1
    assert ran == 3

    installed = subprocess.run(
        [venv / "bin" / "python", "-c", "import patchkit; print(patchkit.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(installed.strip()).is_relative_to(venv)
    report = ElementTree.parse(workspace / "verify.xml").getroot()
    names = ["eagle3", "deepseek-tool-calls", "kimi-k2-tool-calls"]  # the CI covers every set (issue 23)
    cases = list(report.iter("testcase"))
    assert [case.get("name") for case in cases] == [f"{name}: vllm {VERSION}" for name in names]
    assert all(case.find("failure") is None for case in cases)
    summary = (tmp_path / "step-summary.md").read_text()  # the compatibility matrix, issue 22
    assert summary.splitlines()[0] == f"| vLLM | {' | '.join(names)} |", summary
