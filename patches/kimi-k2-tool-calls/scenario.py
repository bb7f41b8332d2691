"""kimi-k2-tool-calls' scenario for behaviour.py: Kimi-K2's format and outputs."""

from __future__ import annotations

from typing import Any

STOP = "<|im_end|>"  # the stop token: in the token ids, not in the text
B, E = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CB, CA, CE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
MARKERS = (B, E, "<|tool_call_section_begin|>", "<|tool_call_section_end|>", CB, CE, CA)

# label: (content before the calls, ((call id, arguments), ...)); the id names the function
CASES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "one call": ("", (("functions.get_weather:0", '{"city": "Paris", "unit": "celsius"}'),)),
    "two parallel calls": (
        "",
        (
            ("functions.get_weather:0", '{"city": "Paris", "unit": "celsius"}'),
            ("functions.get_time:1", '{"timezone": "Europe/Paris", "format": "24h"}'),
        ),
    ),
    "text before the calls": (
        "I will look up the weather in Paris for you now.",
        (("functions.get_weather:0", '{"city": "Paris", "days": 3}'),),
    ),
    "numeric, string and nested arguments": (
        "Booking it.",
        (
            (
                "functions.book:0",
                '{"hotel": "Le Grand", "nights": 2, "guests": {"adults": 2, "ages": [34, 36]}, "price": 199.5}',
            ),
            ("functions.notify:1", '{"user": "ana", "count": 12, "urgent": true, "score": -0.25}'),
        ),
    ),
    "arguments over several lines, an id without functions.": (
        "Two steps:\n",
        (("functions.search:0", '{\n  "query": "a b",\n  "limit": [1, 2]\n}'), ("summarize:1", "{}")),
    ),
    "marker-like text before the calls": ("Use <| or <|tool here.", (("functions.echo:0", '{"s": "<|tool_call"}'),)),
}


def render(output: tuple[str, tuple[tuple[str, str], ...]]) -> tuple[str, Any]:
    """The model's text and what extract_tool_calls reads: the id as written, the name from it."""
    content, calls = output
    text = content + B + "".join(f"{CB}{ident}{CA}{args}{CE}" for ident, args in calls) + E
    return text, (content, [(ident, ident.split(":")[0].split(".")[-1], args) for ident, args in calls])


PARSERS = {"KimiK2ToolParser": render}
