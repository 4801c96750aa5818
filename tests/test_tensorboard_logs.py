"""TensorBoard runs of a study, read back with TensorBoard's own event reader."""

from __future__ import annotations

import optuna
import pytest
from helpers import MODELS
from helpers import tensorboard_scalars as scalars
from optuna.distributions import CategoricalDistribution

from precsearch import LossScale, Policy
from precsearch.model_file import load_model_file
from precsearch.records import Budget
from precsearch.results.tensorboard_logs import METRICS, TensorBoardLog, _Run
from precsearch.study.storage import open_storage, open_study


def hparams_session(folder):
    """A run's events, HParams experiment and hparam values, as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata as hp

    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    content = events.PluginTagToContent(hp.PLUGIN_NAME)
    tags = {hp.EXPERIMENT_TAG, hp.SESSION_START_INFO_TAG, hp.SESSION_END_INFO_TAG}
    assert tags <= set(content)
    experiment = hp.parse_experiment_plugin_data(content[hp.EXPERIMENT_TAG])
    start = hp.parse_session_start_info_plugin_data(content[hp.SESSION_START_INFO_TAG])
    values = {name: getattr(v, v.WhichOneof("kind")) for name, v in start.hparams.items()}
    return events, experiment, values


@pytest.mark.slow
def test_every_trial_and_fp32_reference_run_is_a_tensorboard_run(tiny_study):
    folder, first, _ = tiny_study
    assert "tensorboard:" in first.stdout
    runs = folder / "tensorboard"
    fp32 = scalars(runs / "trial_0000_fp32")
    timed = {"step_ms_by_timed_call/fp32", "step_ms_by_timed_call/candidate"}
    assert {"loss", "speedup", "fidelity_gap", "feasible", *timed} <= set(fp32)
    assert not [tag for tag in fp32 if tag.startswith("gradient_norm")]  # one table instead
    # Loss by samples seen: the tiny model's batch is 32, its budget 20 steps (a trial's
    # curve goes on for its time to quality, up to 1.5 budgets).
    steps = [e.step for e in fp32["loss"]]
    assert steps[:20] == [32 * (i + 1) for i in range(20)] and steps[-1] <= 1.5 * 20 * 32
    assert all(e.value > 0 for e in fp32["step_ms_by_timed_call/candidate"])
    assert (runs / "trial_0001_global_bfloat16").is_dir()
    seeds = sorted((runs / "fp32_bs32_20calls").iterdir())
    # Seed 0 is the trials'; seeds 1..n the references (the tiny study's --fp32-runs 3).
    assert [s.name for s in seeds] == ["seed_1", "seed_2", "seed_3"]

    band = [scalars(s)["loss"] for s in seeds]
    assert all(len(losses) == 20 for losses in band)
    # Seeds differ in data order only: different curves from the same start.
    assert band[0][-1].value != band[1][-1].value
    # The HParams dashboard compares the run's trials by the study's own parameters.
    _, experiment, values = hparams_session(runs / "trial_0000_fp32")
    assert values["run"] == "fp32" and values["dtype:Dense"] == "float32"  # the baseline
    study = open_study("tiny", open_storage(None, folder))
    assert {info.name for info in experiment.hparam_infos} >= {"run", *study.trials[0].params}


@pytest.mark.slow
def test_a_float16_trial_logs_its_loss_scale_and_is_written_once(tmp_path):
    from precsearch.engine.runner import Runner

    runner = Runner(load_model_file(MODELS / "mlp.py"), budget=Budget(steps=12, stop_slow=False))
    result = runner.try_policy(
        Policy(default="mixed_float16", loss_scale=LossScale(initial_scale=2.0**24))
    )
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.add_trial(
        optuna.trial.create_trial(values=[1.0, 0.0], user_attrs={"result": result.to_dict(256)})
    )
    log = TensorBoardLog(tmp_path)
    log.write_all(study)
    run = tmp_path / "trial_0000"
    logged = scalars(run)
    scales = [e.value for e in logged["loss_scale"]]
    assert scales == result.numerics["loss_scale"]
    assert min(scales) < 2.0**24  # overflowing steps halved it, as recorded
    files = sorted(run.iterdir())
    assert not log.write_trial(study.trials[0]) and sorted(run.iterdir()) == files


def a_study_with_one_trial_and_one_reference() -> optuna.Study:
    from precsearch.stored import store_reference

    study = optuna.create_study(directions=["maximize", "minimize"])
    result = {
        "policy": {},
        "curve": {"samples": [32, 64, 96], "loss": [1.0, 0.9, 0.8]},
        "speedup": 1.5,
        "fidelity_gap": 0.1,
        "time_to_quality": {"speedup": 1.25},
        "step_times": {"candidate": [0.002, 0.003], "fp32": [0.004, 0.004]},
        "gradient_norms": {"global": 2.5, "hidden": 2.0, "logits": 1.5},
    }
    trial = optuna.trial.create_trial(
        values=[1.5, 0.1],
        params={"dtype:Dense": "bfloat16", "batch_size": 64},
        distributions={
            "dtype:Dense": CategoricalDistribution(["float32", "bfloat16"]),
            "batch_size": CategoricalDistribution([32, 64]),
        },
        user_attrs={"result": result},
        constraints={"fidelity": -0.9},  # feasible
    )
    study.add_trial(trial)
    reference = {"batch_size": 32, "steps": 3, "curves": [[1.0, 0.9, 0.8]]}
    store_reference(study, "fp32.json", reference)
    return study


@pytest.mark.parametrize("interrupted_at", [1, 12])  # in the trial's run; in the reference's
def test_an_interrupted_run_leaves_no_folder_and_is_written_again(
    tmp_path, monkeypatch, interrupted_at
):
    study = a_study_with_one_trial_and_one_reference()
    add_scalar = _Run.scalar
    calls = []

    def interrupt(self, *args, **kwargs):
        calls.append(args)
        if len(calls) == interrupted_at:
            raise KeyboardInterrupt  # the user's Ctrl-C, in the middle of a run
        return add_scalar(self, *args, **kwargs)

    monkeypatch.setattr(_Run, "scalar", interrupt)
    with pytest.raises(KeyboardInterrupt):
        TensorBoardLog(tmp_path).write_all(study)
    monkeypatch.setattr(_Run, "scalar", add_scalar)
    trial, reference = tmp_path / "trial_0000", tmp_path / "fp32_bs32_3calls" / "seed_0"
    # Complete or absent: the interrupted run has no folder (nor a leftover beside it).
    assert (trial.is_dir(), reference.is_dir()) == (interrupted_at > 11, False)
    assert [p.name for p in tmp_path.rglob("*") if p.name.startswith(".")] == []
    TensorBoardLog(tmp_path).write_all(study)
    assert [e.step for e in scalars(trial)["loss"]] == [32, 64, 96]
    assert [e.value for e in scalars(trial)["speedup"]] == [1.5]
    assert [e.step for e in scalars(reference)["loss"]] == [32, 64, 96]


def test_the_hparams_dashboard_compares_trials_and_references_by_policy(tmp_path):
    """What TensorBoard's HParams plugin reads, through TensorBoard's own loader."""
    from tensorboard.plugins.text import metadata as text

    TensorBoardLog(tmp_path).write_all(a_study_with_one_trial_and_one_reference())

    events, experiment, values = hparams_session(tmp_path / "trial_0000")
    assert values == {"run": "trial", "dtype:Dense": "bfloat16", "batch_size": 64.0}
    infos = {info.name: info for info in experiment.hparam_infos}
    assert sorted(infos["dtype:Dense"].domain_discrete) == ["bfloat16", "float32"]
    assert [m.name.tag for m in experiment.metric_infos] == list(METRICS)
    logged = {
        tag: [e.value for e in points] for tag, points in scalars(tmp_path / "trial_0000").items()
    }
    assert logged["speedup"] == [1.5] and logged["time_to_quality"] == [1.25]
    assert logged["feasible"] == [1.0]  # its constraint was met
    assert logged["step_ms_by_timed_call/candidate"] == pytest.approx([2.0, 3.0])
    assert events.SummaryMetadata("gradient_norms").plugin_data.plugin_name == text.PLUGIN_NAME
    table = events.Tensors("gradient_norms")[0].tensor_proto.string_val[0].decode()
    assert "| hidden | 2 |" in table and "| global | 2.5 |" in table

    _, experiment, reference = hparams_session(tmp_path / "fp32_bs32_3calls" / "seed_0")
    assert reference == {"run": "fp32 reference", "batch_size": 32.0, "jit_compile": False,
                         "seed": 0.0, "dtype:Dense": "float32"}  # fmt: skip
    # The dashboard shows the experiment of whichever run it reads first: a reference's
    # has the study's parameters as columns too.
    infos = {info.name: info for info in experiment.hparam_infos}
    assert sorted(infos["dtype:Dense"].domain_discrete) == ["bfloat16", "float32"]
