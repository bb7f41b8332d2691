"""review40a D1: `run`'s fast path keeps a set's launch findings under a key over the command, the models'
config.json and the tree files the checks read; what else they read (a drafter's weights headers and
index, its directory's listing, the launch's transformers METADATA) is recorded as questions with their
answers (patchkit/launch/observed.py), and a warm run takes the kept findings only while each question
gets the same answer. Each test: a run that launches, one file changed (config.json as it was), and the
next run must refuse the launch as a fresh preflight does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import run_cli_writing
from launch_fixtures import (
    DEEPSEEK_V3,
    DRAFTER,
    REGISTRY,
    REGISTRY_PY,
    eagle3_tensors,
    patchkit_run,
    serve,
    write_eagle3_setup,
    write_model,
    write_weights,
)

import patchkit
from patchkit.launch import observed
from patchkit.launch.command import parse
from patchkit.launch.weights import drafter_tensors

MODELS = "vllm/model_executor/models"
# llama_eagle3.py's and llama.py's lines the drafter's weight rules read (0.16.0's layout, written here)
EAGLE3_PY = textwrap.dedent("""\
    qkv_input_size = 2 * self.hidden_size if layer_idx == 0 else self.hidden_size
    qkv_bias = getattr(config, "attention_bias", False)
    self.fc = ReplicatedLinear(self.config.hidden_size * 3, self.config.hidden_size)
    def load_weights(self, weights):
        for name, tensor in weights:
            name = name.replace("midlayer.", "layers.0.")
            if "t2d" in name:
                continue
            if "d2t" in name:
                name = name.replace("d2t", "draft_id_to_target_id")
            elif "lm_head" not in name:
                name = "model." + name
    """)
LLAMA_PY = 'bias_o_proj = attention_bias\nself.gate_up_proj = Linear(bias=getattr(config, "mlp_bias", False))\n'
# a drafter of its own: hidden 48, 3 heads of 16, one KV head, 40 draft ids, for a 7168-wide target
SMALL = {**DRAFTER, "hidden_size": 48, "num_attention_heads": 3, "num_key_value_heads": 1}
SMALL |= {"intermediate_size": 80, "draft_vocab_size": 40}
TENSORS = eagle3_tensors(48, 16, 80, 40, 7168, None)


@pytest.fixture
def warm(tmp_path):
    """(tree, library, target, drafter, env, marker): the eagle3 set applied, the tree's drafter files
    as 0.16.0 lays them out, a stand-in `vllm` that touches `marker`, a cache of the test's own."""
    tree, library = write_eagle3_setup(tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    (tree / MODELS / "llama_eagle3.py").write_text(EAGLE3_PY)
    (tree / MODELS / "llama.py").write_text(LLAMA_PY)
    bin_dir, marker = tmp_path / "bin", tmp_path / "launched"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f"#!/bin/sh\ntouch {marker}\nexit 7\n")
    (bin_dir / "vllm").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env |= {"PATCHKIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PATCHKIT_DEBUG", None)
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", SMALL)
    write_weights(drafter, TENSORS)
    return tree, library, target, drafter, env, marker


def launch(target: Path, drafter: Path, **spec: object) -> list[str]:
    given = {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3, **spec}
    return ["vllm", "serve", str(target), "--speculative-config", json.dumps(given)]


def run(warm, command: list[str]) -> tuple[int, str]:
    """`patchkit run` of `command`: (its exit status, its stdout), the marker removed after a launch."""
    tree, library, _, _, env, marker = warm
    done = patchkit_run(tree, library, command, env)[1]
    launched = marker.exists()
    assert launched == (done.returncode == 7), (done.returncode, done.stdout, done.stderr)
    marker.unlink(missing_ok=True)
    return done.returncode, done.stdout


def kept_entries(warm) -> int:
    return len(list(Path(warm[4]["PATCHKIT_CACHE_DIR"], "launch-findings").glob("*.json")))


@pytest.mark.parametrize(
    ("changed", "says"),
    [
        ({"midlayer.self_attn.v_proj.bias": [16]}, "which vLLM's drafter has no parameter for"),  # a head re-saved
        ({"fc.weight": [48, 3 * 4096]}, "where its config.json builds [48, 21504]"),  # trained for another target
        ({"layers.1.mlp.up_proj.weight": [80, 48]}, "past its num_hidden_layers 1"),
    ],
)
def test_a_drafters_weights_replaced_after_a_run_are_judged_again(warm, changed, says):
    """The drafter's model.safetensors replaced, its config.json as it was: the warm run must not launch
    on the verdict kept for the weights before."""
    _, _, target, drafter, _, _ = warm
    command = launch(target, drafter)
    assert run(warm, command)[0] == 7
    assert run(warm, command)[0] == 7 and kept_entries(warm) == 1  # warm: the kept findings answer
    write_weights(drafter, {**TENSORS, **changed})
    status, stdout = run(warm, command)
    assert status == 1 and "drafter-architecture" in stdout and says in stdout, stdout
    write_weights(drafter, TENSORS)
    assert run(warm, command)[0] == 7


def test_a_drafters_shard_index_changed_after_a_run_is_judged_again(warm):
    """vLLM loads the shards its model.safetensors.index.json names: an index that names one more (whose
    tensor the drafter has no parameter for) fails the launch, the shards on disk as they were."""
    _, _, target, drafter, _, _ = warm
    write_weights(drafter, {"lm_head.bias": [40]})
    (drafter / "model.safetensors").rename(drafter / "extra.safetensors")
    write_weights(drafter, TENSORS)
    index = drafter / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"d2t": "model.safetensors"}}))
    command = launch(target, drafter)
    assert run(warm, command)[0] == 7
    index.write_text(json.dumps({"weight_map": {"d2t": "model.safetensors", "lm_head.bias": "extra.safetensors"}}))
    status, stdout = run(warm, command)
    assert status == 1 and "its weights hold lm_head.bias (extra.safetensors)" in stdout, stdout


# quantization/__init__.py and a method's module as the tree maps them (0.16.0's layout, written here)
QUANTIZATION = "vllm/model_executor/layers/quantization"
QUANT_INIT = textwrap.dedent("""\
    def get_quantization_config(quantization: str):
        from .gptq import GPTQConfig
        method_to_config = {"gptq": GPTQConfig}
        return method_to_config[quantization]
    """)
GPTQ = 'class GPTQConfig:\n    def get_config_filenames():\n        return ["quantize_config.json"]\n'


@pytest.mark.parametrize(
    ("change", "says"),
    [
        pytest.param(lambda d: (d / "v2-quantize_config.json").write_text("{}"), "holds 2 quantization", id="added"),
        pytest.param(lambda d: (d / "quantize_config.json").unlink(), "no quantize_config.json", id="removed"),
    ],
)
def test_a_drafters_quantization_files_changed_after_a_run_are_listed_again(warm, change, says):
    """vLLM's get_quant_config globs the drafter's directory for the one *.json the method names: a
    second one added, or the one removed, after a run that launched, fails the next."""
    tree, _, target, drafter, _, _ = warm
    (tree / QUANTIZATION).mkdir(parents=True, exist_ok=True)
    (tree / QUANTIZATION / "__init__.py").write_text(QUANT_INIT)
    (tree / QUANTIZATION / "gptq.py").write_text(GPTQ)
    (drafter / "quantize_config.json").write_text('{"bits": 4}')
    command = launch(target, drafter, quantization="gptq")
    assert run(warm, command)[0] == 7
    change(drafter)
    status, stdout = run(warm, command)
    assert status == 1 and "drafter-architecture" in stdout and says in stdout, stdout


BACKEND_BASE = textwrap.dedent("""\
    class Base(nn.Module, VllmModel, SupportsPP, SupportsEagle3):
        def set_aux_hidden_state_layers(self, layers):
            self.check_version("4.99.1", "Eagle3 support")
    """)
BACKEND_TABLE = (
    '_TRANSFORMERS_BACKEND_MODELS = {"TransformersForCausalLM": ("transformers", "TransformersForCausalLM")}\n'
)


def test_the_launchs_transformers_changed_after_a_run_is_read_again(warm):
    """Under --model-impl transformers vLLM builds its Transformers backend, whose EAGLE-3 needs the
    transformers the backend names: the launch's transformers downgraded after a run (its METADATA, a
    file of the site, not of the tree the checks read) fails the next."""
    tree, _, target, _, _, _ = warm
    (tree / MODELS / "transformers").mkdir()
    (tree / MODELS / "transformers" / "base.py").write_text(BACKEND_BASE)
    (tree / REGISTRY).write_text(REGISTRY_PY + BACKEND_TABLE)
    info = tree / "transformers-4.99.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.99.1\n")
    dense = write_model(target.parent / "dense", {**DEEPSEEK_V3, "n_routed_experts": 0})
    command = serve(dense, write_model(target.parent / "plain-drafter", DRAFTER), "--model-impl", "transformers")
    assert run(warm, command)[0] == 7
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.98.0\n")
    status, stdout = run(warm, command)
    assert status == 1 and "needs transformers>=4.99.1" in stdout and "has 4.98.0" in stdout, stdout


# `run` with its exec replaced and each file-system access made while the set's launch findings are found
# (inside observed.recording) listed on stderr: opens, listings (audit events) and stats (os.stat, os.lstat).
TRACED_RUN = """
import json, os, sys
from contextlib import contextmanager
from patchkit.cli.main import main
from patchkit.launch import observed
touched, active = [], []
def hook(event, args):
    if active and event in ("open", "os.listdir", "os.scandir", "glob.glob") and isinstance(args[0], (str, bytes, os.PathLike)):
        touched.append([event, os.path.abspath(os.fsdecode(args[0]))])
sys.addaudithook(hook)
def traced(real):
    def stat(path, *args, **kwargs):
        if active and not isinstance(path, int):
            touched.append([real.__name__, os.path.abspath(os.fsdecode(path))])
        return real(path, *args, **kwargs)
    return stat
os.stat, os.lstat = traced(os.stat), traced(os.lstat)
plain = observed.recording
@contextmanager
def recording():
    with plain() as seen:
        active.append(1)
        try:
            yield seen
        finally:
            active.clear()
observed.recording = recording
os.execvp = lambda *_: sys.exit(0)
sys.argv = ["patchkit", "run", *sys.argv[1:]]
try:
    main()
finally:
    print(json.dumps(touched), file=sys.stderr)
"""


def traced_run(warm, command: list[str]) -> tuple[list[list[str]], dict]:
    """(each access the set's launch findings made, the kept entry): a cold run, its findings kept."""
    tree, library, _, _, env, _ = warm
    args = ["--target", str(tree), "--patches", str(library), "--", *command]
    done = subprocess.run([sys.executable, "-P", "-c", TRACED_RUN, *args], capture_output=True, text=True, env=env)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # launched or refused: its findings kept
    (entry,) = Path(env["PATCHKIT_CACHE_DIR"], "launch-findings").glob("*.json")
    return json.loads(done.stderr.strip().splitlines()[-1]), json.loads(entry.read_text())["entry"]


def uncovered(touched: list[list[str]], kept: dict, places: list[Path], own: list[Path]) -> list[list[str]]:
    """The accesses no recorded question or tree read accounts for: an open, a file read (of the tree,
    or a read question); a listing, a glob or walk question of that directory; a stat, any question's
    path, a directory on the way to one, or what a listing holds. A question noted whole (the launch's
    METADATA, its Python) accounts for what is under the launch's import path and PATH (`places`);
    Python's and patchkit's own modules (its code is in the key) and the set's files (hashed into the
    key) are `own`."""
    read = [Path(kept["root"], path) for path in kept["reads"]]
    named, listed, whole = list(read), [], list(own)
    for question in kept["seen"]:
        kind, *args = json.loads(question)
        if kind in ("glob", "walk"):
            listed.append(Path(os.path.dirname(args[0]) if kind == "glob" else args[0]))
        elif kind in ("distribution", "launch_python"):
            whole += places
        else:
            (read if kind == "read" else named).append(Path(args[0]))
    named += read + listed

    def covered(event: str, path: Path) -> bool:
        if any(path.is_relative_to(p) for p in whole):
            return True
        if event == "open":
            return path in read
        if event in ("os.scandir", "os.listdir", "glob.glob"):
            return path in listed or (path.parent in listed and event == "glob.glob")
        return any(p.is_relative_to(path) for p in named) or any(path.is_relative_to(p) for p in listed)

    return [[event, path] for event, path in touched if not covered(event, Path(path))]


def test_every_read_the_launch_checks_make_is_a_tree_read_or_a_recorded_question(warm):
    """The class of D1: while the set's launch findings are found, every file opened, listed or
    statted outside Python's own modules is a tree file read through LaunchContext.read or a question
    recorded through patchkit.launch.observed (else a change to it would leave the kept verdict
    standing). The launch reaches every rule that reads beyond config.json: a drafter with an index
    and shards, a quantized drafter's directory listed, the Transformers backend's transformers."""
    tree, library, target, drafter, _, _ = warm
    (tree / MODELS / "transformers").mkdir()
    (tree / MODELS / "transformers" / "base.py").write_text(BACKEND_BASE)
    (tree / REGISTRY).write_text(REGISTRY_PY + BACKEND_TABLE)
    info = tree / "transformers-4.90.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.90.0\n")
    (drafter / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"d2t": "model.safetensors"}}))
    (tree / QUANTIZATION).mkdir(parents=True, exist_ok=True)
    (tree / QUANTIZATION / "__init__.py").write_text(QUANT_INIT)
    (tree / QUANTIZATION / "gptq.py").write_text(GPTQ)
    (drafter / "quantize_config.json").write_text('{"bits": 4}')
    dense = write_model(target.parent / "dense", {**DEEPSEEK_V3, "n_routed_experts": 0})
    places = [tree, warm[4]["PATH"].split(os.pathsep)[0]]
    for command in (
        [*launch(dense, drafter), "--model-impl", "transformers"],
        launch(target, drafter, quantization="gptq"),
    ):
        shutil.rmtree(warm[4]["PATCHKIT_CACHE_DIR"], ignore_errors=True)
        touched, kept = traced_run(warm, command)
        kinds = {json.loads(question)[0] for question in kept["seen"]}
        assert kinds >= ({"glob", "isdir"} if "quantization" in command[-1] else {"read", "walk", "distribution"})
        own = [Path(sys.prefix), Path(sys.base_prefix), Path(patchkit.__file__).parent.parent, library]
        assert uncovered(touched, {**kept, "root": tree}, [Path(p) for p in places], own) == []


def _flip_header_byte(directory: Path, name: str) -> None:
    """A shape's digit in the file's header changed (its length as it was)."""
    path = directory / name
    data = path.read_bytes()
    at = data.index(b"[16, 96]")
    path.write_bytes(data[:at] + b"[17, 96]" + data[at + 8 :])


CHANGES = {
    "a header's shape": lambda d: _flip_header_byte(d, "model.safetensors"),
    "a shard added": lambda d: (d / "more.safetensors").write_bytes((d / "model.safetensors").read_bytes()),
    "the shard removed": lambda d: (d / "model.safetensors").unlink(),
    "an index added": lambda d: (d / "model.safetensors.index.json").write_text('{"weight_map": {}}'),
    "Mistral's files below it": lambda d: (
        (d / "sub").mkdir() or (d / "sub" / "consolidated.safetensors").write_text("")
    ),
    "the directory made a file": lambda d: shutil.rmtree(d) or d.write_text(""),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_recording_of_the_drafters_weights_fails_for_each_change_to_what_they_were_read_from(tmp_path, change):
    """drafter_tensors, recorded: the recording holds while the drafter's files are as read, and fails
    for any change that could change what it reads (each one alone), which is what makes `run` judge
    the launch again."""
    drafter = write_model(tmp_path / "drafter", SMALL)
    write_weights(drafter, TENSORS)
    spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3})
    command = parse(["vllm", "serve", str(tmp_path), "--speculative-config", spec], "0.16.0")
    with observed.recording() as seen:
        tensors = drafter_tensors(command)
    assert tensors is not None and tensors["d2t"] == ("model.safetensors", [40])
    assert observed.holds(json.loads(json.dumps(seen)))  # as kept: JSON
    CHANGES[change](drafter)
    assert not observed.holds(seen)


def test_a_drafters_modelopt_quantization_file_removed_after_a_run_is_looked_for_again(warm):
    """ModelOpt's hf_quant_config.json beside config.json makes vLLM read the drafter as quantized (its
    weights' names then not judged); removed after a run, the weights are judged again, and a tensor the
    drafter has no parameter for fails the launch."""
    _, _, target, drafter, _, _ = warm
    write_weights(drafter, {**TENSORS, "midlayer.mlp.gate_proj.bias": [80]})
    (drafter / "hf_quant_config.json").write_text('{"quantization": {"quant_algo": "FP8"}}')
    command = launch(target, drafter)
    assert run(warm, command)[0] == 7
    (drafter / "hf_quant_config.json").unlink()
    status, stdout = run(warm, command)
    assert status == 1 and "midlayer.mlp.gate_proj.bias" in stdout and "no parameter for" in stdout, stdout


PLUGIN = 'from vllm.tool_parsers import ToolParserManager\n@ToolParserManager.register_module("mine")\nclass Mine:\n    pass\n'


def test_a_tool_parser_plugin_changed_after_a_run_is_read_again(warm, tmp_path):
    """vLLM imports --tool-parser-plugin before it looks --tool-call-parser up: a run that launched on
    the plugin's own parser name (not judged: patchkit runs no plugin), then the plugin renamed its
    parser, then removed; each next run reads the plugin again and refuses the launch vLLM refuses."""
    tree, _, target, drafter, _, _ = warm
    (tree / "vllm" / "tool_parsers").mkdir()
    (tree / "vllm" / "tool_parsers" / "__init__.py").write_text('_TOOL_PARSERS_TO_REGISTER = {"kimi_k2": ("k", "K")}\n')
    plugin = tmp_path / "mine.py"
    plugin.write_text(PLUGIN)
    tools = ["--enable-auto-tool-choice", "--tool-call-parser", "mine", "--tool-parser-plugin", str(plugin)]
    command = [*launch(target, drafter), *tools]
    assert run(warm, command)[0] == 7 and run(warm, command)[0] == 7  # warm: the kept findings answer
    plugin.write_text(PLUGIN.replace('"mine"', '"other"'))  # still not judged: it may register mine otherwise
    assert run(warm, command)[0] == 7
    plugin.unlink()  # vLLM logs the failed import and refuses the name
    status, stdout = run(warm, command)
    assert status == 1 and "--tool-call-parser mine: vLLM 0.16.0 registers no tool-call parser" in stdout, stdout
