"""syntax: every touched Python file compiles under the Python that will run vLLM."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys

from patchkit._target.compile_sources import verdicts
from patchkit.base import remembered
from patchkit.checks import CheckContext, CheckResult, too_large_to_parse
from patchkit.checks.parsed import parsed
from patchkit.tree.target import run_worker, same_interpreter


class SyntaxCheck:
    name = "syntax"

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        sources = {p: data for p in ctx.paths if p.endswith(".py") and (data := ctx.read(p)) is not None}
        skipped = {p: result for p, data in sources.items() if (result := too_large_to_parse(self.name, p, data))}
        errors = compile_sources({p: d for p, d in sources.items() if p not in skipped}, ctx.python)
        return [
            skipped.get(path)
            or CheckResult(
                self.name,
                path,
                path not in errors,
                errors.get(path, "compiles"),
                excerpt=excerpt(sources[path], errors[path]) if path in errors else "",
            )
            for path in sorted(sources)
        ]


CHECK = SyntaxCheck()


def compile_sources(sources: dict[str, bytes], python: str | None) -> dict[str, str]:
    """path -> error for each source that does not compile, judged by `python`'s own compiler
    (patchkit/_target/compile_sources.py). A content this process has had judged by the same
    interpreter is not compiled again: apply checks the same contents as planned and as written,
    and fleet's node agent in phase 1 and again in phase 2. Across runs, the verdicts are
    remembered (base/remembered.py) by the content and the interpreter's identity."""
    interpreter = _interpreter(python)
    if interpreter is None:  # no interpreter known by its file: nothing remembered for it
        return _judge(sources, python)
    keys = {path: (interpreter, hashlib.sha256(data).hexdigest()) for path, data in sources.items()}
    if len(_JUDGED) > 4096:  # before choosing what to compile: what is taken as known stays known
        _JUDGED.clear()
    todo = {path: data for path, data in sources.items() if keys[path] not in _JUDGED}
    code = remembered.code_of("patchkit._target.compile_sources")
    kept = {path: remembered.key_of([code, _lasting(interpreter), keys[path][1]]) for path in todo}
    for path, key in kept.items():
        verdict = remembered.recall(CHECK.name, key)
        if verdict is None or isinstance(verdict, str):
            _JUDGED[keys[path]] = verdict
            del todo[path]
    if todo:
        errors = _judge(todo, python)
        for path in todo:
            _JUDGED[keys[path]] = errors.get(path)
            remembered.remember(CHECK.name, kept[path], errors.get(path))
    return {path: error for path in sources if (error := _JUDGED[keys[path]]) is not None}


# The patterns here are text, compiled on first use (re keeps them): start-up compiles none a run does not use.
_ERROR_LINE = r"line (\d+): "


def excerpt(data: bytes, error: str) -> str:
    """The line `error` names ("line 14: ..."), and a caret under where this interpreter's parser
    stops on it (none when it stops elsewhere: the target's Python may read the file differently)."""
    found = re.compile(_ERROR_LINE).match(error)
    lines = data.decode("utf-8", "replace").splitlines()
    if found is None or not 0 < int(found.group(1)) <= len(lines):
        return ""
    number = int(found.group(1))
    source = lines[number - 1].rstrip()
    tree = parsed(data, "")
    column: int | None = getattr(tree, "offset", None) if getattr(tree, "lineno", None) == number else None
    if not column or column > len(source) + 1:
        return source
    return source + "\n" + " " * (column - 1) + "^"


def _lasting(interpreter: Interpreter) -> list[str | int | None]:
    """An interpreter's identity beyond this process: this one's file and version for (None,)."""
    if interpreter == (None,):
        return [sys.executable, sys.hexversion, sys.implementation.cache_tag]
    return list(interpreter)


def _judge(sources: dict[str, bytes], python: str | None) -> dict[str, str]:
    if same_interpreter(python):
        return verdicts(sources)  # the text compiled as the worker does: no tree of objects built
    texts = {p: d.decode("utf-8", "surrogateescape") for p, d in sources.items()}
    return run_worker(python, "compile_sources", {"sources": texts}, timeout=120, doing=" to compile the patched files")


# this process's compiler (None,), or an interpreter's path, inode and mtime (ns)
Interpreter = tuple[None] | tuple[str, int, int]
_JUDGED: dict[tuple[Interpreter, str], str | None] = {}  # (interpreter, sha256) -> its error, None: compiles


def _interpreter(python: str | None) -> Interpreter | None:
    """Names the compiler: this process's (None), or the interpreter's path and its file as it is now
    (a replaced one is another). None when that file does not name it: a script (`#!`, a wrapper
    that may start another Python each time), not a regular file, or unreadable."""
    if python is None:
        return (None,)
    try:
        info = os.stat(python)
        if not stat.S_ISREG(info.st_mode):
            return None
        # Not blocking, and looked at as opened: a file replaced by a fifo since the stat would
        # block an open() for ever.
        fd = os.open(python, os.O_RDONLY | os.O_NONBLOCK)
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino) or os.read(fd, 2) == b"#!":
                return None
        finally:
            os.close(fd)
    except OSError:
        return None
    return (python, info.st_ino, info.st_mtime_ns)
