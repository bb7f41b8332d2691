"""Behaviour test of a vLLM streaming tool-call parser file: streamed calls must equal non-streamed ones.

Usage: python behaviour.py PARSER_FILE [--vllm-version V | --top-up bare|dumps|replace|append ...] [--random N] [--quiet]

The parser file is loaded without vLLM (which needs torch): every `vllm.*` import is served by the
small stand-ins below. A fake tokenizer makes each marker one token, and the model outputs of
CASES are streamed at SPLITS tokens per delta and all at once. The last delta gets the end-of-stream
top-up of vLLM's chat server (TOP_UPS: each release line's own; all of them unless --top-up names
some). Exit 0: every streamed result equals extract_tool_calls'; 1: some differ (each named);
2: the file cannot be loaded or holds no known parser. Standard library only.
"""

# ruff: noqa: RUF001  (the DeepSeek markers are written with fullwidth bars)
from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import random
import re
import sys
import types
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

SPLITS = (1, 2, 3, 4, 6, 8, 16)
EOS = "<｜end▁of▁sentence｜>"  # the stop token: in the token ids, not in the text


# --- stand-ins for what the parser files import from vllm ------------------------------------


class _Model:
    """A pydantic-like model: keyword fields with defaults, model_dump(exclude_none=...)."""

    _fields: ClassVar[dict[str, Any]] = {}

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        for name, default in self._fields.items():
            value = kwargs.get(name, default() if callable(default) else default)
            setattr(self, name, value)

    def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
        dump = {name: getattr(self, name) for name in self._fields}
        return {k: v for k, v in dump.items() if v is not None} if exclude_none else dump


class FunctionCall(_Model):
    _fields: ClassVar[dict[str, Any]] = {"name": None, "arguments": None}


class ToolCall(_Model):
    _fields: ClassVar[dict[str, Any]] = {
        "id": lambda: f"chatcmpl-tool-{uuid.uuid4().hex}",
        "type": "function",
        "function": None,
    }


class ExtractedToolCallInformation(_Model):
    _fields: ClassVar[dict[str, Any]] = {"tools_called": False, "tool_calls": list, "content": None}


class DeltaFunctionCall(_Model):
    _fields: ClassVar[dict[str, Any]] = {"name": None, "arguments": None}


class DeltaToolCall(_Model):
    _fields: ClassVar[dict[str, Any]] = {"id": None, "type": None, "index": None, "function": None}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(self.function, dict):  # vLLM's pydantic model validates a dict into the class
            self.function = DeltaFunctionCall(**self.function)


class DeltaMessage(_Model):
    _fields: ClassVar[dict[str, Any]] = {
        "role": None,
        "content": None,
        "reasoning": None,
        "reasoning_content": None,
        "tool_calls": list,
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.tool_calls is None:
            self.tool_calls = []


class ToolParser:
    """vLLM's ToolParser base, as far as the streaming parsers use it."""

    def __init__(self, tokenizer: Any, tools: Any = None) -> None:
        self.prev_tool_call_arr: list[dict] = []
        self.current_tool_id = -1
        self.current_tool_name_sent = False
        self.streamed_args_for_tool: list[str] = []
        self.model_tokenizer = tokenizer
        self.tools = tools or []

    @property
    def vocab(self) -> dict[str, int]:
        return self.model_tokenizer.get_vocab()

    def adjust_request(self, request: Any) -> Any:
        return request

    def get_remaining_unstreamed_args(self) -> str:
        """vLLM 0.23's: the arguments of the last call parsed but not yet streamed."""
        if not self.prev_tool_call_arr:
            return ""
        index = len(self.prev_tool_call_arr) - 1
        args = self.prev_tool_call_arr[index].get("arguments", {})
        expected = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        actual = self.streamed_args_for_tool[index] if index < len(self.streamed_args_for_tool) else ""
        return expected[len(actual) :] if expected.startswith(actual) else ""


class ToolParserManager:
    @classmethod
    def register_module(cls, *args: Any, **kwargs: Any) -> Callable[[type], type]:
        return lambda module: module


class _Placeholder:
    """Type-only names (requests, tokenizers, tools): the parsers never build them."""


class ChatCompletionRequest(_Placeholder):
    """A request with no tool schemas (the parsers then keep parameter values as written)."""

    tools = None
    tool_choice = "auto"
    skip_special_tokens = True


def _tool_call_id(*args: Any, **kwargs: Any) -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


STAND_INS: dict[str, Any] = {
    "FunctionCall": FunctionCall,
    "ToolCall": ToolCall,
    "ExtractedToolCallInformation": ExtractedToolCallInformation,
    "DeltaFunctionCall": DeltaFunctionCall,
    "DeltaToolCall": DeltaToolCall,
    "DeltaMessage": DeltaMessage,
    "ToolParser": ToolParser,
    "ToolParserManager": ToolParserManager,
    "init_logger": logging.getLogger,
    "make_tool_call_id": _tool_call_id,
    "random_uuid": lambda: uuid.uuid4().hex,
    "ChatCompletionRequest": ChatCompletionRequest,
    **{name: type(name, (_Placeholder,), {}) for name in ("ResponsesRequest", "Tool", "TokenizerLike", "AnyTokenizer")},
}


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name in STAND_INS:
            return STAND_INS[name]
        raise ImportError(f"behaviour.py has no stand-in for {self.__name__}.{name}")


class _VllmStandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every `vllm` and `vllm.*` module (as a package, so any depth imports) with STAND_INS."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "vllm" or fullname.startswith("vllm."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def load_parser_module(path: Path) -> types.ModuleType:
    """Execute the parser file with vllm.* served by stand-ins (and the `regex` package by `re`)."""
    sys.dont_write_bytecode = True  # the file's tree is not the harness's to write into
    sys.meta_path.insert(0, _VllmStandIns())
    try:
        import regex  # noqa: F401
    except ImportError:
        sys.modules["regex"] = re  # the parsers' patterns are plain `re` patterns
    spec = importlib.util.spec_from_file_location(f"behaviour_parser_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- model outputs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    content: str
    calls: tuple[tuple[str, str], ...]  # (function name, arguments as the model writes them)


CASES = (
    Case("one call", "", (("get_weather", '{"city": "Paris", "unit": "celsius"}'),)),
    Case(
        "two parallel calls",
        "",
        (("get_weather", '{"city": "Paris"}'), ("get_time", '{"timezone": "Europe/Paris"}')),
    ),
    Case("text before the calls", "Let me check that for you.\n\n", (("get_weather", '{"city": "Tokyo"}'),)),
    Case("numeric arguments", "", (("add", '{"a": 12, "b": 3.5}'), ("scale", '{"factor": -2}'))),
    Case(
        "nested arguments",
        "Sure.",
        (("search", '{"query": {"text": "vllm", "tags": ["a", "b"]}, "filters": [{"k": 1}, {"k": [2, 3]}]}'),),
    ),
)


@dataclass(frozen=True)
class Format:
    """How a parser class's model writes tool calls, and which markers are single tokens."""

    begin: str
    end: str
    markers: tuple[str, ...]
    render_call: Callable[[str, str], str]
    arguments_as_written: bool = True  # extract_tool_calls returns the arguments as the model wrote them
    named_call: str = ""  # a regex: a call's text up to the end of its name


DSK_MARKERS = (
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
)
FORMATS = {
    "DeepSeekV3ToolParser": Format(
        DSK_MARKERS[0],
        DSK_MARKERS[1],
        DSK_MARKERS,
        lambda name, args: (
            f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"
        ),
        named_call="<｜tool▁call▁begin｜>[^\n]*<｜tool▁sep｜>[^\n]*\n",
    ),
    "DeepSeekV31ToolParser": Format(
        DSK_MARKERS[0],
        DSK_MARKERS[1],
        DSK_MARKERS,
        lambda name, args: f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>",
        named_call="<｜tool▁call▁begin｜>[^\n]*?<｜tool▁sep｜>",
    ),
}


def _dsml_call(name: str, arguments: str) -> str:
    """DeepSeek-V3.2's DSML invoke block: one parameter per top-level key, strings as they are."""
    params = "".join(
        f'<｜DSML｜parameter name="{key}" string="{str(isinstance(value, str)).lower()}">'
        f"{value if isinstance(value, str) else json.dumps(value)}</｜DSML｜parameter>\n"
        for key, value in json.loads(arguments).items()
    )
    return f'<｜DSML｜invoke name="{name}">\n{params}</｜DSML｜invoke>\n'


FORMATS["DeepSeekV32ToolParser"] = Format(
    "<｜DSML｜function_calls>\n",
    "</｜DSML｜function_calls>",
    (
        "<｜DSML｜function_calls>",
        "</｜DSML｜function_calls>",
        "<｜DSML｜invoke name=",
        "</｜DSML｜invoke>",
        "<｜DSML｜parameter name=",
        "</｜DSML｜parameter>",
    ),
    _dsml_call,
    arguments_as_written=False,  # every value a JSON string, as the parameters carry them
    named_call=r'<｜DSML｜invoke name="[^"]+"\s*>',
)


def model_output(case: Case, fmt: Format) -> str:
    return case.content + fmt.begin + "".join(fmt.render_call(n, a) for n, a in case.calls) + fmt.end


class FakeTokenizer:
    """Each marker (and EOS) is one token; other text is cut into short word-like tokens."""

    def __init__(self, markers: tuple[str, ...]) -> None:
        self.vocab: dict[str, int] = {}
        self.markers = (*markers, EOS)
        for marker in self.markers:
            self.token_id(marker)
        self._split = re.compile("(" + "|".join(map(re.escape, self.markers)) + ")")

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def token_id(self, piece: str) -> int:
        return self.vocab.setdefault(piece, len(self.vocab) + 1000)

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        tokens = []
        for part in self._split.split(text):
            pieces = [part] if part in self.markers else re.findall(r" ?\w{1,4}|\s|[^\w\s]", part)
            tokens += [(self.token_id(p), "" if p == EOS else p) for p in pieces]
        return tokens


# --- streaming as vLLM's chat server does -------------------------------------------------------


@dataclass
class Streamed:
    content: str = ""
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)

    def add(self, delta: DeltaMessage | None) -> None:
        if delta is None:
            return
        self.content += delta.content or ""
        for call in delta.tool_calls or []:
            seen = self.calls.setdefault(call.index, {"ids": [], "name": "", "arguments": ""})
            if call.id is not None:
                seen["ids"].append(call.id)
            function = call.function
            if function is not None:
                seen["name"] += function.name or ""
                seen["arguments"] += function.arguments or ""


def _top_up_append(parser: Any, delta: DeltaMessage | None) -> DeltaMessage | None:
    """vLLM >= 0.23 (DelegatingParser._append_unstreamed_tool_args)."""
    if delta and delta.tool_calls and delta.tool_calls[-1].function:
        last = delta.tool_calls[-1].function
        last.arguments = (last.arguments or "") + ToolParser.get_remaining_unstreamed_args(parser)
    return delta


def _top_up_replace(
    parser: Any, delta: DeltaMessage | None, *, keep_strings: bool, keep_ids: bool
) -> DeltaMessage | None:
    """vLLM <= 0.22 (the chat server's check for unstreamed tool arg tokens): the final delta is rewritten
    to carry only the last call; 0.14 on keep its id, type and name; 0.17 on keep str arguments as they are."""
    first = delta.tool_calls[0] if delta and delta.tool_calls else None
    if first is None or first.function is None or first.function.arguments is None:
        return delta
    index = len(parser.prev_tool_call_arr) - 1 if parser.prev_tool_call_arr else 0
    latest_delta_len = len(first.function.arguments)
    args = parser.prev_tool_call_arr[index].get("arguments", {})
    keep = keep_strings and isinstance(args, str)
    expected_call = args if keep else json.dumps(args, ensure_ascii=False)
    actual_call = parser.streamed_args_for_tool[index]
    if latest_delta_len > 0:
        actual_call = actual_call[:-latest_delta_len]
    remaining_call = expected_call.replace(actual_call, "", 1)
    original = next((tc for tc in delta.tool_calls if tc.index == index), None) if keep_ids else None
    function = original.function if original else None
    return DeltaMessage(
        tool_calls=[
            DeltaToolCall(
                index=index,
                id=original.id if original else None,
                type=original.type if original else None,
                function=DeltaFunctionCall(name=function.name if function else None, arguments=remaining_call),
            )
        ]
    )


@dataclass(frozen=True)
class TopUp:
    releases: str
    since: tuple[int, int]  # the first release line that has it
    apply: Callable[[Any, DeltaMessage | None], DeltaMessage | None]
    # The server rebuilds the final delta with the last call only (0.11-0.13: without its id and name):
    # a final delta that names a call loses it, or what came before it in that delta, with any parser.
    rewrites_final_delta: bool


TOP_UPS = {
    "bare": TopUp("0.11-0.13", (0, 11), partial(_top_up_replace, keep_strings=False, keep_ids=False), True),
    "dumps": TopUp("0.14-0.16", (0, 14), partial(_top_up_replace, keep_strings=False, keep_ids=True), True),
    "replace": TopUp("0.17-0.22", (0, 17), partial(_top_up_replace, keep_strings=True, keep_ids=True), True),
    "append": TopUp("0.23 on", (0, 23), _top_up_append, False),
}


def top_up_of(version: str) -> str:
    """The top-up of vLLM `version`'s chat server (e.g. 0.16.0, 0.33.1.dev12+gabc)."""
    line = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    return max((t for t in TOP_UPS.items() if t[1].since <= line), key=lambda t: t[1].since)[0]


def chunks(tokens: list[tuple[int, str]], sizes: list[int]) -> Iterator[list[tuple[int, str]]]:
    start = 0
    for size in sizes:
        yield tokens[start : start + size]
        start += size


def fixed_split(count: int, size: int) -> list[int]:
    return [min(size, count - start) for start in range(0, count, size)]


def random_split(count: int, rng: random.Random) -> list[int]:
    """Delta sizes cut at up to 12 random places, as the runs speculative decoding accepts vary."""
    cuts = sorted(set(rng.sample(range(1, count), min(12, count - 1))))
    return [b - a for a, b in zip([0, *cuts], [*cuts, count], strict=True)]


def stream(parser_class: type, tokenizer: FakeTokenizer, text: str, sizes: list[int], top_up: str) -> Streamed:
    parser = parser_class(tokenizer)
    request = STAND_INS["ChatCompletionRequest"]()
    tokens = tokenizer.tokenize(text + EOS)
    result = Streamed()
    previous_text, previous_ids = "", []
    pieces = list(chunks(tokens, sizes))
    for number, piece in enumerate(pieces, 1):
        delta_ids = [token_id for token_id, _ in piece]
        delta_text = "".join(text for _, text in piece)
        current_text, current_ids = previous_text + delta_text, previous_ids + delta_ids
        delta = parser.extract_tool_calls_streaming(
            previous_text, current_text, delta_text, previous_ids, current_ids, delta_ids, request
        )
        if number == len(pieces):
            delta = TOP_UPS[top_up].apply(parser, delta)
        result.add(delta)
        previous_text, previous_ids = current_text, current_ids
    return result


# --- comparing ----------------------------------------------------------------------------------


def expected_result(parser_class: type, tokenizer: FakeTokenizer, text: str) -> tuple[str, list[tuple[str, str]]]:
    info = parser_class(tokenizer).extract_tool_calls(text, STAND_INS["ChatCompletionRequest"]())
    return info.content or "", [(c.function.name, c.function.arguments) for c in info.tool_calls]


def differences(streamed: Streamed, content: str, calls: list[tuple[str, str]]) -> list[str]:
    found = []
    if streamed.content != content:
        found.append(f"content {streamed.content!r}, expected {content!r}")
    if sorted(streamed.calls) != list(range(len(streamed.calls))):
        found.append(f"call indexes {sorted(streamed.calls)}")
    got = [streamed.calls[i] for i in sorted(streamed.calls)]
    if len(got) != len(calls):
        found.append(f"{len(got)} call(s), expected {len(calls)}")
    for index, (seen, (name, arguments)) in enumerate(zip(got, calls, strict=False)):
        if seen["name"] != name:
            found.append(f"call {index} name {seen['name']!r}, expected {name!r}")
        if seen["arguments"] != arguments:
            found.append(f"call {index} arguments {seen['arguments']!r}, expected {arguments!r}")
        if len(seen["ids"]) != 1:
            found.append(f"call {index} got {len(seen['ids'])} ids")
    return found


@dataclass
class Tally:
    failed: int = 0
    judged: int = 0
    not_judged: int = 0  # a call's name comes in the final delta, under a top-up that rewrites it


def check_class(
    parser_class: type, fmt: Format, top_ups: list[str], random_splits: int, say: Callable[[str], None]
) -> Tally:
    """Stream every case at every split under every top-up; say each run that differs."""
    rng = random.Random(0)  # the same random splits on every run
    tokenizer = FakeTokenizer(fmt.markers)
    tally = Tally()
    for case in CASES:
        text = model_output(case, fmt)
        content, calls = expected_result(parser_class, tokenizer, text)
        written = (
            list(case.calls)
            if fmt.arguments_as_written
            else [(n, a) for (n, _), (_, a) in zip(case.calls, calls, strict=False)]
        )
        if (content, calls) != (case.content, written):
            say(f"FAIL {parser_class.__name__} [{case.name}] non-streaming: {content!r} {calls!r}")
            tally.failed += 1
            continue
        tokens = tokenizer.tokenize(text + EOS)
        total = len(tokens)
        splits = [(fixed_split(total, size), f"{size} token(s) per delta") for size in SPLITS]
        splits += [
            (sizes, f"deltas of {sizes} tokens") for sizes in (random_split(total, rng) for _ in range(random_splits))
        ]
        splits.append(([total], "all at once"))
        for top_up in top_ups:
            for sizes, split in splits:
                before_final = "".join(piece for _, piece in tokens[: total - sizes[-1]])
                names_in_final = len(re.findall(fmt.named_call, text)) > len(re.findall(fmt.named_call, before_final))
                if TOP_UPS[top_up].rewrites_final_delta and names_in_final:
                    tally.not_judged += 1
                    continue
                tally.judged += 1
                try:
                    problems = differences(stream(parser_class, tokenizer, text, sizes, top_up), content, calls)
                except Exception as e:  # the parser's or the top-up's: that split fails, the others still run
                    problems = [f"raised {type(e).__name__}: {e}"]
                if problems:
                    tally.failed += 1
                    say(f"FAIL {parser_class.__name__} [{case.name}] {split}, top-up {top_up}: {'; '.join(problems)}")
    return tally


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("parser_file", type=Path)
    args.add_argument(
        "--top-up", action="append", choices=sorted(TOP_UPS), help="the server's end-of-stream top-up (default: all)"
    )
    args.add_argument("--vllm-version", help="use that release's top-up")
    args.add_argument("--random", type=int, default=0, metavar="N", help="also N seeded random splits per output")
    args.add_argument("--quiet", action="store_true", help="only the summary line")
    options = args.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the parsers log (and log.exception) freely
    say = (lambda _line: None) if options.quiet else print
    try:
        module = load_parser_module(options.parser_file)
    except Exception as e:  # a file that does not load is the report, not a traceback
        print(f"error: cannot load {options.parser_file}: {type(e).__name__}: {e}")
        return 2
    classes = [(getattr(module, name), fmt) for name, fmt in FORMATS.items() if hasattr(module, name)]
    if not classes:
        print(f"error: {options.parser_file} defines none of {', '.join(FORMATS)}")
        return 2
    top_ups = options.top_up or ([top_up_of(options.vllm_version)] if options.vllm_version else list(TOP_UPS))
    tallies = [check_class(cls, fmt, top_ups, options.random, say) for cls, fmt in classes]
    failed, judged, not_judged = (sum(getattr(t, name) for t in tallies) for name in ("failed", "judged", "not_judged"))
    names = ", ".join(cls.__name__ for cls, _ in classes)
    skipped = (
        f"; {not_judged} not judged (a call's name comes in the final delta: vLLM <= 0.22 loses it)"
        if not_judged
        else ""
    )
    print(f"{'FAIL' if failed else 'PASS'} {names}: {failed} of {judged} streamed runs differ{skipped}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
