"""TensorBoard event files of a study: one run per trial and per FP32 reference run.

Written by the study process from what each trial recorded and stored (no second
training pass, and no TensorFlow: TensorBoard's own numpy-only writer), under
``studies/<name>/tensorboard/``:

* ``trial_0003`` (``trial_0000_fp32``, ``trial_0001_global_bfloat16`` for the baselines):
  ``loss`` by samples seen — the x axis every run shares, since trials are judged at
  equal samples — ``loss_scale`` by samples under dynamic loss scaling,
  ``step_ms/candidate`` and ``step_ms/fp32`` for every timed call in block order,
  ``gradient_norm/global`` and ``gradient_norm/<layer>`` after training, and
  ``speedup`` and ``fidelity_gap`` at the budget's last sample;
* ``fp32_bs32_20calls/seed_0``, ``seed_1``, ... (``fp32_bs32_xla_20calls`` under XLA):
  the FP32 reference runs at a batch size and a number of training calls (the band every
  trial is judged against), ``loss`` by samples seen.

Each run's folder is written whole or not at all: one that an interrupted study left
unwritten is written by the next ``precsearch run`` or ``report``.

``tensorboard --logdir studies/<name>/tensorboard`` overlays every trial on FP32.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from precsearch.files import folder_atomic
from precsearch.study.storage import stored_references

__all__ = ["TensorBoardLog", "run_name"]


def run_name(trial: Any) -> str:
    """``trial_0007``, or ``trial_0000_fp32`` for a baseline trial."""
    label = trial.user_attrs.get("baseline")
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
        result = trial.user_attrs.get("result")
        if not result or "duplicate_of" in trial.user_attrs:
            return False
        folder = self.directory / run_name(trial)
        if folder.exists():
            return False
        with _writer(folder) as write:
            curve = result.get("curve") or {}
            samples = curve.get("samples") or []
            for seen, loss in zip(samples, curve.get("loss") or [], strict=False):
                write("loss", loss, seen)
            # One scale per call, like the loss, and down-sampled the same way.
            scales = (result.get("numerics") or {}).get("loss_scale") or []
            for seen, scale in zip(samples, scales, strict=False):
                write("loss_scale", scale, seen)
            for side, times in (result.get("step_times") or {}).items():
                for i, seconds in enumerate(times):
                    write(f"step_ms/{side}", seconds * 1e3, i)
            end = samples[-1] if samples else 0
            for layer, norm in (result.get("gradient_norms") or {}).items():
                write(f"gradient_norm/{layer}", norm, end)
            for name in ("speedup", "fidelity_gap"):
                write(name, result.get(name), end)
        return True

    def write_references(self, study: Any) -> None:
        """The study's stored FP32 reference runs, one run per data-order seed."""
        for ref in stored_references(study).values():
            xla = "_xla" if ref.get("jit_compile") else ""
            group = self.directory / f"fp32_bs{ref['batch_size']}{xla}_{ref['steps']}calls"
            per = ref.get("samples_per_call") or ref["batch_size"]
            curves = ref.get("curves") or []
            for seed, losses in zip(ref.get("seeds") or range(len(curves)), curves, strict=False):
                folder = group / f"seed_{seed}"
                if folder.exists():
                    continue
                with _writer(folder) as write:
                    for i, loss in enumerate(losses):
                        write("loss", loss, per * (i + 1))


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


@contextmanager
def _writer(folder: Path) -> Iterator[Callable[[str, float | None, int], None]]:
    """``write(tag, value, step)`` into a new run folder, which appears when the block
    ends without error; ``None`` values are skipped."""
    _without_tensorflow()
    from tensorboard.summary import Writer

    with folder_atomic(folder) as partial:
        writer = Writer(str(partial))

        def write(tag: str, value: float | None, step: int) -> None:
            if value is not None:
                writer.add_scalar(tag, float(value), step=int(step))

        try:
            yield write
        finally:
            writer.close()
