"""The conftest.py that test_toolcall_real.py puts beside vLLM's own tool-parser tests (taken from the
release's sdist): `vllm.tokenizers.get_tokenizer` gives a stand-in tokenizer whose vocabulary holds
the markers of the tool-call sets' scenarios, each one token. The real tokenizers are downloads from
the Hugging Face hub; the parsers and these tests read the vocabulary (`get_vocab`), and 0.33.0's
tests also stream a text token by token (`encode`, `decode`, `tokenize`).

Loaded by pytest in the vLLM venv (no patchkit there): PATCHKIT_SCENARIOS names the scenario.py
files, separated by os.pathsep.
"""

from __future__ import annotations

import importlib.util
import os
import re
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


CHARACTERS = 200000


class StandInTokenizer:
    """The markers, each one token (ids from 100000: clear of the small ids the tests make up)."""

    def __init__(self, markers: list[str]) -> None:
        self._vocab = {marker: 100000 + number for number, marker in enumerate(dict.fromkeys(markers))}

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    # 0.33.0's tests stream a text one token at a time (tests/tool_parsers/utils.py): each marker is
    # its token, each other character one of its own (ids from CHARACTERS + its code point).
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        markers = re.compile("(" + "|".join(map(re.escape, sorted(self._vocab, key=len, reverse=True))) + ")")
        ids: list[int] = []
        for part in markers.split(text):
            ids += [self._vocab[part]] if part in self._vocab else [CHARACTERS + ord(c) for c in part]
        return ids

    def tokenize(self, text: str) -> list[str]:
        return [self.decode([token]) for token in self.encode(text)]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        markers = {token: marker for marker, token in self._vocab.items()}
        return "".join(
            markers[i] if i in markers else chr(i - CHARACTERS)
            for i in ids
            if not (skip_special_tokens and i in markers)
        )

    @property
    def vocab(self) -> dict[str, int]:
        return self.get_vocab()


def get_tokenizer(*args: Any, **kwargs: Any) -> StandInTokenizer:
    return StandInTokenizer(_markers())


# before the test modules import it (`from vllm.tokenizers import get_tokenizer`)
vllm.tokenizers.get_tokenizer = get_tokenizer
