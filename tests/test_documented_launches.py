"""Every `vllm serve` launch the README and docs/ show (shell blocks, the systemd unit, the
container's CMD) passes preflight's static checks of its command and --speculative-config, with
local model directories in place of its paths and a drafter whose config has no n_predict (so
a launch must give num_speculative_tokens: vLLM has no count otherwise)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from helpers import run_cli_read_only
from launch_fixtures import DRAFTER, KIMI_K25, findings, patchkit_run, stand_in_launch, write_eagle3_setup, write_model

ROOT = Path(__file__).parent.parent
CHECKS = ("command", "speculative-config")  # the launch's own faults, not the test tree's
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def documented_launches() -> list[tuple[str, list[str]]]:
    """(where, argv from `vllm` on) for each launch: a line (continuations joined) running
    `vllm serve`, or a Dockerfile CMD's JSON array."""
    found = []
    for doc in DOCS:
        text = re.sub(r"\\\n\s*", " ", doc.read_text())
        for line in text.splitlines():
            if line.startswith("CMD [") and '"serve"' in line:
                found.append((f"{doc.name}: {line[:50]}", json.loads(line[4:])))
            elif re.search(r"(^|[\s=/])vllm serve \S", line) and "--speculative-config '" in line:
                words = shlex.split(line.partition("=")[2] if line.startswith("ExecStart=") else line)
                start = next(i for i, w in enumerate(words) if w.endswith("vllm") and words[i + 1 : i + 2] == ["serve"])
                found.append((f"{doc.name}: {line[:50]}", words[start:]))
    return found


def localized(argv: list[str], model: Path, drafter: Path) -> list[str]:
    """argv with its model and the speculative config's drafter pointing at local directories."""
    argv = ["vllm", "serve", str(model), *argv[3:]]
    at = argv.index("--speculative-config") + 1
    argv[at] = json.dumps({**json.loads(argv[at]), "model": str(drafter)})
    return argv


def test_every_documented_launch_passes_the_static_checks(tmp_path):
    launches = documented_launches()
    assert len(launches) >= 6 and any(where.startswith("launch.md: CMD") for where, _ in launches), launches
    tree, library = write_eagle3_setup(tmp_path)
    model, drafter = write_model(tmp_path / "kimi", KIMI_K25), write_model(tmp_path / "drafter", DRAFTER)
    assert "n_predict" not in DRAFTER
    refused = {}
    for where, argv in launches:
        done = run_cli_read_only(
            "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
            "--", *localized(argv, model, drafter),
        )  # fmt: skip
        failed = {k: f["message"] for k, f in findings(done).items() if k in CHECKS and not f["ok"]}
        if failed:
            refused[where] = failed
    assert refused == {}


def test_the_exit_codes_docs_give_for_a_refused_run_are_the_ones_it_exits_with(tmp_path):
    """newuser26: launch.md said a failed preflight makes `run` exit 1; a missing model is 4, an
    unreadable command 2. Each case is run, and its code is the one the sentence gives it."""
    text = " ".join((ROOT / "docs" / "launch.md").read_text().split())
    said = text.partition("When the preflight fails, COMMAND does not run")[2].partition(". ")[0]
    tree, library, command, env, marker = stand_in_launch(tmp_path)
    at = command.index("serve") + 1
    cases = {
        "a failed finding": command,  # the tree is stock: tree-state fails
        "a command that cannot be read": [*command, "--tensor-parallel-size", "many"],
        "a missing model": [*command[:at], str(tmp_path / "nowhere"), *command[at + 1 :]],
    }
    for words, launch in cases.items():
        _, done = patchkit_run(tree, library, launch, env)
        assert f"{done.returncode} for {words}" in said, (words, done.returncode, said, done.stderr)
    assert not marker.exists()
