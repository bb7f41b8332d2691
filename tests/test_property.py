"""Property: for random files and random edits, apply gives the edited bytes and revert the
original bytes, through the real commands (engine, transaction, record)."""

from __future__ import annotations

import re
import subprocess

from helpers import examples, snapshot, write_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LINES = st.lists(
    st.sampled_from(["a = 1", "b = 2", "", "# c", "def f():", "    return 0", "x\tx", "é = 'ü'"]), max_size=30
)
ENDINGS = st.sampled_from(["\n", "\r\n"])


@st.composite
def file_and_edit(draw):
    ending = draw(ENDINGS)
    old = draw(LINES)
    new = list(old)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        at = draw(st.integers(0, len(new)))
        if op == "insert" or not new:
            new.insert(at, draw(st.sampled_from(["NEW = 1", "", "z = 'zz'", "import os"])))
        elif op == "delete":
            del new[min(at, len(new) - 1)]
        else:
            new[min(at, len(new) - 1)] = "CHANGED = True"
    old_text = ending.join(old) + (ending if old and draw(st.booleans()) else "")
    new_text = ending.join(new) + (ending if new and draw(st.booleans()) else "")
    return old_text.encode(), new_text.encode()


def diff(work, old: bytes, new: bytes) -> bytes:
    (work / "a/vllm").mkdir(parents=True, exist_ok=True)
    (work / "b/vllm").mkdir(parents=True, exist_ok=True)
    (work / "a/vllm/f.txt").write_bytes(old)
    (work / "b/vllm/f.txt").write_bytes(new)
    done = subprocess.run(
        ["git", "diff", "--no-index", "--no-prefix", "--no-color", "a/vllm/f.txt", "b/vllm/f.txt"],
        cwd=work,
        capture_output=True,
    )
    return done.stdout


# Hunk headers as git writes them, or spelled otherwise the way git reads the same: a section heading
# after " @@" (git's function context), a count of 1 written out.
SPELLINGS = {
    "as git writes it": lambda raw: raw,
    "with a section heading": lambda raw: re.sub(rb"(?m)^(@@ [^@]* @@).*$", rb"\1 def heading():", raw),
    "counts of 1 written out": lambda raw: re.sub(rb"(?m)^@@ -(\d+) \+(\d+) @@", rb"@@ -\1,1 +\2,1 @@", raw),
}


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=file_and_edit(), spelling=st.sampled_from(sorted(SPELLINGS)))
def test_apply_then_revert_is_the_identity(tmp_path_factory, run, case, spelling):
    old, new = case
    work = tmp_path_factory.mktemp("prop")
    raw = SPELLINGS[spelling](diff(work, old, new))
    if not raw:  # the random edit changed nothing
        return
    tree = write_tree(work / "site", files={"vllm/f.txt": old})
    (work / "p.diff").write_bytes(raw)
    stock = snapshot(tree)
    applied = run("apply", "--target", tree, "--patch", work / "p.diff")
    assert applied.exit_code == 0, applied.output
    assert (tree / "vllm/f.txt").read_bytes() == new
    reverted = run("revert", "--target", tree, "--patch", work / "p.diff")
    assert reverted.exit_code == 0, reverted.output
    assert snapshot(tree) == stock
