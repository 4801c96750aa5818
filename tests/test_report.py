"""Text for people (results/report.py), from model info alone."""

from __future__ import annotations

from precsearch import Policy
from precsearch.results.report import assignments_summary, summarize_policy, trials_text, ttq_text


def layer(id_, cls, output=False, unit=None):
    name = id_.rsplit("/", 1)[-1]
    return {"id": id_, "name": name, "class": cls, "params": 1, "output": output,
            "container": False, "floating": True, "unit": unit}  # fmt: skip


def test_the_summary_names_the_output_layer_and_follows_units():
    layers = [
        layer("encoder", "PatchEncoder"),
        layer("encoder/projection", "Dense", unit="encoder"),
        layer("hidden", "Dense"),
        layer("logits", "Dense", output=True),
    ]
    policy = Policy(types={"Dense": "mixed_bfloat16"})
    # The Dense inside the encoder follows the encoder (float32); the output stays float32.
    assert assignments_summary(policy, layers) == [
        "Dense (3 layers): bf16 1, fp32 2 (output logits: fp32)",
        "PatchEncoder (1 layer): fp32 1",
    ]


def test_a_time_to_quality_is_a_ratio_or_its_named_outcome():
    assert ttq_text({"speedup": 1.234, "outcome": "reached"}) == "1.23x"
    assert ttq_text({"outcome": "not reached within 1.5x the budget"}) == ">1.5x budget"
    assert ttq_text({"outcome": "not measured"}) == ttq_text(None) == "n/a"
    # The tracing a user's run pays once stands beside the ratio that leaves it out.
    reached = {"speedup": 1.5, "outcome": "reached", "trace_s": 4.06}
    assert ttq_text(reached) == "1.50x, trace 4.1 s"
    late = {"outcome": "not reached within 1.5x the budget", "trace_s": 12.0}
    assert ttq_text(late) == ">1.5x budget, trace 12.0 s"


def test_a_trial_count_leaves_out_a_samplers_repeats_and_says_so():
    import optuna

    study = optuna.create_study(directions=["maximize", "minimize"])
    for status in ("ok", "too_slow", "ok"):
        trial = study.ask()
        trial.set_user_attr("status", status)
        study.tell(trial, [1.0, 0.0])
    repeat = study.ask()
    repeat.set_user_attr("duplicate_of", 0)
    study.tell(repeat, [1.0, 0.0])
    assert trials_text(study) == (
        "3 trials (2 ok, 1 too_slow); 1 repeat of a measured policy, not run again"
    )
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    assert trials_text(study).startswith("4 trials (1 fail, 2 ok, 1 too_slow); 1 repeat ")


def test_a_trial_enqueued_that_no_worker_ran_is_not_counted_as_a_trial():
    # Two workers reaching their --trials can leave an enqueued FP32 twin WAITING: it is
    # said apart and never counted, whichever trial happened to run last.
    import optuna

    study = optuna.create_study(directions=["maximize", "minimize"])
    trial = study.ask()
    trial.set_user_attr("status", "ok")
    study.tell(trial, [1.0, 0.0])
    study.enqueue_trial({}, user_attrs={"twin_of": 0})
    assert trials_text(study) == "1 trials (1 ok); 1 enqueued, not run"


def test_a_proposal_answered_without_training_is_not_counted_as_a_trial():
    # The probes or the pins can answer a proposal without training it: the run's own
    # notes do not count it as one of --trials, and nor does the count shown.
    import optuna

    from precsearch.stored import mark_answered_by_pins, mark_answered_by_probes

    study = optuna.create_study(directions=["maximize", "minimize"])
    for mark in (None, mark_answered_by_pins, mark_answered_by_probes):
        trial = study.ask()
        trial.set_user_attr("status", "ok" if mark is None else "infeasible")
        if mark is not None:
            mark(trial)
        study.tell(trial, [1.0, 0.0])
    assert trials_text(study) == "1 trials (1 ok); 2 proposals answered without training"


def test_a_short_summary_names_the_output_layer_that_stays_float32():
    policy = Policy(types={"Dense": "mixed_bfloat16"}).to_dict()
    assert summarize_policy(policy) == "bf16: Dense; fp32: rest"
    assert summarize_policy(policy, ["logits"]) == "bf16: Dense; fp32: rest (output logits: fp32)"
    # An output that a layer rule names has the dtype the rule gives it.
    named = Policy(types={"Dense": "mixed_bfloat16"}, layers={"logits": "mixed_bfloat16"})
    assert summarize_policy(named.to_dict(), ["logits"]) == "bf16: Dense, logits; fp32: rest"
