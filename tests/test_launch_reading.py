"""A launch command read as the installed vLLM's parser reads it (issue 20, items 3, 4, 7, 8, 13): the
recorded parser spec, argparse's own rules, the files a launch names read bounded and without blocking,
bad values refused as bad input (exit 2, never 70), the interpreter of pip's /bin/sh wrapper."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_clean_failure, run_cli, run_cli_read_only, write_tree
from launch_fixtures import DEEPSEEK_V3, write_eagle3_setup, write_model
from packaging.version import Version

from patchkit.base.errors import BadInput, TargetError
from patchkit.launch import serve_parser
from patchkit.launch.command import frame, parse
from patchkit.launch.engine import tree_reader
from patchkit.launch.interpreter import script_interpreter
from patchkit.launch.serve_parser import recorded_releases

V16 = "0.16.0"


def read16(*arguments: str):
    return parse(["vllm", "serve", *arguments], V16)


# --- item 3: the reading agrees with vLLM's parser ------------------------------------------------


def test_a_repeated_model_option_is_read_as_vllm_serve_reads_it():
    # vLLM moves the first --model to the positional place, which `vllm serve` serves
    assert read16("--model", "org/first", "--model", "org/second").model == "org/first"
    assert read16("--model=org/first", "--max-model-len", "9", "--model", "org/second").model == "org/first"
    # a positional model and --model: the --model is moved in front, the positional left over is refused
    with pytest.raises(BadInput, match="unrecognized arguments: org/positional"):
        read16("org/positional", "--model", "org/option")


def test_an_unambiguous_prefix_is_expanded_as_argparse_expands_it():
    command = read16("org/m", "--speculative", '{"method": "eagle3", "model": "d"}', "--tensor-parallel", "2")
    assert command.speculative_config == {"method": "eagle3", "model": "d"}
    assert command.tensor_parallel_size == 2
    command = read16("org/m", '--hf-over={"a": 1}')
    assert command.hf_overrides == {"a": 1}


def test_an_ambiguous_prefix_is_refused_as_vllms_parser_refuses_it():
    assert read16("org/m", "--speculative-", "{}").speculative_config == {}
    with pytest.raises(BadInput, match="ambiguous option"):
        read16("org/m", "--max", "5")


@pytest.mark.parametrize("flag", ["--enable-prefix-caching", "--no-enable-prefix-caching", "--enforce-eager"])
def test_a_flag_that_takes_no_value_leaves_the_next_token_as_the_model(flag):
    command = read16(flag, "org/m")
    assert command.model == "org/m"


def test_an_unknown_option_is_refused_for_a_recorded_release_and_ignored_for_another():
    with pytest.raises(BadInput, match="unrecognized arguments"):
        read16("org/m", "--not-a-vllm-option", "1")
    assert parse(["vllm", "serve", "org/m", "--not-a-vllm-option", "1"], "9.9.9").model == "org/m"


def test_negative_numbers_and_the_double_dash_follow_argparse():
    command = read16("org/m", "--seed", "-3", "--tensor-parallel-size=2")
    assert command.options["seed"] == -3  # an int, as vLLM types it
    assert command.tensor_parallel_size == 2
    with pytest.raises(BadInput):
        read16("--", "org/m", "extra")  # argparse: one positional MODEL, then an unrecognized one


def test_a_value_of_the_wrong_type_is_refused_as_vllms_parser_refuses_it():
    with pytest.raises(BadInput, match="--seed: 'forty-two' is not a whole number"):
        read16("org/m", "--seed", "forty-two")
    with pytest.raises(
        BadInput, match=r"--default-chat-template-kwargs: not valid JSON \(.* at column 2\): \{not json"
    ):
        read16("org/m", "--default-chat-template-kwargs", "{not json")


def test_json_and_key_by_key_both_given_is_a_note():
    command = read16("org/m", "--speculative-config", '{"method": "ngram"}', "--speculative-config.method", "eagle3")
    assert command.speculative_config == {"method": "eagle3"}
    assert command.notes and "drops the JSON" in command.notes[0]


def test_the_preflight_reads_the_model_vllm_serves(tmp_path):
    """CLI: `--model a --model b` checks a (vLLM's), not b (which has no config here: exit 4 names it)."""
    tree, library = write_eagle3_setup(tmp_path, V16)
    model = write_model(tmp_path / "served", DEEPSEEK_V3)
    argv = ["vllm", "serve", "--model", str(model), "--model", str(tmp_path / "never-read")]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *argv
    )
    assert done.returncode in (0, 1), done.stderr  # main read the last --model: exit 4, no config there
    assert "never-read" not in done.stderr


@pytest.mark.parametrize("written", ["0.16", "0.16.0.0"])
def test_a_version_written_with_fewer_or_more_parts_reads_its_releases_spec(tmp_path, written):
    """0.16 and 0.16.0.0 are 0.16.0 (PEP 440): the spec recorded for 0.16.0 reads the launch, by
    --vllm-version and by the tree's own METADATA alike (its file was looked for by the name as written)."""
    assert serve_parser.spec_for(written) == serve_parser.spec_for("0.16.0")
    tree, library = write_eagle3_setup(tmp_path, V16)
    model = write_model(tmp_path / "served", DEEPSEEK_V3)
    argv = ["vllm", "serve", str(model)]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--vllm-version", written, "--", *argv
    )
    assert done.returncode in (0, 1), done.stderr
    metadata = next(Path(tree).glob("vllm-*.dist-info")) / "METADATA"
    metadata.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {written}", metadata.read_text()))
    done = run_cli_read_only("preflight", "--target", tree, "--patches", library, "--no-import", "--", *argv)
    assert done.returncode in (0, 1), done.stderr
    done = run_cli("run", "--target", tree, "--patches", library, "--", *argv)  # no vllm on PATH here
    assert done.returncode not in (0, 70) and "internal error" not in done.stderr, done.stderr


def test_every_supported_release_has_a_recorded_spec():
    from patchkit.series.library import default_root, load_set

    # The set's own releases, not its directory listing (a __pycache__ there is no release).
    supported = {r.directory.name for r in load_set(default_root() / "eagle3").releases}
    assert supported <= {str(v) for v in recorded_releases()}


# --- the tree's files as the launch checks read them ---------------------------------------------


def test_the_trees_files_are_read_without_resolving_a_path_and_none_through_a_symlink_out_of_it(tmp_path, monkeypatch):
    """launch.engine.tree_reader: a file with no symlink on its way inside the tree is read with no path resolved
    (resolving the tree and the file on each read was ~6% of a preflight); one reached through a symlink is read
    only where the link resolves inside the tree (a moved vllm/'s own directory for its files)."""
    outside = write_tree(tmp_path / "outside", V16, {"vllm/secret.py": "S = 1\n"}) / "vllm"
    site = write_tree(tmp_path / "site", V16, {"vllm/a.py": "A = 1\n", "vllm/sub/b.py": "B = 1\n"})
    (site / "vllm/out.py").symlink_to(outside / "secret.py")
    (site / "vllm/subout").symlink_to(outside)
    (site / "vllm/in.py").symlink_to("sub/b.py")
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "vllm").symlink_to(site / "vllm")
    resolved = []
    resolve = Path.resolve
    monkeypatch.setattr(Path, "resolve", lambda path, strict=False: resolved.append(path) or resolve(path, strict))
    for tree in (site, moved):  # a tree, and one whose vllm/ was moved away (`vllm -> /data/vllm`)
        read, _ = tree_reader(tree), resolved.clear()
        assert (read("vllm/a.py"), read("vllm/sub/b.py"), read("vllm/absent.py")) == (b"A = 1\n", b"B = 1\n", None)
        assert resolved == [], "a path with no symlink on its way was resolved"
        assert read("vllm/out.py") is read("vllm/subout/secret.py") is read("vllm/../outside/vllm/secret.py") is None
        assert read("vllm/in.py") == b"B = 1\n" and resolved


# --- item 4: files a launch names are read bounded, never blocking -------------------------------


def _preflight_quickly(tree, library, *argv, env=None, limit=20):
    started = time.monotonic()
    done = run_cli_read_only("preflight", "--target", tree, "--patches", library, "--no-import", "--", *argv, env=env)
    assert time.monotonic() - started < limit
    return done


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_config_yaml_that_is_a_fifo_or_dev_zero_is_refused_at_once(tmp_path, kind):
    tree, library = write_eagle3_setup(tmp_path, V16)
    config = tmp_path / "launch.yaml"
    if kind == "fifo":
        os.mkfifo(config)
    else:
        config.symlink_to("/dev/zero")
    done = _preflight_quickly(tree, library, "vllm", "serve", "org/m", "--config", str(config))
    assert_clean_failure(done, 2)
    assert "not a regular file" in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_hub_cache_ref_that_is_a_fifo_or_dev_zero_is_refused_at_once(tmp_path, kind):
    tree, library = write_eagle3_setup(tmp_path, V16)
    repo = tmp_path / "hub" / "models--someorg--somemodel"
    write_model(repo / "snapshots" / "c0ffee", DEEPSEEK_V3)
    (repo / "refs").mkdir()
    if kind == "fifo":
        os.mkfifo(repo / "refs" / "main")
    else:
        (repo / "refs" / "main").symlink_to("/dev/zero")
    done = _preflight_quickly(
        tree, library, "vllm", "serve", "someorg/somemodel", env={"HF_HUB_CACHE": str(tmp_path / "hub")}
    )
    assert_clean_failure(done, 4)  # no other snapshot stands in for the one refs/main should name
    said = done.stdout + done.stderr  # a missing model is a finding among the others (stdout)
    assert "not found" in said and "refs/main" in said


def test_a_model_config_json_that_is_a_fifo_is_refused_at_once(tmp_path):
    tree, library = write_eagle3_setup(tmp_path, V16)
    model = tmp_path / "fifo-model"
    model.mkdir()
    os.mkfifo(model / "config.json")
    done = _preflight_quickly(tree, library, "vllm", "serve", str(model))
    assert_clean_failure(done, 2)


# --- item 7: bad values are exit 2, never 70, the same for preflight and run ---------------------


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    "arguments",
    [
        ["--speculative-config", _nested(1200)],
        ["--hf-overrides", _nested(300)],
        ["--hf-overrides.a", _nested(1200)],
        ["--hf-overrides." + "k." * 1500 + "x", "1"],
        ["--speculative-config." + "k." * 2000 + "x", "1"],
        ["--hf-overrides." + "k." * 40 + "x", _nested(40)],
        ["--speculative-config", '{"num_speculative_tokens": ' + "7" * 5000 + "}"],
    ],
)
@pytest.mark.parametrize("command", ["preflight", "run"])
def test_deep_or_huge_json_values_are_bad_input_in_preflight_and_run(tmp_path, arguments, command):
    tree, library = write_eagle3_setup(tmp_path, V16)
    model = write_model(tmp_path / "m", DEEPSEEK_V3)
    extra = ["--no-import"] if command == "preflight" else []
    done = run_cli(
        command, "--target", tree, "--patches", library, *extra, "--", "vllm", "serve", str(model), *arguments
    )
    assert_clean_failure(done, 2)


@pytest.mark.parametrize(
    "text",
    [
        "model: org/m\nhf-overrides: " + "[" * 5000 + "]" * 5000 + "\n",
        "model: org/m\nseed: " + "9" * 5000 + "\n",
        "model: org/m\n" + "".join("  " * i + f"k{i}:\n" for i in range(200)),
    ],
)
def test_a_deep_or_huge_yaml_config_is_bad_input(tmp_path, text):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    started = time.process_time()
    with pytest.raises(BadInput, match=r"cannot be read|not valid YAML"):
        read16("--config", str(config))
    assert time.process_time() - started < 0.25  # the pure-Python scanner alone takes ~0.4 s on the first text


def test_a_model_config_with_a_huge_integer_is_bad_input(tmp_path):
    tree, library = write_eagle3_setup(tmp_path, V16)
    model = tmp_path / "big-int"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": ' + "1" * 5000 + "}")
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--", "vllm", "serve", str(model)
    )
    assert_clean_failure(done, 2)


# --- item 13: a YAML alias bomb is refused at once; an undecodable byte shows as \xff -------------


def test_a_yaml_alias_bomb_is_refused_well_under_a_second(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    config = tmp_path / "bomb.yaml"
    config.write_text("model: org/m\nhf-overrides:\n" + "\n".join("  " + line for line in lines) + "\n")
    started = time.process_time()
    with pytest.raises(BadInput, match="values"):
        read16("--config", str(config))
    assert time.process_time() - started < 0.5


@pytest.mark.parametrize(
    "text",
    [
        "model: org/m\ntensor-parallel-size: 8\t# eight GPUs\n",
        "model:\torg/m\n",
        "model: org/m\nspeculative-config: {method:\teagle3, num_speculative_tokens: 3}\n",
        "model: org/m\nseed: 7\t\n",
    ],
)
def test_a_config_yaml_vllms_pure_python_loader_refuses_is_refused(tmp_path, text):
    """vLLM reads --config with PyYAML's yaml.safe_load (pure Python), which refuses a tab libyaml
    takes: the launch stops at its parse, so patchkit refuses it too, saying why."""
    import yaml

    config = tmp_path / "tabbed.yaml"
    config.write_text(text)
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(text)
    with pytest.raises(BadInput, match=r"not valid YAML \(vLLM's yaml\.safe_load refuses it\)"):
        read16("--config", str(config))


def test_a_config_yaml_only_the_pure_python_loader_takes_is_read_within_the_limits(tmp_path):
    """`%YAML 1.3` libyaml refuses and vLLM's loader reads: read, its size counted on the pure parser's events."""
    import yaml

    config = tmp_path / "v13.yaml"
    config.write_text("%YAML 1.3\n---\nmodel: org/m\ntensor-parallel-size: 4\n")
    assert yaml.safe_load(config.read_text())["tensor-parallel-size"] == 4
    assert read16("--config", str(config)).options["tensor-parallel-size"] in (4, "4")
    lines = ["a0: &a0 [y, y, y, y, y, y, y, y, y, y]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    config.write_text("%YAML 1.3\n---\nmodel: org/m\nhf-overrides:\n" + "".join(f"  {line}\n" for line in lines))
    started = time.process_time()
    with pytest.raises(BadInput, match="values"):
        read16("--config", str(config))
    assert time.process_time() - started < 0.5


def test_an_undecodable_model_name_is_shown_by_its_byte(tmp_path):
    tree, library = write_eagle3_setup(tmp_path, V16)
    name = os.fsdecode(b"org/m\xfe")
    done = subprocess_cli(tree, library, ["vllm", "serve", name])
    assert_clean_failure(done, 4)
    said = done.stdout + done.stderr  # a missing model is a finding among the others (stdout)
    assert "\\xfe" in said and "\\udcfe" not in said


def test_an_undecodable_byte_in_a_note_is_shown_by_its_byte():
    from patchkit.cli.ui.text import visible

    drafter = os.fsdecode(b"/models/dr\xfeafter")
    command = read16("org/m", "--speculative-config", "{}", "--speculative-config.model", drafter)
    assert "\\xfe" in visible(command.notes[0]) and "udcfe" not in visible(command.notes[0])


def subprocess_cli(tree, library, argv):
    import subprocess

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "patchkit",
            "preflight",
            "--target",
            str(tree),
            "--patches",
            str(library),
            "--no-import",
            "--",
            *argv,
        ],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=300,
    )


# --- item 8: the interpreter of pip's /bin/sh wrapper ---------------------------------------------


@pytest.mark.parametrize("venv_name", ["a venv with spaces", "long" * 40])
def test_the_interpreter_of_pips_sh_wrapper_is_the_one_it_execs(tmp_path, venv_name):
    bin_dir = tmp_path / venv_name / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.symlink_to(sys.executable)
    quoted = f'"{python}"' if " " in str(python) else str(python)
    script = bin_dir / "vllm"
    script.write_text(f"#!/bin/sh\n'''exec' {quoted} \"$0\" \"$@\"\n' '''\nimport sys\n")
    script.chmod(0o755)
    assert script_interpreter(script) == str(python)
    assert frame([str(script), "serve", "org/m"]).interpreter() == str(python)


def test_a_script_that_is_a_fifo_has_no_interpreter_and_never_blocks(tmp_path):
    os.mkfifo(tmp_path / "vllm")
    with pytest.raises(TargetError, match="cannot tell which Python runs"):
        script_interpreter(tmp_path / "vllm")


# --- review 14: a shebang is read as the kernel and env start it; what cannot be told is said --------


def _script(directory: Path, first_line: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "vllm"
    script.write_text(f"{first_line}\nimport sys\n")
    script.chmod(0o755)
    return script


def _python_in(directory: Path, name: str = "python3") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    python = directory / name
    python.symlink_to(sys.executable)
    return python


@pytest.mark.parametrize(
    "line",
    [
        "#!/usr/bin/env -S {python} -u",
        "#!/usr/bin/env -S  -i {python}",
        "#!/usr/bin/env --split-string={python} -E",
        "#!/usr/bin/env -S FOO=1 -u BAR {python} -u",
        "#!  {python}   -u  ",
    ],
)
def test_an_env_split_or_argument_shebang_names_its_python(tmp_path, line):
    python = _python_in(tmp_path / "venv" / "bin")
    script = _script(tmp_path / "bin", line.format(python=python))
    assert script_interpreter(script) == str(python)
    assert frame([str(script), "serve", "org/m"]).interpreter() == str(python)


def test_env_looks_the_program_up_on_the_launchs_path(tmp_path):
    python = _python_in(tmp_path / "venv" / "bin", "python3.99")
    script = _script(tmp_path / "bin", "#!/usr/bin/env python3.99")
    launch = ["env", f"PATH={tmp_path / 'bin'}{os.pathsep}{tmp_path / 'venv' / 'bin'}", "vllm", "serve", "org/m"]
    assert frame(launch).interpreter() == str(python)
    assert script_interpreter(script, f"{tmp_path / 'venv' / 'bin'}") == str(python)
    other = _python_in(tmp_path / "other", "python3.99")
    assert script_interpreter(script, f"{other.parent}") == str(other)
    assert script_interpreter(
        _script(tmp_path / "s", "#!/usr/bin/env -S PATH=/nowhere:" + str(other.parent) + " python3.99"), "/x"
    ) == str(other)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("#!/bin/bash", "runs /bin/bash, not a Python"),
        ("#!/bin/sh", "runs /bin/sh, not a Python"),
        ("#!/usr/bin/env bash", "runs "),
        ("#!/usr/bin/env python3 -u", "starts no program by that one name"),  # env is asked for "python3 -u"
        ("#!/usr/bin/env -i python3", "starts no program by that one name"),
        ("#!/usr/bin/env -S", "names no program"),
        ("#!/usr/bin/env -S -C /tmp python3", "has the option -C"),
        ("#!/usr/bin/env -S ${PY} -u", "expands variables"),
        ("#!/usr/bin/env -S 'python3", "cannot be split"),
        ("#!/usr/bin/env no-such-python-anywhere", "not on the launch's PATH"),
        ("#!", "runs nothing"),
        ("import sys", "with a #! line"),
    ],
)
def test_a_shebang_whose_python_cannot_be_told_is_a_target_error_never_another_interpreter(tmp_path, line, why):
    script = _script(tmp_path / "bin", line)
    with pytest.raises(TargetError, match="cannot tell which Python runs") as raised:
        script_interpreter(script)
    assert why in raised.value.message and "--python" in (raised.value.hint or "")


def test_a_bash_wrapper_or_a_missing_vllm_stops_preflight_with_exit_4_and_a_hint(tmp_path):
    bash = _script(tmp_path / "bash", f'#!/bin/bash\nexec {sys.executable} -m vllm.entrypoints.cli.main "$@"')
    for program in (str(bash), str(tmp_path / "nowhere" / "vllm")):
        done = run_cli_read_only("preflight", "--no-import", "--", program, "serve", "org/m")
        assert done.returncode == 4, done.stdout + done.stderr
        assert "cannot tell which Python runs" in done.stderr and "--python" in done.stderr
        assert "Traceback" not in done.stderr and "syntax error" not in done.stderr


def test_specs_are_recorded_json(tmp_path):
    for release in recorded_releases():
        data = json.loads(
            (Path(__file__).parent.parent / "patchkit" / "launch" / "specs" / f"serve-{release}.json").read_text()
        )
        assert data["vllm"] == str(release)
        assert any("--speculative-config" in a["options"] for a in data["serve"])


# --- review: every value a safe YAML loader or JSON can make is exit 2, never 70 ------------------


@pytest.mark.parametrize(
    "nested",
    [
        "{when: 2023-05-06}",
        "{when: 2023-05-06 07:08:09}",
        "{2023-05-06: x}",
        "{blob: !!binary aGVsbG8=}",
        "{kinds: !!set {p, q}}",
        "{order: !!omap [{p: 1}]}",
        "{pairs: !!pairs [{p: 1}, {p: 2}]}",
        "{n: .nan, i: -.inf, z: ~, b: yes, big: 0x1F, o: 0o17}",
    ],
)
@pytest.mark.parametrize("option", ["speculative-config", "hf-overrides"])
def test_any_yaml_value_nested_in_a_config_file_object_is_read_or_refused(tmp_path, option, nested):
    config = tmp_path / "c.yaml"
    config.write_text(f"model: org/m\n{option}: {nested}\n")
    try:
        read16("--config", str(config))
    except BadInput as exc:
        assert "cannot pass it on as JSON" in str(exc)


@pytest.mark.parametrize(
    "arguments",
    [
        ["--speculative-config", '{"method": "eagle3", "model": "\\ud800"}'],
        ["--speculative-config.method", "eagle3", "--speculative-config.model", '"\\udbff"'],
        ["--hf-overrides", '{"\\udfff": 1}'],
        ["--config", "{yaml}"],
    ],
)
@pytest.mark.parametrize("command", ["preflight", "run"])
def test_a_lone_surrogate_in_a_launch_value_is_bad_input(tmp_path, arguments, command):
    tree, library = write_eagle3_setup(tmp_path, V16)
    model = write_model(tmp_path / "m", DEEPSEEK_V3)
    config = tmp_path / "s.yaml"
    config.write_text('hf-overrides: {"a": "x"}\nspeculative-config: {model: "\\ud800"}\n')  # JSON-escaped once dumped
    arguments = [str(config) if a == "{yaml}" else a for a in arguments]
    extra = ["--no-import"] if command == "preflight" else []
    done = run_cli(
        command, "--target", tree, "--patches", library, *extra, "--", "vllm", "serve", str(model), *arguments
    )
    assert_clean_failure(done, 2)


@pytest.mark.parametrize("build", ["0.16.0+cu129", "0.16.0.post1", "0.16.0rc1", "0.16.0.dev3"])
def test_a_build_is_read_with_its_releases_parser(build):
    with pytest.raises(BadInput, match="unrecognized arguments"):
        parse(["vllm", "serve", "org/m", "--speculative-confg", "{}"], build)  # a typo 0.16.0 refuses
    assert parse(["vllm", "serve", "org/m"], build).release == "0.16.0"


def test_a_release_without_a_recorded_parser_says_whose_read_it_and_cannot_judge_what_that_one_does_not_know(
    tmp_path,
):
    newest = str(recorded_releases()[-1])
    tree, library = write_eagle3_setup(tmp_path, f"0.{Version(newest).minor + 1}.0")  # a release still to come
    model = write_model(tmp_path / "m", DEEPSEEK_V3)

    def command_finding(*arguments):
        done = run_cli_read_only(
            "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
            "--", "vllm", "serve", str(model), *arguments,
        )  # fmt: skip
        found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "command"]
        return done.returncode, found[0]

    rc, finding = command_finding("--spec-future", "eagle3", "--spec-later", "org/d", "-tp", "2")
    assert rc == 1 and not finding["ok"]
    assert "cannot judge" in finding["message"] and f"read with {newest}'s" in finding["message"]
    assert "--spec-future, --spec-later" in finding["message"] and "serve_spec" in finding["fix"]
    rc, finding = command_finding("-tp", "2")
    assert rc == 0 and finding["ok"] and f"read with {newest}'s" in finding["message"]


@pytest.mark.parametrize(
    "encoded",
    [
        lambda text: b"\xef\xbb\xbf" + text.encode("utf-8"),
        lambda text: text.encode("utf-16"),
        lambda text: text.encode("utf-32-le"),
    ],
)
def test_a_model_config_json_transformers_cannot_read_as_utf8_is_bad_input(tmp_path, encoded):
    tree, library = write_eagle3_setup(tmp_path, V16)
    model = tmp_path / "odd-encoding"
    model.mkdir()
    (model / "config.json").write_bytes(encoded(json.dumps(DEEPSEEK_V3)))
    done = _preflight_quickly(tree, library, "vllm", "serve", str(model))
    assert_clean_failure(done, 2)
    assert "config.json" in done.stderr


# --- review 16: argparse's option loop is quadratic; a launch's arguments are bounded --------------


@pytest.mark.parametrize(
    "repeated",
    [["--trust-remote-code"], ["--port", "8000"], ["--port=8000"], ["--trust-rem"], ["-tp", "2"], ["--no-such-opt"]],
)
def test_ten_thousand_repeated_options_are_refused_at_once_naming_the_limit(repeated):
    started = time.process_time()
    with pytest.raises(BadInput, match="patchkit reads at most 8,192 arguments and 1,024 options"):
        parse(["vllm", "serve", "org/m", *repeated * 10_000], "0.16.0")
    assert time.process_time() - started < 1.0


def test_a_config_files_options_count_toward_the_limit(tmp_path):
    config = tmp_path / "many.yaml"
    config.write_text("".join(f"opt-{i}: {i}\n" for i in range(1100)))
    with pytest.raises(BadInput, match="1,100 of them options"):
        parse(["vllm", "serve", "org/m", "--config", str(config)], "0.16.0")


def test_a_thousand_options_are_still_read_quickly():
    started = time.process_time()
    read = parse(["vllm", "serve", "org/m", *["--port", "8000"] * 1000, "--port", "9"], "0.16.0")
    assert read.options["port"] == "9" or read.options["port"] == 9
    assert time.process_time() - started < 1.0


# --- releases after 0.20.0: their recorded parsers and their rewrite ----------------------------


def test_a_config_files_false_is_the_no_option_from_0_28_0(tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("enable-prefix-caching: false\nno-such-key: false\n")
    newer = parse(["vllm", "serve", "org/m", "--config", str(config)], "0.28.0")
    assert newer.exact and newer.options["enable-prefix-caching"] is False
    older = parse(["vllm", "serve", "org/m", "--config", str(config)], "0.27.1")
    assert older.exact and "enable-prefix-caching" not in older.options


# every vLLM release from 0.11.0 to 0.34.0, patch releases included
RELEASES_TO_0_34_0 = [
    *("0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0"),
    *("0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0"),
    *("0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0"),
    *("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"),
]


def test_every_release_up_to_0_34_0_has_its_own_spec():
    recorded = {str(r) for r in recorded_releases()}
    assert set(RELEASES_TO_0_34_0) <= recorded, sorted(set(RELEASES_TO_0_34_0) - recorded)


def test_0_34_0_reads_its_own_options_and_values_that_0_33_0_lacks():
    """0.34.0 added --shuffle-safetensors-files, the all2all backend `mori`, and made
    --gpu-memory-utilization optional (None: vLLM's default), as its own parser reads them."""
    words = ["--shuffle-safetensors-files", "--all2all-backend", "mori", "--gpu-memory-utilization", "None"]
    command = parse(["vllm", "serve", "org/m", *words], "0.34.0")
    assert command.exact and not command.unread and command.options["shuffle-safetensors-files"] is True
    with pytest.raises(BadInput, match="--gpu-memory-utilization/--device-memory-utilization: 'lots' is not a number"):
        parse(["vllm", "serve", "org/m", "--gpu-memory-utilization", "lots"], "0.34.0")


@pytest.mark.parametrize("release", ["0.11.2", "0.14.1", "0.17.1", "0.18.1", "0.19.0"])
def test_a_patch_release_is_read_with_its_own_parser_and_refuses_what_it_refuses(release):
    assert parse(["vllm", "serve", "org/m", "-tp", "2"], release).exact
    with pytest.raises(BadInput, match="unrecognized arguments: --no-such-option"):
        parse(["vllm", "serve", "org/m", "--no-such-option"], release)


def test_0_19_0_reads_its_own_options_that_0_18_lacks():
    speculative = {"method": "eagle3", "model": "org/d", "num_speculative_tokens": 3}
    argv = ["vllm", "serve", "org/m", "-sc", json.dumps(speculative), "--reasoning-config", "{}"]
    command = parse(argv, "0.19.0")
    assert command.exact and not command.unread and command.speculative_config == speculative
    with pytest.raises(BadInput, match="unrecognized arguments: --swap-space"):  # gone since 0.18.0
        parse(["vllm", "serve", "org/m", "--swap-space", "4"], "0.18.1")


@pytest.mark.parametrize(
    ("flag", "stored"),
    [
        ("--enable-auto-tool-choice", True),
        ("--disable-auto-tool-choice", False),
        ("--no-enable-auto-tool-choice", False),  # kept out of 0.33.0's help, read all the same
        ("--no-enable-auto-tool", False),  # a prefix of it
    ],
)
def test_an_enable_disable_pair_stores_what_0_33_0_stores(flag, stored):
    command = parse(["vllm", "serve", "org/m", flag, "--tool-call-parser", "hermes"], "0.33.0")  # needed by the flag
    assert command.exact and command.options["enable-auto-tool-choice"] is stored


# --- review-launch3 06: the env prefix read as GNU env reads it --------------------------------------


@pytest.mark.parametrize(
    ("prefix", "env", "clean", "unset"),
    [
        (["env", "-u", "HOME"], {}, False, ["HOME"]),
        (["env", "--unset=HOME", "--uns", "XDG_CACHE_HOME", "A=1"], {"A": "1"}, False, ["HOME", "XDG_CACHE_HOME"]),
        (["env", "-iuX", "B=2"], {"B": "2"}, True, ["X"]),
        (["env", "-v", "--ignore-environment", "--", "C=3"], {"C": "3"}, True, []),
        (["env", "-"], {}, True, []),
    ],
)
def test_env_options_are_read_as_gnu_env_reads_them(prefix, env, clean, unset, monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    command = frame([*prefix, "vllm", "serve", "org/m"])
    assert (command.env, command.clean_env, command.unset, command.program) == (env, clean, unset, "vllm")
    assert ("HOME" in command.environ) == (not clean and "HOME" not in unset)


def test_the_recorded_parser_is_built_without_a_help_formatter_each_option(monkeypatch):
    """Issue 21: argparse asks a formatter, as each of ~200 options is added, whether its metavar
    fits its nargs; making a whole HelpFormatter each time was ~1.5 ms of `run`'s fast path. The
    check itself still runs: a metavar that does not fit is refused."""
    made = []
    monkeypatch.setattr(argparse.HelpFormatter, "__init__", lambda self, *args, **kwargs: made.append(args))
    serve_parser._parser.cache_clear()
    try:
        parser = serve_parser._parser("0.16.0", True)
    finally:
        serve_parser._parser.cache_clear()
    assert made == [] and parser.parse_args(["org/m", "--max-model-len", "4096"]).max_model_len == 4096
    with pytest.raises(ValueError, match="metavar"):
        parser.add_argument("--pair", nargs=2, metavar=("ONE", "TWO", "THREE"))


def test_the_launchs_environment_is_read_from_patchkits_once_a_command(monkeypatch):
    """Issue 21: each read of os.environ decodes every variable, and a `run` of three sets asked
    for the launch's environment ~45 times; a command read again (read(), replace) reads it anew."""
    reads = []

    class Counted(dict):
        def items(self):
            reads.append(1)
            return super().items()

    monkeypatch.setattr(os, "environ", Counted(os.environ, HOME="/home/someone"))
    command = frame(["env", "-u", "HOME", "A=1", "vllm", "serve", "org/m"])
    assert [command.environ.get("A"), command.environ.get("HOME"), "PATH" in command.environ] == ["1", None, True]
    assert len(reads) == 1
    assert dataclasses.replace(command, model="other").environ == command.environ and len(reads) == 2


def test_env_chdir_to_patchkits_own_directory_is_read_and_another_is_refused_saying_why(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert frame(["env", f"--chdir={tmp_path}", "vllm", "serve", "org/m"]).cwd == str(tmp_path)
    with pytest.raises(BadInput, match="patchkit reads its relative paths from its own working directory") as refused:
        frame(["env", "-C", "/", "vllm", "serve", "org/m"])
    assert "cd /" in (refused.value.hint or "")


@pytest.mark.parametrize(
    ("given", "made", "why"),
    [
        ("nodir", None, "from {cwd} (no such file or directory)"),
        ("", None, "from {cwd} (no such file or directory)"),
        ("{cwd}/gone", None, "(no such file or directory)"),
        ("file", "file", "from {cwd} (not a directory)"),
        ("file/sub", "file", "from {cwd} (not a directory)"),
    ],
)
def test_env_chdir_to_no_directory_is_refused_as_env_refuses_it_with_no_cd_hint(tmp_path, given, made, why):
    """review44a T10: `env -C DIR` where env's chdir fails (DIR missing from the launch's directory, a
    file): env refuses, the launch never runs; no `cd DIR && ...` hint (that cd fails too). Exit 2,
    `preflight` and `run` alike."""
    if made:
        (tmp_path / made).write_text("")
    directory = given.format(cwd=tmp_path)
    for verb in ("preflight", "run"):
        done = run_cli(verb, "--", "env", "-C", directory, "vllm", "serve", "m", cwd=tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == 2, said
        expected = f"env cannot change directory to it {why.format(cwd=tmp_path)}: env refuses the launch"
        assert expected in said and "cd " not in said, said
        assert "give env -C a directory that exists and the launch may enter" in said, said


def test_env_chdir_to_a_directory_the_launch_may_not_enter_is_refused(tmp_path, monkeypatch):
    """A directory env's chdir is denied (search permission): refused as env refuses it. root enters
    any, so the permission is taken away as os.access answers it."""
    (tmp_path / "closed").mkdir()
    monkeypatch.chdir(tmp_path)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == "closed" else real(path, mode))
    with pytest.raises(BadInput, match=re.escape("env -C closed: env cannot change directory to it from")) as refused:
        frame(["env", "--chdir=closed", "vllm", "serve", "org/m"])
    assert "(permission denied): env refuses the launch" in str(refused.value) and "cd " not in (
        refused.value.hint or ""
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["env", "A=1", "-i", "vllm", "serve", "org/m"], "env runs '-i' as the command"),
        (["env", "-S", "vllm serve org/m"], "patchkit does not read env's -S option"),
        (["env", "--ign", "vllm", "serve", "org/m"], "env refuses the option --ign"),
        (["env", "-u"], "env's -u needs a value"),
    ],
)
def test_an_env_prefix_patchkit_does_not_read_is_refused_with_a_true_message(argv, says):
    with pytest.raises(BadInput, match=re.escape(says)):
        frame(argv)


def test_env_unset_takes_the_variable_out_of_what_the_launch_reads(tmp_path):
    tree, library = write_eagle3_setup(tmp_path, V16)
    model = write_model(tmp_path / "m", DEEPSEEK_V3)
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "env", "-u", "VLLM_USE_MODELSCOPE", "vllm", "serve", str(model),
        env={"VLLM_USE_MODELSCOPE": "true"},
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("--tensor-paralel-size", "--tensor-parallel-size"), ("--speculative-confg", "--speculative-config")],
)
def test_a_mistyped_option_is_refused_with_the_option_it_looks_like(typed, meant):
    with pytest.raises(BadInput, match=f"unrecognized arguments: {typed}") as refused:
        read16("org/m", typed, "8")
    assert refused.value.hint is not None and refused.value.hint.startswith(f"did you mean {meant}?")
    with pytest.raises(BadInput) as unlike:  # nothing close: where the options are listed, no guess
        read16("org/m", "--zzz-qqq")
    assert unlike.value.hint is not None and "did you mean" not in unlike.value.hint


def test_bad_json_shows_where_json_stopped_and_the_shell_fix():
    """New-user trial 26 s3: the excerpt was the first 60 characters, the column past them (83)."""
    trailing = '{"method": "eagle3", "model": "some/drafter-model-dir", "num_speculative_tokens": 3,}'
    with pytest.raises(BadInput) as refused:
        read16("org/m", "--speculative-config", trailing)
    assert "at column 85): …" in refused.value.message and refused.value.message.endswith('tokens": 3,}')
    assert refused.value.hint == "remove the comma before the } at column 85 (JSON allows no trailing comma)"
    for typed in ("{'method': 'eagle3'}", "{method: eagle3}"):  # single quotes; the shell ate the double ones
        with pytest.raises(BadInput) as quoted:
            read16("org/m", "--speculative-config", typed)
        assert quoted.value.hint is not None and "put the whole JSON in single quotes" in quoted.value.hint
        assert "\n" not in quoted.value.message
