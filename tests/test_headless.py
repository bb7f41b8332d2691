"""A headless node (`vllm serve --headless`, or --api-server-count below 1: serve's run_headless,
the worker nodes of a multi-node data-parallel launch) runs engine cores and no API server, in
every release 0.11.0-0.34.0 (their cli/serve.py). The API server's options are then not judged,
and said so once; the engine's checks (sets, weights, the adapters the head has every engine's
workers load) still are. The real vLLM's serve command is asked in
tests/vllm_import/test_headless_real.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import run_cli, run_cli_read_only
from launch_fixtures import (  # noqa: F401  (the fixture `setup`)
    DATA_PARALLEL_CASES,
    ONE_TENSOR,
    TOOLS,
    eagle3_and_tools,
    safetensors_file,
    serve,
    write_model,
)

from patchkit._target import engine_config
from patchkit.base.errors import BadInput
from patchkit.launch.command import parse
from patchkit.launch.late_files import headless_note, late_file_findings
from patchkit.launch.preflight import CHAT_TEMPLATES

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
ADAPTER = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}
SERVE = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
WEIGHTS = safetensors_file(ONE_TENSOR, 8)  # a whole safetensors file: vLLM's reader takes it
API_SERVER = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model"]


@pytest.mark.parametrize(
    ("release", "words", "headless"),
    [
        ("0.16.0", ["--headless"], True),
        ("0.16.0", ["--api-server-count", "0"], True),
        ("0.16.0", ["-asc", "0"], True),
        ("0.16.0", ["--api-server-count=0"], True),
        ("0.16.0", ["-asc", "-1"], True),  # `< 1`
        ("0.16.0", ["--headless", "-asc", "0"], True),
        ("0.16.0", ["-asc", "1"], False),
        ("0.16.0", [], False),
        ("0.11.0", ["--headless", "-asc", "1"], True),  # 0.11.0-0.14.x: the count defaults to 1
        ("0.11.0", ["-asc", "0"], True),
        ("0.18.0", ["--headless", "--grpc"], False),  # serve_grpc first
        ("0.22.0", ["--headless", "--data-parallel-multi-port-external-lb"], False),  # run_dp_supervisor first
    ],
)
def test_a_headless_launch_is_read_as_vllm_serve_reads_it(release, words, headless):
    assert parse(["vllm", "serve", "m", *words], release).headless is headless


@pytest.mark.parametrize(("words", "headless"), DATA_PARALLEL_CASES)
def test_a_data_parallel_size_below_1_is_headless_where_the_count_defaults_to_it(words, headless):
    assert parse(["vllm", "serve", "m", *words], "0.16.0").headless is headless
    assert not parse(["vllm", "serve", "m", *words], "0.14.0").headless  # the count defaults to 1 there
    # a front end of its own (VLLM_RUST_FRONTEND_PATH) makes the defaulted count 1
    assert not parse(["env", "VLLM_RUST_FRONTEND_PATH=/x", "vllm", "serve", "m", *words], "0.22.0").headless


def test_the_config_file_and_the_api_server_module(tmp_path):
    (tmp_path / "c.yaml").write_text("headless: true\n")
    assert parse(["vllm", "serve", "m", "--config", str(tmp_path / "c.yaml")], "0.16.0").headless
    (tmp_path / "d.yaml").write_text("api-server-count: 0\n")
    assert parse(["vllm", "serve", "m", "--config", str(tmp_path / "d.yaml")], "0.16.0").headless
    (tmp_path / "e.yaml").write_text("data-parallel-size: 0\n")
    assert parse(["vllm", "serve", "m", "--config", str(tmp_path / "e.yaml")], "0.16.0").headless
    # the api_server module serves whatever it is given (run_server, no run_headless)
    assert not parse([*API_SERVER, "m", "--headless"], "0.16.0").headless


@pytest.mark.parametrize(
    ("release", "count"), [("0.16.0", "1"), ("0.16.0", "2"), ("0.34.0", "1"), ("0.11.0", "2"), ("0.14.0", "3")]
)
def test_headless_with_an_api_server_count_vllm_refuses_is_refused(release, count):
    with pytest.raises(BadInput) as raised:
        parse(["vllm", "serve", "m", "--headless", "--api-server-count", count], release)
    assert raised.value.message == (
        f"vLLM refuses --headless with --api-server-count {count} as it starts: a headless node runs no API server"
    )


def late(directory: Path, *words: str, architectures: tuple[str, ...] = ()) -> list[str]:
    here = os.getcwd()
    os.chdir(directory)
    try:
        command = parse([*SERVE, "m", *words], "0.16.0")
        found = late_file_findings(command, "command", lambda: "utf-8", architectures=architectures)
        return [f.message for f in found if not f.ok]  # an adapter judged loadable: a pass
    finally:
        os.chdir(here)


API_OPTIONS = (
    "--ssl-keyfile", "key.pem", "--ssl-ca-certs", "/nonexistent/ca.pem", "--generation-config", "/nonexistent/gen",
    "--tool-server", "http://localhost:8000",
)  # fmt: skip


def test_the_api_servers_files_are_not_judged_on_a_headless_node(tmp_path):
    (tmp_path / "key.pem").write_text("not a key")
    assert len(late(tmp_path, *API_OPTIONS)) == 2  # the keyfile alone, the generation config
    assert late(tmp_path, *API_OPTIONS, "--headless") == []
    assert late(tmp_path, *API_OPTIONS, "--api-server-count", "0") == []


def test_a_headless_node_still_judges_the_adapters_its_workers_load(tmp_path):
    """The head's init_static_loras has every engine (DPLBAsyncMPClient.call_utility_async) load each
    adapter, each worker from the path as given: a missing one fails the launch from this node too,
    as does LoRA not enabled here. A name given twice is the head's own refusal."""
    good = tmp_path / "good"
    good.mkdir()
    (good / "adapter_config.json").write_text(json.dumps(ADAPTER))
    (good / "adapter_model.safetensors").write_bytes(WEIGHTS)
    twice = ("--enable-lora", "--lora-modules", f"a={good}", f"a={good}")
    assert [m.split(":")[0] for m in late(tmp_path, *twice)] == [f"--lora-modules a={good}"]
    assert late(tmp_path, *twice, "--headless") == []
    missing = late(tmp_path, "--enable-lora", "--lora-modules", f"b={tmp_path / 'gone'}", "--headless")
    assert missing == [
        f"--lora-modules {tmp_path / 'gone'}: adapter_config.json there: no such file: "
        "vLLM refuses the launch once the model has loaded"
    ]
    off = late(tmp_path, "--lora-modules", f"a={good}", "--headless")
    assert [m.split(":")[0] for m in off] == ["--lora-modules without --enable-lora"]


def test_a_model_class_that_reads_the_generation_config_itself_is_judged_headless(tmp_path):
    """Llama4ForCausalLM (and 0.34.0's Gemma4 classes) read it as the model is built, in the engine."""
    assert late(tmp_path, "--generation-config", "/nonexistent/gen", "--headless") == []
    said = late(tmp_path, "--generation-config", "/nonexistent/gen", "--headless", architectures=("Llama4ForCausalLM",))
    assert said == ["--generation-config /nonexistent/gen: no such directory: vLLM refuses the launch as it starts"]


def test_the_note_names_what_a_headless_node_does_not_use():
    command = parse(["vllm", "serve", "m", "--headless", *API_OPTIONS, "--middleware", "x.y"], "0.16.0")
    assert headless_note(command) == (
        "headless: no API server runs here, so --ssl-keyfile, --ssl-ca-certs, --middleware, --generation-config, "
        "--tool-server are not used on this node"
    )
    lora = parse(["vllm", "serve", "m", "-asc", "0", "--chat-template", "t", "--lora-modules", "a=/x"], "0.16.0")
    assert headless_note(lora) == (
        "headless: no API server runs here, so --chat-template is not used on this node; its "
        "workers still load the --lora-modules adapters the head serves"
    )
    llama4 = parse(["vllm", "serve", "m", "--headless", "--generation-config", "/g"], "0.16.0")
    assert headless_note(llama4, ["Llama4ForCausalLM"]) is None  # judged there: nothing to say
    assert headless_note(parse(["vllm", "serve", "m", "--headless"], "0.16.0")) is None
    assert headless_note(parse(["vllm", "serve", "m", "--ssl-keyfile", "k"], "0.16.0")) is None


def preflight(tree: Path, lib: Path, *launch: str) -> tuple[int, list[dict], list[str]]:
    """(exit code, the failed findings, the notes said) of a --no-import preflight of `launch`."""
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--format", "json", "--no-import", "--", *launch
    )
    failed = [f for f in json.loads(done.stdout)["findings"] if not f["ok"]]
    said = run_cli_read_only("preflight", "--target", tree, "--patches", lib, "--no-import", "--", *launch)
    assert said.returncode == done.returncode
    lines = (said.stdout + said.stderr).splitlines()
    return done.returncode, failed, [line.removeprefix("note: ") for line in lines if line.startswith("note: ")]


def test_preflight_of_a_headless_node_refuses_none_of_the_api_servers_options(setup, tmp_path):
    """review35 N10's launch, on a tree the sets are applied to: each option the head's API server
    reads refused before (6 refusals); headless, a note, exit 0."""
    tree, lib, _, _ = setup
    assert run_cli("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    model = write_model(tmp_path / "llama", LLAMA)
    (model / "model.safetensors").write_bytes(WEIGHTS)
    (tmp_path / "key.pem").write_text("x")
    options = [
        "--ssl-keyfile", str(tmp_path / "key.pem"), "--middleware", "nodot", "--generation-config", "/nonexistent",
        "--chat-template", "/nonexistent.jinja", "--tool-server", "http://localhost:8000",
    ]  # fmt: skip
    code, failed, _ = preflight(tree, lib, "vllm", "serve", str(model), *options)
    refused = {f["message"].split()[0] for f in failed if f["check"] == "command"}
    assert code == 1 and refused == {"--ssl-keyfile", "--middleware", "--generation-config", "--tool-server"}, failed
    code, failed, notes = preflight(tree, lib, "vllm", "serve", str(model), "--headless", *options)
    assert (code, failed) == (0, [])
    assert [n for n in notes if n.startswith("headless: ")] == [
        "headless: no API server runs here, so --ssl-keyfile, --middleware, --chat-template, --generation-config, "
        "--tool-server are not used on this node"
    ]


def test_a_headless_node_needs_no_tool_call_set_but_still_the_engines(setup):
    """F11's rule, for a node that builds no tool parser: the tools set is not needed there (noted);
    an eagle3 launch still needs eagle3 (the engine loads the drafter)."""
    tree, lib, target, drafter = setup
    code, failed, _ = preflight(tree, lib, "vllm", "serve", str(target), *TOOLS)
    assert code == 1 and [f["check"] for f in failed] == ["tree-state"], failed
    code, failed, notes = preflight(tree, lib, "vllm", "serve", str(target), "--headless", *TOOLS)
    assert (code, failed) == (0, [])
    assert any(n.startswith("not used by this launch: ") and "tools" in n for n in notes), notes
    assert "headless: no API server runs here, so --tool-call-parser is not used on this node" in notes
    code, failed, _ = preflight(tree, lib, *serve(target, drafter, "--headless"))
    assert code == 1 and any("eagle3" in f["message"] for f in failed if f["check"] == "tree-state"), failed


def test_vllms_validation_asks_the_engine_as_run_headless_does(monkeypatch):
    """create_engine_config(headless=True), and none of build_app's --middleware imports."""
    asked: list[dict] = []

    class EngineArgs:
        def create_engine_config(self, usage_context=None, headless=False):
            asked.append({"headless": headless})

    engine_config._engine_config(EngineArgs(), True)
    engine_config._engine_config(EngineArgs(), False)
    assert asked == [{"headless": True}, {"headless": False}]
    args = type("Args", (), {"middleware": ["nodot"]})()
    assert engine_config.after_load_refusal(args, None, True)["stage"] == "no-dot"
    assert engine_config.after_load_refusal(args, None, True, headless=True) is None


def test_a_headless_node_still_has_its_template_checked_as_vllm_starts(setup, tmp_path):
    """validate_chat_template runs on every node as `vllm serve` starts (ServeSubcommand.validate): a
    value with no `{`, `}` or line break that names no file and no built-in template is refused
    there too; what load_chat_template reads after the load is the API server's alone."""
    tree, lib, _, _ = setup
    assert run_cli("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    (tree / CHAT_TEMPLATES).mkdir(parents=True)
    (tree / CHAT_TEMPLATES / "template_basic.jinja").write_text("{{ messages }}")
    model = write_model(tmp_path / "llama", LLAMA)
    (model / "model.safetensors").write_bytes(WEIGHTS)
    launch = ["vllm", "serve", str(model), "--headless", "--chat-template"]
    code, failed, _ = preflight(tree, lib, *launch, "/nonexistent.jinja")
    assert code == 1 and [f["message"] for f in failed] == [
        f"--chat-template /nonexistent.jinja: no such file, nor a template vLLM ships (under {CHAT_TEMPLATES}): vLLM "
        "refuses the command as it starts (validate_chat_template, on a headless node too)"
    ]
    for value in ("template_basic.jinja", "{{ x }}", str(tmp_path)):  # built in; a template; a path that exists
        assert preflight(tree, lib, *launch, value)[:2] == (0, []), value
    code, failed, _ = preflight(
        tree, lib, *launch[:-2], "--chat-template", str(tmp_path)
    )  # a directory: after the load
    assert code == 1 and failed[0]["message"].endswith("vLLM refuses the launch once the model has loaded"), failed
