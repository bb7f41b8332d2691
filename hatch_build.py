"""Build hook: a wheel carries the patch library (patches/ in the repository) as patchkit/_library,
and README.md, docs/ and the files they link to (CONTRIBUTING.md, bench/README.md,
examples/Dockerfile) as patchkit/_docs (README's links still resolve there): a user who installed
with pip has no clone to read them in.

Only regular wheels: an editable install reads patches/ in place, so edits to the library show at once
(hatchling's static force-include would copy it into editable installs too).
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# The files beside README.md and docs/ that they link to or name: shipped at the same relative paths.
SHIPPED_WITH_THE_DOCS = ("CONTRIBUTING.md", "bench/README.md", "examples/Dockerfile")


class LibraryInWheel(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name == "wheel" and version == "standard":
            build_data["force_include"]["patches"] = "patchkit/_library"
            build_data["force_include"]["README.md"] = "patchkit/_docs/README.md"
            build_data["force_include"]["docs"] = "patchkit/_docs/docs"
            for linked in SHIPPED_WITH_THE_DOCS:  # README and docs/ link to them
                build_data["force_include"][linked] = f"patchkit/_docs/{linked}"
