"""A launch whose model weights (or a LoRA adapter) preflight read and found loadable: its verdict
counts that check as passed, and -v shows it; it never says "nothing judged: no check applies to
this launch", which is what a launch nobody looked at says."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_cli_read_only
from launch_fixtures import DEEPSEEK_V3, WEIGHTS, stock_files, write_model, write_tree

ADAPTER = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "bias": "none", "peft_type": "LORA"}


def preflight(tree: Path, *launch: str, verbose: bool = False):
    extra = ["-v"] if verbose else []
    return run_cli_read_only("preflight", *extra, "--target", tree, "--no-import", "--", "vllm", "serve", *launch)


def test_loadable_weights_and_adapter_are_counted_as_passed_checks(tmp_path):
    tree = write_tree(tmp_path / "site", "0.16.0", stock_files("0.16.0"))
    model = write_model(tmp_path / "m", DEEPSEEK_V3)
    done = preflight(tree, str(model))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "preflight: ok: 1 check passed (-v shows each)" in done.stdout.splitlines(), done.stdout
    shown = preflight(tree, str(model), verbose=True)
    assert f"model '{model}': its weights are there, as vLLM's loader reads them" in shown.stdout, shown.stdout
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps(ADAPTER))
    (adapter / "adapter_model.safetensors").write_bytes((model / WEIGHTS).read_bytes())
    both = preflight(tree, str(model), "--enable-lora", "--lora-modules", f"a={adapter}")
    assert "preflight: ok: 2 checks passed (-v shows each)" in both.stdout.splitlines(), both.stdout
    # a bad weight file: the same launch fails that check, and the adapter's pass is still counted
    (model / WEIGHTS).write_bytes(b"\x02" + b"\x00" * 7 + b"[]")
    failed = preflight(tree, str(model), "--enable-lora", "--lora-modules", f"a={adapter}")
    assert failed.returncode == 1, failed.stdout
    assert "preflight: FAILED: 1 of 2 checks failed, 1 passed (-v shows each)" in failed.stdout, failed.stdout
