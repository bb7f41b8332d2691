"""Behaviour test of a vLLM Kimi-K2 tool-call parser file: streamed calls must equal non-streamed ones.

Usage: python behaviour.py PATH/TO/vllm/.../kimi_k2_tool_parser.py [--top-up auto|bare|dumps|replace] [--random N]

The parser file is loaded without vLLM (which needs torch): its ``vllm.*`` imports are served by
small stand-ins. A fake tokenizer whose markers are single tokens drives it. Each model output is
streamed at several tokens per delta and all at once, with the end-of-stream top-up vLLM's
serving code does (read from the tree's serving file), and compared with ``extract_tool_calls``
on the whole output; ``--random N`` adds N seeded random splits per output.
Exit 0: every split matches; 1: a split lost or changed something (named); 2: the file cannot
be read or holds an import this harness has no stand-in for.
Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import logging
import random
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

SPLITS: tuple[int | None, ...] = (1, 2, 3, 4, 6, 8, 16, None)  # None: all at once

# --- stand-ins for what the parser imports from vllm -------------------------------------------


def _dump(obj: Any, exclude_none: bool = False) -> dict[str, Any]:
    fields = dataclasses.asdict(obj)
    return {k: v for k, v in fields.items() if v is not None} if exclude_none else fields


@dataclasses.dataclass
class FunctionCall:
    name: str
    arguments: str


@dataclasses.dataclass
class ToolCall:
    function: FunctionCall
    id: str | None = None
    type: str = "function"


@dataclasses.dataclass
class DeltaFunctionCall:
    name: str | None = None
    arguments: str | None = None

    def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
        return _dump(self, exclude_none)


@dataclasses.dataclass
class DeltaToolCall:
    index: int
    id: str | None = None
    type: str | None = None
    function: DeltaFunctionCall | dict[str, Any] | None = None

    def __post_init__(self) -> None:  # pydantic turns the dict parsers pass into the model
        if isinstance(self.function, dict):
            self.function = DeltaFunctionCall(**self.function)


@dataclasses.dataclass
class DeltaMessage:
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCall] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ExtractedToolCallInformation:
    tools_called: bool
    tool_calls: list[ToolCall]
    content: str | None = None


class ChatCompletionRequest:
    tools: list[Any] | None = None
    tool_choice: str = "auto"
    skip_special_tokens: bool = False


class ToolParser:
    def __init__(self, tokenizer: Any, tools: list[Any] | None = None) -> None:
        self.prev_tool_call_arr: list[dict[str, Any]] = []
        self.current_tool_id = -1
        self.current_tool_name_sent = False
        self.streamed_args_for_tool: list[str] = []
        self.model_tokenizer = tokenizer
        self.tools = tools

    @property
    def vocab(self) -> dict[str, int]:
        vocab: dict[str, int] = self.model_tokenizer.get_vocab()
        return vocab

    def adjust_request(self, request: Any) -> Any:
        return request


class ToolParserManager:
    @staticmethod
    def register_module(*_args: Any, **_kwargs: Any) -> Callable[[type], type]:
        return lambda parser_class: parser_class


def partial_tag_overlap(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that begins ``tag`` (vllm/tool_parsers/utils.py)."""
    for size in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


STAND_INS: dict[str, Any] = {
    "FunctionCall": FunctionCall,
    "ToolCall": ToolCall,
    "DeltaFunctionCall": DeltaFunctionCall,
    "DeltaToolCall": DeltaToolCall,
    "DeltaMessage": DeltaMessage,
    "ExtractedToolCallInformation": ExtractedToolCallInformation,
    "ChatCompletionRequest": ChatCompletionRequest,
    "ResponsesRequest": ChatCompletionRequest,
    "ToolParser": ToolParser,
    "Tool": dict,
    "ToolParserManager": ToolParserManager,
    "TokenizerLike": object,
    "AnyTokenizer": object,
    "init_logger": logging.getLogger,
    "partial_tag_overlap": partial_tag_overlap,
}


def load_parser_class(path: Path, class_name: str) -> type:
    """Execute the parser file with each ``from vllm.X import names`` served by STAND_INS."""
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vllm":
            name = node.module or "vllm"
            module = sys.modules.get(name) or types.ModuleType(name)  # two imports from one module add up
            for alias in node.names:
                if alias.name not in STAND_INS:
                    raise LookupError(f"no stand-in for {node.module}.{alias.name}")
                setattr(module, alias.name, STAND_INS[alias.name])
            sys.modules[module.__name__] = module
    if importlib.util.find_spec("regex") is None:
        sys.modules["regex"] = re  # the patterns these parsers use mean the same in re
    namespace: dict[str, Any] = {"__name__": "kimi_parser_under_test"}
    exec(compile(source, str(path), "exec"), namespace)  # the file under test
    parser_class: type = namespace[class_name]
    return parser_class


# --- a tokenizer whose markers are single tokens ---------------------------------------------

MARKERS = (
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_section_begin|>",
    "<|tool_call_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_end|>",
    "<|tool_call_argument_begin|>",
    "<|im_end|>",
)
STOP = "<|im_end|>"
PIECE = re.compile("|".join(re.escape(m) for m in MARKERS) + r"|\s?\w+|\s|[^\w\s]")


class FakeTokenizer:
    """Words, single punctuation marks and each marker are one token; decoding concatenates."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {m: i for i, m in enumerate(MARKERS)}

    def get_vocab(self) -> dict[str, int]:
        return dict(self.ids)

    def encode(self, text: str) -> list[tuple[int, str]]:
        pieces = PIECE.findall(text)
        assert "".join(pieces) == text, "tokenizer lost text"
        return [(self.ids.setdefault(p, len(self.ids)), p) for p in pieces]


# --- the end-of-stream top-up of vLLM's serving code (chat completion streaming) ---------------


@dataclasses.dataclass(frozen=True)
class TopUp:
    """The chat server's end-of-stream top-up: whether it takes a str argument text as it is
    (0.17.0 on) rather than json.dumps-ing it, and whether the delta it sends keeps the original
    entry's id, type and name (0.14.0 on, `_create_remaining_args_delta`)."""

    keeps_strings: bool
    keeps_ids: bool

    def __str__(self) -> str:
        named = {(False, False): "bare", (False, True): "dumps", (True, True): "replace"}
        return named.get((self.keeps_strings, self.keeps_ids), "bare, str as is")


TOP_UPS = {"bare": TopUp(False, False), "dumps": TopUp(False, True), "replace": TopUp(True, True)}


def top_up_of_tree(parser_file: Path) -> TopUp:
    """The top-up of the serving file in the tree the parser file is in (`replace` when none)."""
    for parent in parser_file.resolve().parents:
        if parent.name != "vllm":
            continue
        for rel in ("entrypoints/openai/chat_completion/serving.py", "entrypoints/openai/serving_chat.py"):
            serving = parent / rel
            if serving.is_file():
                nodes = list(ast.walk(ast.parse(serving.read_text(encoding="utf-8"), str(serving))))
                return TopUp(
                    keeps_strings=any(_keeps_str_arguments(node) for node in nodes),
                    keeps_ids=any(
                        isinstance(node, ast.FunctionDef) and node.name == "_create_remaining_args_delta"
                        for node in nodes
                    ),
                )
    return TOP_UPS["replace"]


def _keeps_str_arguments(node: ast.AST) -> bool:
    """`if isinstance(X, str): expected_call = X`, or `expected_call = X if isinstance(X, str) else ...`."""

    def str_check(test: ast.AST) -> str | None:
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance":
            checked, kind = test.args if len(test.args) == 2 else (None, None)
            if isinstance(checked, ast.Name) and isinstance(kind, ast.Name) and kind.id == "str":
                return checked.id
        return None

    def assigns_expected(statement: ast.AST, name: str) -> bool:
        return (
            isinstance(statement, ast.Assign)
            and [getattr(t, "id", None) for t in statement.targets] == ["expected_call"]
            and isinstance(statement.value, ast.Name)
            and statement.value.id == name
        )

    if isinstance(node, ast.If) and (name := str_check(node.test)):
        return any(assigns_expected(statement, name) for statement in node.body)
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp):
        name = str_check(node.value.test)
        return name is not None and assigns_expected(ast.Assign(targets=node.targets, value=node.value.body), name)
    return False


def top_up(parser: Any, message: DeltaMessage | None, mode: TopUp) -> DeltaMessage | None:
    """What vLLM sends instead of the last delta when that delta's first tool call has arguments."""
    if not (message and message.tool_calls and message.tool_calls[0].function):
        return message
    first = message.tool_calls[0].function
    assert isinstance(first, DeltaFunctionCall)
    if first.arguments is None or not parser.prev_tool_call_arr:
        return message
    index = len(parser.prev_tool_call_arr) - 1
    args = parser.prev_tool_call_arr[index].get("arguments", {})
    expected = args if mode.keeps_strings and isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    actual = parser.streamed_args_for_tool[index]
    if first.arguments:
        actual = actual[: -len(first.arguments)]
    original = next((c for c in message.tool_calls if c.index == index), None) if mode.keeps_ids else None
    name = original.function.name if original and isinstance(original.function, DeltaFunctionCall) else None
    return DeltaMessage(
        tool_calls=[
            DeltaToolCall(
                index=index,
                id=original.id if original else None,
                type=original.type if original else None,
                function=DeltaFunctionCall(name=name, arguments=expected.replace(actual, "", 1)),
            )
        ]
    )


# --- the driver ---------------------------------------------------------------------------------

B, E = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CB, CA, CE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


Call = tuple[str, str, str]  # id, name, arguments

# label: (content before the calls, [(id, arguments)])
CASES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "one call": ("", [("functions.get_weather:0", '{"city": "Paris", "unit": "celsius"}')]),
    "two parallel calls": (
        "",
        [
            ("functions.get_weather:0", '{"city": "Paris", "unit": "celsius"}'),
            ("functions.get_time:1", '{"timezone": "Europe/Paris", "format": "24h"}'),
        ],
    ),
    "text before the calls": (
        "I will look up the weather in Paris for you now.",
        [("functions.get_weather:0", '{"city": "Paris", "days": 3}')],
    ),
    "numeric, string and nested arguments": (
        "Booking it.",
        [
            (
                "functions.book:0",
                '{"hotel": "Le Grand", "nights": 2, "guests": {"adults": 2, "ages": [34, 36]}, "price": 199.5}',
            ),
            ("functions.notify:1", '{"user": "ana", "count": 12, "urgent": true, "score": -0.25}'),
        ],
    ),
    "arguments over several lines, an id without functions.": (
        "Two steps:\n",
        [("functions.search:0", '{\n  "query": "a b",\n  "limit": [1, 2]\n}'), ("summarize:1", "{}")],
    ),
    "marker-like text before the calls": ("Use <| or <|tool here.", [("functions.echo:0", '{"s": "<|tool_call"}')]),
}


def model_output(content: str, calls: list[tuple[str, str]]) -> str:
    return content + B + "".join(f"{CB}{ident}{CA}{args}{CE}" for ident, args in calls) + E


def intended(calls: list[tuple[str, str]]) -> list[Call]:
    return [(ident, ident.split(":")[0].split(".")[-1], args) for ident, args in calls]


@dataclasses.dataclass
class Streamed:
    content: str = ""
    calls: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)

    def take(self, message: DeltaMessage | None) -> None:
        if message is None:
            return
        self.content += message.content or ""
        for delta in message.tool_calls or []:
            entry = self.calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
            if delta.id:
                entry["id"] = delta.id
            function = delta.function
            if isinstance(function, DeltaFunctionCall):
                if function.name:
                    if entry["name"]:
                        self.problems.append(f"call {delta.index}: name sent twice")
                    entry["name"] = function.name
                entry["arguments"] += function.arguments or ""


def fixed_split(count: int, size: int | None) -> list[int]:
    """Delta sizes: `size` tokens each (the last one what is left), or one delta of all."""
    step = size or count
    return [min(step, count - start) for start in range(0, count, step)]


def random_split(count: int, rng: random.Random) -> list[int]:
    """Delta sizes cut at up to 12 random places, as speculative decoding's accepted runs vary."""
    cuts = sorted(rng.sample(range(1, count), rng.randint(0, min(12, count - 1))))
    return [end - start for start, end in zip([0, *cuts], [*cuts, count], strict=True)]


def token_count(output: str) -> int:
    return len(FakeTokenizer().encode(output + STOP))


def stream(parser_class: type, output: str, sizes: list[int], mode: TopUp) -> Streamed:
    tokenizer = FakeTokenizer()
    tokens = tokenizer.encode(output + STOP)  # the stop token ends the last delta
    parser = parser_class(tokenizer)
    request = ChatCompletionRequest()
    seen = Streamed()
    previous_text, previous_ids, start = "", list[int](), 0
    for number, size in enumerate(sizes, 1):
        piece, start = tokens[start : start + size], start + size
        delta_ids = [i for i, _ in piece]
        delta_text = "".join(t for _, t in piece if t != STOP)  # vLLM does not detokenize it
        current_text, current_ids = previous_text + delta_text, previous_ids + delta_ids
        message = parser.extract_tool_calls_streaming(
            previous_text, current_text, delta_text, previous_ids, current_ids, delta_ids, request
        )
        seen.take(top_up(parser, message, mode) if number == len(sizes) else message)
        previous_text, previous_ids = current_text, current_ids
    return seen


def non_streamed(parser_class: type, output: str) -> tuple[str, list[Call]]:
    info = parser_class(FakeTokenizer()).extract_tool_calls(output, ChatCompletionRequest())
    calls = [(c.id, c.function.name, c.function.arguments) for c in info.tool_calls]
    return info.content or "", calls


def differences(got: Streamed, want_content: str, want_calls: list[Call]) -> list[str]:
    found = list(got.problems)
    if got.content != want_content:
        found.append(f"content {got.content!r}, expected {want_content!r}")
    for index, (ident, name, arguments) in enumerate(want_calls):
        entry = got.calls.get(index)
        if entry is None:
            found.append(f"call {index} ({name}) lost")
            continue
        for field, want in (("id", ident), ("name", name), ("arguments", arguments)):
            if entry[field] != want:
                found.append(f"call {index} ({name}) {field} {entry[field]!r}, expected {want!r}")
    found += [f"extra call {index}: {got.calls[index]}" for index in sorted(got.calls) if index >= len(want_calls)]
    return found


def run(parser_file: Path, mode: TopUp, random_splits: int = 0, say: Callable[[str], None] = print) -> bool:
    parser_class = load_parser_class(parser_file, "KimiK2ToolParser")
    rng = random.Random(0)  # the same random splits on every run
    failures = total = 0
    for label, (content, calls) in CASES.items():
        output = model_output(content, calls)
        count = token_count(output)
        splits = [
            (fixed_split(count, size), "all at once" if size is None else f"{size} token(s) per delta")
            for size in SPLITS
        ]
        splits += [
            (sizes, f"deltas of {sizes} tokens") for sizes in (random_split(count, rng) for _ in range(random_splits))
        ]
        total += len(splits)
        want_content, want_calls = non_streamed(parser_class, output)
        if (want_content, want_calls) != (content, intended(calls)):
            say(f"FAIL  {label}: extract_tool_calls reads {want_calls} and content {want_content!r}")
            failures += len(splits)  # no split can be judged against it
            continue
        for sizes, split in splits:
            found = differences(stream(parser_class, output, sizes, mode), want_content, want_calls)
            for problem in found:
                say(f"FAIL  {label}, {split}: {problem}")
            failures += bool(found)
    verdict = "PASS" if not failures else "FAIL"
    say(f"{verdict}  {parser_file}: {total - failures}/{total} streams match (top-up: {mode})")
    return not failures


def main(argv: list[str] | None = None) -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("parser_file", type=Path)
    options.add_argument("--top-up", choices=("auto", *TOP_UPS), default="auto", help="auto: the tree's serving file")
    options.add_argument("--random", type=int, default=0, metavar="N", help="also N random splits per output")
    args = options.parse_args(argv)
    if not args.parser_file.is_file():
        print(f"error: no file {args.parser_file}", file=sys.stderr)
        return 2
    mode = top_up_of_tree(args.parser_file) if args.top_up == "auto" else TOP_UPS[args.top_up]
    logging.disable(logging.CRITICAL)  # the parser's logger.exception would bury the report
    try:
        return 0 if run(args.parser_file, mode, args.random) else 1
    except (LookupError, SyntaxError, OSError) as e:  # not a parser this harness can load
        print(f"error: {args.parser_file}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
