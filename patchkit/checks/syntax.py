"""syntax: every touched Python file compiles under the Python that will run vLLM."""

from __future__ import annotations

from patchkit.checks import CheckContext, CheckResult, too_large_to_parse
from patchkit.target import run_worker


class SyntaxCheck:
    name = "syntax"

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        sources = {p: data for p in ctx.paths if p.endswith(".py") and (data := ctx.read(p)) is not None}
        skipped = {p: result for p, data in sources.items() if (result := too_large_to_parse(self.name, p, data))}
        errors = compile_sources({p: d for p, d in sources.items() if p not in skipped}, ctx.python)
        return [
            skipped.get(path) or CheckResult(self.name, path, path not in errors, errors.get(path, "compiles"))
            for path in sorted(sources)
        ]


CHECK = SyntaxCheck()


def compile_sources(sources: dict[str, bytes], python: str | None) -> dict[str, str]:
    """path -> error for each source that does not compile, judged by `python`'s own compiler
    (patchkit/_target/compile_sources.py)."""
    texts = {p: d.decode("utf-8", "surrogateescape") for p, d in sources.items()}
    request = {"sources": texts}
    return run_worker(python, "compile_sources", request, timeout=120, doing=" to compile the patched files")
