"""Each option has one definition (a :class:`SearchOptions` field and its flag), and the
parser made from it agrees with it: every flag is a field with the field's default, and
every field a user sets has a flag or says why not."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from precsearch.cli import build_parser
from precsearch.cli.commands import run_options
from precsearch.errors import UserInputError
from precsearch.study.flags import count, positive_float, positive_int, seconds
from precsearch.study.options import SearchOptions, flagless, option_flags

FIELDS = {f.name: f for f in dataclasses.fields(SearchOptions)}
DEFAULTS = SearchOptions()
# Where another command's flag of a search option deliberately differs from run's.
OWN_DEFAULTS = {("probe", "probe_time"): 30.0}  # probing is what probe is for: not env, not 0
# Flags of other commands that share a field's name but are not a search's options.
NOT_SEARCH_OPTIONS = {("train", "out"), ("train", "steps")}  # the real training's own


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def flags_of(cmd: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in cmd._actions if a.option_strings and a.dest != "help"]


def test_every_run_flag_is_a_search_option_with_that_options_default():
    parser = build_parser()
    top = {a.dest: a for a in flags_of(parser)}
    run = flags_of(commands(parser)["run"])
    assert [a.dest for a in run] == list(option_flags())  # each field once, in its order
    for action in run:
        flag = option_flags()[action.dest]
        assert action.option_strings == [flag.name]
        assert (action.help, action.metavar) == (flag.help, flag.metavar), flag.name
        assert action.choices == flag.choices, flag.name
        # A flag that goes before the command too (--debug) takes its default from there.
        given = top[action.dest] if action.default is argparse.SUPPRESS else action
        assert given.default == getattr(DEFAULTS, action.dest), flag.name
    # And what a run gets when nothing is typed: the options' own defaults, all of them.
    assert run_options(parser.parse_args(["run", "model.py"])) == DEFAULTS


def test_every_search_option_has_a_run_flag_or_says_why_not():
    reasons = flagless()
    assert set(option_flags()) | set(reasons) == set(FIELDS)
    assert not set(option_flags()) & set(reasons)
    assert all(len(why) > 20 for why in reasons.values()), reasons


def test_other_commands_share_runs_flags_and_defaults():
    """A search option on another command is the same flag, with the same default, but
    where the command says otherwise (OWN_DEFAULTS)."""
    parser = build_parser()
    top = {a.dest: a for a in flags_of(parser)}
    shared = 0
    for name, cmd in commands(parser).items():
        for action in flags_of(cmd):
            if action.dest not in FIELDS or (name, action.dest) in NOT_SEARCH_OPTIONS:
                continue
            shared += 1
            assert action.option_strings == [option_flags()[action.dest].name], (name, action)
            given = top[action.dest] if action.default is argparse.SUPPRESS else action
            expected = OWN_DEFAULTS.get((name, action.dest), getattr(DEFAULTS, action.dest))
            assert given.default == expected, (name, action.dest)
    assert shared > 20
    probe = parser.parse_args(["probe", "model.py", "--sensitive"])
    assert run_options(probe) == SearchOptions(probe_time=30.0, sensitive=True)


def test_renamed_flags_reach_their_fields():
    argv = ["run", "m.py", "--confirm", "0", "--dimension", "a", "--dimension", "b=1",
            "--objective", "memory", "--export", "onnx", "--debug"]  # fmt: skip
    options = run_options(build_parser().parse_args(argv))
    assert (options.confirm_top, options.dimensions) == (0, ["a", "b=1"])
    assert (options.objectives, options.exporters, options.debug) == (["memory"], ["onnx"], True)
    # A list default is each run's own.
    assert SearchOptions().objectives is not SearchOptions().objectives


@pytest.mark.parametrize(
    ("convert", "text", "message"),
    [
        (positive_int, "0", "0 is not a positive integer"),
        (positive_int, "x", "'x' is not an integer"),
        (count, "-1", "-1 is negative"),
        (positive_float, "nan", "nan is not a positive number"),
        (positive_float, "1e", "'1e' is not a number"),
        (seconds, "-1", "-1.0 is not a positive number"),
    ],
)
def test_a_flags_converter_says_what_is_wrong(convert, text, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        convert(text)


def test_converters_read_good_values():
    assert (positive_int("3"), count("0"), positive_float("0.5")) == (3, 0, 0.5)
    assert (seconds("0"), seconds(" 0.0 "), seconds("2")) == (0.0, 0.0, 2.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "m.py", "--trials", "-1"], "argument --trials: -1 is negative"),
        (["finish", "s", "--storage", "x", "--confirm", "0"], "0 is not a positive integer"),
        (["run", "m.py", "--seed", "x"], "argument --seed: invalid int value: 'x'"),
        (["probe", "m.py", "--probe-time", "0"], "0.0 is not a positive number"),
        (["run", "m.py", "--fp32-runs", "2"], "argument --fp32-runs: 2 is fewer than 3"),
        (["run", "m.py", "--block-time", "0"], "argument --block-time: 0.0 is not a positive"),
    ],
)
def test_a_bad_flag_value_is_one_line_that_says_why(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_fp32_runs_set_the_budgets_reference_runs_for_every_worker_of_the_study():
    options = run_options(build_parser().parse_args(["run", "m.py", "--fp32-runs", "3"]))
    assert options.budget().ref_seeds == 3 and SearchOptions().budget().ref_seeds == 12
    assert options.shared()["fp32_runs"] == 3  # stored in the study: workers run the same
    # The notebook's search(fp32_runs=...) skips the parser: resolved() refuses it too.
    with pytest.raises(UserInputError, match="^--fp32-runs 2: expected at least 3"):
        SearchOptions(fp32_runs=2).resolved({})
    for wrong in (3.0, True):
        with pytest.raises(UserInputError, match="expected a positive integer"):
            SearchOptions(fp32_runs=wrong).resolved({})


def test_block_time_sets_the_budgets_least_block_for_every_worker_of_the_study(monkeypatch):
    options = run_options(build_parser().parse_args(["run", "m.py", "--block-time", "0.2"]))
    assert options.budget().block_time == 0.2 and SearchOptions().budget().block_time == 0.5
    assert options.shared()["block_time"] == 0.2
    # Unset, $PRECSEARCH_BLOCK_TIME gives the default (this suite's conftest sets 0.1).
    monkeypatch.delenv("PRECSEARCH_BLOCK_TIME", raising=False)
    assert SearchOptions().resolved({}).block_time == 0.5
    monkeypatch.setenv("PRECSEARCH_BLOCK_TIME", "0.25")
    assert SearchOptions().resolved({}).budget().block_time == 0.25
    monkeypatch.setenv("PRECSEARCH_BLOCK_TIME", "fast")
    with pytest.raises(UserInputError, match="^PRECSEARCH_BLOCK_TIME='fast': expected a number"):
        SearchOptions().resolved({})
    with pytest.raises(UserInputError, match="^--block-time -1.0: expected a positive number"):
        SearchOptions(block_time=-1.0).resolved({})
