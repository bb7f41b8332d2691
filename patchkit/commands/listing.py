from __future__ import annotations

import click

from patchkit.commands import format_option, make_ui, target_options


@click.command()
@target_options
@format_option
def command(opts, quiet, verbose, fmt):
    """The library: its sets, the releases each covers, each patch's description."""
    from patchkit.library import load_library
    from patchkit.resolve import library_root

    ui = make_ui(fmt, quiet, verbose)
    root = library_root(opts)
    sets = load_library(root)
    data = [_describe(s) for s in sets.values()]
    if ui.json_mode:
        ui.json({"library": str(root), "sets": data})
        return
    ui.line(f"library  {root}")
    for s in data:
        ui.line(f"set      {s['name']}: {s['description']}", style="bold")
        ui.line(f"         supported {s['supported'] or 'any'}; upstream {s['upstream'] or 'never'}")
        ui.table(["releases", "series", "patch", "description"],
                 ([r["versions"], r["dir"], p["name"], p["description"]]
                  for r in s["releases"] for p in r["patches"]))


def _describe(patch_set) -> dict:
    from patchkit.patchfile import read_patch

    releases = []
    for release in patch_set.releases:
        patches = [read_patch(release.directory / name, patch_set.roots) for name in release.patch_names()]
        releases.append({"versions": str(release.versions), "dir": release.directory.name,
                         "patches": [{"name": p.name, "description": p.description, "sha256": p.sha256,
                                      "files": [f.path for f in p.files]} for p in patches]})
    return {"name": patch_set.name, "description": patch_set.description,
            "supported": str(patch_set.supported) if patch_set.supported else None,
            "upstream": str(patch_set.upstream) if patch_set.upstream else None,
            "releases": releases}
