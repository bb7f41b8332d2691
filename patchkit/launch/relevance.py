"""Which of the library's sets a launch needs (set.toml's [needed_by]), and whether the launch guard
runs in it.

A set that declares no rule is needed by every launch (as before the rule existed). The others are
needed when the launch names what they serve: the speculative method vLLM settles on, or the
--tool-call-parser. A set the launch does not need is not a failure of its preflight: its state is
at most a note. The guard is another matter: vLLM's plugin loader runs it in the launch unless the
launch's environment turns it off, and it refuses a tree for any recorded set's drift.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field
from typing import TYPE_CHECKING

from patchkit.base.values import FrozenValue, frozen
from patchkit.engine.guard import ENTRY_POINT_NAME
from patchkit.launch.command import LaunchCommand
from patchkit.launch.engine import loaded_plugins
from patchkit.series.library import LaunchFacts

if TYPE_CHECKING:
    from packaging.version import Version

    from patchkit.series.library import LaunchRule, PatchSetDef

GUARD_ENV = "PATCHKIT_GUARD"  # the guard's own switch (_target/guard.py): off skips it, warn only logs
GUARD_QUIET = ("off", "warn")


def unneeded_reason(patch_set: PatchSetDef | None, launch: LaunchFacts) -> str | None:
    """None when the launch needs the set (it declares no rule, or the launch names what it serves);
    else what the set serves, in the launch's words (`--tool-call-parser kimi_k2`)."""
    rule: LaunchRule | None = getattr(patch_set, "needed_by", None)
    if rule is None or rule.needs(launch):
        return None
    return rule.described()


def facts(
    command: LaunchCommand,
    method: str | None,
    target_architectures: Iterable[str] = (),
    version: Version | None = None,
    *,
    parser_refused: bool = False,
) -> LaunchFacts:
    """What the rule reads of a launch as vLLM serves it (`method`: the speculative method vLLM settles
    on, patchkit/launch/method.py; `target_architectures`: its target model's; `version`: the tree's
    vLLM, when known; `parser_refused`: the release registers no tool parser of the name given, so
    vLLM refuses the launch at start and no tool-call set could serve it)."""
    # vLLM builds the named tool parser only under --enable-auto-tool-choice, and only in an API
    # server (a headless node runs none): else no parser runs
    builds = command.auto_tool_choice and not command.headless and not parser_refused
    parser = command.optional_text("tool-call-parser") if builds else None
    return LaunchFacts(method, parser, tuple(target_architectures), version)


def unused_parser_note(command: LaunchCommand) -> str | None:
    """The words for a --tool-call-parser vLLM never builds (no --enable-auto-tool-choice); None: none."""
    parser = command.optional_text("tool-call-parser")
    if parser is None or command.auto_tool_choice or command.headless:  # headless: late_files.headless_note
        return None
    return (
        f"--tool-call-parser {parser} is unused: without --enable-auto-tool-choice vLLM builds no tool "
        "parser (no tool-call set is needed for it)"
    )


def guard_runs(environ: dict[str, str]) -> bool:
    """Whether the launch guard, installed, refuses in a launch of this environment: PATCHKIT_GUARD
    is not off or warn, and vLLM loads the plugin (no VLLM_PLUGINS, or a list naming it)."""
    mode = environ.get(GUARD_ENV, "").strip().lower()
    return mode not in GUARD_QUIET and bool(loaded_plugins({ENTRY_POINT_NAME}, environ))


def guard_off_words(environ: dict[str, str]) -> str:
    """How the launch turns the guard off, for a note."""
    mode = environ.get(GUARD_ENV, "").strip().lower()
    if mode in GUARD_QUIET:
        return f"{GUARD_ENV}={mode}" + (": it only logs" if mode == "warn" else "")
    return f"VLLM_PLUGINS={environ.get('VLLM_PLUGINS', '')} does not load it"


@frozen
class LaunchNeeds(FrozenValue):
    """The library's sets this launch does not need (name -> what each serves), and whether the
    launch guard refuses in it. A set not named here (no rule, another library's, ad-hoc) is needed."""

    unneeded: dict[str, str] = field(default_factory=dict)
    guard_runs: bool = True
    guard_off: str = ""  # how the launch turns the guard off (guard_off_words), when it does
    judged: frozenset[str] = frozenset()  # the sets this run judges (each needed one says its own drift)
    named: dict[str, str] = field(default_factory=dict)  # the sets whose rule names this launch -> what it names
    # unneeded sets the launch's tool parser plugin may use, patchkit cannot read it -> why (parser_plugin.py)
    maybe: dict[str, str] = field(default_factory=dict)

    def needs(self, set_name: str) -> bool:
        return set_name not in self.unneeded


def launch_needs(
    sets: Iterable[PatchSetDef],
    command: LaunchCommand,
    method: str | None,
    target_architectures: Iterable[str] = (),
    version: Version | None = None,
    *,
    parser_refused: bool = False,
) -> LaunchNeeds:
    """What `command` (as vLLM serves it: a speculators-format model's config in place), whose target
    model has `target_architectures`, needs of `sets` on vLLM `version` (None: not known);
    `parser_refused`: as facts() takes it."""
    launch = facts(command, method, target_architectures, version, parser_refused=parser_refused)
    sets = list(sets)
    reasons = {s.name: unneeded_reason(s, launch) for s in sets}
    unneeded = {name: reason for name, reason in reasons.items() if reason is not None}
    named = {s.name: s.needed_by.described() for s in sets if s.needed_by is not None and s.name not in unneeded}
    runs = guard_runs(command.environ)
    return LaunchNeeds(unneeded, runs, "" if runs else guard_off_words(command.environ), named=named)


EVERY = LaunchNeeds()  # every set needed, the guard as installed: what a launch needed before the rule
