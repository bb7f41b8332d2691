"""syntax: every touched Python file compiles under the Python that will run vLLM."""

from __future__ import annotations

import json
import os
import subprocess

from patchkit.checks import CheckContext, CheckResult, same_interpreter
from patchkit.errors import TargetError


class SyntaxCheck:
    name = "syntax"

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        sources = {p: ctx.read(p) for p in ctx.paths if p.endswith(".py")}
        sources = {p: data for p, data in sources.items() if data is not None}
        errors = compile_sources(sources, ctx.python)
        return [CheckResult(self.name, path, path not in errors, errors.get(path, "compiles"))
                for path in sorted(sources)]


CHECK = SyntaxCheck()

# Defined as text because it also runs inside the target's interpreter, which lacks patchkit.
_COMPILER = r"""
def compile_errors(sources):
    errors = {}
    for path, text in sources.items():
        try:
            compile(text.encode("utf-8", "surrogateescape"), path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            errors[path] = f"line {line}: {exc.msg}" if line else str(exc)
    return errors
"""
_COMPILER_MAIN = "import json, sys\nprint(json.dumps(compile_errors(json.load(sys.stdin))))\n"


def compile_sources(sources: dict[str, bytes], python: str | None) -> dict[str, str]:
    """path -> error for each source that does not compile, judged by `python`'s own compiler."""
    texts = {p: d.decode("utf-8", "surrogateescape") for p, d in sources.items()}
    if same_interpreter(python):
        namespace: dict = {}
        exec(_COMPILER, namespace)  # noqa: S102 - our own constant
        return namespace["compile_errors"](texts)
    try:
        done = subprocess.run([python, "-c", _COMPILER + _COMPILER_MAIN], input=json.dumps(texts),
                              capture_output=True, text=True, timeout=120, cwd=os.path.abspath(os.sep))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetError(f"cannot run {python} to compile the patched files: {exc}") from exc
    if done.returncode != 0:
        raise TargetError(f"{python} failed while compiling the patched files: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)
