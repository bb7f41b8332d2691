from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.base import hints
from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import target_options
from patchkit.engine.resolve import resolve_target
from patchkit.engine.transaction import Unsealed, never_locked, read_only_view, target_lock

if TYPE_CHECKING:
    from patchkit.base.options import Options


@click.command()
@click.option(
    "--roll-back",
    "roll_back",
    is_flag=True,
    help="Roll back a journal whose marker is not sealed with your key (recovery refuses it otherwise), "
    "keeping a copy of each file it replaces or removes in .patchkit/saved/. For an apply or revert "
    "of yours that was cut short.",
)
@click.option(
    "--discard",
    "discard",
    is_flag=True,
    help="Remove a journal whose marker is not sealed with your key, changing no file and not the record. "
    "For a journal no apply or revert of yours left.",
)
@target_options(without={"vllm_version", "library", "adhoc", "set_name", "verbose"})  # the tree alone
def command(opts: Options, quiet: bool, verbose: int, roll_back: bool, discard: bool) -> None:
    """Roll back a transaction that a crash left unfinished (other commands do this first too)."""
    if roll_back and discard:  # opposite answers to one question: click would keep the last one given
        raise click.UsageError("--roll-back and --discard exclude each other: give one")
    unsealed = Unsealed.ROLL_BACK if roll_back else Unsealed.DISCARD if discard else Unsealed.REFUSE
    ui = make_ui("text", quiet, verbose)
    root = resolve_target(opts).root
    message, settled = None, False
    if never_locked(root):  # no patchkit ever worked here: no transaction to roll back, no lock to make
        with read_only_view(root, "recover") as settled:
            pass
    if not settled:
        with target_lock(root, unsealed=unsealed) as message:
            pass
    ui.line(message or "nothing to recover: no unfinished transaction")
    if message:  # the tree is as before the command cut short: that command is what is left to do
        ui.note(f"run the apply or revert it cut short again; {hints.command('status')} shows where the tree stands")
