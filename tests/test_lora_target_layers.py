"""A static LoRA adapter (--lora-modules, --default-mm-loras) whose layers the target lacks: vLLM's
LoRAModel.from_local_checkpoint (check_unexpected_modules) refuses it once the model has loaded, so
preflight and run fail it first, judged from the target checkpoint's weight names (its index, or
its safetensors headers). What those names cannot tell (experts, embeddings, names vLLM does not
parse, a target whose weights are not here) is "cannot judge", never a pass and never a failure.
vLLM's own verdicts on a tiny model: tests/vllm_import/test_after_load_real.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import run_cli_read_only
from launch_fixtures import (  # noqa: F401  (the fixtures `launch` and `setup`)
    DEEPSEEK_V3,
    EMPTY_SAFETENSORS,
    applied,
    eagle3_and_tools,
    patchkit_run,
    plain_launch,
    write_model,
)

from patchkit.launch.command import parse
from patchkit.launch.late_files import late_file_findings

ATTENTION = ("q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
# a DeepSeek-V3 checkpoint's names (q_lora_rank set; a dense layer, then a MoE one; FP8 scales)
DEEPSEEK = [
    "model.embed_tokens.weight",
    *(f"model.layers.0.self_attn.{m}.weight" for m in ATTENTION),
    *(f"model.layers.0.mlp.{m}.{w}" for m in MLP for w in ("weight", "weight_scale_inv")),
    "model.layers.1.mlp.gate.weight",
    "model.layers.1.mlp.gate.e_score_correction_bias",
    *(f"model.layers.1.mlp.{e}.{m}.weight" for e in ("experts.0", "experts.1", "shared_experts") for m in MLP),
    *(f"model.layers.{i}.{n}.weight" for i in (0, 1) for n in ("input_layernorm", "post_attention_layernorm")),
    "model.norm.weight",
    "lm_head.weight",
]
# a Llama checkpoint whose lm_head is tied to its embeddings (no lm_head weight)
LLAMA = [
    "model.embed_tokens.weight",
    *(f"model.layers.0.self_attn.{m}.weight" for m in ("q_proj", "k_proj", "v_proj", "o_proj")),
    *(f"model.layers.0.mlp.{m}.weight" for m in MLP),
    "model.layers.0.input_layernorm.weight",
    "model.norm.weight",
]


def lora(*modules: str) -> list[str]:
    """The tensor names PEFT saves for LoRA on each module (a path under the model)."""
    return [f"base_model.model.{m}.lora_{ab}.weight" for m in modules for ab in "AB"]


def safetensors(names: list[str]) -> bytes:
    """A safetensors file of one F32 [2, 2] tensor under each name."""
    header = {
        name: {"dtype": "F32", "shape": [2, 2], "data_offsets": [16 * i, 16 * i + 16]} for i, name in enumerate(names)
    }
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + b"\x00" * (16 * len(names))


def adapter(directory: Path, names: list[str], **config: object) -> str:
    directory.mkdir(parents=True)
    base = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "bias": "none", "peft_type": "LORA"}
    (directory / "adapter_config.json").write_text(json.dumps({**base, **config}))
    (directory / "adapter_model.safetensors").write_bytes(safetensors(names))
    return str(directory)


def deepseek(directory: Path) -> str:
    """A sharded target: its index names every weight (the shards themselves are not read)."""
    directory.mkdir(parents=True)
    index = {
        "metadata": {},
        "weight_map": {name: f"model-0000{i % 2 + 1}-of-00002.safetensors" for i, name in enumerate(DEEPSEEK)},
    }
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return str(directory)


def llama(directory: Path) -> str:
    """A target of one weight file, whose header names its weights."""
    directory.mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(safetensors(LLAMA))
    return str(directory)


def verdicts(target: str, *options: str, release: str = "0.16.0") -> list[tuple[str, str]]:
    """(result, message) of each after-load finding for `vllm serve TARGET --enable-lora OPTIONS`."""
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", target, "--enable-lora", *options]
    found = late_file_findings(parse(argv, release), "command", lambda: "utf-8")
    return [(f.result, " ".join(f.message.split())) for f in found]


def result(target: str, path: str, **kw: str) -> str:
    """fail, cannot judge or pass: the adapter at `path` served on `target`."""
    results = {r for r, _ in verdicts(target, "--lora-modules", f"a={path}", **kw)}
    return "fail" if "fail" in results else "cannot judge" if "cannot judge" in results else "pass"


ATTN = [f"model.layers.0.self_attn.{m}" for m in ("q_proj", "k_proj", "v_proj", "o_proj")]
MLPS = [f"model.layers.0.mlp.{m}" for m in MLP]
MLA = [f"model.layers.0.self_attn.{m}" for m in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")]
# adapter -> (its tensor names, on DeepSeek-V3, on a tied Llama)
ADAPTERS = {
    "llama_qv": (lora(ATTN[0], ATTN[2]), "fail", "pass"),
    "llama_all": (lora(*ATTN, *MLPS), "fail", "pass"),
    "mlp": (lora(*MLPS, "model.layers.1.mlp.shared_experts.down_proj"), "pass", "pass"),
    "o_proj": (lora(ATTN[3]), "pass", "pass"),
    "mla": (lora(*MLA), "pass", "fail"),
    "router": (lora("model.layers.1.mlp.gate"), "pass", "fail"),
    # vLLM skips an embedding's base weights and any base_layer
    "base": (
        [
            *lora(MLA[0]),
            "base_model.model.model.embed_tokens.base_layer.weight",
            "base_model.model.lm_head.base_layer.weight",
        ],
        "pass",
        "fail",
    ),
    # embeddings are LoRA-able by the model class's embedding_modules, experts by its FusedMoE: not in the names
    "embed": (
        [
            "base_model.model.model.embed_tokens.lora_embedding_A",
            "base_model.model.model.embed_tokens.lora_embedding_B",
        ],
        "cannot judge",
        "cannot judge",
    ),
    "lm_head": (lora("lm_head"), "cannot judge", "cannot judge"),
    "experts": (lora("model.layers.1.mlp.experts.0.gate_proj"), "cannot judge", "cannot judge"),
    "unparsed": (
        ["base_model.model.model.layers.0.self_attn.o_proj.lora_A.default.weight"],
        "cannot judge",
        "cannot judge",
    ),
    # a layer no weight names fails whatever else the adapter holds
    "mixed": ([*lora("lm_head", "model.layers.1.mlp.experts.0.up_proj"), *lora(ATTN[0])], "fail", "cannot judge"),
    "empty": ([], "pass", "pass"),
}


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_an_adapter_is_failed_where_the_target_has_none_of_its_layers(tmp_path, name):
    names, on_deepseek, on_llama = ADAPTERS[name]
    path = adapter(tmp_path / name, names)
    assert result(deepseek(tmp_path / "ds"), path) == on_deepseek
    assert result(llama(tmp_path / "llama"), path) == on_llama


def test_the_failure_names_the_foreign_layers_and_says_what_to_do(tmp_path):
    path = adapter(tmp_path / "a", lora(*ATTN))
    said = verdicts(deepseek(tmp_path / "ds"), "--lora-modules", f"a={path}")
    assert said == [
        (
            "fail",
            f"--lora-modules {path}: it adapts k_proj, q_proj, v_proj, which no weight of the target names: "
            "vLLM refuses the launch once the model has loaded",
        )
    ]
    argv = ["vllm", "serve", str(tmp_path / "ds"), "--enable-lora", "--lora-modules", f"a={path}"]
    [found] = late_file_findings(parse(argv, "0.16.0"), "command", lambda: "utf-8")
    assert found.fix == "serve the adapter on the model it was trained for, or train one on this model's layers"


def test_a_modules_to_save_adapter_a_later_release_serves_is_never_failed(tmp_path):
    saved = [*lora(ATTN[0]), "base_model.model.score.weight"]
    path = adapter(tmp_path / "score", saved, modules_to_save=["score"])
    target = llama(tmp_path / "llama")
    assert result(target, path, release="0.32.0") == "cannot judge"
    assert result(target, path) == "fail"  # 0.16.0 refuses modules_to_save itself
    assert "modules_to_save" in verdicts(target, "--lora-modules", f"a={path}")[0][1]
    # LoRA on the classifier head a base model lacks: 0.32.0 on takes a layer its modules_to_save names
    both = adapter(tmp_path / "both", [*saved, *lora("score")], modules_to_save=["score"])
    assert result(target, both, release="0.32.0") == "cannot judge"


def test_a_target_whose_weight_names_are_not_read_is_not_judged(tmp_path):
    path = adapter(tmp_path / "a", lora(*ATTN))
    bins = tmp_path / "bins"
    bins.mkdir()
    (bins / "pytorch_model.bin").write_bytes(b"PK")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "model.safetensors").write_bytes(safetensors([]))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.safetensors.index.json").write_text("[1]")
    mistral = llama(tmp_path / "mistral")
    Path(mistral, "consolidated.safetensors").write_bytes(safetensors(["layers.0.attention.wq.weight"]))
    ds = deepseek(tmp_path / "ds")
    for target, options in (
        ("someorg/some-model", ()),  # a hub id vLLM downloads
        (str(bins), ()),
        (str(empty), ()),
        (str(broken), ()),
        (mistral, ()),
        (ds, ("--load-format", "sharded_state")),  # vLLM's own names (qkv_proj), not the model's
        (ds, ("--load-format", "gguf")),
    ):
        said = verdicts(target, *options, "--lora-modules", f"a={path}")
        assert [r for r, _ in said] == ["pass", "cannot judge"], (target, options, said)
        assert said[1][1].startswith(f"cannot judge: --lora-modules {path}: whether the target has its layers: "), said
    argv = ["vllm", "serve", "someorg/some-model", "--enable-lora", "--lora-modules", f"a={path}"]
    unread = late_file_findings(parse(argv, "0.16.0"), "command", lambda: "utf-8")[1]
    assert unread.fix == "check that the adapter was trained for this model"  # not "serve it on another model"


def test_an_adapter_whose_tensor_names_are_not_read_is_not_judged(tmp_path):
    path = adapter(tmp_path / "a", [])
    Path(path, "adapter_model.safetensors").unlink()
    Path(path, "adapter_model.bin").write_bytes(b"PK\x03\x04")
    said = verdicts(deepseek(tmp_path / "ds"), "--lora-modules", f"a={path}")
    assert said[1] == (
        "cannot judge",
        f"cannot judge: --lora-modules {path}: its layers: the tensor names of its adapter_model.bin are not read here",
    )


def test_a_relative_target_and_each_adapter_are_judged_from_the_launchs_directory(tmp_path, monkeypatch):
    deepseek(tmp_path / "ds")
    good, bad = adapter(tmp_path / "good", lora(*MLA)), adapter(tmp_path / "bad", lora(ATTN[0]))
    monkeypatch.chdir(tmp_path)
    mm = json.dumps({"audio": bad})
    said = verdicts("ds", "--lora-modules", f"g={good}", "--default-mm-loras", mm)
    assert [r for r, _ in said] == ["pass", "fail"], said
    assert said[1][1].startswith(f"--default-mm-loras {bad}: it adapts q_proj, which no weight"), said


def test_run_refuses_an_adapter_for_another_model_before_the_launch(launch, tmp_path):
    tree, library, command, env, marker = launch
    applied(tree, library)
    target = Path(command[2])  # the Kimi-K2.5 stand-in, a DeepSeek-V3 language model
    names = [f"language_model.{name}" for name in DEEPSEEK]
    (target / "model.safetensors").write_bytes(safetensors(names))
    for path, launched in (
        (adapter(tmp_path / "mla", lora(*MLA)), True),
        (adapter(tmp_path / "qv", lora(*ATTN)), False),
        (adapter(tmp_path / "head", lora(*MLA, "lm_head")), True),  # launched, its lm_head said not judged
    ):
        options = ["--enable-lora", "--max-lora-rank", "8", "--lora-modules", f"a={path}"]
        _, done = patchkit_run(tree, library, [*command, *options], env)
        said = " ".join(done.stdout.split())
        assert done.returncode == (7 if launched else 1) and marker.exists() is launched, said + done.stderr
        assert launched or "it adapts k_proj, q_proj, v_proj, which no weight of the target names" in said, said
        warned = " ".join(done.stderr.split())
        assert ("warning: command: cannot judge: --lora-modules" in warned) is path.endswith("head"), warned
        marker.unlink(missing_ok=True)


def test_what_is_not_judged_of_an_adapter_is_said_when_several_sets_are_judged(setup, tmp_path):
    """A cannot-judge beside a pass of its check was dropped where preflight merges several sets'
    findings (one pass per check was kept, and nothing after it)."""
    tree, lib, _, _ = setup
    target = Path(deepseek(tmp_path / "ds"))
    write_model(target, DEEPSEEK_V3)  # its config and tokenizer (and a model.safetensors the index leaves out)
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        (target / shard).write_bytes(EMPTY_SAFETENSORS)
    path = adapter(tmp_path / "a", lora(*MLA, "lm_head"))
    launch = ["vllm", "serve", str(target), "--enable-lora", "--max-lora-rank", "8", "--lora-modules", f"a={path}"]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json", "--", *launch
    )
    found = json.loads(done.stdout)["findings"]
    assert done.returncode == 0, found
    assert sorted((f["result"], f["message"]) for f in found if f["check"] == "command") == [
        (
            "cannot judge",
            f"cannot judge: --lora-modules {path}: its lm_head: vLLM takes or refuses them by the model's class, "
            "not its weight names",
        ),
        ("pass", f"--lora-modules {path}: its config and adapter_model.safetensors read as vLLM reads them"),
    ]
    text = run_cli_read_only("preflight", "--target", tree, "--patches", lib, "--no-import", "--", *launch)
    assert "1 cannot judge" in text.stdout + text.stderr, text.stdout + text.stderr
