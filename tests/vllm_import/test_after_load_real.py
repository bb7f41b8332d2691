"""Opt-in (`make test-vllm`): what preflight refuses of a launch's TLS and --lora-modules
(patchkit/launch/tls.py, patchkit/launch/late_files.py) is what the real uvicorn and vLLM refuse
once the model has loaded: uvicorn.Config(...).load() with the same SSL arguments, and vLLM's own
OpenAIServingModels.init_static_loras over an engine whose add_lora runs the worker's steps
(LoRA enabled, get_adapter_absolute_path, PEFTHelper.from_local_dir(...).validate_legal)."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
from launch_fixtures import (
    EMPTY_SAFETENSORS,
    GENERATION_CASES,
    LFS_POINTER,
    ONE_TENSOR,
    safetensors_file,
    tls_files,
    torch_file,
)
from vllm_overlay import TINY_DEEPSEEK_V3, TINY_LLAMA, ask_vllm

from patchkit.launch.command import parse
from patchkit.launch.late_files import late_file_findings, lora_ranks

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = [
    pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]

ASK_VLLM = textwrap.dedent("""\
    import asyncio, json, os, sys, types
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # an encrypted key's passphrase prompt reads nothing
    try:
        os.setsid()  # no terminal to ask it on either
    except OSError:
        pass
    import uvicorn
    from vllm.config.lora import LoRAConfig
    from vllm.entrypoints.openai.models.protocol import LoRAModulePath
    from vllm.entrypoints.openai.models.serving import OpenAIServingModels
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.peft_helper import PEFTHelper
    from vllm.lora.utils import get_adapter_absolute_path
    from vllm.entrypoints.utils import process_lora_modules

    def tls(kwargs):
        try:
            uvicorn.Config(app=lambda scope, receive, send: None, **kwargs).load()
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    class Engine:
        def __init__(self, enable, rank):
            self.enable, self.config = enable, LoRAConfig(max_lora_rank=rank)
            self.input_processor = self.io_processor = self.renderer = None
            self.model_config = types.SimpleNamespace(max_model_len=1024)

        async def add_lora(self, request):  # the worker's _ensure_lora_enabled, then _load_adapter's reading
            if not self.enable:
                raise RuntimeError("LoRA is not enabled. Use --enable-lora to enable LoRA.")
            path = get_adapter_absolute_path(request.lora_path)
            peft = PEFTHelper.from_local_dir(path, None)
            peft.validate_legal(self.config)
            LoRAModel.from_local_checkpoint(path, {"q_proj"}, peft, device="cpu")

    def lora(case):
        modules = [LoRAModulePath(name=n, path=p) for n, p in case["modules"]]
        # init_app_state's merge: default_mm_loras only when LoRA is on (else no LoRAConfig)
        modules = process_lora_modules(modules or None, case.get("mm") if case["enable"] else {})
        models = OpenAIServingModels(Engine(case["enable"], case["rank"]), [], lora_modules=modules)
        try:
            asyncio.run(models.init_static_loras())
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    cases = json.loads(sys.argv[1])
    print(json.dumps([tls(c["tls"]) if "tls" in c else lora(c) for c in cases]))
""")


OPTION = {"ssl_keyfile": "--ssl-keyfile", "ssl_certfile": "--ssl-certfile", "ssl_ca_certs": "--ssl-ca-certs"}
OPTION |= {"ssl_ciphers": "--ssl-ciphers", "ssl_cert_reqs": "--ssl-cert-reqs"}


def make_tls(directory: Path) -> dict[str, str]:
    return {p.name: str(p) for p in tls_files(directory).iterdir()}


def tls_cases(f: dict[str, str]) -> list[dict[str, object]]:
    good = {"ssl_certfile": f["cert.pem"], "ssl_keyfile": f["key.pem"]}
    return [
        {"ssl_keyfile": f["key.pem"]},
        {"ssl_certfile": f["cert.pem"]},
        {"ssl_certfile": f["both.pem"]},
        good,
        {**good, "ssl_keyfile": f["other.pem"]},
        {**good, "ssl_certfile": f["junk.pem"]},
        {**good, "ssl_keyfile": f["enc.pem"]},
        {**good, "ssl_ca_certs": f["cert2.pem"], "ssl_cert_reqs": 2},
        {**good, "ssl_ca_certs": f["key.pem"]},
        {"ssl_ca_certs": "/nonexistent/ca.pem"},
        {**good, "ssl_ciphers": "NO-SUCH-CIPHER"},
        {**good, "ssl_cert_reqs": 5},
        {**good, "ssl_ciphers": "ECDHE+AESGCM:!aNULL"},
    ]


def adapters(root: Path) -> dict[str, str]:
    base = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "bias": "none"}
    configs = {
        "good": json.dumps(base),
        "r64": json.dumps({**base, "r": 64}),
        "bias": json.dumps({**base, "bias": "all"}),
        "dora": json.dumps({**base, "use_dora": True}),
        "saved": json.dumps({**base, "modules_to_save": ["lm_head"]}),
        "zero": json.dumps({**base, "r": 0}),
        "bare": json.dumps({"r": 8}),
        "list": "[1, 2]",
        "broken": "{not json",
        "noweights": json.dumps(base),
        "lfs": json.dumps(base),
        "cut": json.dumps(base),
        "lfsbin": json.dumps(base),
        "goodbin": json.dumps(base),
    }
    weights = {  # the first weight file from_local_checkpoint opens (review35 N6's class)
        "noweights": None,
        "lfs": ("adapter_model.safetensors", LFS_POINTER.encode()),
        "cut": ("adapter_model.safetensors", safetensors_file(ONE_TENSOR, 5)),
        "lfsbin": ("adapter_model.bin", LFS_POINTER.encode()),
        "goodbin": ("adapter_model.bin", torch_file()),
    }
    for name, text in configs.items():
        (root / name).mkdir(parents=True)
        (root / name / "adapter_config.json").write_text(text)
        weight = weights.get(name, ("adapter_model.safetensors", EMPTY_SAFETENSORS))  # holding no tensor
        if weight is not None:
            (root / name / weight[0]).write_bytes(weight[1])
    return {name: str(root / name) for name in configs}


def lora_cases(a: dict[str, str]) -> list[dict[str, object]]:
    cases: list[dict[str, object]] = [
        {"modules": [["a", a["good"]]], "enable": True, "rank": 16},
        {"modules": [["a", a["good"]]], "enable": False, "rank": 16},
        {"modules": [["a", a["good"]], ["a", a["good"]]], "enable": True, "rank": 16},
        {"modules": [["a", a["good"]], ["b", a["good"]]], "enable": True, "rank": 16},
        {"modules": [["a", a["r64"]]], "enable": True, "rank": 32},
        {"modules": [["a", a["r64"]]], "enable": True, "rank": 64},
        {"modules": [["a", "someorg/not-cached"]], "enable": True, "rank": 16},
        {"modules": [["a", "someorg/cached"]], "enable": True, "rank": 16},
        {"modules": [["a", "someorg/empty"]], "enable": True, "rank": 16},
        {"modules": [], "mm": {"audio": a["good"], "image": a["r64"]}, "enable": False, "rank": 16},
        {"modules": [], "mm": {"audio": a["good"], "image": a["r64"]}, "enable": True, "rank": 16},
        {"modules": [["audio", a["good"]]], "mm": {"audio": a["good"]}, "enable": True, "rank": 16},
        {"modules": [["a", a["good"]]], "mm": {"audio": a["good"]}, "enable": True, "rank": 16},
    ]
    others = ("bias", "dora", "saved", "zero", "bare", "list", "broken", "noweights", "lfs", "cut", "lfsbin", "goodbin")
    return cases + [{"modules": [["a", a[name]]], "enable": True, "rank": 16} for name in others]


def cached(cache: Path, repo: str, config: str | None) -> None:
    """A hub cache entry of `repo` whose main snapshot holds `config` as adapter_config.json (None: not)."""
    storage = cache / ("models--" + repo.replace("/", "--"))
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text("c0ffee")
    (storage / "snapshots" / "c0ffee").mkdir(parents=True)
    if config is not None:
        (storage / "snapshots" / "c0ffee" / "adapter_config.json").write_text(config)
        (storage / "snapshots" / "c0ffee" / "adapter_model.safetensors").write_bytes(b"\x02" + b"\x00" * 7 + b"{}")


def refused_by_patchkit(case: dict[str, object]) -> bool:
    launch = ["env", "HF_HUB_OFFLINE=1", str(VLLM_PYTHON), "-m", "vllm.entrypoints.cli.main", "serve", "m"]
    if "tls" in case:
        tls = case["tls"]
        assert isinstance(tls, dict)
        options = [str(x) for key, value in tls.items() for x in (OPTION[key], value)]
    else:
        enable = ["--enable-lora"] if case["enable"] else []
        modules = case["modules"]
        assert isinstance(modules, list)
        options = [*enable, "--max-lora-rank", str(case["rank"])]
        options += ["--lora-modules", *(f"{n}={p}" for n, p in modules)] if modules else []
        options += ["--default-mm-loras", json.dumps(case["mm"])] if "mm" in case else []
    findings = late_file_findings(parse([*launch, *options], "0.16.0"), "command", lambda: "utf-8")
    return any(not f.ok for f in findings)


def test_tls_and_static_adapters_are_refused_exactly_where_uvicorn_and_vllm_refuse_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cached(tmp_path / "hub", "someorg/cached", json.dumps({"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}))
    cached(tmp_path / "hub", "someorg/empty", None)
    cases = [{"tls": c} for c in tls_cases(make_tls(tmp_path / "tls"))] + lora_cases(adapters(tmp_path / "lora"))
    vllm_said = ask_vllm(ASK_VLLM, json.dumps(cases))
    assert isinstance(vllm_said, list)
    disagreements = [
        (case, said) for case, said in zip(cases, vllm_said, strict=True) if refused_by_patchkit(case) != bool(said)
    ]
    assert disagreements == []
    assert sum(bool(s) for s in vllm_said) >= 16, vllm_said  # most cases are refusals, each of its own kind


ASK_GENERATION = textwrap.dedent("""\
    import json, sys
    from vllm.transformers_utils.config import try_get_generation_config

    def refused(value):  # ModelConfig.try_get_generation_config for a value other than auto / vllm
        try:
            try_get_generation_config(value, trust_remote_code=False, config_format="auto")
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    print(json.dumps([refused(value) for value in json.loads(sys.argv[1])]))
""")

LLAMA = {key: value for key, value in TINY_LLAMA.items() if key != "torch_dtype"}  # the dtype vLLM defaults


def generation_values(root: Path, cache: Path) -> list[str]:
    directories = {
        "withgen": {"generation_config.json": '{"temperature": 0.5}'},
        "withconf": {"config.json": json.dumps(LLAMA)},
        "empty": {},
        "list": {"generation_config.json": "[1]"},
        "null": {"generation_config.json": "null"},
        "bad": {"generation_config.json": "{bad"},
        "badconf": {"generation_config.json": "{bad", "config.json": json.dumps(LLAMA)},
        "latin1": {"generation_config.json": '{"x": "caf\xe9"}'},
        **{name: {"generation_config.json": text} for name, (text, _) in GENERATION_CASES.items()},
    }
    for name, files in directories.items():
        (root / name).mkdir(parents=True)
        for file, text in files.items():
            (root / name / file).write_bytes(text.encode("latin-1"))
    (root / "file.txt").write_text("x")
    (root / "m.gguf").write_text("x")
    (root / "headed").write_bytes(b"GGUF and more")
    for repo, files in {"someorg/gen-cached": {"generation_config.json": "{}"}, "someorg/gen-empty": {}}.items():
        storage = cache / ("models--" + repo.replace("/", "--"))
        (storage / "refs").mkdir(parents=True)
        (storage / "refs" / "main").write_text("c0ffee")
        (storage / "snapshots" / "c0ffee").mkdir(parents=True)
        for file, text in files.items():
            (storage / "snapshots" / "c0ffee" / file).write_text(text)
    local = [str(root / name) for name in [*directories, "file.txt", "m.gguf", "headed"]]
    return [*local, "/nonexistent/gen", "someorg/gen-absent", "someorg/gen-cached", "someorg/gen-empty", "org/m:Q4_K_M"]


def test_a_generation_config_is_refused_exactly_where_vllm_finds_none(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    values = generation_values(tmp_path / "gc", tmp_path / "hub")
    vllm_said = ask_vllm(ASK_GENERATION, json.dumps(values))
    assert isinstance(vllm_said, list)
    launch = ["env", "HF_HUB_OFFLINE=1", str(VLLM_PYTHON), "-m", "vllm.entrypoints.cli.main", "serve", "m"]
    disagreements = []
    for value, said in zip(values, vllm_said, strict=True):
        command = parse([*launch, "--generation-config", value], "0.16.0")
        refused = any(not f.ok for f in late_file_findings(command, "command", lambda: "utf-8"))
        disagreements += [(value, said)] if refused != bool(said) else []
    assert disagreements == []
    assert sum(bool(s) for s in vllm_said) >= 6, vllm_said


ASK_MODEL_GENERATION = textwrap.dedent("""\
    import json, sys, types
    from vllm.config.model import ModelConfig

    def refused(model):  # `auto`, `vllm`: ModelConfig.try_get_generation_config on the model's own directory
        config = types.SimpleNamespace(
            generation_config=sys.argv[2], hf_config_path=None, model=model, trust_remote_code=False,
            revision=None, config_format="auto",
        )
        try:
            ModelConfig.try_get_generation_config(config)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    print(json.dumps([refused(model) for model in json.loads(sys.argv[1])]))
""")


@pytest.mark.parametrize("mode", ["auto", "vllm"])
def test_the_models_own_generation_config_is_refused_exactly_where_vllm_refuses_it(tmp_path, monkeypatch, mode):
    """review35 N7: under `auto` (the default) and `vllm` (review36 W3) vLLM reads the model's own directory: each model
    directory here (config.json beside each generation_config.json of generation_values), and a
    cached snapshot read offline, judged by patchkit as the real ModelConfig.try_get_generation_config
    refuses it (the InputProcessor of vLLM's front end calls it as it starts)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    contents = {
        "withgen": '{"temperature": 0.5}', "none": None, "list": "[1]", "null": "null", "string": '"x"',
        "bad": "{bad", "empty": "", "latin1": '{"x": "caf\xe9"}', "number": "7",
        "deep": '{"a": ' * 5000 + "1" + "}" * 5000,
        **{name: text for name, (text, _) in GENERATION_CASES.items()},  # review36 W4: GenerationConfig's own
    }  # fmt: skip
    models = []
    for name, text in contents.items():
        model = tmp_path / "models" / name
        model.mkdir(parents=True)
        (model / "config.json").write_text(json.dumps(LLAMA))
        if text is not None:
            (model / "generation_config.json").write_bytes(text.encode("latin-1"))
        models.append(str(model))
    storage = tmp_path / "hub" / "models--someorg--listed"
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text("c0ffee")
    (storage / "snapshots" / "c0ffee").mkdir(parents=True)
    (storage / "snapshots" / "c0ffee" / "config.json").write_text(json.dumps(LLAMA))
    (storage / "snapshots" / "c0ffee" / "generation_config.json").write_text("[1]")
    snapshot = str(storage / "snapshots" / "c0ffee")  # what EngineArgs hands ModelConfig offline
    vllm_said = ask_vllm(ASK_MODEL_GENERATION, json.dumps([*models, snapshot]), mode)
    assert isinstance(vllm_said, list)
    serve = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.cli.main", "serve"]
    launches = [[*serve, model, "--generation-config", mode] for model in models]
    launches.append(["env", "HF_HUB_OFFLINE=1", *serve, "someorg/listed", "--generation-config", mode])
    disagreements = []
    for launch, said in zip(launches, vllm_said, strict=True):
        command = parse(launch, "0.16.0")
        refused = any(not f.ok for f in late_file_findings(command, "command", lambda: "utf-8"))
        disagreements += [(launch[-3], said)] if refused != bool(said) else []
    assert disagreements == []
    assert sum(bool(s) for s in vllm_said) >= 4, vllm_said


RANKS = """
import json, typing
import vllm.config.lora as lora
print(json.dumps({"file": lora.__file__, "allowed": sorted(typing.get_args(lora.MaxLoRARanks))}))
"""


def test_the_lora_ranks_read_from_the_tree_are_the_ones_vllm_allows():
    """review35 N9: the rank fix's --max-lora-rank comes from config/lora.py read statically; the
    real release's MaxLoRARanks (what its parser's choices are built from) agrees."""
    said = ask_vllm(RANKS)
    assert isinstance(said, dict)
    assert lora_ranks(Path(said["file"]).read_bytes()) == tuple(said["allowed"])


# review38 B7: the worker's expected LoRA modules (_load_adapter: the built model's LoRA-able layers,
# packed ones by their parts) for tiny models, built on the meta device (no weights, no run), and
# the checkpoint names transformers' save_pretrained gives the same config
ASK_LAYERS = r"""
import json, os, sys, tempfile
from vllm import platforms
from vllm.platforms.cpu import CpuPlatform


class _Cpu(CpuPlatform):  # MLA has no CPU backend; the model is only built (meta), never run
    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config):
        if attn_selector_config.use_mla:
            return "vllm.v1.attention.backends.mla.triton_mla.TritonMLABackend"
        return CpuPlatform.get_attn_backend_cls(selected_backend, attn_selector_config)


platforms.current_platform = _Cpu()
from vllm.distributed import init_distributed_environment, initialize_model_parallel
init_distributed_environment(1, 0, f"file://{tempfile.mktemp()}", 0, "gloo")
initialize_model_parallel(1, 1)
import torch
import transformers
from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
from vllm.lora.lora_model import LoRAModel
from vllm.lora.peft_helper import PEFTHelper
from vllm.lora.utils import get_supported_lora_modules
from vllm.model_executor.model_loader.utils import initialize_model


def built(directory):
    '''The worker's expected_lora_modules (_load_adapter), mapper and skip prefixes; and the names
    save_pretrained gives the checkpoint of the same config (tied weights left out).'''
    config = VllmConfig(model_config=ModelConfig(model=directory, dtype="float32", enforce_eager=True))
    with set_current_vllm_config(config), torch.device("meta"):
        model = initialize_model(vllm_config=config)
    packed, expected = model.packed_modules_mapping, []
    for module in get_supported_lora_modules(model):
        expected += packed[module] if module in packed else [module]
        expected += [module] if module == "experts" else []
    hf_config = transformers.AutoConfig.from_pretrained(directory)
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(hf_config)
    tied = set(getattr(hf, "_tied_weights_keys", None) or []) if hf_config.tie_word_embeddings else set()
    names = [k for k in hf.state_dict() if k not in tied]
    return (set(expected), getattr(model, "hf_to_vllm_mapper", None), getattr(model, "lora_skip_prefixes", None)), names


def refused(adapter, target):
    expected, mapper, skip = target
    try:
        peft = PEFTHelper.from_local_dir(adapter, None)
        LoRAModel.from_local_checkpoint(adapter, expected, peft, device="cpu", weights_mapper=mapper, skip_prefixes=skip)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:300]}"


asked = json.loads(sys.argv[1])
said = {}
for directory, adapters in asked.items():
    target, names = built(directory)
    said[directory] = {"names": names, "expected": sorted(target[0]), "refused": {a: refused(a, target) for a in adapters}}
print(json.dumps(said))
"""

LAYER = "base_model.model.model.layers"
# adapter -> the modules it holds LoRA weights for (its lora_A/lora_B, or an embedding's A/B)
LAYER_ADAPTERS = {
    "llama_qv": [f"{LAYER}.0.self_attn.q_proj", f"{LAYER}.0.self_attn.v_proj"],
    "llama_all": [f"{LAYER}.0.self_attn.{m}_proj" for m in "qkvo"] + [f"{LAYER}.0.mlp.{m}_proj" for m in ("gate", "up", "down")],
    "mla": [f"{LAYER}.0.self_attn.{m}" for m in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")],
    "mlp": [f"{LAYER}.0.mlp.{m}_proj" for m in ("gate", "up", "down")],
    "router": [f"{LAYER}.1.mlp.gate"],
    "fused": [f"{LAYER}.0.self_attn.qkv_proj"],  # vLLM's own packed name
    "gpt2": ["base_model.model.transformer.h.0.attn.c_attn"],
    "lm_head": ["base_model.model.lm_head"],
    "embed": ["base_model.model.model.embed_tokens:embedding"],
    "experts": [f"{LAYER}.1.mlp.experts.0.gate_proj"],
    "unparsed": [f"{LAYER}.0.self_attn.o_proj:default"],
}  # fmt: skip


def layer_adapter(directory: Path, modules: list[str]) -> str:
    """An adapter of rank 8 with a [8, 8] F32 lora_A and lora_B for each module (`:embedding`: as
    an embedding's lora_embedding_A/B; `:default`: saved under PEFT's adapter name, as vLLM does not read)."""
    names = []
    for module in modules:
        path, _, kind = module.partition(":")
        ends = {"embedding": ("lora_embedding_A", "lora_embedding_B"), "default": ("lora_A.default.weight",)}
        names += [f"{path}.{end}" for end in ends.get(kind, ("lora_A.weight", "lora_B.weight"))]
    header = {
        n: {"dtype": "F32", "shape": [8, 8], "data_offsets": [256 * i, 256 * i + 256]} for i, n in enumerate(names)
    }
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}))
    (directory / "adapter_model.safetensors").write_bytes(safetensors_file(header, 256 * len(names)))
    return str(directory)


def test_an_adapter_fails_only_where_vllm_expects_none_of_its_layers(tmp_path):
    targets = {"llama": LLAMA, "tied": {**LLAMA, "tie_word_embeddings": True}, "deepseek": TINY_DEEPSEEK_V3}
    for name, config in targets.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    adapters = {name: layer_adapter(tmp_path / "lora" / name, modules) for name, modules in LAYER_ADAPTERS.items()}
    asked = {str(tmp_path / name): list(adapters.values()) for name in targets}
    said = ask_vllm(ASK_LAYERS, json.dumps(asked))
    assert isinstance(said, dict)
    verdicts = {}
    for name in targets:
        target = said[str(tmp_path / name)]
        index = {"metadata": {}, "weight_map": {weight: "model.safetensors" for weight in target["names"]}}
        (tmp_path / name / "model.safetensors.index.json").write_text(json.dumps(index))
        for adapter, path in adapters.items():
            options = ["--enable-lora", "--max-lora-rank", "8", "--lora-modules", f"a={path}"]
            command = parse(
                [str(VLLM_PYTHON), "-m", "vllm.entrypoints.cli.main", "serve", str(tmp_path / name), *options]
            )
            found = {f.result for f in late_file_findings(command, "command", lambda: "utf-8")}
            ours = "fail" if "fail" in found else "cannot judge" if "cannot judge" in found else "pass"
            verdicts[(name, adapter)] = (ours, target["refused"][path])
    # never a false failure; every refusal failed or said not judged; and a refusal patchkit judges is failed
    assert [k for k, (ours, refused) in verdicts.items() if ours == "fail" and not refused] == []
    assert [k for k, (ours, refused) in verdicts.items() if ours == "pass" and refused] == []
    assert {k for k, (ours, _) in verdicts.items() if ours == "cannot judge"} == {
        *((t, a) for t in targets for a in ("lm_head", "embed", "experts", "unparsed")),
    }, verdicts
    ours, refused = verdicts[("deepseek", "llama_qv")]  # review38's case: a Llama adapter on DeepSeek-V3
    assert ours == "fail" and "expected target modules in" in refused, verdicts
    assert sum(ours == "fail" for ours, _ in verdicts.values()) >= 10, verdicts
