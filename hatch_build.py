"""Build hook: a wheel carries the patch library (patches/ in the repository) as patchkit/_library,
and README.md and docs/ as patchkit/_docs (README's links to docs/ still resolve there): a user who
installed with pip has no clone to read them in.

Only regular wheels: an editable install reads patches/ in place, so edits to the library show at once
(hatchling's static force-include would copy it into editable installs too).
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class LibraryInWheel(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name == "wheel" and version == "standard":
            build_data["force_include"]["patches"] = "patchkit/_library"
            build_data["force_include"]["README.md"] = "patchkit/_docs/README.md"
            build_data["force_include"]["docs"] = "patchkit/_docs/docs"
