"""syntax: every touched Python file compiles under the Python that will run vLLM."""

from __future__ import annotations

from patchkit.checks import CheckContext, CheckResult, run_in


class SyntaxCheck:
    name = "syntax"

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        sources = {p: ctx.read(p) for p in ctx.paths if p.endswith(".py")}
        sources = {p: data for p, data in sources.items() if data is not None}
        errors = compile_sources(sources, ctx.python)
        return [
            CheckResult(self.name, path, path not in errors, errors.get(path, "compiles")) for path in sorted(sources)
        ]


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


def compile_sources(sources: dict[str, bytes], python: str | None) -> dict[str, str]:
    """path -> error for each source that does not compile, judged by `python`'s own compiler."""
    texts = {p: d.decode("utf-8", "surrogateescape") for p, d in sources.items()}
    return run_in(python, _COMPILER, "compile_errors", [texts], timeout=120, doing=" to compile the patched files")
