"""A layer group that breaks in low precision: localized, pinned float32, explained, and
the rest of the model still searched (precsearch/study/pitfalls.py, precsearch/pins.py)."""

from __future__ import annotations

import json

import pytest
from helpers import MODELS, run_cli

from precsearch.pins import breaks, cause, pin_lines, pinned_reason
from precsearch.study.pitfalls import localize, pin_failure, pin_quality

FINE = {"loss_error": 0.01, "gradient_error": 0.02, "problem": ""}


class Space:
    """What localize asks of a search space: a policy per parameter set (here the set of
    groups in low precision itself) and each group's layers."""

    def group_layers(self):
        return {"dtype:a": ["a1"], "dtype:b": ["b1", "b2"], "dtype:c": ["c1"], "dtype:d": []}

    def policy(self, params):
        return frozenset(p for p, v in params.items() if v != "float32")


class OneBatch:
    """An executor whose one-batch numbers break when ``culprits`` are all low together
    (the real one runs the model: the slow test below); it counts its commands."""

    def __init__(self, *culprits):
        self.culprits = [frozenset(c) for c in culprits]
        self.commands = 0

    def numerics(self, configs):
        self.commands += 1
        out = {}
        for label, low in configs:
            broken = any(c <= low for c in self.culprits)
            out[label] = {"error": "error: ValueError: boom", "detail": ""} if broken else FINE
        return out


PARAMS = {p: "bfloat16" for p in ("dtype:a", "dtype:b", "dtype:c", "dtype:d")} | {"x": 1}


def test_a_group_that_breaks_alone_is_pinned_and_nothing_else():
    executor = OneBatch({"dtype:b"})
    pins = localize(executor, Space(), PARAMS)
    assert list(pins) == ["dtype:b=bfloat16"]
    assert pins["dtype:b=bfloat16"]["layers"] == ["b1", "b2"]
    assert pins["dtype:b=bfloat16"]["reason"] == "error: ValueError: boom"
    # The policy as it is (beside FP32), each group alone, the rest together: three.
    assert executor.commands == 3


def test_groups_that_break_only_together_are_found_by_halving():
    pins = localize(OneBatch({"dtype:c", "dtype:d"}), Space(), PARAMS)
    assert set(pins) == {"dtype:c=bfloat16", "dtype:d=bfloat16"}
    assert pins["dtype:c=bfloat16"]["together_with"] == ["dtype:d"]


def test_a_policy_that_does_not_break_on_one_batch_pins_nothing():
    executor = OneBatch()
    assert localize(executor, Space(), PARAMS) == {} and executor.commands == 1
    assert localize(OneBatch({"dtype:a"}), Space(), {"dtype:a": "float32"}) == {}


def test_nothing_is_pinned_when_fp32_breaks_the_same_way():
    # The model's own fault (a loss it cannot compute, bad data): no group is to blame.
    executor = OneBatch(set())  # the empty set of low groups breaks: FP32 itself
    assert localize(executor, Space(), PARAMS) == {} and executor.commands == 1


def test_the_numbers_that_say_a_policy_breaks():
    assert breaks(FINE) == ""
    assert breaks({"error": "error: X"}) == "error: X"
    nan = {"loss_error": None, "gradient_error": None, "problem": "dense: non-finite"}
    assert breaks(nan) == "non-finite loss on one batch (dense: non-finite)"


def test_an_id_rounded_out_of_range_is_said_in_words_with_what_to_do():
    pin = {
        "param": "dtype:Embedding",
        "dtype": "bfloat16",
        "layers": ["embedding"],
        "reason": "error: InvalidArgumentError: indices[0,11] = 2000 is not in [0, 2000)",
    }
    assert cause(pin, {"tokens": 1999.0, "mask": 1.0}) == (
        "its input holds integer ids (tokens up to 1999); bfloat16 holds integers exactly "
        "only up to 256, so an id became 2000, out of the layer's range [0, 2000): keep it "
        "float32, or give the Input dtype int32"
    )
    (line,) = pin_lines({"dtype:Embedding=bfloat16": pin}, {"tokens": 1999.0})
    assert line.startswith("Embedding (embedding) stays float32 in bfloat16: its input holds")
    pins = {"dtype:Embedding=bfloat16": pin}
    assert pinned_reason(pins, {"dtype:Embedding": "bfloat16"}).startswith(
        "pinned float32: Embedding in bfloat16 (error: InvalidArgumentError: indices"
    )
    assert pinned_reason(pins, {"dtype:Embedding": "float32"}) == ""
    assert pinned_reason(pins, {"dtype:Embedding": "float16"}) == ""


@pytest.mark.slow
def test_a_transformer_whose_embedding_breaks_in_bfloat16_is_searched_around_it(tmp_path):
    # The Keras example's shape: layer subclasses, token ids up to 1999 through a float
    # Input. bfloat16 rounds 1999 to 2000, out of the embedding's range.
    done = run_cli(
        "run", str(MODELS / "text_transformer.py"), "--out", str(tmp_path), "--steps", "16",
        "--trials", "3", "--dtypes", "float32,bfloat16", "--sampler", "random",
        "--probe-time", "2", "--confirm-time", "1", "--export", "policy_json",
        "--fp32-runs", "3",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pinned: TokenAndPositionEmbedding (token_and_position_embedding) stays float32" in (
        done.stdout + done.stderr
    )
    assert "int32 Input avoids it" in done.stdout  # the up-front note on the float ids
    # The recipe without the pinned group is a peer of its own beside the recipe as it is.
    assert "global mixed recipe except the pinned groups" in done.stdout
    folder = tmp_path / "text_transformer"
    manifest = json.loads((folder / "best_policy.json").read_text())["manifest"]
    (pinned,) = manifest["pinned"]
    assert (pinned["param"], pinned["dtype"]) == ("dtype:TokenAndPositionEmbedding", "bfloat16")
    assert "integer ids (the input up to 1999)" in pinned["why"]
    assert "give the Input dtype int32" in pinned["why"]

    import pandas as pd

    trials = pd.read_csv(folder / "trials.csv", keep_default_na=False)
    # No trial fails with a raw error: the global recipe is infeasible for the pin, and
    # the recipe without the embedding trains in bfloat16 (the rest of the model searched).
    assert "failed" not in set(trials["status"]) and "FAIL" not in set(trials["state"])
    assert not trials["reason"].str.contains("Graph execution error").any()
    recipe = trials[trials["baseline"] == "global_bfloat16"].iloc[0]
    assert recipe["status"] == "infeasible"
    assert recipe["reason"].startswith("pinned float32: TokenAndPositionEmbedding in bfloat16")
    rest = trials[trials["baseline"] == "except_pinned_bfloat16"].iloc[0]
    assert rest["status"] in ("ok", "infeasible", "too_slow") and rest["speedup"] != ""
    assert rest["param:dtype:TokenAndPositionEmbedding"] == "float32"
    assert "bfloat16" in {rest[c] for c in trials.columns if c.startswith("param:dtype:")}

    shown = run_cli("show", str(folder))
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "Kept float32" in shown.stdout and "out of the layer's range" in shown.stdout
    assert "Kept float32" in (folder / "report.html").read_text()


class Recipes(Space):
    """The space's global recipes too, as pin_failure enqueues them."""

    dtypes = ["float32", "bfloat16"]

    def baselines(self):
        return [("fp32", dict.fromkeys(PARAMS, "float32") | {"x": 1}), ("global_bfloat16", PARAMS)]


def test_a_later_pin_re_enqueues_the_recipe_once_with_all_pins_and_the_peer_is_the_latest():
    import optuna

    from precsearch.stored import baseline_of, baseline_trial

    study = optuna.create_study()
    said = []
    pin_failure(study, OneBatch({"dtype:b"}), Recipes(), PARAMS, said.append)
    first = {**PARAMS, "dtype:b": "float32"}
    # The first recipe ran (trains like FP32, say) before a later trial found dtype:c.
    trial = study.ask()
    assert trial.params == {} and baseline_of(trial) == "except_pinned_bfloat16"
    study.tell(trial, 1.0)
    later = {**PARAMS, "dtype:a": "bfloat16", "dtype:b": "float32"}
    pin_failure(study, OneBatch({"dtype:b"}, {"dtype:c"}), Recipes(), later, said.append)
    pin_failure(study, OneBatch({"dtype:b"}, {"dtype:c"}), Recipes(), later, said.append)
    enqueued = [t for t in study.trials if baseline_of(t) == "except_pinned_bfloat16"]
    both = {**PARAMS, "dtype:b": "float32", "dtype:c": "float32"}
    assert [t.system_attrs["fixed_params"] for t in enqueued] == [first, both]  # once each
    assert [line for line in said if line.startswith("enqueued")] == [
        "enqueued: the global bfloat16 recipe except b (kept float32)",
        "enqueued: the global bfloat16 recipe except b, c (kept float32)",
    ]
    # The peer is the recipe with every pin, though the first one completed and it waits.
    assert baseline_trial(study, "except_pinned_").number == enqueued[1].number


WORSE = "trains worse than FP32: training loss 3.10x the bar"


class Budgeted:
    """An executor whose runs of the budget train worse than FP32 (a gap of 3.1) when the
    group ``culprit`` is low (the real one trains: the slow test below); it counts them."""

    def __init__(self, culprit):
        self.culprit = culprit
        self.runs = 0

    def run_trial(self, low, budget):
        from precsearch.records import TrialResult

        self.runs += 1
        assert not budget.stop_slow  # a check is judged, never stopped as too slow
        if self.culprit in low:
            return TrialResult(policy={}, status="infeasible", fidelity_gap=3.1, reason=WORSE)
        return TrialResult(policy={}, status="ok", fidelity_gap=0.2)


def judged(reason=WORSE, gap=3.1, scale=None):
    from precsearch.records import TrialResult

    numerics = {"min_loss_scale": scale, "loss_scale": [2.0**15, 1.0, scale]} if scale else {}
    return TrialResult(policy={}, status="infeasible", reason=reason, fidelity_gap=gap,
                       numerics=numerics)  # fmt: skip


@pytest.mark.parametrize(
    ("culprit", "runs"), [("dtype:a", 2), ("dtype:b", 3), ("dtype:c", 2), ("dtype:d", 3)]
)
def test_a_group_that_trains_worse_is_found_by_halving_in_at_most_three_runs(culprit, runs):
    import optuna

    from precsearch.records import Budget

    study, said = optuna.create_study(), []
    executor = Budgeted(culprit)
    new = pin_quality(study, executor, Recipes(), PARAMS, judged(), Budget(), said.append)
    # Halves of a, b, c, d, low alone: a and b; then a; b is the other half, so it must
    # train worse alone to be pinned (one run more). The same on the other side.
    assert list(new) == [f"{culprit}=bfloat16"] and executor.runs == runs
    pin = new[f"{culprit}=bfloat16"]
    assert pin["reason"] == "trains worse than FP32 in bfloat16: gap 3.1 units"
    assert pinned_reason(new, {culprit: "bfloat16"}) == (
        f"pinned float32: {culprit[6:]} in bfloat16 "
        "(trains worse than FP32 in bfloat16: gap 3.1 units)"
    )
    assert f"pinned: {pin_lines(new, {})[0]}" in said
    assert "found on runs of the trial's budget" in pin_lines(new, {})[0]
    # Stored: a resumed study (or a later trial with these groups) runs nothing again.
    again = Budgeted(culprit)
    pin_quality(study, again, Recipes(), PARAMS, judged(), Budget(), said.append)
    assert again.runs == 0


def test_a_loss_scale_that_collapses_in_one_group_is_pinned_without_a_run():
    import optuna

    from precsearch.records import Budget

    study, executor = optuna.create_study(), Budgeted("dtype:a")
    alone = {**dict.fromkeys(PARAMS, "float32"), "dtype:b": "float16"}
    collapsed = judged("loss scale collapsed to 0.5", None, scale=0.5)
    new = pin_quality(study, executor, Recipes(), alone, collapsed, Budget(), print)
    # The trial put one group low: it ran that group alone already.
    assert executor.runs == 0
    (pin,) = new.values()
    assert pin["reason"] == "its loss scale collapses in float16 (to 0.5)"
    assert pin["loss_scale"] == [2.0**15, 1.0, 0.5]


def test_no_pin_where_no_single_group_trains_worse_within_three_runs():
    import optuna

    from precsearch.records import Budget

    study, said = optuna.create_study(), []
    executor = Budgeted("nothing alone")  # only the groups together train worse
    assert pin_quality(study, executor, Recipes(), PARAMS, judged(), Budget(), said.append) == {}
    assert executor.runs == 3 and study.user_attrs.get("pins") is None
    assert said[-1].startswith("note: no single group found that trains worse alone within 3")


@pytest.mark.slow
def test_a_layer_that_trains_worse_in_bfloat16_is_localized_pinned_and_searched_around(tmp_path):
    # tests/models/fine_offset.py: recenter adds and takes off an offset of 4096, which
    # bfloat16 holds only to steps of 32: no error, no non-finite value, no learning.
    from precsearch.app.run import run_study
    from precsearch.stored import answered_by_pins, baseline_of, reason_of, status_of
    from precsearch.study.options import SearchOptions

    options = SearchOptions(
        trials=4, steps=24, out=str(tmp_path), study_name="fine", group_by="layer",
        dtypes="float32,bfloat16", in_process=True, confirm_top=0, sampler="random",
        dimensions=["layer_dtypes"], keep_slow=True,  # judged, whatever bfloat16's speed here
    )  # fmt: skip
    study = run_study(MODELS / "fine_offset.py", options).study
    (pin,) = study.user_attrs["pins"].values()
    assert (pin["param"], pin["dtype"], pin["layers"]) == (
        "dtype:recenter",
        "bfloat16",
        ["recenter"],
    )
    assert pin["reason"].startswith("trains worse than FP32 in bfloat16: gap ")
    # Of the two groups the recipe put low, recenter alone (the first half) trained worse.
    assert pin["found"] == "on runs of the trial's budget (1 run here)"
    by_label = {baseline_of(t): t for t in study.trials if baseline_of(t)}
    recipe = by_label["global_bfloat16"]
    assert status_of(recipe) == "infeasible"
    assert reason_of(recipe).startswith("trains worse than FP32")
    # The rest of the model searched: the recipe without recenter trains like FP32.
    rest = by_label["except_pinned_bfloat16"]
    assert rest.params == {"dtype:recenter": "float32", "dtype:hidden": "bfloat16"}
    assert status_of(rest) == "ok"
    # The one policy left, recenter alone in bfloat16, is answered from the pin.
    (answered,) = [t for t in study.trials if answered_by_pins(t)]
    assert answered.params["dtype:recenter"] == "bfloat16"
    assert reason_of(answered).startswith("pinned float32: recenter in bfloat16 (trains worse")
