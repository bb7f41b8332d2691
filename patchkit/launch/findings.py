"""What a launch check says (Finding) and what vLLM itself answered (VllmVerdict): the data the
launch checks, vLLM's own validation and a set's launch script share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Finding:
    check: str
    ok: bool
    message: str
    fix: str | None = None

    def to_json(self) -> dict:
        return {"check": self.check, "ok": self.ok, "message": self.message, "fix": self.fix}


@dataclass
class VllmVerdict:
    """What vLLM itself answered, imported in the target's interpreter; None: not asked or no answer."""

    result: bool | None
    message: str
