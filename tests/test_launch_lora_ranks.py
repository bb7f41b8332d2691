"""The LoRA rank fix names a --max-lora-rank the release allows (review35 N9): vLLM 0.12.0 on takes
only the values of its MaxLoRARanks Literal (config/lora.py; the parser refuses another), 0.11.0
only those of LoRAConfig's possible_max_ranks. Read from the installed tree; unknown, the fix says so."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from launch_fixtures import (
    applied,
    patchkit_run,
    plain_launch,  # noqa: F401  (the fixture `launch`)
)

from patchkit.launch.command import parse
from patchkit.launch.late_files import late_file_findings, lora_ranks

LITERAL = "MaxLoRARanks = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]\n"  # 0.12.0-0.34.0's line
TUPLE = "        possible_max_ranks = (8, 16, 32, 64, 128, 256, 320, 512)\n"  # 0.11.0's, in __post_init__


def adapter(directory: Path, r: object) -> str:
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": 16, "target_modules": ["q"]}))
    (directory / "adapter_model.safetensors").write_bytes(b"\x02" + b"\x00" * 7 + b"{}")
    return str(directory)


def fixes(options: list[str], ranks: tuple[int, ...] | None) -> list[tuple[str, str | None]]:
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "m", "--enable-lora", *options]
    found = late_file_findings(parse(argv, "0.16.0"), "command", lambda: "utf-8", ranks)
    return [(f.message, f.fix) for f in found if not f.ok]  # an adapter judged loadable: a pass


def test_a_release_s_allowed_ranks_are_read_from_its_lora_config():
    assert lora_ranks(f"import x\n{LITERAL}".encode()) == (1, 8, 16, 32, 64, 128, 256, 320, 512)
    assert lora_ranks(f"class LoRAConfig:\n    def __post_init__(self):\n{TUPLE}".encode())[0] == 8
    assert lora_ranks(None) is None and lora_ranks(b"max_lora_rank: int = 16\n") is None
    assert lora_ranks(b"MaxLoRARanks = Literal[1, RANK]\n") is None  # not only numbers: not known


def test_the_rank_fix_names_the_smallest_allowed_rank_or_says_none_serves_it(tmp_path):
    ranks = lora_ranks(LITERAL.encode())
    r100, r600, rinf = (adapter(tmp_path / f"r{r}", r) for r in (100, 600, "inf"))
    (tmp_path / "rinf" / "adapter_config.json").write_text('{"r": 1e400, "lora_alpha": 16, "target_modules": ["q"]}')
    [(message, fix)] = fixes(["--lora-modules", f"a={r100}"], ranks)
    assert "LoRA rank 100 is greater than max_lora_rank 16" in message
    assert fix == "give --max-lora-rank 128 (the smallest this vLLM allows at or above 100)"
    [(_, fix)] = fixes(["--max-lora-rank", "512", "--default-mm-loras", json.dumps({"audio": r600})], ranks)
    assert fix == "give an adapter of rank 512 or less: this vLLM allows no --max-lora-rank above 512"
    [(message, fix)] = fixes(["--lora-modules", f"a={rinf}"], ranks)
    assert "LoRA rank inf is greater than max_lora_rank 16" in message  # PEFTHelper.validate_legal's words
    assert fix == "give the adapter's own adapter_config.json, as PEFT saved it (its r a whole number)"
    [(_, fix)] = fixes(["--lora-modules", f"a={r100}"], None)
    assert fix == "give a --max-lora-rank of at least 100 that this vLLM allows (refusing another, it lists them)"
    assert fixes(["--max-lora-rank", "128", "--lora-modules", f"a={r100}"], ranks) == []


def test_run_reads_the_allowed_ranks_from_the_installed_tree(launch, tmp_path):
    """The reproduction: an adapter of r 100; the fix's --max-lora-rank then launches."""
    tree, library, command, env, marker = launch
    applied(tree, library)
    (tree / "vllm" / "config").mkdir(parents=True, exist_ok=True)
    (tree / "vllm" / "config" / "lora.py").write_text(f"from typing import Literal\n{LITERAL}")
    lora = ["--enable-lora", "--lora-modules", f"a={adapter(tmp_path / 'r100', 100)}"]
    _, done = patchkit_run(tree, library, [*command, *lora], env)
    said = " ".join(done.stdout.split())
    assert done.returncode == 1 and not os.path.exists(marker), said + done.stderr
    assert "give --max-lora-rank 128 (the smallest this vLLM allows at or above 100)" in said, said
    _, done = patchkit_run(tree, library, [*command, *lora, "--max-lora-rank", "128"], env)
    assert done.returncode == 7, done.stdout + done.stderr
