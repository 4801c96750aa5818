"""Errors as one line: what a user or a trial's reason reads (precsearch/errors.py)."""

from __future__ import annotations

from precsearch.errors import one_line


def test_a_keras_call_error_keeps_its_cause_and_says_where():
    # Keras wraps an error inside a layer's call with a first line of its own; the
    # reason a failed trial records must keep the cause that follows it.
    wrapped = TypeError(
        "Exception encountered when calling PatchEncoder.call().\n\n"
        "\x1b[1mInput 'y' of 'AddV2' Op has type float32 that does not match type bfloat16 "
        "of argument 'x'.\x1b[0m\n\nArguments received by PatchEncoder.call():\n  • patch=..."
    )
    assert one_line(wrapped) == (
        "TypeError: Input 'y' of 'AddV2' Op has type float32 that does not match type "
        "bfloat16 of argument 'x'. (in PatchEncoder.call())"
    )


def test_one_line_is_the_first_line_and_short():
    assert one_line(ValueError("first\nsecond")) == "ValueError: first"
    assert one_line(KeyError()) == "KeyError"
    long = one_line(RuntimeError("x" * 500), limit=50)
    assert len(long) == 50 and long.endswith("...")
