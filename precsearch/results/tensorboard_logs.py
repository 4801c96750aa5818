"""TensorBoard event files of a study: one run per trial and per FP32 reference run.

Written by the study process from what each trial recorded and stored (no second
training pass, and no TensorFlow: TensorBoard's own numpy-only protos and event writer),
under ``studies/<name>/tensorboard/``. Every tag has one x axis, named in it or here:

* ``trial_0003`` (``trial_0000_fp32``, ``trial_0001_global_bfloat16`` for the baselines):
  ``loss`` by samples seen — the x axis every run shares, since trials are judged at
  equal samples — ``loss_scale`` by samples under dynamic loss scaling;
  ``step_ms_by_timed_call/candidate`` and ``.../fp32``, one point per timed call in
  block order; ``speedup``, ``fidelity_gap``, ``time_to_quality`` (FP32's time to the
  target over the trial's) and ``feasible`` (1 or 0) at the budget's last sample; the
  gradient norms per layer after training as one table (the Text dashboard,
  ``gradient_norms``); and the trial's parameters as hparams, those four figures its
  metrics, so that the HParams dashboard compares the whole study;
* ``fp32_bs32_20calls/seed_1``, ``seed_2``, ... (``fp32_bs32_xla_20calls`` under XLA):
  the FP32 reference runs at a batch size and a number of training calls (the band every
  trial is judged against), ``loss`` by samples seen, with hparams ``run`` (``fp32
  reference``), ``batch_size``, ``jit_compile``, ``seed`` and every dtype ``float32``.

Each run's folder is written whole or not at all: one that an interrupted study left
unwritten is written by the next ``precsearch run`` or ``report``.

``tensorboard --logdir studies/<name>/tensorboard`` overlays every trial on FP32.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from precsearch.files import folder_atomic
from precsearch.stored import (
    baseline_of,
    is_feasible,
    is_repeat,
    result_of,
    stored_references,
)

__all__ = ["METRICS", "TensorBoardLog", "run_name"]

# The HParams dashboard's metrics: scalar tags every trial run ends with.
METRICS = {
    "speedup": "speedup vs FP32 (the trial's own timed blocks)",
    "fidelity_gap": "fidelity gap (noise units; feasible at most the tolerance)",
    "time_to_quality": "time to FP32's quality, FP32's over the trial's",
    "feasible": "1 if the trial trained like FP32 within the tolerance",
}


def run_name(trial: Any) -> str:
    """``trial_0007``, or ``trial_0000_fp32`` for a baseline trial."""
    label = baseline_of(trial)
    return f"trial_{trial.number:04d}" + (f"_{label}" if label else "")


class TensorBoardLog:
    """Writes the event files of a study's finished trials and FP32 references.

    An Optuna callback (``study.optimize(callbacks=[log])``) that writes each trial as
    it ends; :meth:`write_all` catches up on a study's earlier trials. Each run is
    written once, whole (:func:`precsearch.files.folder_atomic`): a folder that exists
    is complete and left alone, and an interrupted one does not exist.

    Args:
        directory: The study's ``tensorboard`` folder.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def __call__(self, study: Any, trial: Any) -> None:
        self.write_trial(trial)
        self.write_references(study)

    def write_all(self, study: Any) -> Path:
        """Every finished trial and every stored reference; return the folder."""
        for trial in study.get_trials(deepcopy=False):
            self.write_trial(trial)
        self.write_references(study)
        return self.directory

    def write_trial(self, trial: Any) -> bool:
        """One trial's run (not for a repeat of a measured policy); whether written."""
        result = result_of(trial)
        if result is None or is_repeat(trial):
            return False
        folder = self.directory / run_name(trial)
        if folder.exists():
            return False
        ends = {
            "speedup": result.speedup,
            "fidelity_gap": result.fidelity_gap,
            "time_to_quality": result.time_to_quality.get("speedup"),
            "feasible": float(is_feasible(trial)),
        }
        hparams = {"run": baseline_of(trial) or "trial", **trial.params}
        with _writer(folder) as run:
            run.hparams(hparams, trial.distributions, f"trial {trial.number}")
            curve = result.curve
            samples = curve.get("samples") or []
            for seen, loss in zip(samples, curve.get("loss") or [], strict=False):
                # A stored non-finite loss reads back as NaN: no point, as before parsing.
                run.scalar("loss", loss if math.isfinite(loss) else None, seen)
            # One scale per call, like the loss, and down-sampled the same way.
            scales = result.numerics.get("loss_scale") or []
            for seen, scale in zip(samples, scales, strict=False):
                run.scalar("loss_scale", scale, seen)
            for side, times in result.step_times.items():
                for i, seconds in enumerate(times):
                    run.scalar(f"step_ms_by_timed_call/{side}", seconds * 1e3, i)
            end = samples[-1] if samples else 0
            norms = result.gradient_norms
            if norms:
                rows = "\n".join(f"| {layer} | {norm:.4g} |" for layer, norm in norms.items())
                run.text("gradient_norms", f"| layer | gradient norm |\n|---|---|\n{rows}", end)
            for name in METRICS:
                run.scalar(name, ends[name], end)
        return True

    def write_references(self, study: Any) -> None:
        """The study's stored FP32 reference runs, one run per data-order seed."""
        # TensorBoard's HParams dashboard takes its columns from the experiment of one
        # run, whichever it reads first (a reference's sorts before the trials'): each
        # reference carries the study's parameters too.
        distributions: dict[str, Any] = {}
        for trial in study.get_trials(deepcopy=False):
            distributions.update(trial.distributions)
        for ref in stored_references(study).values():
            xla = "_xla" if ref.get("jit_compile") else ""
            group = self.directory / f"fp32_bs{ref['batch_size']}{xla}_{ref['steps']}calls"
            per = ref.get("samples_per_call") or ref["batch_size"]
            curves = ref.get("curves") or []
            for seed, losses in zip(ref.get("seeds") or range(len(curves)), curves, strict=False):
                folder = group / f"seed_{seed}"
                if folder.exists():
                    continue
                with _writer(folder) as run:
                    hparams = {
                        "run": "fp32 reference",
                        "batch_size": ref["batch_size"],
                        "jit_compile": bool(ref.get("jit_compile")),
                        "seed": seed,
                        **{name: "float32" for name in distributions if name.startswith("dtype")},
                    }
                    run.hparams(hparams, distributions, f"{group.name}/seed_{seed}")
                    for i, loss in enumerate(losses):
                        run.scalar("loss", loss, per * (i + 1))


def _without_tensorflow() -> None:
    """Make TensorBoard's writer use its own TensorFlow stub in this process.

    Its protos are made through ``tensorboard.compat.tf``, which imports TensorFlow when
    it is installed (6 s, and its start-up lines among the progress lines) unless a
    module ``tensorboard.compat.notf`` exists: TensorBoard's own switch for that.
    Where TensorFlow is loaded already (a notebook's in-process study) nothing changes.
    """
    import sys
    import types

    if "tensorflow" not in sys.modules:
        sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("notf"))


class _Run:
    """One run's event file: scalars, text and HParams data as TensorBoard writes them,
    built from TensorBoard's protos (no TensorFlow)."""

    def __init__(self, folder: Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.events = EventFileWriter(str(folder))

    def _emit(self, tag: str, tensor: Any, metadata: Any, step: int) -> None:
        from tensorboard.compat.proto import event_pb2

        event = event_pb2.Event(wall_time=time.time(), step=int(step))
        event.summary.value.add(tag=tag, tensor=tensor, metadata=metadata)
        self.events.add_event(event)

    def scalar(self, tag: str, value: float | None, step: int) -> None:
        """A point of the scalars dashboard; ``None`` is skipped."""
        if value is None:
            return
        from tensorboard.compat.proto import summary_pb2
        from tensorboard.plugins.scalar import metadata
        from tensorboard.util import tensor_util

        meta = metadata.create_summary_metadata(display_name=tag, description="")
        meta.data_class = summary_pb2.DataClass.DATA_CLASS_SCALAR
        self._emit(tag, tensor_util.make_tensor_proto(float(value)), meta, step)

    def text(self, tag: str, markdown: str, step: int) -> None:
        """A Markdown text (tables render) on the Text dashboard."""
        from tensorboard.compat.proto import summary_pb2
        from tensorboard.plugins.text import metadata
        from tensorboard.util import tensor_util

        meta = metadata.create_summary_metadata(display_name=tag, description="")
        meta.data_class = summary_pb2.DataClass.DATA_CLASS_TENSOR
        self._emit(tag, tensor_util.make_tensor_proto(markdown), meta, step)

    def hparams(self, values: dict[str, Any], distributions: dict[str, Any], group: str) -> None:
        """The run as one HParams session: the experiment (every hparam with its choices,
        the :data:`METRICS`), the run's values, and its end."""
        from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2, summary_v2
        from tensorboard.plugins.hparams import metadata as hp

        names = {"run": None, "seed": None, "batch_size": None, "jit_compile": None}
        names.update({name: d for name, d in distributions.items()})
        infos = [summary_v2.HParam(name, _domain(names[name])) for name in names]
        metrics = [summary_v2.Metric(tag, description=text) for tag, text in METRICS.items()]
        values = {k: _hparam_value(v) for k, v in values.items()}
        summaries = [
            summary_v2.hparams_config_pb(infos, metrics),
            summary_v2.hparams_pb(values, trial_id=group),
        ]
        end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS)
        meta = hp.create_summary_metadata(plugin_data_pb2.HParamsPluginData(session_end_info=end))
        for summary in summaries:
            for value in summary.value:
                self._emit(value.tag, value.tensor, value.metadata, 0)
        self._emit(hp.SESSION_END_INFO_TAG, hp.NULL_TENSOR, meta, 0)

    def close(self) -> None:
        self.events.close()


def _hparam_value(value: Any) -> bool | float | str:
    return value if isinstance(value, bool | int | float | str) else str(value)


def _domain(distribution: Any) -> Any:
    """An hparam's choices (an Optuna categorical's), where they are of one type."""
    from tensorboard.plugins.hparams import summary_v2

    choices = [_hparam_value(c) for c in getattr(distribution, "choices", ())]
    kinds = {bool if isinstance(c, bool) else float if isinstance(c, int | float) else str
             for c in choices}  # fmt: skip
    if not choices or len(kinds) > 1:
        return None
    return summary_v2.Discrete([float(c) if kinds == {float} else c for c in choices])


@contextmanager
def _writer(folder: Path) -> Iterator[_Run]:
    """A :class:`_Run` writing into a new run folder, which appears when the block ends
    without error."""
    _without_tensorflow()
    with folder_atomic(folder) as partial:
        run = _Run(partial)
        try:
            yield run
        finally:
            run.close()
