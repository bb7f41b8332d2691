"""A safetensors header that is a JSON object, but one safetensors' reader refuses (review36 W1): a
tensor entry of the wrong shape, offsets not matching dtype and shape, a gap or an overlap, an
unknown dtype, a negative size, __metadata__ not of strings, NaN. Each is a weights problem in the
reader's words; which ones it refuses is held against safetensors 0.8.0 itself in
tests/vllm_import/test_weights_real.py (launch_fixtures.SAFETENSORS_HEADERS)."""

from __future__ import annotations

import pytest
from launch_fixtures import SAFETENSORS_HEADERS, raw_safetensors, write_layout

from patchkit.launch.weights import weights_problem

SAID = {
    "tensor_an_integer": "invalid JSON in header: tensor `w`: no struct TensorInfo",
    "tensor_a_list_of_four": "invalid length 4, expected struct TensorInfo with 3 elements",
    "offset_a_float": "tensor `w`: its data_offsets are not two integers 0 or more",
    "offset_minus_zero": "tensor `w`: its data_offsets are not two integers 0 or more",
    "dtype_unknown": "unknown dtype `F99`, expected one of BOOL, F4,",
    "dtype_four_bits_half_a_byte": "its F4 data does not end up at a byte boundary",
    "shape_not_the_offsets": "invalid shape, data type, or offset for tensor `w` (36 bytes of F32 [3, 3], its data_offsets span 16)",
    "shape_negative": "its shape is not a list of sizes (integers 0 or more)",
    "shape_overflowing_before_a_zero": "overflow computing buffer size from shape and/or element type",
    "a_gap_before": "invalid offset for tensor `w` (the tensors' data must run on from 0, no gap or overlap)",
    "two_at_one_place": "invalid offset for tensor `",
    "field_twice": "duplicate field `dtype`",
    "field_missing": "missing field `shape`",
    "metadata_an_integer_value": "invalid JSON in header: __metadata__ is not a map of strings",
    "metadata_twice": "duplicate field `__metadata__`",
    "metadata_nan": "model.safetensors is no safetensors file (its header is no JSON object in UTF-8)",
    "key_lone_surrogate": "invalid JSON in header: `w\\ud800` holds a lone surrogate escape",
    "key_lone_trailing_surrogate": "invalid JSON in header: `w\\udc00` holds a lone surrogate escape",
    "metadata_value_lone_surrogate": "invalid JSON in header: `b\\ud800` holds a lone surrogate escape",
    "other_field_lone_surrogate": "invalid JSON in header: `\\udbff` holds a lone surrogate escape",
}


@pytest.mark.parametrize("name", sorted(SAID))
def test_a_header_safetensors_refuses_is_said_in_its_words(tmp_path, name):
    text, data, loads = SAFETENSORS_HEADERS[name]
    assert not loads
    directory = write_layout(tmp_path / "m", {"model.safetensors": raw_safetensors(text, data)})
    said = weights_problem(str(directory), "auto")
    assert said is not None and SAID[name] in said, said
    assert said.startswith("model.safetensors"), said


def test_a_long_tensor_name_is_cut_in_the_message(tmp_path):
    name = "layer." * 5_000
    text = '{"' + name + '": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}'
    directory = write_layout(tmp_path / "m", {"model.safetensors": raw_safetensors(text, 32)})
    said = weights_problem(str(directory), "auto")
    assert said is not None and "invalid offset for tensor `layer.layer." in said and len(said) < 300, said


def test_fastsafetensors_judges_only_the_data_length_as_before(tmp_path):
    """Its own reader, not safetensors': a header it may take is not refused in safetensors' words."""
    text, data, _ = SAFETENSORS_HEADERS["a_gap_before"]
    directory = write_layout(tmp_path / "m", {"model.safetensors": raw_safetensors(text, data)})
    assert weights_problem(str(directory), "fastsafetensors") is None


def test_a_tensor_name_with_a_newline_is_said_on_one_line(tmp_path):
    """review36 L8's class: a name read from the header is escaped as a file's name is."""
    text = '{"a\\nb\\u001b[2J": ' + '{"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}'
    directory = write_layout(tmp_path / "m", {"model.safetensors": raw_safetensors(text, 32)})
    said = weights_problem(str(directory), "auto")
    assert said is not None and "invalid offset for tensor `a\\x0ab\\x1b[2J`" in said and "\n" not in said, said
