"""The checks apply and verify run on contents, and running them: the one module that knows them
(they import this package's types, so the list lives apart from them). The set's behaviour test,
which only `verify` runs, is added by verify (patchkit.checks.behaviour): apply never loads it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.checks import Check, CheckContext, CheckResult, contract, names, probe, syntax

if TYPE_CHECKING:
    from collections.abc import Sequence


def default_checks(verifying: Sequence[Check] = ()) -> list[Check]:
    """The checks `apply` and `verify` run on contents, in order; each module defines CHECK.
    `verifying`: the checks only `verify` runs after them (the set's behaviour test: seconds).

    integrity (before writing) and bytecode (after writing) are steps of apply, revert and
    verify themselves: they look at the disk, not at contents."""
    return [syntax.CHECK, names.CHECK, contract.CHECK, probe.CHECK, *verifying]


def run_checks(ctx: CheckContext, checks: list[Check] | None = None) -> list[CheckResult]:
    results: list[CheckResult] = []
    for check in checks if checks is not None else default_checks():
        results.extend(check.run(ctx))
    return results


def named(names: tuple[str, ...]) -> list[Check]:
    """The registered checks of these names, in their order."""
    return [check for check in default_checks() if check.name in names]
