"""A DeepSeek tool parser streamed through vLLM's own serving path (vLLM 0.23 on), for files behaviour.py cannot
load: 0.34.0's DeepSeek-V3.2 parser (deepseekv32_engine_tool_parser.py) is an adapter on vLLM's parser engine.

For each of scenario.py's outputs at behaviour.py's splits (and --random N seeded ones), a new parser of the class
the chat server builds, ParserManager.get_parser(tool_parser_name=NAME, enable_auto_tools=True), takes the
deltas through parse_delta(..., finished=) as ChatStreamProcessor.step gives them (the last one finished: the
server's top-up and the engine's flush run there); what it streams must equal what parser.parse(), the
non-streaming path, reads from the whole text. The tokenizer is behaviour.py's (markers one token each, or with
--dsml-as-text the DSML markers cut like text), with decode and the stop token as a special token.

Usage (vLLM 0.34.0 does not install here; its sources do import with a newer Transformers and xgrammar):
  pip install --target SITE --no-deps "transformers==5.22.2" "huggingface_hub==2.4.0" "tokenizers==0.23.3" \
      "xgrammar==0.2.8"
  PYTHONPATH=SITE:TREE VENV/bin/python -B served.py deepseek_v32 [--random N] [--no-tools] [--dsml-as-text]
where TREE is patchkit's tree of 0.34.0's files (patchkit.fetch.release_tree("0.34.0", all_python=True)) and VENV
one with torch (the vLLM 0.16.0 venv of `make test-vllm`). NAME: deepseek_v3, deepseek_v31 or deepseek_v32.
Exit 0: every streamed run equals parse(); 1: some differ (each named).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import random
import sys
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RENDERS = {"deepseek_v3": "DeepSeekV3ToolParser", "deepseek_v31": "DeepSeekV31ToolParser"}
RENDERS["deepseek_v32"] = "DeepSeekV32ToolParser"
SCHEMAS = {  # the scenario's functions, as a client declares them
    "get_weather": {"city": {"type": "string"}, "unit": {"type": "string"}},
    "get_time": {"timezone": {"type": "string"}},
    "add": {"a": {"type": "number"}, "b": {"type": "number"}},
    "scale": {"factor": {"type": "number"}},
    "search": {"query": {"type": "object"}, "filters": {"type": "array"}},
}


def load(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


behaviour = load(HERE / "behaviour.py", "behaviour")
scenario = behaviour.load_scenario(HERE / "scenario.py")


class Tokenizer(behaviour.FakeTokenizer):
    """behaviour.py's tokenizer with what the parser engine asks of one: decode and the special tokens."""

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        text = {token_id: piece for piece, token_id in self.vocab.items()}
        return "".join(text[i] for i in ids if not (skip_special_tokens and text[i] == self.stop))

    @property
    def all_special_tokens(self) -> list[str]:
        return [self.stop]

    @property
    def all_special_ids(self) -> list[int]:
        return [self.vocab[self.stop]]


def streamed(parser: Any, request: Any, tokens: list[tuple[int, str]], sizes: list[int]) -> Any:
    result = behaviour.Streamed()
    pieces = list(behaviour.chunks(tokens, sizes))
    for number, piece in enumerate(pieces, 1):
        text, ids = "".join(t for _, t in piece), [i for i, _ in piece]
        result.add(parser.parse_delta(text, ids, request, [1, 2, 3], finished=number == len(pieces)))
    return result


def differences(got: Any, content: str, calls: list[tuple[str, str]]) -> list[str]:
    found = list(got.problems)
    if got.content != content:
        found.append(f"content {got.content!r}, expected {content!r}")
    for index, (name, arguments) in enumerate(calls):
        seen = got.calls.get(index)
        if seen is None:
            found.append(f"call {index} ({name}) lost")
            continue
        if seen["name"] != name:
            found.append(f"call {index} name {seen['name']!r}")
        if seen["arguments"] != arguments:
            equal = " (equal as JSON)" if _json_equal(seen["arguments"], arguments) else ""
            found.append(f"call {index} ({name}) arguments {seen['arguments']!r}, expected {arguments!r}{equal}")
        if len(seen["ids"]) != 1:
            found.append(f"call {index} ({name}) ids {seen['ids']}")
    return found + [f"extra call {i}: {got.calls[i]}" for i in sorted(got.calls) if i >= len(calls)]


def _json_equal(a: str, b: str) -> bool:
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return False


def main(argv: list[str]) -> int:
    name = argv[0]
    random_splits = int(argv[argv.index("--random") + 1]) if "--random" in argv else 0
    import vllm  # lazy: the tree on PYTHONPATH, after the arguments are read
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    logging.disable(logging.CRITICAL)
    parser_cls = ParserManager.get_parser(tool_parser_name=name, enable_auto_tools=True, model_name="m")
    tools = [
        {"type": "function", "function": {"name": f, "parameters": {"type": "object", "properties": p}}}
        for f, p in SCHEMAS.items()
    ]
    given = "--no-tools" not in argv
    request = ChatCompletionRequest(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=tools if given else None,
        tool_choice="auto" if given else None,
    )
    as_text = "--dsml-as-text" in argv
    tokenizer = Tokenizer(tuple(m for m in scenario.MARKERS if not (as_text and "DSML" in m)), scenario.STOP)
    print(
        f"vLLM {vllm.__version__} ({vllm.__file__}): {parser_cls.tool_parser_cls.__name__} in "
        f"{parser_cls.__mro__[1].__name__}; tools {'given' if given else 'none'}; "
        f"DSML markers {'as text' if as_text else 'one token each'}"
    )
    rng, failed, runs = random.Random(0), 0, 0
    for label, output in scenario.CASES.items():
        text, intended = scenario.PARSERS[RENDERS[name]](output)
        _, content, calls = parser_cls(tokenizer, request.tools, chat_template_kwargs=None, model_config=None).parse(
            text, request, enable_auto_tools=True
        )
        want = [(c.name, c.arguments) for c in calls or []]
        if not behaviour.matches((content or "", [(None, *call) for call in want]), intended):
            print(f"FAIL [{label}] parse() reads {content!r} {want!r}")
            failed, runs = failed + 1, runs + 1
            continue
        tokens = tokenizer.tokenize(text)
        splits = behaviour.splits_of(tokens, tokenizer, random_splits, rng)
        for sizes, split in splits:
            runs += 1
            try:
                problems = differences(
                    streamed(
                        parser_cls(tokenizer, request.tools, chat_template_kwargs=None, model_config=None),
                        request,
                        tokens,
                        sizes,
                    ),
                    content or "",
                    want,
                )
            except Exception as e:  # that split fails, the others still run
                problems = [f"raised {type(e).__name__}: {e}"]
            if problems:
                failed += 1
                print(f"FAIL [{label}] {split or f'deltas of {sizes} tokens'}: {'; '.join(problems)}")
    print(f"{'FAIL' if failed else 'PASS'} {name}: {failed} of {runs} streamed runs differ from parse()")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
