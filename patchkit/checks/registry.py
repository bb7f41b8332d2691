"""The checks run on contents, and running them: the one module that knows every check module
(they import this package's types, so the list lives apart from them)."""

from __future__ import annotations

from patchkit.checks import Check, CheckContext, CheckResult, behaviour, contract, names, probe, syntax


def default_checks(*, verifying: bool = False) -> list[Check]:
    """The checks `apply` and `verify` run on contents, in order; each module defines CHECK.
    `verifying`: with the set's behaviour test, which only `verify` runs (it takes seconds).

    integrity (before writing) and bytecode (after writing) are steps of apply, revert and
    verify themselves: they look at the disk, not at contents."""
    return [syntax.CHECK, names.CHECK, contract.CHECK, probe.CHECK, *([behaviour.CHECK] if verifying else [])]


def run_checks(ctx: CheckContext, checks: list[Check] | None = None) -> list[CheckResult]:
    results: list[CheckResult] = []
    for check in checks if checks is not None else default_checks():
        results.extend(check.run(ctx))
    return results


def named(names: tuple[str, ...]) -> list[Check]:
    """The registered checks of these names, in their order."""
    return [check for check in default_checks(verifying=True) if check.name in names]
