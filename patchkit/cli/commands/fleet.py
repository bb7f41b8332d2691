from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import click

from patchkit.base.errors import BadInput
from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import format_option, no_import_option, target_options
from patchkit.cli.main import run_in_process
from patchkit.fleet import DEFAULT_TIME_LIMIT
from patchkit.fleet.cluster import connected
from patchkit.fleet.protocol import FleetResult, NodeReport, fleet_apply, run_each

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.base.options import Options
    from patchkit.cli.ui.console import UI

ACTIONS = ("status", "apply", "verify", "revert")


class Seconds(click.FloatRange):
    """A number of seconds in the range: never nan (FloatRange compares it with nothing, so lets it by)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        seconds = super().convert(value, param, ctx)
        if seconds != seconds:
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return seconds


KEEP_ALIVE = 300.0  # seconds a node's agent stays after a command, for the next one


@click.command()
@click.argument("action", type=click.Choice(ACTIONS))
@click.option("--address", metavar="ADDR", help="The Ray cluster (default: $RAY_ADDRESS, else auto).")
@click.option(
    "--timeout",
    metavar="SECONDS",
    type=Seconds(min=0, min_open=True, max=86400),
    default=DEFAULT_TIME_LIMIT,
    show_default=True,
    help="Seconds each node's step may take.",
)
@click.option(
    "--keep-alive",
    metavar="SECONDS",
    type=Seconds(min=0, max=86400),
    default=KEEP_ALIVE,
    show_default=True,
    help="Seconds each node's patchkit agent stays for the next fleet command (0: it ends with this one).",
)
@target_options(without={"verbose"})  # the nodes' steps report in the table
@format_option
@no_import_option("apply, verify: do not import the patched modules on the nodes (probe check).")
@click.option("--no-guard", is_flag=True, help="apply: do not install the launch guard on the nodes.")
@click.option("--require-same-version", is_flag=True, help="apply: refuse a cluster whose nodes run different vLLMs.")
def command(
    opts: Options,
    quiet: bool,
    verbose: int,
    fmt: str,
    action: str,
    address: str | None,
    timeout: float,
    keep_alive: float,
    no_import: bool,
    no_guard: bool,
    require_same_version: bool,
) -> FleetResult:
    """status, apply, verify or revert on every alive node of a Ray cluster.

    Each node's target is its own PATCHKIT_TARGET or PATCHKIT_PYTHON, else --target/--python (paths
    on the nodes), else the Ray worker's interpreter there. apply is all or nothing: phase 1 plans
    and checks on every node (no writes), phase 2 writes; a failure reverts the nodes written.
    A driver killed before its commit: the nodes revert themselves once it has been silent 10 s
    (only a node whose agent dies too keeps its write; `fleet status` then names the fix); one
    stopped (Ctrl-Z) keeps its run --timeout + 60 s. A node where another fleet apply's write is
    undecided is busy: a status waits 15 s at most, a write is refused (exit 4).
    The steps run in a patchkit agent on each node (a Ray actor), kept --keep-alive seconds for
    the next command. Exit 1: a node failed; 4: the cluster (cannot connect, a node lost or past the time limit);
    128 + the signal when interrupted (143 SIGTERM, 130 Ctrl-C).
    """
    _refuse_flags_for(action, no_guard=no_guard, require_same_version=require_same_version)
    ui = make_ui(fmt, quiet, verbose)
    request = {**_request(opts, timeout), "address": address}  # the address: for hints that rerun a fleet command
    with connected(address, keep_alive=keep_alive, patchkit=run_in_process) as runner:
        nodes = runner.alive_nodes()
        if action == "apply":
            apply_flags = [flag for flag, on in (("--no-import", no_import), ("--no-guard", no_guard)) if on]
            result = fleet_apply(
                runner, nodes, request, apply_flags=apply_flags, require_same_version=require_same_version
            )
        else:
            flags = ["--no-import"] if no_import and action == "verify" else []
            result = run_each(runner, action, nodes, {**request, "extra": flags})
        _show(ui, result)  # while connected: a signal now is absorbed, not an exit without the document
    return result


def _refuse_flags_for(action: str, **apply_only: bool) -> None:
    given = [name for name, on in apply_only.items() if on]
    if given and action != "apply":
        flag = "--" + given[0].replace("_", "-")
        raise BadInput(f"{flag} is an option of `patchkit fleet apply`, not of fleet {action}")


def _request(opts: Options, timeout: float) -> dict[str, Any]:
    """What every node is asked (node.command_line turns it into patchkit options; paths are the nodes')."""
    return {
        "target": opts.target_dir,
        "python": opts.python,
        "vllm_version": opts.vllm_version,
        "library": opts.library,
        "adhoc": list(opts.adhoc),
        "set_name": opts.set_name,
        "timeout": timeout,
    }


def _show(ui: UI, result: FleetResult) -> None:
    if ui.json_mode:
        ui.json(
            {
                "action": result.action,
                "state": result.state,
                "phase": result.phase,
                "versions": result.versions,
                "nodes": [r.to_json() for r in result.reports],
                "notes": result.notes,
            }
        )
        return
    several = any(r.sets for r in result.reports)  # a column saying each set's state on the node
    rows = [
        [
            r.node.node_id[:12],
            r.node.node_ip,
            r.target or "",
            r.vllm_version or "",
            r.state,
            *([", ".join(f"{s['set']} {s['state']}" for s in r.sets)] if several else []),
            _detail(r),
        ]
        for r in result.reports
    ]
    columns = ["node", "ip", "target", "vLLM", "state", *(["sets"] if several else []), "detail"]
    ui.table(columns, rows, title=f"fleet {result.action}", state_column=4)
    ui.line(_summary(result), style="green" if result.error is None else "red")
    for note in result.notes:
        ui.note(note)


def _detail(report: NodeReport) -> str:
    """The row's detail, and the node's own fix when the detail does not already say it."""
    if not report.hint or report.hint in report.detail:
        return report.detail
    return "; ".join(part for part in (report.detail, f"fix: {report.hint}") if part)


def _summary(result: FleetResult) -> str:
    counts = Counter(r.state for r in result.reports)
    states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    versions = f"; vLLM {', '.join(result.versions)}" if result.versions else ""
    return f"fleet {result.action}: {len(result.reports)} node(s): {states}{versions}"
