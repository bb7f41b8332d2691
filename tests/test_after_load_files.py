"""What vLLM refuses of a launch only once the model has loaded, judged by preflight and run first:
uvicorn's TLS (an --ssl-keyfile without --ssl-certfile, a certificate and key OpenSSL cannot load
together, an encrypted key, a CA file of no certificate, a cipher list that selects none), and
--lora-modules that init_static_loras refuses (no --enable-lora, a name given twice, an adapter whose
adapter_config.json PEFTHelper refuses, an offline launch's hub adapter not in the cache). The real
uvicorn and vLLM give the same verdicts: tests/vllm_import/test_after_load_real.py."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from launch_fixtures import (
    EMPTY_SAFETENSORS,
    LFS_POINTER,
    ONE_TENSOR,
    applied,
    patchkit_run,
    plain_launch,  # noqa: F401  (the fixture `launch`)
    safetensors_file,
    tls_files,
    torch_file,
)

from patchkit.launch.command import parse
from patchkit.launch.late_files import late_file_findings

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


ADAPTER = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "bias": "none", "peft_type": "LORA"}


def judged(directory: Path, *options: str, program: str = "python") -> list[str]:
    """The after-load findings' messages for a launch of `options` run in `directory`, by `program`:
    `python` (the launch's own Python: this one), or `vllm` (no such program: no Python to ask)."""
    argv = (
        [sys.executable, "-m", "vllm.entrypoints.cli.main"]
        if program == "python"
        else ["env", "PATH=/nonexistent", "vllm"]
    )
    here = os.getcwd()
    os.chdir(directory)  # the launch's relative paths are read from patchkit's own directory
    try:
        command = parse([*argv, "serve", "m", *options], "0.16.0")
        found = late_file_findings(command, "command", lambda: "utf-8")
        return [" ".join(f.message.split()) for f in found if not f.ok]  # an adapter judged loadable: a pass
    finally:
        os.chdir(here)


# --- uvicorn's TLS ---------------------------------------------------------------------------------


@needs_openssl
def test_a_keyfile_without_a_certfile_is_refused(tmp_path):
    tls = tls_files(tmp_path / "tls")
    said = judged(tls, "--ssl-keyfile", "key.pem")
    assert said == [
        "--ssl-keyfile key.pem without --ssl-certfile: uvicorn asserts a certificate: "
        "vLLM refuses the launch once the model has loaded"
    ]


@needs_openssl
@pytest.mark.parametrize("program", ["python", "vllm"])
def test_tls_openssl_cannot_build_is_refused_and_good_tls_passes(tmp_path, program):
    tls = tls_files(tmp_path / "tls")
    good = ["--ssl-certfile", "cert.pem", "--ssl-keyfile", "key.pem", "--ssl-ca-certs", "cert2.pem"]
    assert judged(tls, *good, "--ssl-ciphers", "ECDHE+AESGCM", "--ssl-cert-reqs", "2", program=program) == []
    assert judged(tls, "--ssl-certfile", "cert.pem", program=program) != []  # no key in the certfile
    (tls / "both.pem").write_bytes((tls / "cert.pem").read_bytes() + (tls / "key.pem").read_bytes())
    assert judged(tls, "--ssl-certfile", "both.pem", program=program) == []
    (tls / "both-enc.pem").write_bytes((tls / "cert.pem").read_bytes() + (tls / "enc.pem").read_bytes())
    said = judged(tls, "--ssl-certfile", "both-enc.pem", program=program)
    assert len(said) == 1 and said[0].startswith("--ssl-certfile both-enc.pem: its key is encrypted"), said
    refused = {
        ("--ssl-certfile", "cert.pem", "--ssl-keyfile", "other.pem"): "key values mismatch",
        ("--ssl-certfile", "junk.pem", "--ssl-keyfile", "key.pem"): "OpenSSL cannot load a certificate",
        ("--ssl-certfile", "cert.pem", "--ssl-keyfile", "enc.pem"): "--ssl-keyfile enc.pem: the key is encrypted",
        ("--ssl-certfile", "both.pem", "--ssl-ca-certs", "key.pem"): "--ssl-ca-certs key.pem: OpenSSL takes no CA",
        ("--ssl-certfile", "both.pem", "--ssl-cert-reqs", "5"): "--ssl-cert-reqs 5: 5 is not a valid VerifyMode",
    }
    for options, why in refused.items():
        said = judged(tls, *options, program=program)
        assert len(said) == 1 and why in said[0], (options, said)
        assert "vLLM refuses the launch once the model has loaded" in said[0], said
        assert ("judged by patchkit's own Python" in said[0]) == (program == "vllm"), said


@needs_openssl
def test_a_cipher_list_the_launchs_openssl_selects_nothing_from_is_refused(tmp_path):
    tls = tls_files(tmp_path / "tls")
    said = judged(tls, "--ssl-certfile", "cert.pem", "--ssl-keyfile", "key.pem", "--ssl-ciphers", "NO-SUCH-CIPHER")
    assert len(said) == 1 and said[0].startswith("--ssl-ciphers NO-SUCH-CIPHER: OpenSSL"), said
    assert "selects no cipher from it" in said[0], said
    # not the launch's OpenSSL that judged it: cannot judge, never a refusal
    tls_options = ["--ssl-certfile", str(tls / "cert.pem"), "--ssl-keyfile", str(tls / "key.pem")]
    stand_in = parse(
        ["env", "PATH=/nonexistent", "vllm", "serve", "m", *tls_options, "--ssl-ciphers", "NO-SUCH-CIPHER"],
        "0.16.0",
    )
    findings = late_file_findings(stand_in, "command", lambda: "utf-8")
    assert [(f.ok, f.judged) for f in findings] == [(True, False)], [f.message for f in findings]


@needs_openssl
def test_a_ca_file_alone_is_never_read_and_a_fifo_never_given_to_openssl(tmp_path):
    tls = tls_files(tmp_path / "tls")
    assert judged(tls, "--ssl-ca-certs", "/nonexistent/ca.pem") == []  # plain HTTP: uvicorn never opens it
    os.mkfifo(tls / "cert.fifo")
    said = judged(tls, "--ssl-certfile", "cert.fifo", "--ssl-keyfile", "key.pem")
    assert said == [
        "--ssl-certfile cert.fifo: not a regular file (a fifo, a device or a directory): "
        "vLLM refuses the launch once the model has loaded"
    ], said


# --- --lora-modules: what init_static_loras refuses --------------------------------------------------


def adapter(directory: Path, **config: object) -> str:
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text(json.dumps({**ADAPTER, **config}))
    (directory / "adapter_model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    return str(directory)


def test_an_adapter_without_the_weights_vllm_loads_is_refused(tmp_path):
    good = adapter(tmp_path / "good")
    Path(good, "adapter_model.safetensors").unlink()
    said = judged(tmp_path, "--enable-lora", "--lora-modules", f"a={good}")
    assert said == [
        f"--lora-modules {good}: no adapter weights there (vLLM loads adapter_model.safetensors, "
        "adapter_model.bin, adapter_model.pt): vLLM refuses the launch once the model has loaded"
    ], said
    for name in ("adapter_model.bin", "adapter_model.pt"):
        Path(good, name).write_bytes(torch_file())
        assert judged(tmp_path, "--enable-lora", "--lora-modules", f"a={good}") == []
        Path(good, name).unlink()
    Path(good, "adapter_model.safetensors").mkdir()  # a directory of that name is no file to vLLM
    assert len(judged(tmp_path, "--enable-lora", "--lora-modules", f"a={good}")) == 1


def test_adapters_vllm_refuses_after_the_load_are_refused(tmp_path):
    good = adapter(tmp_path / "good")
    assert judged(tmp_path, "--enable-lora", "--lora-modules", f"a={good}", f"b={good}") == []
    assert judged(tmp_path, "--lora-modules", f"a={good}") == [
        "--lora-modules without --enable-lora: vLLM's worker refuses each adapter (LoRA is not enabled): "
        "vLLM refuses the launch once the model has loaded"
    ]
    said = judged(tmp_path, "--enable-lora", "--lora-modules", f"a={good}", json.dumps({"name": "a", "path": good}))
    assert len(said) == 1 and "the adapter name a is given twice" in said[0], said
    refusals = {
        "r64": ({"r": 64}, "LoRA rank 64 is greater than max_lora_rank 16"),
        "bias": ({"bias": "all"}, "Adapter bias is not supported"),
        "dora": ({"use_dora": True}, "vLLM does not yet support DoRA"),
        "saved": ({"modules_to_save": ["score"]}, 'vLLM does not support its modules_to_save ["score"]'),
        "zero": ({"r": 0}, "vLLM cannot scale lora_alpha 16 by r 0"),
    }
    for name, (config, why) in refusals.items():
        path = adapter(tmp_path / name, **config)
        said = judged(tmp_path, "--enable-lora", "--lora-modules", f"x={path}")
        assert len(said) == 1 and f"--lora-modules {path}: its adapter_config.json: {why}" in said[0], said
        assert said[0].endswith("vLLM refuses the launch once the model has loaded"), said
    assert judged(tmp_path, "--enable-lora", "--max-lora-rank", "64", "--lora-modules", f"x={tmp_path / 'r64'}") == []
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "adapter_config.json").write_text('{"r": 8}')
    said = judged(tmp_path, "--enable-lora", "--lora-modules", "x=bare")
    assert said == [
        "--lora-modules bare: its adapter_config.json: Missing required configuration fields: lora_alpha, "
        "target_modules: vLLM refuses the launch once the model has loaded"
    ], said


def test_default_multimodal_adapters_are_static_adapters_too(tmp_path):
    good, r64 = adapter(tmp_path / "good"), adapter(tmp_path / "r64", r=64)
    mm = json.dumps({"audio": good, "image": r64})
    assert judged(tmp_path, "--default-mm-loras", mm) == []  # without LoRA vLLM builds no LoRAConfig: unread
    said = judged(tmp_path, "--enable-lora", "--default-mm-loras", mm, "--lora-modules", f"audio={good}")
    assert len(said) == 2, said
    assert said[0].startswith(f"--default-mm-loras audio={good}: the adapter name audio is given twice"), said
    assert said[1].startswith(f"--default-mm-loras {r64}: its adapter_config.json: LoRA rank 64"), said


def test_an_offline_launchs_hub_adapter_is_judged_in_the_cache_and_left_to_vllm_online(tmp_path):
    cache = tmp_path / "hub"
    online = ["env", f"HF_HUB_CACHE={cache}"]
    offline = [*online, "HF_HUB_OFFLINE=1"]

    def said(env: list[str], path: str) -> list[str]:
        argv = [*env, sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "m", "--enable-lora"]
        command = parse([*argv, "--lora-modules", f"a={path}"], "0.16.0")
        return [f.message for f in late_file_findings(command, "command", lambda: "utf-8") if not f.ok]

    assert said(online, "someorg/not-cached") == []  # vLLM downloads it: not judged
    missing = said(offline, "someorg/not-cached")
    assert len(missing) == 1 and "HF_HUB_OFFLINE is set" in missing[0], missing
    assert f"{cache} holds no snapshot of it" in missing[0] and missing[0].endswith("once the model has loaded")
    repo = cache / "models--someorg--cached"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("c0ffee")
    (repo / "snapshots" / "c0ffee").mkdir(parents=True)
    assert said(offline, "someorg/cached") == [
        "--lora-modules someorg/cached: adapter_config.json there: no such file: "
        "vLLM refuses the launch once the model has loaded"
    ]
    adapter(repo / "snapshots" / "c0ffee" / "x", r=32)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (repo / "snapshots" / "c0ffee" / "x" / name).rename(repo / "snapshots" / "c0ffee" / name)
    assert said(offline, "someorg/cached") == [
        "--lora-modules someorg/cached: its adapter_config.json: LoRA rank 32 is greater than max_lora_rank 16: "
        "vLLM refuses the launch once the model has loaded"
    ]


# --- through `patchkit run`: refused before the exec --------------------------------------------------


@needs_openssl
def test_run_refuses_a_launch_whose_tls_or_adapter_vllm_refuses_after_the_load(launch, tmp_path):
    tree, library, command, env, marker = launch
    applied(tree, library)
    tls = tls_files(tmp_path / "tls")
    good = ["--ssl-certfile", str(tls / "cert.pem"), "--ssl-keyfile", str(tls / "key.pem")]
    _, done = patchkit_run(tree, library, [*command, *good], env)
    assert done.returncode == 7, done.stdout + done.stderr
    marker.unlink()
    _, done = patchkit_run(tree, library, [*command, "--ssl-ca-certs", "/nonexistent"], env)  # plain HTTP
    assert done.returncode == 7, done.stdout + done.stderr
    marker.unlink()
    for options in (
        ["--ssl-keyfile", str(tls / "key.pem")],
        ["--ssl-certfile", str(tls / "cert.pem"), "--ssl-keyfile", str(tls / "other.pem")],
        ["--lora-modules", "a=" + adapter(tmp_path / "lora")],
    ):
        _, done = patchkit_run(tree, library, [*command, *options], env)
        said = " ".join(done.stdout.split())
        assert done.returncode == 1 and not marker.exists(), said + done.stderr
        assert "vLLM refuses the launch once the model has loaded" in said, said


# --- --generation-config: read by InputProcessor as the front end starts, get_diff_sampling_param later ---


def generation_configs(root: Path) -> dict[str, bool]:
    """--generation-config values under `root`, each with whether vLLM 0.16.0's try_get_generation_config
    refuses it (as tests/vllm_import/test_after_load_real.py checks on the real one)."""
    for name, files in {
        "withgen": {"generation_config.json": '{"temperature": 0.5}'},
        "withconf": {"config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})},
        "empty": {},
        "list": {"generation_config.json": "[1]"},
        "bad": {"generation_config.json": "{bad"},
        "badconf": {"generation_config.json": "{bad", "config.json": '{"model_type": "llama"}'},
    }.items():
        (root / name).mkdir(parents=True)
        for file, text in files.items():
            (root / name / file).write_text(text)
    (root / "file.txt").write_text("x")
    (root / "m.gguf").write_text("x")
    refused = ("empty", "list", "bad", "file.txt", "/nonexistent/gen", "./nowhere/gen")
    values = ("withgen", "withconf", "badconf", "m.gguf", "auto", "vllm", "org/m:Q4_K_M", *refused)
    return {value: value in refused for value in values}


def test_a_generation_config_vllm_finds_nothing_at_is_refused(tmp_path):
    root = tmp_path / "gc"
    for value, refused in generation_configs(root).items():
        said = judged(root, "--generation-config", value, program="vllm")
        assert bool(said) == refused, (value, said)
        assert all(s.startswith(f"--generation-config {value}: ") for s in said), said
    assert judged(root, "--generation-config", "empty") == [
        "--generation-config empty: a directory with neither a readable generation_config.json nor config.json or "
        "params.json: vLLM refuses the launch as it starts"
    ]


def test_an_offline_generation_config_hub_id_is_judged_in_the_cache(tmp_path):
    cache = tmp_path / "hub"
    storage = cache / "models--someorg--gen"
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text("c0ffee")
    (storage / "snapshots" / "c0ffee").mkdir(parents=True)

    def said(*env: str) -> list[str]:
        command = parse(
            ["env", f"HF_HUB_CACHE={cache}", *env, "vllm", "serve", "m", "--generation-config", "someorg/gen"]
        )
        return [f.message for f in late_file_findings(command, "command", lambda: "utf-8") if not f.ok]

    assert said() == []  # online: vLLM downloads it, not judged
    missing = said("HF_HUB_OFFLINE=1")
    assert len(missing) == 1 and "holds no snapshot" not in missing[0] and "neither a readable" in missing[0], missing
    assert said("HF_HUB_OFFLINE=1", "HF_HUB_CACHE=/nonexistent") != []
    (storage / "snapshots" / "c0ffee" / "generation_config.json").write_text('{"top_p": 0.9}')
    assert said("HF_HUB_OFFLINE=1") == []


def test_a_classification_adapters_saved_modules_are_refused_only_where_the_release_refuses_them(tmp_path):
    score, head = (
        adapter(tmp_path / "score", modules_to_save=["score"]),
        adapter(tmp_path / "head", modules_to_save=["lm_head"]),
    )

    def said(release: str, path: str) -> list[str]:
        command = parse(["vllm", "serve", "m", "--enable-lora", "--lora-modules", f"a={path}"], release)
        return [f.message for f in late_file_findings(command, "command", lambda: "utf-8") if not f.ok]

    assert said("0.16.0", score) != [] and said("0.16.0", head) != []  # 0.16.0: none at all
    assert said("0.33.0", score) == []  # 0.32.0 on: a classifier's "classifier" and "score"
    assert len(said("0.33.0", head)) == 1 and 'modules_to_save ["lm_head"]' in said("0.33.0", head)[0]


def test_the_models_own_generation_config_is_judged_under_auto(tmp_path):
    """review35 N7: `auto` (the default) reads the model's own generation_config.json (ModelConfig's
    try_get_generation_config on --hf-config-path or the model); JSON that is not an object there is
    a TypeError. The model is local, or offline its cached snapshot; online a hub id is not judged."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))

    def said(*words: str, model_name: str = str(model), env: tuple[str, ...] = ()) -> list[str]:
        command = parse(["env", *env, "vllm", "serve", model_name, *words], "0.16.0")
        return [f.message for f in late_file_findings(command, "command", lambda: "utf-8") if not f.ok]

    assert said() == []  # no generation_config.json: vLLM reads config.json instead
    for text in ('{"temperature": 0.6}', "{bad", ""):  # an object; unreadable JSON: vLLM falls back
        (model / "generation_config.json").write_text(text)
        assert said() == [] and said("--generation-config", "auto") == [], text
    (model / "generation_config.json").write_text("[1]")
    refused = [
        f"the model's generation_config.json ({model}/generation_config.json) is JSON but not an object: "
        "vLLM refuses the launch as it starts"
    ]
    assert said() == refused and said("--generation-config", "auto") == refused
    # `vllm` too: the front end reads the model's own as it starts (review36 W3)
    assert said("--generation-config", "vllm") == refused
    (model / "generation_config.json").write_text('{"a": ' * 5000 + "1" + "}" * 5000)  # review36 W4
    assert said() == [
        f"the model's generation_config.json ({model}/generation_config.json) nests deeper than Python's JSON "
        "reader goes (RecursionError): vLLM refuses the launch as it starts"
    ]
    (model / "generation_config.json").write_text("[1]")
    assert said("--config-format", "mistral") == []  # another parser: not judged
    other = tmp_path / "other"
    other.mkdir()
    (other / "generation_config.json").write_text("null")
    assert said("--hf-config-path", str(other)) == [refused[0].replace(str(model), str(other))]
    cache = tmp_path / "hub"
    snapshot = cache / "models--someorg--m" / "snapshots" / "c0ffee"
    snapshot.mkdir(parents=True)
    (cache / "models--someorg--m" / "refs").mkdir()
    (cache / "models--someorg--m" / "refs" / "main").write_text("c0ffee")
    (snapshot / "config.json").write_text("{}")
    (snapshot / "generation_config.json").write_text('"text"')
    hub = ("someorg/m", (f"HF_HUB_CACHE={cache}",))
    assert said(model_name=hub[0], env=hub[1]) == []  # online: vLLM downloads it
    offline = said(model_name=hub[0], env=(*hub[1], "HF_HUB_OFFLINE=1"))
    assert offline == [
        f"the model's generation_config.json ({snapshot}/generation_config.json) is JSON but not an object: vLLM refuses the launch as it starts"
    ]


def test_an_adapter_whose_first_weight_file_its_reader_refuses_is_refused(tmp_path):
    """review35 N6's class: from_local_checkpoint opens the first of its weight files there is; a Git
    LFS pointer or a cut-short file fails there, once the model has loaded."""
    good = adapter(tmp_path / "good")
    Path(good, "adapter_model.safetensors").write_text(LFS_POINTER)
    assert judged(tmp_path, "--enable-lora", "--lora-modules", f"a={good}") == [
        f"--lora-modules {good}: adapter_model.safetensors is a Git LFS pointer (cloned without git-lfs?): "
        "vLLM refuses the launch once the model has loaded"
    ]
    Path(good, "adapter_model.safetensors").write_bytes(safetensors_file(ONE_TENSOR, 5))
    [said] = judged(tmp_path, "--enable-lora", "--lora-modules", f"a={good}")
    assert "adapter_model.safetensors is cut short (its header declares 8 bytes of tensors, the file holds 5)" in said
    Path(good, "adapter_model.safetensors").unlink()
    Path(good, "adapter_model.bin").write_bytes(b"")
    Path(good, "adapter_model.pt").write_bytes(torch_file())  # never opened: the .bin comes first
    [said] = judged(tmp_path, "--enable-lora", "--lora-modules", f"a={good}")
    assert f"--lora-modules {good}: adapter_model.bin is empty: " in said


def test_a_generation_config_refused_at_start_is_said_in_one_wording():
    """The static check (genconfig) and the after-load answer (validation) name the moment vLLM
    refuses a generation config in the same words: defined once, where both read it."""
    from patchkit.launch import genconfig, validation

    said = validation.after_load_finding({"option": "generation-config", "value": "auto", "error": "bad JSON"})
    assert said.message.endswith(f": {genconfig.AT_START}")
    sources = [path.read_text(encoding="utf-8") for path in Path(genconfig.__file__).parent.glob("*.py")]
    assert sum(source.count(f'"{genconfig.AT_START}"') for source in sources) == 1


def test_thousands_of_refused_adapters_are_a_few_lines(tmp_path):
    """L7's class: --lora-modules naming 2,000 adapters vLLM refuses was 2,000 findings (269 KB of
    text); the first few are said, then the rest as one, with their fixes once."""
    good = tmp_path / "good"
    good.mkdir()
    (good / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}')
    (good / "adapter_model.bin").write_bytes(b"PK\x03\x04 a torch zip")
    modules = [f"a{i}=/nonexistent/x{i}" for i in range(2_000)] + [f"g={good}"]
    command = parse(["vllm", "serve", "m", "--enable-lora", "--lora-modules", *modules], "0.16.0")
    found = late_file_findings(command, "command", lambda: "utf-8")
    failed = [f for f in found if not f.ok]
    assert [f.message.split(":")[0] for f in failed[:3]] == [f"--lora-modules /nonexistent/x{i}" for i in range(3)]
    assert len(failed) == 4 and failed[3].message.startswith("1,997 more adapters vLLM refuses: --lora-modules "), (
        failed
    )
    assert failed[3].message.endswith(" +1,996 more") and len(failed[3].message) < 300, failed[3].message
    assert failed[3].fix == failed[0].fix
    assert [f.message for f in found if f.result == "pass"] == [
        f"--lora-modules {good}: its config and adapter_model.bin read as vLLM reads them"
    ]
    assert [f.message.split(":")[1] for f in found if f.result == "cannot judge"] == [f" --lora-modules {good}"]
    few_bad = parse(["vllm", "serve", "m", "--enable-lora", "--lora-modules", *modules[:4]], "0.16.0")
    assert len(late_file_findings(few_bad, "command", lambda: "utf-8")) == 4  # four: each said
