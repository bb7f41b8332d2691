"""review35 N12: --tool-server (MCP). vLLM's API server makes http://ENTRY/sse of each comma-separated
entry ("demo": its own tools) and connects once the model has loaded; any failure ends the launch.
Every release 0.11.0-0.34.0 builds the URL so (MCPToolServer.add_tool_server). An entry that can
never be reached so (a scheme, a space, nothing, a trailing slash) fails `command`; a HOST:PORT is
noted only: the server may start after preflight."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli_read_only
from launch_fixtures import DEEPSEEK_V3, write_eagle3_setup, write_model
from packaging.version import Version

from patchkit.launch.command import parse
from patchkit.launch.late_files import tool_server_findings


def judged(value: str, version: str | None = "0.16.0", *more: str) -> tuple[list[str], list[str]]:
    command = parse(["vllm", "serve", "m", "--tool-server", value, *more], "0.16.0")
    found, notes = tool_server_findings(command, "command", Version(version) if version else None)
    assert all(not f.ok for f in found)
    return [f.message for f in found], notes


@pytest.mark.parametrize(
    ("value", "entry"),
    [
        ("http://localhost:8000", "http://localhost:8000"),
        ("localhost:8000,https://tools:9000", "https://tools:9000"),
        ("localhost:8000,", ""),
        ("localhost:8000, tools:9000", " tools:9000"),
        ("localhost:8000/", "localhost:8000/"),
        # review36 W2: a port httpx refuses (InvalidURL) or no connection can use; IPv6 unbracketed
        ("x:abc", "x:abc"),
        ("::1:8000", "::1:8000"),
        ("a:1,127.0.0.1:99999", "127.0.0.1:99999"),
        ("h:0", "h:0"),
        ("[::1]x", "[::1]x"),
        ("u:p@h:-1/mcp", "u:p@h:-1/mcp"),
    ],
)
def test_an_entry_vllm_can_never_reach_is_refused(value, entry):
    found, notes = judged(value)
    assert notes == [] and found == [
        f"--tool-server {value}: vLLM adds http:// and /sse to each entry itself, and connects to "
        f"http://{entry}/sse, which no MCP server answers: vLLM refuses the launch once the model has loaded"
    ]


def test_host_and_port_are_noted_not_connected_to():
    assert judged("localhost:8000,tools:9000/mcp") == (
        [],
        ["--tool-server: vLLM connects to http://localhost:8000/sse, http://tools:9000/mcp/sse once the model has "
         "loaded (not judged here)"],
    )  # fmt: skip
    assert judged("demo") == ([], [])
    for fine in ("[::1]:8000", "u:p@h:1", "h:65535", "host", "[::1]", "h:+80"):  # as httpx reads each
        assert judged(fine)[0] == [], fine


@pytest.mark.parametrize("version", ["0.11.0", "0.17.1", "0.34.0"])
def test_the_rule_holds_in_each_release_checked(version):
    assert len(judged("http://x:1", version)[0]) == 1


@pytest.mark.parametrize("version", ["0.35.0", "0.10.2", None])
def test_another_release_is_not_judged(version):
    found, notes = judged("http://x:1", version)
    assert found == [] and len(notes) == 1 and notes[0].startswith("--tool-server http://x:1: not judged: vLLM ")


def test_a_headless_node_connects_to_no_tool_server():
    assert judged("http://x:1", "0.16.0", "--headless") == ([], [])


def test_a_value_of_thousands_of_entries_is_said_in_a_line():
    """review36 L7: 12,000 entries were one note of 241 KB (each expanded), the refusal quoted the
    whole value: a few entries, then how many more."""
    many = ",".join(f"h{i}:1" for i in range(12_000))
    found, notes = judged(many)
    assert found == [] and notes == [
        "--tool-server: vLLM connects to http://h0:1/sse, http://h1:1/sse, http://h2:1/sse +11,997 more once the "
        "model has loaded (not judged here)"
    ]
    value = many + ",http://x:1"
    found, notes = judged(value)
    assert notes == [] and len(found) == 1 and len(found[0]) < 400, found
    assert found[0].startswith("--tool-server h0:1,h1:1,") and f"... ({len(value):,} characters)" in found[0]
    assert "connects to http://http://x:1/sse, which no MCP server answers" in found[0]
    found, notes = judged(value, "0.35.0")
    assert found == [] and len(notes) == 1 and len(notes[0]) < 400 and f"({len(value):,} characters)" in notes[0]


def pooling(*words: str, architectures: tuple[str, ...], version: str = "0.16.0") -> tuple[list[str], list[str]]:
    command = parse(["vllm", "serve", "m", "--tool-server", "http://x:1", *words], "0.16.0")
    found, notes = tool_server_findings(command, "command", Version(version), architectures)
    return [f.message for f in found], notes


NOT_USED = "--tool-server: not used: vLLM builds no tool server for a pooling model (no generate task)"


@pytest.mark.parametrize(
    ("words", "architectures"),
    [
        (["--runner", "pooling"], ("LlamaForCausalLM",)),
        ([], ("LlamaForSequenceClassification",)),
        ([], ("Qwen2ForRewardModel",)),
        (["--runner", "auto"], ("BertForSequenceClassification", "LlamaForCausalLM")),
    ],
)
def test_a_pooling_model_builds_no_tool_server(words, architectures):
    """From 0.16.0 the API server builds its tool server only for a model serving `generate`
    (init_generate_state): a pooling model's launch never connects to it, so nothing is refused."""
    assert pooling(*words, architectures=architectures) == ([], [NOT_USED])
    found, _ = pooling(*words, architectures=architectures, version="0.15.1")  # built for every model there
    assert len(found) == 1


@pytest.mark.parametrize(
    ("words", "architectures"),
    [
        ([], ("LlamaForCausalLM",)),
        (["--runner", "generate"], ("LlamaForSequenceClassification",)),
        ([], ("LlamaForCausalLM", "BertForSequenceClassification")),  # the first one decides
        ([], ("BertModel",)),  # a bare ...Model: some generate (ChatGLMModel): still judged
        ([], ()),
    ],
)
def test_a_generating_model_or_one_not_certainly_pooling_is_judged(words, architectures):
    found, notes = pooling(*words, architectures=architectures)
    assert len(found) == 1 and notes == []


ST_POOLING = {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
ST_TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}


@pytest.mark.parametrize(
    ("modules", "words", "is_pooling"),
    [
        ([ST_TRANSFORMER, ST_POOLING], [], True),  # vLLM 0.16.0's get_pooling_config: pooling runner
        ([ST_POOLING], ["--runner", "auto"], True),
        ([ST_TRANSFORMER, ST_POOLING], ["--runner", "generate"], False),  # the runner given wins
        ([ST_TRANSFORMER], [], False),  # no Pooling module: get_pooling_config gives None
        ([], [], False),
        ({"type": "sentence_transformers.models.Pooling"}, [], False),  # no list: vLLM fails as it starts
        (None, [], False),  # no modules.json
        ("not json", [], False),
    ],
)
def test_a_sentence_transformers_pooling_model_builds_no_tool_server(tmp_path, modules, words, is_pooling):
    """A *ForCausalLM model whose modules.json names a Pooling module is served by vLLM's pooling
    runner (ModelConfig._get_default_runner_type asks get_pooling_config before the architecture): its
    launch builds no tool server, so an http:// entry is no refusal."""
    if modules is not None:
        (tmp_path / "modules.json").write_text(modules if isinstance(modules, str) else json.dumps(modules))
    command = parse(["vllm", "serve", "m", "--tool-server", "http://x:1", *words], "0.16.0")
    found, notes = tool_server_findings(command, "command", Version("0.16.0"), ("LlamaForCausalLM",), str(tmp_path))
    assert (found, notes) == (([], [NOT_USED]) if is_pooling else (found, []))
    assert bool(found) is not is_pooling


def test_preflight_reads_the_modules_json_of_the_model_vllm_serves(tmp_path):
    """The same, through preflight: a local model directory, then (online) the hub cache's snapshot
    of a hub id, where vLLM's file_or_path_exists finds it too."""
    tree, library = write_eagle3_setup(tmp_path)
    model = write_model(tmp_path / "st", {**DEEPSEEK_V3, "architectures": ["LlamaForCausalLM"]})
    cache = tmp_path / "hub"
    snapshot = cache / "models--org--st" / "snapshots" / ("c" * 40)
    write_model(snapshot, {**DEEPSEEK_V3, "architectures": ["LlamaForCausalLM"]})
    (cache / "models--org--st" / "refs").mkdir()
    (cache / "models--org--st" / "refs" / "main").write_text("c" * 40)

    def tool_server_refused(name: str) -> bool:
        done = run_cli_read_only(
            "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--",
            "env", f"HF_HUB_CACHE={cache}", "vllm", "serve", name, "--tool-server", "http://x:1",
        )  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr
        return any("--tool-server" in f["message"] and not f["ok"] for f in json.loads(done.stdout)["findings"])

    assert tool_server_refused(str(model)) and tool_server_refused("org/st")
    for directory in (model, snapshot):
        (directory / "modules.json").write_text(json.dumps([ST_TRANSFORMER, ST_POOLING]))
    assert not tool_server_refused(str(model)) and not tool_server_refused("org/st")
