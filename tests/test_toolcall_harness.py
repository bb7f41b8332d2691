"""The tool-call sets' behaviour harness (patches/*/behaviour.py) on inputs of its own.

One driver, shipped as a byte-identical copy in each set; each set declares only its scenario.
The top-up it judges under is the one the tree's own serving code runs.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from helpers import LIBRARY, behaviour_harness

SETS = ("deepseek-tool-calls", "kimi-k2-tool-calls")


def harness(set_name: str = SETS[0]) -> types.ModuleType:
    return behaviour_harness(set_name)


def test_every_set_ships_the_same_driver_and_a_scenario_of_its_own():
    drivers = {name: (LIBRARY / name / "behaviour.py").read_bytes() for name in SETS}
    assert len(set(drivers.values())) == 1, "behaviour.py copies differ: copy the changed one over the others"
    for name in SETS:
        scenario = harness(name).load_scenario(LIBRARY / name / "scenario.py")
        assert scenario.PARSERS and scenario.CASES and scenario.MARKERS and scenario.STOP


def write(root: Path, relative: str, text: str) -> None:
    path = root / "vllm" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


PARSER = "tool_parsers/some_tool_parser.py"
DUMPS_ALWAYS = "expected_call = json.dumps(args, ensure_ascii=False)\n"
STR_AS_IS = "if isinstance(args, str):\n    expected_call = args\nelse:\n    expected_call = json.dumps(args)\n"
KEEPS_IDS = "def _create_remaining_args_delta(delta, remaining, index):\n    pass\n"


@pytest.mark.parametrize(
    ("serving", "server_code", "expected"),
    [
        ("entrypoints/openai/serving_chat.py", DUMPS_ALWAYS, "bare"),
        ("entrypoints/openai/serving_chat.py", KEEPS_IDS + DUMPS_ALWAYS, "dumps"),
        ("entrypoints/openai/chat_completion/serving.py", KEEPS_IDS + STR_AS_IS, "replace"),
        ("entrypoints/openai/serving_chat.py", STR_AS_IS, "bare, str as is"),  # kimi's 0002 on 0.11-0.13
    ],
)
def test_the_top_up_is_read_from_the_trees_serving_code(tmp_path, serving, server_code, expected):
    write(tmp_path, serving, server_code)
    write(tmp_path, PARSER, "")
    top_up, source = harness().top_up_of_tree(tmp_path / "vllm" / PARSER)
    assert (str(top_up), source) == (expected, tmp_path / "vllm" / serving)


def test_a_server_without_the_rewrite_appends_where_its_parser_module_says(tmp_path):
    write(tmp_path, "entrypoints/openai/chat_completion/serving.py", "delta = parser.parse_delta(x)\n")
    write(tmp_path, "parser/abstract_parser.py", "def _append_unstreamed_tool_args(self, delta):\n    pass\n")
    write(tmp_path, PARSER, "")
    top_up, _ = harness().top_up_of_tree(tmp_path / "vllm" / PARSER)
    assert str(top_up) == "append"


def test_without_serving_code_the_version_decides(tmp_path):
    write(tmp_path, PARSER, "")
    module = harness()
    assert module.top_up_of_tree(tmp_path / "vllm" / PARSER) is None
    versions = {
        "0.11.0": "bare",
        "0.13.0": "bare",
        "0.14.1": "dumps",
        "0.22.1": "replace",
        "0.33.1.dev12+gabc": "append",
    }
    assert {v: str(module.top_up_of_version(v)) for v in versions} == versions


def test_version_keys_name_the_top_up_each_release_is_judged_under(capsys):
    """What `verify` of releases groups by (checks/behaviour.version_keys): releases judged under one
    top-up may share a verdict, releases under two may not."""
    module = harness()
    versions = ["0.13.0", "0.14.0", "0.16.0", "0.17.0", "0.22.1", "0.23.0", "0.34.0"]
    assert module.main(["--version-keys", *versions]) == 0
    keys = json.loads(capsys.readouterr().out)["version_keys"]
    assert keys == {v: str(module.top_up_of_version(v)) for v in versions}
    assert keys["0.14.0"] == keys["0.16.0"] != keys["0.13.0"] != keys["0.17.0"] == keys["0.22.1"] != keys["0.23.0"]


def test_a_final_delta_that_starts_with_a_new_calls_name_is_left_as_it_is():
    """Up to 0.22 the server rewrites a final delta only when its first entry carries arguments."""
    module = harness()
    name_first = module.DeltaMessage(
        content="Sure.",
        tool_calls=[
            module.DeltaToolCall(index=0, id="a", type="function", function=module.DeltaFunctionCall(name="f")),
            module.DeltaToolCall(index=0, function=module.DeltaFunctionCall(arguments='{"x": 1}')),
        ],
    )

    parser = types.SimpleNamespace(prev_tool_call_arr=[{"name": "f", "arguments": {"x": 1}}])
    parser.streamed_args_for_tool = ['{"x": 1}']
    for name in ("bare", "dumps", "replace"):
        assert module.TOP_UPS[name].apply(parser, name_first) is name_first
    arguments_first = module.DeltaMessage(tool_calls=list(reversed(name_first.tool_calls)))
    rewritten = module.TOP_UPS["bare"].apply(parser, arguments_first)
    assert [(c.index, c.id, c.function.name) for c in rewritten.tool_calls] == [(0, None, None)]


def test_the_fake_tokenizer_answers_what_vllms_parser_engine_asks():
    """From 0.25 a parser on vLLM's parser engine decodes each token id and reads the special tokens
    (without decode, every run of stock 0.33.0's Kimi-K2 parser raised AttributeError)."""
    module = harness("kimi-k2-tool-calls")
    scenario = module.load_scenario(LIBRARY / "kimi-k2-tool-calls" / "scenario.py")
    tokenizer = module.FakeTokenizer(scenario.MARKERS, scenario.STOP)
    text = f'Sure.{scenario.B}{scenario.CB}functions.f:0{scenario.CA}{{"x": 1}}{scenario.CE}{scenario.E}'
    ids = [token for token, _ in tokenizer.tokenize(text)]
    assert "".join(tokenizer.decode([token]) for token in ids) == text + scenario.STOP
    assert tokenizer.decode(ids, skip_special_tokens=True) == 'Sure.functions.f:0{"x": 1}'
    assert tokenizer.all_special_tokens == [*scenario.MARKERS, scenario.STOP]
    assert [tokenizer.get_vocab()[t] for t in tokenizer.all_special_tokens] == tokenizer.all_special_ids


class EngineParser:
    """As a parser on vLLM's parser engine: its own rest of the arguments; text held until finish."""

    engine_based_streaming = True

    def __init__(self, module: types.ModuleType) -> None:
        self.module, self.finished = module, 0

    def get_remaining_unstreamed_args(self) -> str:
        return "}"

    def finish_streaming(self):
        self.finished += 1
        call = self.module.DeltaToolCall(
            index=1, id="b", type="function", function=self.module.DeltaFunctionCall(name="g")
        )
        return self.module.DeltaMessage(content=" held", tool_calls=[call])


def test_the_append_top_up_flushes_a_parser_on_the_engine_as_the_server_does():
    """0.25 on: the server appends the parser's own unstreamed rest, then takes what finish_streaming
    holds back (DelegatingParser._flush_engine_parsers); a parser not on the engine is not flushed."""
    module = harness()
    last = module.DeltaToolCall(index=0, function=module.DeltaFunctionCall(arguments='{"x": 1'))
    parser = EngineParser(module)
    delta = module.TOP_UPS["append"].apply(parser, module.DeltaMessage(content="Sure.", tool_calls=[last]))
    assert delta.content == "Sure. held" and parser.finished == 1
    assert [(c.index, c.function.name, c.function.arguments) for c in delta.tool_calls] == [
        (0, None, '{"x": 1}'),
        (1, "g", None),
    ]
    assert module.TOP_UPS["append"].apply(EngineParser(module), None).content == " held"
    plain = types.SimpleNamespace(prev_tool_call_arr=[], streamed_args_for_tool=[], finish_streaming=None)
    assert module.TOP_UPS["append"].apply(plain, None) is None


# A parser engine of our own, in vLLM's layout (0.25 on): the tool parser file subclasses an adapter that
# registered_adapters.py makes from an engine class with make_adapters (which imports every model's engine).
ENGINE = {
    "parser/engine/adapters.py": (
        "from vllm.tool_parsers.abstract_tool_parser import ToolParser\n\n"
        "def make_adapters(engine):\n"
        "    return type('R', (), {}), type(engine.__name__ + 'ToolAdapter', (ToolParser,), {'engine': engine})\n"
    ),
    "parser/engine/registered_adapters.py": (
        "from vllm.parser.engine.adapters import make_adapters\n"
        "from vllm.parser.other_model import OtherParser\n"
        "from vllm.parser.demo import DemoParser\n\n"
        "OtherParserReasoningAdapter, OtherParserToolAdapter = make_adapters(OtherParser)\n"
        "(DemoParserReasoningAdapter, DemoParserToolAdapter) = make_adapters(DemoParser)\n"
    ),
    "parser/demo.py": "from vllm.parser.engine.events import KIND\n\nclass DemoParser:\n    kind = KIND\n",
    "parser/engine/events.py": "KIND = 'from the tree'\n",
    "parser/other_model.py": "import a_package_the_harness_lacks\n",  # never loaded: only DemoParser is asked
    "parser/__init__.py": "import a_package_the_harness_lacks\n",  # vllm.parser itself stays a stand-in
}
ENGINE_PARSER = "tool_parsers/demo_tool_parser.py"
ENGINE_PARSER_SOURCE = (
    "from vllm.parser.engine.registered_adapters import DemoParserToolAdapter\n\n"
    "class DemoToolParser(DemoParserToolAdapter):\n    pass\n"
)


def test_a_parser_on_vllms_parser_engine_loads_the_engine_from_its_own_tree(tmp_path):
    """From 0.25.0 the tool parsers are adapters on vLLM's parser engine: vllm/parser/ is loaded from
    the judged file's tree (not the package's __init__, which imports every model's parser), and the
    adapter registered_adapters.py names is made from the one engine it asks for."""
    for relative, text in {**ENGINE, ENGINE_PARSER: ENGINE_PARSER_SOURCE}.items():
        write(tmp_path, relative, text)
    module = harness().load_parser_module(tmp_path / "vllm" / ENGINE_PARSER)
    adapter = module.DemoToolParser.__mro__[1]
    assert adapter.__name__ == "DemoParserToolAdapter" and adapter.engine.kind == "from the tree"


def test_a_parser_on_the_engine_without_the_engine_beside_it_says_so(tmp_path):
    write(tmp_path, ENGINE_PARSER, ENGINE_PARSER_SOURCE)
    with pytest.raises(ImportError) as raised:
        harness().load_parser_module(tmp_path / "vllm" / ENGINE_PARSER)
    assert str(raised.value) == (
        "behaviour.py has no stand-in for vllm.parser.engine.registered_adapters.DemoParserToolAdapter "
        "(the tree has no vllm/parser/engine/ beside the file)"
    )


def test_an_engine_module_the_tree_lacks_is_named_with_where_a_set_lists_it(tmp_path):
    """A release whose engine imports a module the set's behaviour_reads does not name (so no fetch
    brought it): the file it lacks is named, not only the name the stand-ins do not serve."""
    for relative, text in {**ENGINE, ENGINE_PARSER: ENGINE_PARSER_SOURCE}.items():
        if relative != "parser/engine/events.py":
            write(tmp_path, relative, text)
    with pytest.raises(ImportError) as raised:
        harness().load_parser_module(tmp_path / "vllm" / ENGINE_PARSER)
    assert str(raised.value) == (
        "behaviour.py has no stand-in for vllm.parser.engine.events.KIND (the tree has no "
        "vllm/parser/engine/events.py beside vllm/parser/engine/: behaviour_reads in set.toml)"
    )
