"""The conftest.py that test_toolcall_real.py puts beside vLLM's own tool-parser tests (taken from the
release's sdist): `vllm.tokenizers.get_tokenizer` gives a stand-in tokenizer whose vocabulary holds
the markers of the tool-call sets' scenarios, each one token. The real tokenizers are downloads from
the Hugging Face hub; the parsers and these tests read only the vocabulary (`get_vocab`).

Loaded by pytest in the vLLM venv (no patchkit there): PATCHKIT_SCENARIOS names the scenario.py
files, separated by os.pathsep.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import vllm.tokenizers


def _markers() -> list[str]:
    markers: list[str] = []
    for number, path in enumerate(os.environ["PATCHKIT_SCENARIOS"].split(os.pathsep)):
        spec = importlib.util.spec_from_file_location(f"patchkit_scenario_{number}", path)
        assert spec is not None and spec.loader is not None
        scenario = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(scenario)
        markers += [*scenario.MARKERS, scenario.STOP]
    return markers


class StandInTokenizer:
    """The markers, each one token (ids from 100000: clear of the small ids the tests make up)."""

    def __init__(self, markers: list[str]) -> None:
        self._vocab = {marker: 100000 + number for number, marker in enumerate(dict.fromkeys(markers))}

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    @property
    def vocab(self) -> dict[str, int]:
        return self.get_vocab()


def get_tokenizer(*args: Any, **kwargs: Any) -> StandInTokenizer:
    return StandInTokenizer(_markers())


# before the test modules import it (`from vllm.tokenizers import get_tokenizer`)
vllm.tokenizers.get_tokenizer = get_tokenizer
