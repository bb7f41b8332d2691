"""deepseek-tool-calls' scenario for behaviour.py: DeepSeek-V3, V3.1 and V3.2's formats and outputs."""

# ruff: noqa: RUF001  (the DeepSeek markers are written with fullwidth bars)
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

STOP = "<｜end▁of▁sentence｜>"  # the stop token: in the token ids, not in the text
CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
DSML = ("<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "<｜DSML｜invoke name=", "</｜DSML｜invoke>")
MARKERS = (
    CALLS_BEGIN,
    CALLS_END,
    CALL_BEGIN,
    CALL_END,
    SEP,
    *DSML,
    "<｜DSML｜parameter name=",
    "</｜DSML｜parameter>",
)

# label: (content before the calls, ((function name, arguments as the model writes them), ...))
CASES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "one call": ("", (("get_weather", '{"city": "Paris", "unit": "celsius"}'),)),
    "two parallel calls": ("", (("get_weather", '{"city": "Paris"}'), ("get_time", '{"timezone": "Europe/Paris"}'))),
    "text before the calls": ("Let me check that for you.\n\n", (("get_weather", '{"city": "Tokyo"}'),)),
    "numeric arguments": ("", (("add", '{"a": 12, "b": 3.5}'), ("scale", '{"factor": -2}'))),
    "nested arguments": (
        "Sure.",
        (("search", '{"query": {"text": "vllm", "tags": ["a", "b"]}, "filters": [{"k": 1}, {"k": [2, 3]}]}'),),
    ),
}


def _v3_call(name: str, arguments: str) -> str:
    return f"{CALL_BEGIN}function{SEP}{name}\n```json\n{arguments}\n```{CALL_END}"


def _v31_call(name: str, arguments: str) -> str:
    return f"{CALL_BEGIN}{name}{SEP}{arguments}{CALL_END}"


def _dsml_call(name: str, arguments: str) -> str:
    """DeepSeek-V3.2's DSML invoke block: one parameter per top-level key, strings as they are."""
    params = "".join(
        f'<｜DSML｜parameter name="{key}" string="{str(isinstance(value, str)).lower()}">'
        f"{value if isinstance(value, str) else json.dumps(value)}</｜DSML｜parameter>\n"
        for key, value in json.loads(arguments).items()
    )
    return f'<｜DSML｜invoke name="{name}">\n{params}</｜DSML｜invoke>\n'


def _format(begin: str, end: str, render_call: Callable[[str, str], str], as_written: bool = True) -> Callable:
    """render(output): the model's text and what extract_tool_calls reads (ids are random: None)."""

    def render(output: tuple[str, tuple[tuple[str, str], ...]]) -> tuple[str, Any]:
        content, calls = output
        text = content + begin + "".join(render_call(name, args) for name, args in calls) + end
        return text, (content, [(None, name, args if as_written else None) for name, args in calls])

    return render


PARSERS = {
    "DeepSeekV3ToolParser": _format(CALLS_BEGIN, CALLS_END, _v3_call),
    "DeepSeekV31ToolParser": _format(CALLS_BEGIN, CALLS_END, _v31_call),
    # V3.2 reads every parameter back as a JSON value of its own: the arguments are its to say
    "DeepSeekV32ToolParser": _format(DSML[0] + "\n", DSML[1], _dsml_call, as_written=False),
}
