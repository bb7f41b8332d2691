"""Golden snapshots of what a person reads (issue 22): status, apply --dry-run, apply, verify
(passing and failing), preflight and list, on a stock and an applied vLLM 0.16.0 tree, captured
in a real terminal (tmux at 80 and 120 columns: the command typed at a prompt, the screen read
back) and piped. PATCHKIT_UPDATE_SNAPSHOTS=1 rewrites them; the terminal ones are skipped only
where tmux is missing (CI installs it: .ci/run). Paths and timings are normalised."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import lay_out_release, run_cli
from launch_fixtures import DEEPSEEK_V3, DRAFTER, write_model

pytestmark = pytest.mark.release

SNAPSHOTS = Path(__file__).parent / "snapshots"
CHECKOUT = Path(__file__).resolve().parent.parent
UPDATE = os.environ.get("PATCHKIT_UPDATE_SNAPSHOTS") == "1"
KIMI = "vllm/model_executor/models/kimi_k25.py"
PARSERS = "vllm/tool_parsers/__init__.py"
SPEC = json.dumps({"method": "eagle3", "model": "models/drafter", "num_speculative_tokens": 3}, separators=(",", ":"))
PREFLIGHT = ["preflight", "--no-import", "--", "vllm", "serve", "models/dsv3", "-tp", "4", "--speculative-config", SPEC]

# name -> the command line's words after `patchkit`
COMMANDS = {
    "status-stock": ["status", "--target", "stock"],
    "status-applied": ["status", "--target", "applied"],
    "status-broken": ["status", "--target", "broken"],
    "apply-dry-run-stock": ["apply", "--dry-run", "--target", "stock"],
    "apply-stock": ["apply", "--target", "stock"],
    "verify-stock": ["verify", "--target", "stock"],
    "verify-applied": ["verify", "--target", "applied"],
    "verify-failing": ["verify", "--target", "broken"],
    "preflight-stock": [*PREFLIGHT[:1], "--target", "stock", *PREFLIGHT[1:]],
    "preflight-applied": [*PREFLIGHT[:1], "--target", "applied", *PREFLIGHT[1:]],
    "list": ["list"],
    # the tree `apply --set eagle3` (or `run --apply` of an EAGLE-3 launch) leaves: the others not chosen
    "status-chosen": ["status", "--target", "chosen"],
    # a misspelt tool-call parser: vLLM refuses it at start
    "preflight-parser": [
        *PREFLIGHT[:2],
        "--target",
        "applied",
        "--",
        "vllm",
        "serve",
        "models/dsv3",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "deepseekv3",
    ],
}
WIDTHS = (80, 120)
TIMING = re.compile(r"\d+\.\d+ ?s\b")


@pytest.fixture(scope="module")
def fetched(tmp_path_factory) -> Path:
    """vLLM 0.16.0's files as `patchkit fetch 0.16.0 --dest` lays them out, then applied and broken."""
    base = tmp_path_factory.mktemp("snapshots")
    done = run_cli("fetch", "0.16.0", "--dest", base / "stock")
    assert done.returncode == 0, done.stderr
    lay_out_release("0.16.0", [PARSERS], base / "stock")  # as `fetch --all` lays it out: the parsers' names
    shutil.copytree(base / "stock", base / "applied")
    assert run_cli("apply", "--target", base / "applied").returncode == 0
    shutil.copytree(base / "stock", base / "chosen")
    assert run_cli("apply", "--target", base / "chosen", "--set", "eagle3").returncode == 0
    shutil.copytree(base / "applied", base / "broken")
    kimi = base / "broken" / KIMI
    kimi.write_text(kimi.read_text().replace("\nimport copy\n", "\nimport copy,\n", 1))
    write_model(base / "models" / "dsv3", DEEPSEEK_V3)
    write_model(base / "models" / "drafter", DRAFTER)
    return base


@pytest.fixture
def work(fetched: Path) -> Iterator[Path]:
    """A fresh copy of the trees for one run (apply changes its tree), in a directory whose name
    has the same length in every run: a line fitted to the terminal never depends on it."""
    work = Path(tempfile.mkdtemp(prefix="pk-snap-", dir="/tmp"))
    shutil.copytree(fetched, work, symlinks=True, dirs_exist_ok=True)
    yield work
    shutil.rmtree(work, ignore_errors=True)


def normalised(text: str, work: Path) -> str:
    """The run's own directory as <tmp>, the checkout as <checkout>, timings as N.NN s, no
    trailing blank lines."""
    text = text.replace(str(work.resolve()), "<tmp>").replace(str(work), "<tmp>")
    text = text.replace(str(CHECKOUT), "<checkout>")
    text = TIMING.sub("N.NN s", text)
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines()) + "\n"


def check(name: str, text: str) -> None:
    """`text` is the snapshot `name` (PATCHKIT_UPDATE_SNAPSHOTS=1 writes it instead)."""
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no snapshot {path.name}: PATCHKIT_UPDATE_SNAPSHOTS=1 writes it"
    assert text == path.read_text(), f"{path.name} differs (PATCHKIT_UPDATE_SNAPSHOTS=1 rewrites it)"


@pytest.mark.parametrize("name", COMMANDS)
def test_piped(name, work):
    done = run_cli(*COMMANDS[name], cwd=work)
    shown = f"$ {shlex.join(['patchkit', *COMMANDS[name]])} | cat\n{done.stdout}"
    if done.stderr:
        shown += f"(stderr)\n{done.stderr}"
    check(f"{name}.piped", normalised(shown + f"(exit {done.returncode})\n", work))


class Terminal:
    """A tmux server of its own (no user configuration) with one window `width` columns wide
    running bash at a `$ ` prompt. A command is typed with send-keys; once bash draws the next
    prompt (its PROMPT_COMMAND signals a tmux channel) the screen is read with capture-pane."""

    def __init__(self, tmux: str, width: int, cwd: Path) -> None:
        self.tmux, self.socket = tmux, f"patchkit-snapshots-{os.getpid()}-{width}"
        env = {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # the venv's patchkit
            "PS1": "$ ",
            "PROMPT_COMMAND": f"{tmux} -L {self.socket} wait-for -S prompt",
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "HOME": os.environ.get("HOME", "/"),
        }
        env.update({k: os.environ[k] for k in ("PATCHKIT_CACHE_DIR", "PATCHKIT_LIBRARY") if k in os.environ})
        shell = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), "bash", "--norc", "--noprofile"]
        self.tmux_run("-f", "/dev/null", "new-session", "-d", "-x", str(width), "-y", "40", "-c", str(cwd), *shell)
        self.tmux_run("set-option", "-g", "history-limit", "5000")
        self.wait_for_prompt()

    def tmux_run(self, *args: str) -> str:
        return subprocess.run(
            [self.tmux, "-u", "-L", self.socket, *args], capture_output=True, text=True, check=True, timeout=300
        ).stdout

    def type(self, line: str) -> tuple[str, str]:
        """Type `line` and Enter; (the screen as drawn, the screen with wrapped lines joined)."""
        self.tmux_run("send-keys", "-t", "0", "-l", line)
        self.tmux_run("send-keys", "-t", "0", "Enter")
        self.wait_for_prompt()
        return (
            self.tmux_run("capture-pane", "-p", "-t", "0", "-S", "-"),
            self.tmux_run("capture-pane", "-p", "-J", "-t", "0", "-S", "-"),
        )

    def wait_for_prompt(self) -> None:
        """Until bash is at its prompt: signalled (PROMPT_COMMAND runs before the prompt is drawn),
        then drawn as the screen's last line (keys typed before it would be echoed twice)."""
        self.tmux_run("wait-for", "prompt")
        for _ in range(200):
            if self.tmux_run("capture-pane", "-p", "-t", "0").rstrip().splitlines()[-1:] == ["$"]:
                return
            time.sleep(0.05)
        raise AssertionError("bash did not draw its prompt in 10 s")

    def close(self) -> None:
        subprocess.run([self.tmux, "-L", self.socket, "kill-server"], capture_output=True, check=False)


def without_last_prompt(screen: str) -> list[str]:
    lines = screen.rstrip().splitlines()
    return lines[:-1] if lines and lines[-1].strip() == "$" else lines


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", COMMANDS)
def test_in_a_terminal(name, width, work):
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (.ci/run installs it)")
    terminal = Terminal(tmux, width, work)
    try:
        line = shlex.join(["patchkit", *COMMANDS[name]])
        drawn, joined = terminal.type(f'{line}; echo "(exit $?)"')
    finally:
        terminal.close()
    printed = without_last_prompt(joined)[1:]  # what patchkit printed, each line as it was written
    too_wide = [text for text in printed if len(text.rstrip()) > width]
    assert not too_wide, f"wider than the terminal (cut by it, maybe mid-word): {too_wide}"
    check(f"{name}.{width}", normalised("\n".join(without_last_prompt(drawn)), work))
