"""TensorBoard runs of a study, read back with TensorBoard's own event reader."""

from __future__ import annotations

import optuna
import pytest
from helpers import MODELS
from helpers import tensorboard_scalars as scalars

from precsearch import LossScale, Policy
from precsearch.loaders import load_model_file
from precsearch.records import Budget
from precsearch.results.tensorboard_logs import TensorBoardLog


@pytest.mark.slow
def test_every_trial_and_fp32_reference_run_is_a_tensorboard_run(tiny_study):
    folder, first, _ = tiny_study
    assert "tensorboard:" in first.stdout
    runs = folder / "tensorboard"
    fp32 = scalars(runs / "trial_0000_fp32")
    assert {"loss", "step_ms/fp32", "step_ms/candidate", "speedup", "fidelity_gap"} <= set(fp32)
    assert {"gradient_norm/global", "gradient_norm/hidden", "gradient_norm/logits"} <= set(fp32)
    # Loss by samples seen: the tiny model's batch is 32, its budget 20 steps (a trial's
    # curve goes on for its time to quality, up to 1.5 budgets).
    steps = [e.step for e in fp32["loss"]]
    assert steps[:20] == [32 * (i + 1) for i in range(20)] and steps[-1] <= 1.5 * 20 * 32
    assert all(e.value > 0 for e in fp32["step_ms/candidate"])
    assert (runs / "trial_0001_global_bfloat16").is_dir()
    seeds = sorted((runs / "fp32_bs32_20calls").iterdir())
    assert [s.name for s in seeds] == ["seed_1", "seed_2", "seed_3"]  # seed 0 is the trials'

    band = [scalars(s)["loss"] for s in seeds]
    assert all(len(losses) == 20 for losses in band)
    # Seeds differ in data order only: different curves from the same start.
    assert band[0][-1].value != band[1][-1].value


@pytest.mark.slow
def test_a_float16_trial_logs_its_loss_scale_and_is_written_once(tmp_path):
    from precsearch.engine.runner import Runner

    runner = Runner(load_model_file(MODELS / "mlp.py"), budget=Budget(steps=12, stop_slow=False))
    result = runner.run_trial(
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
    from precsearch.study.storage import SharedReferences

    study = optuna.create_study(directions=["maximize", "minimize"])
    result = {
        "curve": {"samples": [32, 64, 96], "loss": [1.0, 0.9, 0.8]},
        "speedup": 1.5,
        "fidelity_gap": 0.1,
    }
    study.add_trial(optuna.trial.create_trial(values=[1.5, 0.1], user_attrs={"result": result}))
    reference = {"batch_size": 32, "steps": 3, "curves": [[1.0, 0.9, 0.8]]}
    study.set_user_attr(SharedReferences.PREFIX + "fp32.json", reference)
    return study


@pytest.mark.parametrize("interrupted_at", [1, 6])  # in the trial's run; in the reference's
def test_an_interrupted_run_leaves_no_folder_and_is_written_again(
    tmp_path, monkeypatch, interrupted_at
):
    from tensorboard.summary import Writer

    study = a_study_with_one_trial_and_one_reference()
    add_scalar = Writer.add_scalar
    calls = []

    def interrupt(self, *args, **kwargs):
        calls.append(args)
        if len(calls) == interrupted_at:
            raise KeyboardInterrupt  # the user's Ctrl-C, in the middle of a run
        return add_scalar(self, *args, **kwargs)

    monkeypatch.setattr(Writer, "add_scalar", interrupt)
    with pytest.raises(KeyboardInterrupt):
        TensorBoardLog(tmp_path).write_all(study)
    monkeypatch.setattr(Writer, "add_scalar", add_scalar)
    trial, reference = tmp_path / "trial_0000", tmp_path / "fp32_bs32_3calls" / "seed_0"
    # Complete or absent: the interrupted run has no folder (nor a leftover beside it).
    assert (trial.is_dir(), reference.is_dir()) == (interrupted_at > 5, False)
    assert [p.name for p in tmp_path.rglob("*") if p.name.startswith(".")] == []
    TensorBoardLog(tmp_path).write_all(study)
    assert [e.step for e in scalars(trial)["loss"]] == [32, 64, 96]
    assert [e.value for e in scalars(trial)["speedup"]] == [1.5]
    assert [e.step for e in scalars(reference)["loss"]] == [32, 64, 96]
