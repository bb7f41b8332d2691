"""The safetensors headers preflight parses have a bound per model (review36 W8: 100 shards of 14 MB
headers took 5 minutes): past it, the rest are judged by their lengths alone, said in one note. And
a weight file's name is said as other read-back names are (review36 L8: a newline in it split the
message's line). Counted, never timed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers import run_cli_in_process
from launch_fixtures import LFS_POINTER, index_of, safetensors_file, stock_files, write_model, write_tree

from patchkit.launch import weights
from patchkit.launch.command import parse
from patchkit.launch.late_files import late_file_findings

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
ADAPTER = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "bias": "none", "peft_type": "LORA"}


def sharded(directory: Path, shards: int, tensors: int) -> Path:
    """A model of `shards` safetensors shards (hard links of one), each a header naming `tensors` tensors."""
    model = write_model(directory, LLAMA)
    header = {f"layer.{i}.w": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(tensors)}
    names = [f"model-{i:05}-of-{shards:05}.safetensors" for i in range(shards)]
    (model / names[0]).write_bytes(safetensors_file(header, tensors))
    for name in names[1:]:
        os.link(model / names[0], model / name)
    (model / "model.safetensors.index.json").write_text(index_of(*names))
    return model


def test_header_bytes_parsed_stop_at_the_models_budget_and_a_note_says_so(tmp_path, monkeypatch):
    model = sharded(tmp_path / "m", 10, 2_000)
    length = int.from_bytes((model / "model-00000-of-00010.safetensors").read_bytes()[:8], "little")
    read: list[int] = []

    def counted(path, limit, **kwargs):
        data = real(path, limit, **kwargs)
        read.append(len(data))
        return data

    real = weights.read_regular
    monkeypatch.setattr(weights, "read_regular", counted)
    monkeypatch.setattr(weights, "HEADER_BUDGET", 3 * length + length // 2)  # three headers and a half
    tree = write_tree(tmp_path / "site", "0.16.0", stock_files("0.16.0"))
    done = run_cli_in_process("preflight", "--target", tree, "--no-import", "--", "vllm", "serve", model)
    assert done.returncode == 0, done.stdout + done.stderr
    headers = [n for n in read if n > 64]  # the rest: each file's first bytes (a Git LFS pointer?)
    assert headers == [8 + length] * 3, read
    assert sum(read) < 3 * (8 + length) + 10 * 64
    said = " ".join(done.stdout.split()) + " " + " ".join(done.stderr.split())
    assert (
        f"model '{model}': its weights are there, as vLLM's loader reads them; the headers of 7 of its 10 "
        f"safetensors files were judged by their length alone (patchkit parses up to 0 MB of headers a model)"
    ) in said, said
    # within the bound (the real one: 256 MB), every header is parsed and nothing more is said
    monkeypatch.setattr(weights, "HEADER_BUDGET", 256 << 20)
    read.clear()
    done = run_cli_in_process("preflight", "--target", tree, "--no-import", "--", "vllm", "serve", model)
    assert done.returncode == 0 and [n for n in read if n > 64] == [8 + length] * 10
    assert "judged by their length alone" not in done.stdout + done.stderr


def test_the_budget_is_each_models_own_and_a_file_past_it_is_still_judged_by_its_length(tmp_path, monkeypatch):
    model = sharded(tmp_path / "m", 4, 100)
    length = int.from_bytes((model / "model-00000-of-00004.safetensors").read_bytes()[:8], "little")
    monkeypatch.setattr(weights, "HEADER_BUDGET", length)  # one header parsed
    assert weights.weights_problem(str(model), "auto") is None
    last = model / "model-00003-of-00004.safetensors"
    last.unlink()
    last.write_bytes(safetensors_file({"w": "x" * 100}, 0)[:20])  # cut short: its length says so, unparsed
    assert "model-00003-of-00004.safetensors is cut short" in str(weights.weights_problem(str(model), "auto"))


def test_a_weight_file_name_with_a_newline_is_said_on_one_line(tmp_path):
    """review36 L8: `model-\\x1b[31mRED\\nX.safetensors`, a Git LFS pointer: ESC was escaped, the
    newline split the models line in two."""
    model = write_model(tmp_path / "ctl", LLAMA)
    (model / "model-\x1b[31mRED\nX.safetensors").write_text(LFS_POINTER)
    tree = write_tree(tmp_path / "site", "0.16.0", stock_files("0.16.0"))
    done = run_cli_in_process(
        "preflight", "--target", tree, "--no-import", "--format", "json", "--", "vllm", "serve", model
    )
    [finding] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "models"]
    assert finding["message"].startswith(f"model '{model}': model-\\x1b[31mRED\\x0aX.safetensors is a Git LFS"), finding
    assert "\n" not in finding["message"] and "\x1b" not in finding["message"]
    shown = run_cli_in_process("preflight", "--target", tree, "--no-import", "--", "vllm", "serve", model)
    lines = [line for line in (shown.stdout + shown.stderr).splitlines() if "RED" in line]
    assert len(lines) == 1 and "RED\\x0aX.safetensors is a Git LFS pointer" in lines[0], shown.stdout + shown.stderr


def test_the_adapters_headers_share_one_budget_a_launch(tmp_path, monkeypatch):
    """W8's class: --lora-modules naming thousands of adapters (or one adapter thousands of times)
    parsed each header whole; they share the bound, and one judged past it says so."""
    header = {f"lora.{i}.w": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(500)}
    weights_file = safetensors_file(header, 500)
    length = int.from_bytes(weights_file[:8], "little")
    modules = []
    for i in range(5):
        adapter = tmp_path / f"a{i}"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text(json.dumps(ADAPTER))
        (adapter / "adapter_model.safetensors").write_bytes(weights_file)
        modules.append(f"a{i}={adapter}")
    read: list[int] = []
    real = weights.read_regular

    def counted(path, limit, **kwargs):
        data = real(path, limit, **kwargs)
        read.append(len(data))
        return data

    monkeypatch.setattr(weights, "read_regular", counted)
    monkeypatch.setattr(weights, "HEADER_BUDGET", 2 * length + 10)
    command = parse(["vllm", "serve", "m", "--enable-lora", "--max-lora-rank", "8", "--lora-modules", *modules])
    found = late_file_findings(command, "command", lambda: "utf-8")
    assert all(f.ok for f in found), found
    found = [f for f in found if f.result == "pass"]  # each adapter's layers (no LoRA names): not judged
    assert len(found) == 5, found
    assert [n for n in read if n > 64] == [8 + length] * 2, read
    assert [f.message.endswith("patchkit parses up to 0 MB of adapter headers)") for f in found] == [False] * 2 + [
        True
    ] * 3, found
