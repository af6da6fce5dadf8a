"""The one line an error becomes (components/core/text.py), on real errors."""

from __future__ import annotations

import pytest
import tensorflow as tf

from components.core.text import one_line


def test_the_first_line_or_the_type_name():
    assert one_line(ValueError("bad value\nmore detail")) == "bad value"
    assert one_line(ValueError("")) == "ValueError"
    assert one_line("  \n  second line\n") == "second line"
    assert one_line("") == ""
    assert one_line(ValueError("x" * 500), limit=300) == "x" * 300


def test_a_password_is_removed_before_the_line_is_cut():
    error = ConnectionError("cannot reach postgresql://mptfx:s3cret@db:5432/mlmd now")
    assert "s3cret" not in one_line(error, redact=True)
    assert "s3cret" not in one_line(error, limit=30, redact=True)


def test_an_error_inside_a_graph_is_its_cause_not_graph_execution_error():
    @tf.function
    def check(images):
        tf.debugging.assert_greater(tf.reduce_max(images), 0.0, message="blank image")
        return images

    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        check(tf.zeros([2]))
    assert str(caught.value).startswith("Graph execution error:")
    line = one_line(caught.value)
    assert line.startswith("assertion failed: [blank image]"), line
    assert "[[" not in line and "[Op:" not in line


def test_an_eager_op_error_is_its_message():
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        tf.io.decode_png(b"not a png")
    assert one_line(caught.value) == \
        "Unknown image file format. One of JPEG, PNG, GIF, BMP required."
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        tf.io.decode_image(b"\xff\xd8\xff\xe0 a truncated JPEG")
    assert caught.value.message.startswith("{{function_node __wrapped__DecodeImage")
    # The sentence only, without the function TensorFlow wrapped the op in and its name.
    assert one_line(caught.value) == "jpeg::Uncompress failed. Invalid JPEG data or crop window."
