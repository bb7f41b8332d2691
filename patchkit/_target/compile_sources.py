"""Which sources do not compile, judged by this interpreter's own compiler (the syntax check)."""

from __future__ import annotations

import json
import os
import sys
import warnings


def work(request: dict[str, dict[str, str]]) -> dict[str, str]:
    """{"sources": {path: text}} -> {path: error} for each source that does not compile."""
    return verdicts({path: text.encode("utf-8", "surrogateescape") for path, text in request["sources"].items()})


def verdicts(sources: dict[str, bytes]) -> dict[str, str]:
    """{path: bytes} -> {path: error}. Warnings are no verdict ("is" with a literal, an invalid
    escape): the module imports under the default filters, whatever filters this process has."""
    errors = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path, data in sources.items():
            try:
                compile(data, path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
                errors[path] = describe(exc)
    return errors


def describe(exc: BaseException) -> str:
    if isinstance(exc, (RecursionError, MemoryError)):
        return "nested deeper than this interpreter can compile (Python cannot import it either)"
    line = getattr(exc, "lineno", None)
    message = getattr(exc, "msg", None) or str(exc)
    return f"line {line}: {message}" if line else str(exc)


def write_answer(path: str, answer: object) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(answer, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    write_answer(sys.argv[1], work(json.load(sys.stdin)))
