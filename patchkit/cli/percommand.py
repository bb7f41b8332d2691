"""What a patchkit process remembers while it runs a command: its module-level memos and caches, named here.

A command run in a process that ran others (fleet's node agent, cli.run_in_process) starts from none of it,
as a new process would: a memo of one command (where a tree's interpreter was asked, the pycache prefix its
start-up sets, the seal key of its state directory) may be stale for the next; but for KEPT, what patchkit's
own files alone decide. Only modules already imported hold any: nothing is imported here.
tests/test_percommand.py fails on a memo a command fills that is not named.
"""

from __future__ import annotations

import sys

# module -> its memos: a dict, list or set emptied, a functools cache cleared
MEMOS: dict[str, tuple[str, ...]] = {
    "patchkit.base.hashing": ("_digests",),
    "patchkit.base.notes": ("_held", "_sinks"),
    "patchkit.base.remembered": ("_prepared", "code_of"),
    "patchkit.base.seal": ("_key", "_unusable"),
    "patchkit.base.usercache": ("_USER_CACHE", "_NOTED"),
    "patchkit.base.values": ("_GETTERS",),
    "patchkit.checks.contract": ("_kept",),
    "patchkit.checks.names": ("_SEEN",),
    "patchkit.checks.parsed": ("_kept",),
    "patchkit.checks.syntax": ("_JUDGED",),
    "patchkit.distinfo.entry_points": ("_text_distribution",),
    "patchkit.distinfo.record": ("_kept",),
    "patchkit.engine.vouched": ("_TOUCHED",),
    "patchkit.fetch.cache": ("_SOUND_STATES", "_record_of"),
    "patchkit.fetch.pipconfig": ("_CACHE",),
    "patchkit.launch.shortcut": ("_own_code",),
    "patchkit.launch.speculative": ("_fields",),
    "patchkit.launch.weights": ("_JUDGED", "_PARTS"),
    "patchkit.store.state": ("_hashed", "_hashed_bytes", "_kept", "_parsed", "_walked"),
    "patchkit.tree.target": (
        "_ASKED_HERE",
        "_LAUNCH_DEADLINES",
        "_LAUNCH_PROBES",
        "_LAUNCH_UNANSWERED",
        "_NAMED_AS",
        "_STARTUP_PREFIX",
        "_STARTUP_TIMED_OUT",
    ),
}

# Memos of what patchkit's own package files or the memo's key alone decide, never stale: kept across commands.
# vLLM's serve parser as recorded (patchkit/launch/specs): rebuilding its ~200 options was ~5% of a preflight in
# process; a contract's requirements, keyed by its entries; a TOML file's parse, keyed by its text.
KEPT: dict[str, tuple[str, ...]] = {
    "patchkit.launch.serve_parser": ("_load_spec", "_parser"),
    "patchkit.series.library": ("_TOML",),
    "patchkit.series.requirements": ("_PARSED",),
}


def forget() -> None:
    """Every memo of MEMOS emptied, in the modules imported so far."""
    for name, memos in MEMOS.items():
        module = sys.modules.get(name)
        for memo in memos if module is not None else ():
            held = getattr(module, memo)
            if hasattr(held, "cache_clear"):
                held.cache_clear()
            else:
                held.clear()
