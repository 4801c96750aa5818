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


def test_a_graph_execution_error_says_what_failed_and_at_which_layer():
    # TensorFlow's first line says only that a graph failed; the op's message follows
    # the Python stack it prints, and the node's name is the layer's path.
    class InvalidArgumentError(Exception):
        pass

    text = (
        "Graph execution error:\n\nDetected at node functional_1/token_embedding/embedding/"
        "GatherV2 defined at (most recent call last):\n"
        '  File "model.py", line 24, in <module>\n\n'
        '  File "keras/src/backend/tensorflow/numpy.py", line 3095, in take\n\n'
        "indices[57,51] = 2000 is not in [0, 2000)\n"
        "\t [[{{node functional_1/token_embedding/embedding/GatherV2}}]] "
        "[Op:__inference_multi_step_on_iterator_510]"
    )
    assert one_line(InvalidArgumentError(text), limit=300) == (
        "InvalidArgumentError: indices[57,51] = 2000 is not in [0, 2000) "
        "(at node functional_1/token_embedding/embedding/GatherV2)"
    )


def test_an_eager_ops_error_leaves_out_its_kernel_and_device():
    class InvalidArgumentError(Exception):
        pass

    text = (
        "{{function_node __wrapped__GatherV2_device_/job:localhost/replica:0/task:0/device:"
        "CPU:0}} indices[0,11] = 2000 is not in [0, 2000) [Op:GatherV2]"
    )
    assert one_line(InvalidArgumentError(text)) == (
        "InvalidArgumentError: indices[0,11] = 2000 is not in [0, 2000) [Op:GatherV2]"
    )


def test_running_out_of_memory_is_told_apart_on_every_backend():
    from precsearch.errors import is_resource_problem

    class OutOfMemoryError(RuntimeError):  # PyTorch's name
        pass

    class XlaRuntimeError(RuntimeError):  # JAX's
        pass

    assert is_resource_problem(OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert is_resource_problem(XlaRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating"))
    assert not is_resource_problem(XlaRuntimeError("INVALID_ARGUMENT: shapes differ"))
    assert not is_resource_problem(RuntimeError("RESOURCE_EXHAUSTED in a user's own words"))
