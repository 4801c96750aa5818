"""The bad-input corpus: every mistake a user can make is one clear line and exit 2.

Model files and policy files live in ``tests/data/bad/``; flags, storage URLs and study
names are listed here. Each case runs the real command line and must exit 2 with one
line on stderr that says what was wrong, and no traceback (``--debug`` shows one). The
corpus test prints ``bad inputs: N/N clear``.
"""

from __future__ import annotations

import contextlib
import io
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import MODELS
from hypothesis import given, settings
from hypothesis import strategies as st

from precsearch.cli import build_parser
from precsearch.cli.commands import run_options
from precsearch.errors import UserInputError
from precsearch.plugins import get
from precsearch.records import SpaceOptions

BAD = Path(__file__).parent / "data" / "bad"
MLP = str(MODELS / "mlp.py")

# (command line after `precsearch`, words the error line must contain)
MODEL_FILES = [
    ("syntax_error.py", ["syntax error"]),
    ("no_build_model.py", ["no function build_model()"]),
    ("no_train_data.py", ["no function train_data()"]),
    ("build_model_not_function.py", ["build_model is a int, expected a function"]),
    ("config_not_literal.py", ["precsearch_config must be a literal"]),
    ("config_unknown_key.py", ["'batchsize' unknown"]),
    ("import_fails.py", ["importing the model file failed", "ValueError"]),
    ("missing_module.py", ["'precsearch_no_such_package'", "not installed"]),
    # These build the model (TensorFlow is imported in the worker first).
    ("build_returns_int.py", ["build_model() returned int, expected a keras.Model"]),
    ("train_data_returns_str.py", ["train_data() returned str, expected (x, y)"]),
    ("shape_mismatch.py", ["examples do not fit build_model()'s model"]),
    ("batched_data.py", ["returned a batched dataset", "drop .batch()"]),
    ("no_loss.py", ["no loss anywhere"]),
]
MODEL_CASES = [
    (f"run {BAD / 'models' / name} --trials 1 --confirm 0", [name, *words])
    for name, words in MODEL_FILES
] + [
    (
        f"run {BAD / 'models' / 'nothing_to_search.py'} --dimension layer_dtypes",
        ["nothing to search", "--dtypes float32,bfloat16"],
    )
]
POLICY_CASES = [
    (f"policy {path}", [path.name, field])
    for path, field in [
        (BAD / "policies" / f"{name}.json", field)
        for name, field in [
            ("format", "'format'"),
            ("default", "'default'"),
            ("types_not_object", "'types'"),
            ("types_dtype", "types['Dense']"),
            ("layers_regex", "a valid regular expression"),
            ("layers_empty_key", "non-empty string keys"),
            ("loss_scale_dynamic", "'loss_scale.dynamic'"),
            ("loss_scale_initial", "'loss_scale.initial_scale'"),
            ("loss_scale_growth", "'loss_scale.growth_steps'"),
            ("loss_scale_unknown", "'loss_scale.scale'"),
            ("loss_scale_not_object", "'loss_scale'"),
            ("batch_size", "'batch_size'"),
            ("base_batch_size", "'base_batch_size'"),
            ("lr_rule", "'lr_rule'"),
            ("jit_compile", "'jit_compile'"),
            ("manifest", "'manifest'"),
            ("unknown_field", "'defualt'"),
            ("top_level_list", "a JSON object"),
            ("not_json", "not a JSON policy file"),
            ("missing", "no such policy file"),
        ]
    ]
]
FLAG_CASES = [
    (f"run {MLP} --trails 3", ["unrecognized arguments: --trails"]),
    (f"run {MLP} --trials -1", ["--trials", "negative"]),
    (f"run {MLP} --tolerance 0", ["--tolerance", "not a positive number"]),
    (f"run {MLP} --confirm-time 0", ["--confirm-time", "not a positive number"]),
    (f"run {MLP} --confirm -2", ["--confirm", "negative"]),
    (f"run {MLP} --group-by blocks", ["--group-by", "invalid choice"]),
    (f"run {MLP} --dtypes float32,fp8", ["--dtypes", "expected short names"]),
    (f"run {MLP} --objective speed", ["unknown objective 'speed'"]),
    (f"run {MLP} --export onnx", ["unknown exporter 'onnx'"]),
    (f"run {MLP} --dimension dtypes", ["unknown dimension 'dtypes'"]),
    (f"run {MLP} --loader notebook", ["unknown loader 'notebook'"]),
    # Conflicting: a budget too short to time one block; a watchdog that stops FP32 itself.
    (f"run {MLP} --steps 5", ["steps is 5", "so that one block is timed"]),
    (f"run {MLP} --watchdog 0.5", ["watchdog", "expected > 1"]),
    ("run /nonexistent/model.py", ["no such model file"]),
    ("worker net", ["--storage"]),
    ("frobnicate", ["invalid choice: 'frobnicate'"]),
]
STORAGE_CASES = [
    (f"run {MLP} --storage postgresql://u:pw@127.0.0.1:9/x", ["--storage", "cannot open"]),
    (f"run {MLP} --storage nosuchdb://x/y", ["--storage", "cannot open"]),
    (f"run {MLP} --storage sqlite:////nonexistent/dir/x.db", ["--storage", "cannot open"]),
    ("show net --storage postgresql://u:pw@127.0.0.1:9/x", ["--storage", "cannot open"]),
    ("show /nonexistent/study", ["no study here"]),
]
NAME_CASES = [
    (f"run {MLP} --study-name={shlex.quote(name)}", ["study name", "not a path"])
    for name in ["../../escape", "a/b", ".hidden", "-x", "", "x" * 101]
]
CASES = MODEL_CASES + POLICY_CASES + FLAG_CASES + STORAGE_CASES + NAME_CASES


def precsearch(command: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "precsearch", *extra, *shlex.split(command)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def clear(done: subprocess.CompletedProcess, words: list[str]) -> str:
    """'' when the error is clear, else what is wrong with it."""
    lines = done.stderr.strip().splitlines()
    if done.returncode != 2:
        return f"exit {done.returncode}"
    if len(lines) != 1:
        return f"{len(lines)} lines"
    missing = [word for word in words if word not in lines[0]]
    if missing or "pw@" in lines[0]:
        return f"missing {missing}" if missing else "shows the password"
    return ""


@pytest.mark.slow
def test_the_bad_input_corpus_is_all_one_clear_line(tmp_path, figure):
    # Two at a time (two cores): a third of the cases start TensorFlow in a worker.
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda case: precsearch(case[0], tmp_path), CASES))
    problems = {
        command: f"{why}: {result.stderr.strip()[-300:]}"
        for (command, words), result in zip(CASES, done, strict=True)
        if (why := clear(result, words))
    }
    figure(f"bad inputs: {len(CASES) - len(problems)}/{len(CASES)} clear")
    assert not problems
    assert not list(tmp_path.rglob("escape")) and not (tmp_path.parent / "escape").exists()


def test_debug_shows_the_traceback(tmp_path):
    done = precsearch(f"policy {BAD / 'policies' / 'default.json'}", tmp_path, "--debug")
    assert done.returncode != 0 and "Traceback" in done.stderr and "UserInputError" in done.stderr


WORDS = st.sampled_from(
    ["run", MLP, "--trials", "--steps", "--dtypes", "--group-by", "--tolerance", "--confirm-time",
     "--confirm", "--watchdog", "--study-name", "--sampler", "--lr-rule", "--objective",
     "--export", "--dimension", "--batch-size", "--seed", "float32,bfloat16", "layer",
     "tpe", "grid", "0", "-1", "3", "1e9", "nan", "inf", "x", "../x", "speedup", ""]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS | st.text(max_size=8), max_size=8))
def test_the_run_flags_raise_nothing_but_a_clear_error(words):
    """Whatever is typed after ``precsearch run MODEL``: parsed and checked as far as a
    run goes before it builds the model, only a one-line error (exit 2) comes out."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = build_parser().parse_args(["run", MLP, *words])
        options = run_options(args).resolved({})
        SpaceOptions(
            group_by=options.group_by, casts=options.casts, dtypes=options.dtypes,
            lr_rule=options.lr_rule,
        )  # fmt: skip
        for kind, names in (("objective", options.objectives), ("exporter", options.exporters)):
            for name in names:
                get(kind, name.partition("=")[0])
    except SystemExit as exc:
        assert exc.code == 2  # argparse's own errors, one line (see the corpus)
    except UserInputError as exc:
        assert "\n" not in str(exc)
