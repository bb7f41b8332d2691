"""One module per command. Shared options live here; commands build an Options and a UI."""

from __future__ import annotations

import functools

import click

from patchkit.options import Options

FORMATS = ("text", "json")


VERSION_HELP = "Override the detected vLLM version."


def target_options(func=None, *, version_help: str = VERSION_HELP, versions_repeatable: bool = False):
    """--target/--python/--vllm-version/--patches/--patch/--set and -q/-v, on every target command.

    versions_repeatable: --vllm-version may be given several times (verify: several releases)."""
    if func is None:
        return functools.partial(target_options, version_help=version_help, versions_repeatable=versions_repeatable)
    options = [
        click.option(
            "--target",
            "target_dir",
            metavar="DIR",
            help="Directory containing the vllm/ package (site-packages, unpacked wheel, checkout).",
        ),
        click.option(
            "--python",
            "python",
            metavar="PATH",
            help="Interpreter whose environment has vLLM (found without importing it; apply/verify import-test the patches).",
        ),
        click.option("--vllm-version", metavar="VERSION", multiple=versions_repeatable, help=version_help),
        click.option(
            "--patches",
            "library",
            metavar="DIR",
            help="A patch library root (default: $PATCHKIT_LIBRARY, else the installed library).",
        ),
        click.option(
            "--patch",
            "adhoc",
            metavar="FILE",
            multiple=True,
            help="Ad-hoc unified diff instead of the library's series (repeatable).",
        ),
        click.option("--set", "set_name", metavar="NAME", help="Patch set in the library (default: the only one)."),
        click.option("-q", "--quiet", is_flag=True, help="Only errors and warnings."),
        click.option("-v", "--verbose", count=True, help="More detail."),
    ]
    for option in reversed(options):
        func = option(func)

    @functools.wraps(func)
    def wrapper(target_dir, python, vllm_version, library, adhoc, set_name, quiet, verbose, **kwargs):
        opts = Options(target_dir, python, vllm_version, library, tuple(adhoc), set_name)
        return func(opts=opts, quiet=quiet, verbose=verbose, **kwargs)

    return wrapper


def format_option(func=None, *, formats: tuple[str, ...] = FORMATS, help: str = "Output format."):
    option = click.option("--format", "fmt", type=click.Choice(formats), default="text", show_default=True, help=help)
    return option(func) if func else option


def make_ui(fmt: str = "text", quiet: bool = False, verbose: int = 0):
    from patchkit.ui import UI

    return UI(fmt=fmt, quiet=quiet, verbose=verbose)


def fix_bytecode(ui, target, changes):
    """After apply or revert: rebuild or remove compiled bytecode that would keep running the old
    code of the changed files (unchecked-hash pycs), and show what was done."""
    from patchkit.checks import bytecode

    results = bytecode.fix(target.root, changes, target.python)
    ui.checks(results)
    return results
