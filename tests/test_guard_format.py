"""The guard's check format (patchkit/_target/guard.py GUARD_FORMAT) is held to its code: status
trusts an older build's guard of the same format to judge a tree as this patchkit does (a note,
`apply` updates it), so any change to the guard's code needs a new format number (older guards are
then a failure until `apply`, never trusted to agree).

The fingerprint is the module's tokens without comments, docstrings or blank lines: a comment or a
docstring changes no check; anything else may. When this test fails, bump GUARD_FORMAT and record
the new number with the fingerprint it prints."""

from __future__ import annotations

import hashlib
import io
import tokenize
from pathlib import Path

from patchkit._target import guard

# GUARD_FORMAT -> the fingerprint of the guard's code it names (one line per format ever released)
FORMATS = {
    2: "9c53f95eb55092939ad6ec0e109ea0bc68e9cfb973afb046e8824e2ec30beacd",
    3: "4b4ae17dcd985762e4c483c448a84abd4a62caed15101c8eee13d2ac780769d5",  # the shadow check (review 15 L6)
    4: "28a8a91138b01eb8b39c10fbd599dc07eb734b76748fd2f47af8eb00ada484d5",  # an unlistable __pycache__: its own names only
    5: "b38068f97a384fc657f2f2dd9ce93fc39abb9f49f85aac641356d046d1d332c3",  # a --patch record outside vllm/ is damaged; status's tags (review 17 H3, M1)
    6: "d4bed5828c456ef91f1209e40062aed9680afbeaf22f16814f07a92878d1bf01",  # the pycache prefix's bytecode (issue 20)
    7: "b133c9569c86bbbd955fad82b425bf734ed520c9d68bbe480230abee5691a152",  # the prefix by the path vllm is imported from
    8: "8770133608c63230240ba16a644218f6536bf560dbfb953a87dfd9c58e511b7e",  # a symlinked __pycache__ or .pyc followed, as Python follows it
    9: "eb4d7d1bd12f62e00b73237916b6567ab215c3b80ad9213ba0b589edefdc3577",  # under a pycache prefix, its mirror alone (not __pycache__)
    10: "e0ab67b251ea5e53cb05d93626277818cc7c4275d2ed50cf2d9a25461b1036de",  # no vllm-*.dist-info said as such; the launch's extension suffixes; a fifo as bytecode; a file leading out
    11: "ca19f0b5d392cb7818cd17de21d480ca3bd0110050711f1c2480bbe17005e636",  # a wheel's provenance believed only in a labelled dist-info whose RECORD lists its patched hashes
    12: "8705b356ad1fb7e2aaaeb093b2d9a603b5bd43be55c6d2cb79f7ccc42e61c9d1",  # a provenance of status's shape, its shipped patches of the recorded sha256
    13: "3209885c98ef05e0b1527f1d584942b7144c73585ae42549bda552165cb10299",  # vllm/ moved to another volume (a symlink in its place): its files judged inside it, the site it is in judged
    14: "3a6303f73ca3767de3beac13cf622bd14b83a3891ecf636a34daadb99edfd24f",  # checked-hash bytecode judged too under --check-hash-based-pycs never
    15: "cac00c7a7c983f95497014b45dafe727d5b049d4ec979923ae67f7f8f89a7faf",  # a record's set name that is no set name ('../x', '-x') is damaged
    16: "c5d9330201f3acbbd3cf539ff21d11c3b7018d1c2dba8840d843ea92c5dfe929",  # a recorded file pip wrote (vLLM's RECORD lists its bytes) said as a reinstall
    17: "fba0a2367c86af971c199b7d556335b194f513b4e39dfc446291eb244e73fae3",  # no hash-based bytecode judged stale under --check-hash-based-pycs always
    18: "2be851c7f2ca9c57f856bb8756e92d4aa54f324ada0abd8d042b91d9be87999e",  # a recorded patch's name that is no file name ('../x', '..') is damaged (with 17)
    19: "81d0723ee5e48b42ca7f94717e1629253fa64134327e51e48458f00455bccd39",  # typed for mypy --strict: the same checks
    20: "60f2c8d640716fbd1c6f803a69aaf9de6734d86bb75a6da4f05800690df14720",  # an empty METADATA Version: "names no version"
    21: "7a7b1b33bc3726a551d49aa00b3e4569ac3196caf033d2b7207c31447ae0bbb9",  # a record of thousands of files judged in linear time: the same checks
    22: "39c27cd272383bbc2043be0ae4b7cf1dc445e8fa8d70b0a63d59a2e68eb7984a",  # a record of more than 10,000 files or 256 sets is damaged
    23: "c55f1fd1aa318bb086f482411f4872f25fa1719d6d0b2d6f9819ba4e7692fdd5",  # the guard's refusal names a few problems, then how many more; control characters escaped
    24: "d133a73032393d976b895b9caa6973c34d6743365e9f907f31b6a60c0d5b3aa0",  # a recorded path deeper than 32 parts, or too long for a file, is damaged
    25: "155ad1f4d3f7b4c984cd98e28e76437e7b49050d56c8072822eb03b51642c79d",  # a recorded absolute path refused in the words of its fault (too long, a control character)
    26: "df65c034bd5d8d4ea3fbd25340269e2d664c9cf2ffe7f47f18512cb6a583b070",  # characters above U+00FF escaped as \\uNNNN, the tree path escaped and one shell word
    27: "f9aa4c6f40e966e3bc1221870fe8d657d0d5f23297c76d13c656c0d9ab56a4da",  # NaN, Infinity in a record are malformed JSON
    28: "3c5a7434317b537eadcf6dd7636640d6dc74cddb0e07bcda5a5722a267558958",  # recorded paths walked from the tree to the first symlink, never resolved
    29: "bc3057a6e12aea7174aef66fc54d6258caf90c0df43509fbf1fb1e91516fe351",  # each recorded file (device, inode, size, mtime) hashed once, 256 MiB at most a judging
    30: "6c290e042350e770d2744e50d65385870a006e9c77a2fb33a8bc0249f2bc4147",  # each __pycache__ listed once a judging, each directory's names by module (a planted symlink expanded once; no names x files)
    31: "e75a9d8999cf2413f0e6851ae3a3162073ce349d145b70921a542099fadf2652",  # a journal in .patchkit/ (an apply or revert cut short, or running) refused: recover first
    32: "8762b6bd980378dee15048e0861f32cae5e04b3a194c15f1623434b2c277baf8",  # a symlinked __pycache__ or .pyc of a recorded file refused, never followed
    33: "d49aedce21dd1928f64131544dd65976ffd39740e500cd4b902ec7491c22f042",  # an older patchkit's --patch record (no "held" mark) refused; the guard's version 0.1.0+patchkit
    34: "d1f029e7cead44d661d82301b187cdef9cc100d2579a879f2e0c2712bd62c6a6",  # an older patchkit's `wheel --patch` build refused unless state.json's "wheel_held" names its patchkit.json
    35: "2cd8b3a6b43b7612c3411a71599688571bb14909f7a7cc251d7145e771ae510b",  # a recorded mode no apply records (no owner read, or every user may write) refused
    36: "79e9329dfc5fb2463fee49fa902cc91b100d815d6d875b0d1f1790125b5e181e",  # a file hashed in pieces: no allocation of the whole bound a file
}
_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
_STATEMENT_START = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, None}


def fingerprint(source: bytes) -> str:
    """sha256 of the code's tokens, comments, blank lines and docstrings (a string that is a whole
    statement) left out."""
    tokens = [t for t in tokenize.tokenize(io.BytesIO(source).readline) if t.type not in _SKIPPED]
    kept = []
    for index, token in enumerate(tokens):
        before = tokens[index - 1].type if index else None
        after = tokens[index + 1].type if index + 1 < len(tokens) else tokenize.NEWLINE
        if not (token.type == tokenize.STRING and before in _STATEMENT_START and after == tokenize.NEWLINE):
            kept.append(f"{token.type}:{token.string}")
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()


def test_the_guards_code_is_the_code_its_format_names():
    source = Path(guard.__file__).read_bytes()
    found = fingerprint(source)
    assert FORMATS.get(guard.GUARD_FORMAT) == found, (
        f"patchkit/_target/guard.py changed: set GUARD_FORMAT = {max(FORMATS) + 1} and add "
        f"{max(FORMATS) + 1}: {found!r} to FORMATS (an older build's guard is then updated, not trusted)"
    )


def test_a_comment_or_docstring_changes_no_fingerprint_and_code_does():
    source = Path(guard.__file__).read_bytes()
    commented = source.replace(
        b'    """The vllm.general_plugins entry point."""\n', b'    """Said otherwise."""  # why\n'
    )
    assert commented != source and fingerprint(commented) == fingerprint(source)
    changed = source.replace(b"MAX_FILE_BYTES = 64 *", b"MAX_FILE_BYTES = 32 *")
    assert changed != source and fingerprint(changed) != fingerprint(source)
