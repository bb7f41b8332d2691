"""The README and docs/ as a reader meets them: the README stays short, every link lands, and every
shell example is either run here, as written, or says why it cannot be.

A fenced `sh`/`console` block is preceded by `<!-- runnable -->` or by `<!-- not run: REASON -->`.
The runnable blocks of a page run in order, each with `bash -e`, in one directory of their own
that holds what the page says its examples assume: stock vLLM 0.16.0's files (`vllm-0.16.0`, laid
out by the README's own first command), `vllm-venv` (a Python environment with that vLLM in its
site-packages), the models a launch names (`./kimi-k2.5-eagle3`, `./deepseek-v3-eagle3`; `moonshotai/Kimi-K2.5` and
`deepseek-ai/DeepSeek-V3` in a Hugging Face cache) and a `vllm` on the PATH that stands in for
the launch `run` becomes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import make_venv, purelib
from launch_fixtures import DEEPSEEK_V3, DRAFTER, KIMI_DRAFTER, KIMI_K25, write_model

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")]
)
SHELL = {"sh", "shell", "bash", "console"}
RUNNABLE = "<!-- runnable -->"
NOT_RUN = re.compile(r"<!-- not run: (\S.*?) -->")
FENCE = re.compile(r"^(`{3,})(\S*)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


@dataclass
class Block:
    page: Path
    line: int
    language: str
    marker: str
    text: str


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for fence in FENCE.finditer(text):
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        line = text.count("\n", 0, fence.start()) + 1
        found.append(Block(page, line, fence.group(2), before, fence.group(3)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def test_the_readme_says_where_hf_comes_from_where_it_names_it():
    """newuser17 5d: the README named `hf download` and nothing of `hf`, which is huggingface_hub's
    (not patchkit's); it says so as preflight's hints do."""
    said = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "`hf download" in said
    assert "`hf` comes with huggingface_hub" in said and "`pipx run --spec huggingface_hub hf download" in said


def test_every_shell_example_is_run_or_says_why_not():
    unmarked = [
        f"{b.page.relative_to(ROOT)}:{b.line}"
        for page in PAGES
        for b in blocks(page)
        if b.language in SHELL and b.marker != RUNNABLE and not NOT_RUN.fullmatch(b.marker)
    ]
    assert unmarked == []


def test_every_link_lands():
    broken = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or (anchor and anchor not in anchors(dest)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_marker_test_sees_the_blocks():
    """The parser finds what a reader sees: the README's five-minute path is a runnable sh block."""
    readme = [b for b in blocks(ROOT / "README.md") if b.marker == RUNNABLE]
    assert readme and "patchkit apply $T" in readme[0].text


# What the examples assume, made once and copied for each page.


def install_into_venv(tree: Path, venv: Path) -> None:
    make_venv(venv)
    site = purelib(venv / "bin" / "python")
    for entry in tree.iterdir():
        if entry.name != ".patchkit":
            shutil.copytree(entry, site / entry.name)


def hub_model(hf_home: Path, repo: str, config: dict) -> None:
    cached = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    write_model(cached / "snapshots" / "0123abcd", config)
    (cached / "refs").mkdir(parents=True)
    (cached / "refs" / "main").write_text("0123abcd")


def shell_env(where: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_DEBUG", "HF_HOME", "HF_HUB_CACHE")}
    scripts = Path(sysconfig.get_path("scripts"))
    env["PATH"] = os.pathsep.join([str(where / "bin"), str(Path(sys.executable).parent), str(scripts), env["PATH"]])
    env["HF_HOME"] = str(where / "hf")
    return env


def run_blocks(runnable: list[Block], where: Path) -> None:
    """The blocks in one shell, in order, as a reader types them into one terminal (a variable one
    block sets is there in the next); the first command that fails stops it."""
    script = "".join(f"echo '>>> {b.page.relative_to(ROOT)}:{b.line}' >&2\n{b.text}" for b in runnable)
    done = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=where,
        env=shell_env(where),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stdout + done.stderr


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("docs-examples")
    (base / "bin").mkdir()
    stand_in = base / "bin" / "vllm"
    stand_in.write_text('#!/bin/sh\necho "vllm stand-in: $*"\n')
    stand_in.chmod(0o755)
    write_model(base / "kimi-k2.5-eagle3", KIMI_DRAFTER)
    write_model(base / "deepseek-v3-eagle3", DRAFTER)
    hub_model(base / "hf", "moonshotai/Kimi-K2.5", KIMI_K25)
    hub_model(base / "hf", "deepseek-ai/DeepSeek-V3", DEEPSEEK_V3)
    fetch = next(b for b in blocks(ROOT / "README.md") if b.marker == RUNNABLE).text.splitlines()[0]
    assert fetch.startswith("patchkit fetch 0.16.0 --all --dest vllm-0.16.0")
    run_blocks([Block(ROOT / "README.md", 0, "sh", RUNNABLE, fetch + "\n")], base)
    install_into_venv(base / "vllm-0.16.0", base / "vllm-venv")
    return base


def pages_with_examples() -> list[Path]:
    return [p for p in PAGES if any(b.marker == RUNNABLE for b in blocks(p))]


@pytest.mark.release
@pytest.mark.parametrize("page", pages_with_examples(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_runnable_examples_run_as_written(prepared, tmp_path, page):
    where = tmp_path / "examples"
    shutil.copytree(prepared, where, symlinks=True)
    if page.name == "README.md" and page.parent == ROOT:
        shutil.rmtree(where / "vllm-0.16.0")  # its own first command lays the tree out
    run_blocks([b for b in blocks(page) if b.marker == RUNNABLE], where)
