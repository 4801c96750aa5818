"""The notebook API: :func:`search`, :func:`load_study` and their :class:`SearchResult`."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any

from precsearch.app.files import export_winner
from precsearch.app.run import make_executor, run_study
from precsearch.errors import UserInputError
from precsearch.model_file import spec_from_callables
from precsearch.policy import Policy
from precsearch.records import Confirmation, TrialResult
from precsearch.results.export import best_policy_with_manifest, trials_frame, write_trials_csv
from precsearch.results.report import SPEED_LEGEND, pareto_rows, trials_text
from precsearch.stored import confirmation_of, fp32_result, study_record
from precsearch.study.options import DEFAULT_EXPORTERS, SearchOptions, stored_options
from precsearch.study.storage import find_study

__all__ = ["SearchResult", "load_study", "search"]


class SearchResult:
    """A study's results, for notebooks: from :func:`search` or :func:`load_study`.

    Attributes:
        study: The Optuna study.
        study_dir: Its folder (policy, SavedModel, trials.csv).
        notes: What the run wanted a person to know.
    """

    def __init__(self, study: Any, study_dir: Path, notes: list[str] | None = None) -> None:
        self.study = study
        self.study_dir = Path(study_dir)
        self.notes = notes or []

    def __repr__(self) -> str:
        best = self.confirmation.verdict if self.confirmation else "not confirmed yet"
        return f"<SearchResult {self.study.study_name!r}: {trials_text(self.study)}; {best}>"

    def _repr_html_(self) -> str:
        """Jupyter's view: the verdict, the Pareto front as a table, and its plot."""
        import html

        from precsearch.results.figures import pareto_svg

        record = self.confirmation
        verdict = record.verdict if record else "not confirmed yet"
        pareto = self.pareto
        table = (
            pareto.to_html(index=False, float_format=lambda v: f"{v:.3g}")
            if len(pareto)
            else "<p>No feasible trial yet: nothing trained like FP32 within the tolerance.</p>"
        )
        return (
            f"<div><b>precsearch study {html.escape(self.study.study_name)}</b>: "
            f"{html.escape(trials_text(self.study))}; {html.escape(verdict)}."
            f"<div style='display:flex;gap:1em;align-items:flex-start'>"
            f"<div>{table}</div>{pareto_svg(self.study)}</div>"
            f"<small>{html.escape(SPEED_LEGEND)}</small><br>"
            f"<small>{html.escape(str(self.study_dir / 'report.html'))}: the whole report"
            "</small></div>"
        )

    def plot(self) -> Any:
        """The interactive Pareto plot (a plotly figure; error bars from the
        confirmation)."""
        from precsearch.results.figures import pareto_figure

        return pareto_figure(self.study)

    def report(self) -> Path:
        """Write ``report.html`` into the study folder and return its path."""
        from precsearch.results.html_report import write_report

        return write_report(self.study, self.study_dir / "report.html")

    @property
    def trials(self) -> Any:
        """Every trial as a pandas DataFrame (the columns of ``trials.csv``)."""
        return trials_frame(self.study)

    @property
    def pareto(self) -> Any:
        """The feasible Pareto front as a pandas DataFrame, fastest first."""
        import pandas as pd

        return pd.DataFrame(pareto_rows(self.study))

    @property
    def confirmation(self) -> Confirmation | None:
        """The confirmation record (``None`` before confirmation)."""
        return confirmation_of(self.study)

    @property
    def best_policy(self) -> Policy | None:
        """The confirmed best :class:`~precsearch.policy.Policy`, manifest filled in
        (``None`` before confirmation)."""
        if not self.confirmation:
            return None
        return best_policy_with_manifest(self.study)

    @property
    def reference(self) -> TrialResult | None:
        """The FP32 baseline trial's result: FP32's speed and loss curve in this study
        (``None`` before it completed)."""
        return fp32_result(self.study)

    def export(
        self, directory: str | os.PathLike[str], exporters: list[str] | None = None
    ) -> dict[str, Path]:
        """Run exporters into a folder: by default ``best_policy.json``,
        ``saved_model/`` and ``trials.csv``.

        A SavedModel already in the study folder is copied; otherwise (say, the study
        came from a shared storage, or another model exporter is named) the best policy
        is trained again for the budget in a worker, with the study's own options, and
        the model exporters run there.
        """
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        if not self.confirmation:
            return {"trials.csv": write_trials_csv(self.study, target / "trials.csv")}
        source = self.study_dir / "saved_model"

        def model_exports(policy: Any, names: list[str]) -> list[str]:
            if names == ["saved_model"] and source.exists():
                destination = target / "saved_model"
                if source.resolve() != destination.resolve():
                    shutil.rmtree(destination, ignore_errors=True)
                    shutil.copytree(source, destination)
                return [str(destination)]
            return self._train_and_export(policy, names, target)

        return export_winner(
            self.study, target, list(exporters or DEFAULT_EXPORTERS), model_exports
        )

    def _train_and_export(self, policy: Any, names: list[str], target: Path) -> list[str]:
        model_file = study_record(self.study, "model_file") or ""
        if not Path(model_file).is_file():
            raise UserInputError(
                f"no SavedModel in {self.study_dir} and the model file {model_file!r} is not "
                "here to train one"
            )
        # The study's own options: its batch size, strategy, budget and loader.
        options = stored_options(self.study)
        executor = make_executor(options, self.study_dir / "work", Path(model_file))
        try:
            return executor.export(policy, names, target)["paths"]
        finally:
            executor.close()


def load_study(
    name_or_dir: str | os.PathLike[str], storage: str | None = None, out: str = "studies"
) -> SearchResult:
    """The results of an existing study, by folder or by name (+ ``storage``)."""
    study, folder = find_study(name_or_dir, storage, out)
    return SearchResult(study, folder)


def search(
    model: str | os.PathLike[str] | Any,
    train_data: Any = None,
    *,
    val_data: Any = None,
    compile_kwargs: Any = None,
    progress: Any = None,
    **options: Any,
) -> SearchResult:
    """Run a study from a notebook; the keyword options are those of ``precsearch run``.

    Args:
        model: A model file's path, or a function returning a ``keras.Model`` (then
            ``train_data`` is required and trials run in this process).
        train_data: Unbatched examples, or a function returning them (callables only).
        val_data: Optional validation examples (callables only).
        compile_kwargs: ``model.compile`` arguments (callables only; else the model must
            come compiled).
        progress: Stream for progress lines (default stderr).
        **options: ``trials``, ``steps``, ``group_by``, ``dtypes``, ``study_name``,
            ``out``, ``sampler``, ``tolerance``, ... (see :class:`SearchOptions`).

    Returns:
        A :class:`SearchResult` with ``.trials``, ``.pareto``, ``.best_policy``,
        ``.reference`` and ``.export(dir)``.
    """
    known = set(SearchOptions.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise UserInputError(
            f"search() got unknown option {unknown[0]!r}; known: {', '.join(sorted(known))}"
        )
    if callable(model) and not isinstance(model, (str, os.PathLike)):
        if train_data is None:
            raise UserInputError("search(build_fn) needs train_data (examples or a function)")
        model = spec_from_callables(model, train_data, val_data, compile_kwargs)
    elif train_data is not None or val_data is not None:
        raise UserInputError(
            "train_data/val_data go with a build function; a model file defines its own"
        )
    run = run_study(model, SearchOptions(**options), progress=progress)
    if run.failure:
        warnings.warn(f"{run.failure}; the study and its trials are kept", stacklevel=2)
    notes = [*run.notes, *[text for text in (run.verdict, run.failure) if text]]
    return SearchResult(run.study, run.study_dir, notes)
