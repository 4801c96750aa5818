"""The probes before a search: each layer group alone in low precision against FP32, and
what the search does with them (the rules on made-up figures, the measuring for real)."""

from __future__ import annotations

import math

import optuna
import pytest
from helpers import MODELS, run_cli

from precsearch import Policy, UserInputError
from precsearch.app.run import run_study
from precsearch.cost_model import (
    ALL,
    XLA,
    accuracy,
    predicted,
    predicted_best,
    probe_lines,
    rejection,
    ruled_out,
)
from precsearch.model_file import load_model_file
from precsearch.records import GRAPH_REWRITE, Budget, ModelInfo
from precsearch.results.explain import group_effects, probe_summary, why_lines
from precsearch.stored import set_study_record
from precsearch.study.executors import InProcess
from precsearch.study.options import SearchOptions
from precsearch.study.probe import probe_params, run_probes
from precsearch.study.space import SearchSpace, SpaceOptions

pytest.importorskip("keras")

BY_LAYER = SpaceOptions(group_by="layer", dtypes=["float32", "bfloat16"])


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """The shared MLP in this process, and its space with a dtype choice per layer."""
    with InProcess(load_model_file(MODELS / "mlp.py"), tmp_path_factory.mktemp("w")) as ex:
        yield ex, SearchSpace(ex.model_info.to_dict(), BY_LAYER)


def speed(estimate: float, low: float, high: float) -> dict:
    return {"estimate": estimate, "low": low, "high": high}


def record(alone: dict[str, dict], together: dict | None, error: float | None = 0.01) -> dict:
    """A probes record with the given speeds per group (and for every group at once)."""
    numbers = {"gradient_error": error, "loss_error": error, "max_activation": 3.0,
               "layer": "hidden", "problem": ""}  # fmt: skip
    probes = {
        f"{param}=bfloat16": {"param": param, "dtype": "bfloat16", "speed": s, "numerics": numbers}
        for param, s in alone.items()
    }
    if together:
        probes[f"{ALL}=bfloat16"] = {"param": ALL, "dtype": "bfloat16", "speed": together,
                                     "numerics": numbers}  # fmt: skip
    return {"probes": probes, "rounds": 5, "seconds": 1.0}


def test_a_probe_puts_one_group_alone_in_low_precision(mlp):
    _, space = mlp
    probes = {label: params for label, _, _, params in probe_params(space)}
    assert set(probes) == {"dtype:hidden=bfloat16", "dtype:hidden2=bfloat16", f"{ALL}=bfloat16",
                           f"{XLA}=True"}  # fmt: skip
    alone = probes["dtype:hidden=bfloat16"]
    assert alone["dtype:hidden"] == "bfloat16" and alone["dtype:hidden2"] == "float32"
    # The user's own batch size and XLA setting: the probe measures precision alone.
    assert space.policy(alone).batch_size == 32 and not space.policy(alone).jit_compile
    # The XLA probe is FP32 with XLA, at the user's batch size.
    xla = space.policy(probes[f"{XLA}=True"])
    assert xla.jit_compile and xla.batch_size == 32 and xla.rule_dtypes() == {"float32"}


def test_a_space_without_a_low_dtype_has_nothing_to_probe(mlp):
    executor, _ = mlp
    fp32_only = SearchSpace(executor.model_info.to_dict(), SpaceOptions(dtypes=["float32"]))
    # Only XLA is left to probe, and XLA alone is not what the probes are for.
    assert [param for _, param, _, _ in probe_params(fp32_only)] == [XLA]
    with pytest.raises(UserInputError, match="nothing to probe"):
        run_probes(executor, fp32_only, seconds=1, block=5)


def test_the_probes_measure_speed_with_an_interval_and_numerics_against_fp32(mlp):
    executor, _ = mlp
    by_type = SpaceOptions(group_by="type", dtypes=["float32", "bfloat16"])
    space = SearchSpace(executor.model_info.to_dict(), by_type)
    got = run_probes(executor, space, seconds=1, block=5)
    assert got["rounds"] >= 5
    assert set(got["probes"]) == {label for label, *_ in probe_params(space)}
    assert got["probes"][f"{XLA}=True"]["numerics"] == {}  # XLA: the same dtypes
    for entry in got["probes"].values():
        s = entry["speed"]
        assert 0 < s["low"] <= s["estimate"] <= s["high"] and s["rounds"] == got["rounds"]
        if entry["param"] == XLA:
            continue
        n = entry["numerics"]
        # bfloat16 keeps 8 bits of mantissa: off FP32, but not by much on one batch.
        assert 0 < n["gradient_error"] < 0.2 and n["loss_error"] < 0.05
        assert n["max_activation"] > 0 and n["problem"] == ""


def test_fp32_against_itself_has_no_numerical_error(mlp):
    executor, space = mlp
    fp32 = space.policy(dict(space.baselines())["fp32"])
    same = executor.numerics([("fp32", fp32)])["fp32"]
    assert same["gradient_error"] == 0 and same["loss_error"] == 0


def test_one_traced_model_per_policy_serves_the_trials_probes_and_confirmation(mlp):
    executor, space = mlp
    runner = executor.runner
    fp32 = space.policy(dict(space.baselines())["fp32"])
    low = space.policy({**dict(space.baselines())["fp32"], "dtype:hidden": "bfloat16"})
    executor.confirm([("fp32", fp32), ("null", fp32), ("c0", low)], [["fp32", "null", "c0"]], 2)
    executor.confirm([("fp32", fp32), ("null", fp32), ("best", low)], [["best", "fp32", "null"]], 3)
    models = {key[0]: timed.model for key, timed in runner.timed_cache.items()}
    # The user's FP32 is the model the trials are timed against; its copy is another;
    # the fresh rounds' winner is the selection's candidate, not traced again.
    assert models["fp32"] is runner.timing_model()[0]
    assert models["null"] is not models["fp32"]
    assert models["best"] is models["c0"] and models["c0"] is not models["fp32"]
    # TensorFlow's graph rewrite: its trial's model, traced under the rewrite, is the one
    # the fresh rounds time.
    executor.run_trial(None, Budget(steps=10), peer=GRAPH_REWRITE)
    kept = runner.traced_models[(False, "null")].model
    executor.confirm([("fp32", fp32), (GRAPH_REWRITE, None)], [[GRAPH_REWRITE, "fp32"]], 2)
    assert runner.timed_cache[(GRAPH_REWRITE, "null", 2)].model is kept


def test_a_group_that_goes_non_finite_says_so(tmp_path):
    with InProcess(load_model_file(MODELS / "nan_in_bf16.py"), tmp_path) as executor:
        got = executor.numerics([("bf16", Policy(default="mixed_bfloat16"))])["bf16"]
    assert got["gradient_error"] is None
    assert "non-finite" in got["problem"]


def test_a_gradient_that_overflows_only_the_initial_loss_scale_is_not_a_pitfall(tmp_path):
    import numpy as np

    from precsearch.backend import current
    from precsearch.engine.problem import Problem

    float16 = Policy(default="mixed_float16")
    problem = Problem(load_model_file(MODELS / "attention_scaled.py"))
    model = problem.model_for(problem.normalise(float16), seed=0)
    x, y = problem.first_batch(32)
    # The premise: at 2**15 the scaled gradient overflows float16; at 2**8 it does not.
    for scale, finite in ((2.0**15, False), (2.0**8, True)):
        _, grads = current().gradients(model, x, y, scale)
        assert all(np.isfinite(g).all() for g in grads) is finite
    # Dynamic loss scaling skips those steps and halves the scale: no pitfall (it was
    # pinned float32 when read at 2**15 alone), and close to FP32 at the scale reached.
    with InProcess(load_model_file(MODELS / "attention_scaled.py"), tmp_path) as executor:
        got = executor.numerics([("f16", float16)])["f16"]
        assert got["gradient_error"] is not None and got["gradient_error"] < 0.05, got
        # A backward pass that overflows at every scale down to 1 still breaks (the
        # guard calls a scale below 1 collapsed).
    with InProcess(load_model_file(MODELS / "overflowing_gradient.py"), tmp_path) as executor:
        broken = executor.numerics([("f16", float16)])["f16"]
    assert broken["gradient_error"] is None


def test_a_dtype_is_ruled_out_only_when_it_loses_alone_and_together(mlp):
    _, space = mlp
    slow, fast, even = speed(0.5, 0.45, 0.55), speed(1.3, 1.2, 1.4), speed(1.0, 0.9, 1.1)
    both_slow = record({"dtype:hidden": slow, "dtype:hidden2": fast}, together=slow)
    assert ruled_out(both_slow) == {"dtype:hidden": ["bfloat16"]}
    # Slower alone, but all groups together are not: the casts at its edges may be
    # what it lost to, so it stays in the search.
    assert ruled_out(record({"dtype:hidden": slow, "dtype:hidden2": fast}, together=even)) == {}
    params = {"dtype:hidden": "bfloat16", "dtype:hidden2": "float32", "batch_size": 32}
    assert rejection(both_slow, params).startswith("ruled out by the probes: hidden in bfloat16")
    assert rejection(both_slow, {**params, "dtype:hidden": "float32"}) == ""
    assert rejection(None, params) == ""
    # The cost model: a group alone is its probe, all of them the all-groups probe (not
    # the product, 0.65: two low groups need no casts between them)...
    assert predicted(both_slow, params) == 0.5
    assert predicted(both_slow, {**params, "dtype:hidden2": "bfloat16"}) == pytest.approx(0.5)
    assert predicted(both_slow, {"dtype:hidden": "float32"}) == 1.0
    # ... without an all-groups probe the product; between, the interaction spread evenly:
    # 2 of 3 groups get half of it (all 0.4 against a product of 0.8).
    assert predicted(record({"dtype:hidden": slow, "dtype:hidden2": fast}, None),
                     {**params, "dtype:hidden2": "bfloat16"}) == pytest.approx(0.65)  # fmt: skip
    one, lower = speed(1.0, 0.9, 1.1), speed(0.8, 0.7, 0.9)
    three = record(
        {"dtype:a": one, "dtype:b": one, "dtype:c": lower}, together=speed(0.4, 0.3, 0.5)
    )
    two = {"dtype:a": "bfloat16", "dtype:b": "bfloat16", "dtype:c": "float32"}
    assert predicted(three, two) == pytest.approx(1.0 * 1.0 * (0.4 / 0.8) ** 0.5)
    # The predicted best: the faster group alone, at the user's batch size.
    best = predicted_best(both_slow, space)
    assert best["dtype:hidden2"] == "bfloat16" and best["dtype:hidden"] == "float32"
    assert best["batch_size"] == dict(space.baselines())["fp32"]["batch_size"]
    # No group faster, or the faster one non-finite: nothing to enqueue.
    assert predicted_best(record({"dtype:hidden": slow}, None), space) is None
    assert predicted_best(record({"dtype:hidden2": fast}, None, error=None), space) is None


def test_xla_is_ruled_out_like_a_dtype_and_predicted_with_it(mlp):
    _, space = mlp
    slow, fast = speed(0.3, 0.28, 0.32), speed(1.4, 1.3, 1.5)
    fp32 = dict(dict(space.baselines())["fp32"])
    made = record({"dtype:hidden": fast}, None)
    made["probes"][f"{XLA}=True"] = {"param": XLA, "dtype": "True", "speed": slow,
                                     "numerics": {}}  # fmt: skip
    assert ruled_out(made) == {XLA: ["True"]}
    with_xla = {**fp32, XLA: True, "batch_size": 64}
    assert rejection(made, with_xla) == (
        "ruled out by the probes: XLA alone 0.30x (0.28-0.32) of FP32's speed"
    )
    assert rejection(made, fp32) == ""
    # A rejected trial's speedup is the probes' prediction, XLA's part included.
    assert predicted(made, {**with_xla, "dtype:hidden": "bfloat16"}) == pytest.approx(1.4 * 0.3)
    assert predicted(made, fp32) == 1.0
    assert any(line.startswith("XLA: 0.30x") and line.endswith("ruled out")
               for line in probe_lines(made))  # fmt: skip
    # Where XLA is faster, the predicted best takes it, even with every group in FP32.
    made["probes"][f"{XLA}=True"]["speed"] = fast
    made["probes"]["dtype:hidden=bfloat16"]["speed"] = slow
    assert ruled_out(made) == {"dtype:hidden": ["bfloat16"]}
    assert predicted_best(made, space) == {**fp32, XLA: True}


def test_a_study_answers_what_the_probes_ruled_out_without_running_it(tmp_path):
    """Made-up probes stored in a study (the measuring is tested above), which then
    resumes: the search honours them, runs the global recipe anyway, and explains."""
    options = SearchOptions(
        trials=0, steps=20, out=str(tmp_path), study_name="ruled", group_by="layer",
        dtypes="float32,bfloat16", in_process=True, confirm_top=0, sampler="random",
        dimensions=["layer_dtypes"],
    )  # fmt: skip
    study = run_study(MODELS / "mlp.py", options).study  # made, baselines enqueued
    assert "probes" not in study.user_attrs  # PRECSEARCH_PROBE_TIME=0 (conftest)
    slow, fast = speed(0.5, 0.45, 0.55), speed(1.3, 1.2, 1.4)
    made_up = record({"dtype:hidden": slow, "dtype:hidden2": fast}, together=slow)
    study.set_user_attr("probes", made_up)
    options.trials = 4
    run = run_study(MODELS / "mlp.py", options)
    trials = run.study.trials
    rejected = [t for t in trials if t.user_attrs.get("probe_rejected")]
    ran = [t for t in trials if not t.user_attrs.get("probe_rejected")]
    for t in rejected:
        assert t.params["dtype:hidden"] == "bfloat16"
        assert t.user_attrs["status"] == "too_slow"
        assert t.user_attrs["reason"].startswith("ruled out by the probes")
        assert t.constraints["fidelity"] > 0 and t.values[1] == math.inf
    # FP32 and the global recipe ran: the global recipe is the peer the answer is
    # shown against, whatever the probes say.
    labels = {t.user_attrs.get("baseline"): t for t in ran}
    assert labels["global_bfloat16"].user_attrs["result"]["block_ratios"]
    assert "probe_rejected" not in labels["global_bfloat16"].user_attrs
    # The probes' predicted best ran after them; then the space held nothing the
    # probes allow that was not measured (4 policies: 2 ruled out, 3 run with FP32).
    (best,) = [t for t in ran if t.user_attrs.get("probe") == "predicted best"]
    assert (best.params["dtype:hidden"], best.params["dtype:hidden2"]) == ("float32", "bfloat16")
    assert len([t for t in ran if "duplicate_of" not in t.user_attrs]) == 3
    assert any("answered by the probes" in note for note in run.notes) == bool(rejected)
    # The explanation quotes the probes; the summary checks the cost model.
    why = why_lines(group_effects(run.study), {}, made_up)
    (hidden,) = [line for line in why if line.startswith("hidden:")]
    assert "the probe, bfloat16 alone: 0.50x (0.45-0.55)" in hidden and "ruled out" in hidden
    summary = probe_summary(run.study)
    assert summary[0] == "3 probes, 5 timed rounds, 1 s before the search"
    assert summary[1].startswith("hidden in bfloat16: 0.50x (0.45-0.55)")
    assert summary[1].endswith("; ruled out")
    # Two trials in low precision at the user's settings: the global recipe (predicted
    # 0.5 x 1.3) and the predicted best (1.3), each against its own timed blocks.
    assert summary[-1].startswith("cost model (the product of the probes' ratios) against 2")


def test_the_cost_model_is_checked_against_trials_at_the_users_settings():
    study = optuna.create_study(directions=["maximize", "minimize"])
    probes = record({"dtype:a": speed(2.0, 1.9, 2.1), "dtype:b": speed(0.5, 0.4, 0.6)}, None)
    study.set_user_attr("probes", probes)
    info = ModelInfo(
        source="m.py", fingerprint="f", model_name="m", model_class="Functional", params=1,
        layers=[], output_layers=[], batch_size=32, train_examples=64, jit_compile=False,
    )  # fmt: skip
    set_study_record(study, "model_info", info)
    dist = optuna.distributions.CategoricalDistribution(["float32", "bfloat16"])
    cases = [  # (a, b, batch size, measured): predicted 2.0, 0.5, 1.0 (FP32: left out)
        ("bfloat16", "float32", 32, 2.2),
        ("float32", "bfloat16", 32, 0.5),
        ("bfloat16", "bfloat16", 32, 0.8),
        ("float32", "float32", 32, 1.0),
        ("bfloat16", "float32", 64, 3.0),  # another batch size: not precision alone
    ]
    for a, b, batch, measured in cases:
        study.add_trial(
            optuna.trial.create_trial(
                params={"dtype:a": a, "dtype:b": b},
                distributions={"dtype:a": dist, "dtype:b": dist},
                values=[measured, 0.0],
                user_attrs={
                    "result": {
                        "block_ratios": {"estimate": measured},
                        "policy": {"batch_size": batch, "jit_compile": False},
                    }
                },
            )  # fmt: skip
        )
    got = accuracy(study)
    assert [r["trial"] for r in got["trials"]] == [0, 1, 2]
    assert got["within_15"] == 2  # 2.0 vs 2.2 (9%), 0.5 vs 0.5; 1.0 vs 0.8 is 25% off
    assert got["max_error"] == pytest.approx(0.25)


def test_bad_probe_input_is_one_line_and_exit_2(tmp_path):
    missing = run_cli("probe", str(tmp_path / "none.py"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    negative = run_cli("run", str(MODELS / "mlp.py"), "--probe-time", "-1")
    assert negative.returncode == 2 and "--probe-time" in negative.stderr


@pytest.mark.slow
def test_the_probe_command_prints_each_group(tmp_path):
    done = run_cli("probe", str(MODELS / "mlp.py"), "--probe-time", "1",
                   "--dtypes", "float32,bfloat16")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Each layer group alone in low precision, and XLA, against FP32")
    # By layer class (the default): the MLP's hidden Dense layers are one group.
    assert len(lines) == 3 and lines[1].startswith("  Dense in bfloat16: ")
    assert lines[2].startswith("  XLA: ") and "the same dtypes as FP32" in lines[2]


@pytest.mark.slow
def test_the_probes_record_and_say_each_classic_pitfall_of_a_group(tmp_path):
    # tests/models/classic_pitfalls.py: one layer per pitfall (test_doctor.py's CLASSIC).
    import io
    from types import SimpleNamespace

    from precsearch.study.probe import probe_study

    by_layer = SpaceOptions(group_by="layer", dtypes=["float32", "float16"])
    with InProcess(load_model_file(MODELS / "classic_pitfalls.py"), tmp_path) as executor:
        # Only the dtypes: the determinant does not compile with XLA on a CPU.
        space = SearchSpace(executor.model_info.to_dict(), by_layer, ["layer_dtypes"])
        study = optuna.create_study(directions=["maximize", "minimize"])
        progress = io.StringIO()
        options = SimpleNamespace(probe_time=0.5, seed=0)
        stored, _ = probe_study(study, executor, space, options, block=2, progress=progress)
    blamed = {(line.split(" ")[0], line.split(" in ")[1].split(":")[0])
              for line in stored["pitfalls"]}  # fmt: skip
    assert blamed == {("naive_softmax", "float16"), ("standardize", "float16"),
                      ("mean_by_sum", "float16"), ("gram_det", "float16")}  # fmt: skip
    said = progress.getvalue().splitlines()
    for line in stored["pitfalls"]:
        assert f"  pitfall: {line}" in said
    # Each probe records the pitfalls of its own group's layers, a broken one too.
    entries = {**stored["probes"], **stored["broken"]}
    for layer in ("naive_softmax", "standardize", "mean_by_sum", "gram_det"):
        (line,) = entries[f"dtype:{layer}=float16"]["numerics"]["pitfalls"]
        assert line.startswith(f"{layer} (")
    assert "error" in entries["dtype:gram_det=float16"]["numerics"]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["in_process", "worker"])
def test_a_probe_that_cannot_be_timed_is_its_own_finding_and_the_others_go_on(tmp_path, where):
    # tests/models/no_xla.py: a determinant, which XLA cannot compile on a CPU. Its XLA
    # probe's timed rounds raised and took the whole probe command (every probe) down.
    import contextlib
    import io
    from types import SimpleNamespace

    from precsearch.pins import pin_lines, pinned_reason
    from precsearch.stored import study_record
    from precsearch.study.probe import probe_study
    from precsearch.study.worker import Worker

    model = MODELS / "no_xla.py"
    made = InProcess(load_model_file(model), tmp_path) if where == "in_process" else None
    with made or contextlib.closing(Worker(model, tmp_path)) as executor:
        executor.start()
        # The whole model one group: a dtype probe and XLA's (offered by default).
        one_group = SpaceOptions(group_by="global", dtypes=["float32", "bfloat16"])
        space = SearchSpace(executor.model_info.to_dict(), one_group)
        study = optuna.create_study(directions=["maximize", "minimize"])
        progress = io.StringIO()
        options = SimpleNamespace(probe_time=0.5, seed=0)
        stored, notes = probe_study(study, executor, space, options, block=2, progress=progress)
    assert stored is not None and not any("without them" in note for note in notes)
    # The dtype probe measured beside FP32; XLA's is a finding with its reason.
    assert [label for label, *_ in probe_params(space)] == ["dtype=bfloat16", f"{XLA}=True"]
    assert stored["probes"]["dtype=bfloat16"]["speed"]["rounds"] >= 5
    (xla,) = stored["broken"].values()
    assert xla["param"] == XLA and "MatrixDeterminant" in xla["untimed"]
    assert xla["untimed"].startswith("error: InvalidArgumentError")
    # Pinned off: a trial with XLA is answered from the pins, with the reason.
    pins = study_record(study, "pins")
    fp32 = dict(dict(space.baselines())["fp32"])
    reason = pinned_reason(pins, {**fp32, XLA: True})
    assert reason.startswith("XLA: error: ") and reason.endswith("(not compilable here)")
    assert pinned_reason(pins, fp32) == ""
    (line,) = pin_lines(pins, {})
    assert line.startswith("XLA stays off: XLA cannot run the model here (error: ")
    assert f"pinned: {line}" in progress.getvalue().splitlines()
