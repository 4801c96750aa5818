"""A precsearch loader for keras-tuner hypermodels with fixed hyperparameters."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from precsearch.plugins import (
    Loader,
    ModelSpec,
    UserInputError,
    functions_of,
    import_model_file,
    read_config,
    read_literal,
)

__all__ = ["KerasTunerLoader", "best_values"]


def best_values(project: str | Path) -> dict[str, Any]:
    """Hyperparameter values of the best completed trial in a keras-tuner project folder.

    Raises:
        UserInputError: No such folder, or no completed trial with a score in it.
    """
    project = Path(project)
    trials = []
    for path in sorted(project.glob("trial_*/trial.json")):
        try:
            trial = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserInputError(f"{path}: unreadable keras-tuner trial ({exc})") from None
        score = trial.get("score")
        if (
            trial.get("status") == "COMPLETED"
            and isinstance(score, (int, float))
            and math.isfinite(score)
        ):
            trials.append(trial)
    if not trials:
        raise UserInputError(
            f"{project}: no completed keras-tuner trial with a score (expected "
            "trial_*/trial.json files of a finished search)"
        )

    def direction(trial: dict[str, Any]) -> str:
        for metric in (trial.get("metrics") or {}).get("metrics", {}).values():
            values = [o["value"][0] for o in metric.get("observations", []) if o.get("value")]
            if values and trial["score"] in values:
                return metric.get("direction", "min")
        return "min"

    reverse = direction(trials[0]) == "max"
    best = sorted(trials, key=lambda t: t["score"], reverse=reverse)[0]
    return dict(best["hyperparameters"]["values"])


class KerasTunerLoader(Loader):
    """A keras-tuner hypermodel (``build_model(hp)`` or ``hypermodel``), values fixed.

    Args:
        arg: Optional keras-tuner project folder whose best trial gives the values.
    """

    name = "kerastuner"

    def config(self, source: Any) -> dict[str, Any]:
        return read_config(source)

    def values(self, source: Any) -> dict[str, Any]:
        """The hyperparameter values this loader fixes for ``source``."""
        project = self.arg or read_literal(source, "keras_tuner_project")
        if project:
            folder = Path(project)
            if not folder.is_absolute():
                folder = Path(source).resolve().parent / folder if not folder.exists() else folder
            return best_values(folder)
        values = read_literal(source, "hyperparameters", {})
        if not isinstance(values, dict):
            raise UserInputError(
                f"{source}: hyperparameters is a {type(values).__name__}, expected a dict"
            )
        return values

    def load(self, source: Any) -> ModelSpec:
        import keras_tuner as kt

        path = Path(source).resolve()
        values = self.values(path)
        module = import_model_file(path)
        functions = functions_of(module, path, ("train_data",))
        hypermodel = getattr(module, "hypermodel", None)
        build_hp = functions.pop("build_model", None)
        if hypermodel is not None and not isinstance(hypermodel, kt.HyperModel):
            raise UserInputError(
                f"{path}: hypermodel is a {type(hypermodel).__name__}, expected a "
                "keras_tuner.HyperModel"
            )
        if hypermodel is None and build_hp is None:
            raise UserInputError(
                f"{path}: no build_model(hp) and no hypermodel (a keras-tuner model file "
                "must define one)"
            )

        def build_model() -> Any:
            hp = kt.HyperParameters()
            hp.values.update(values)  # keras-tuner keeps populated values over defaults
            return hypermodel.build(hp) if hypermodel is not None else build_hp(hp)

        return ModelSpec(
            source=str(path),
            config=read_config(path),
            build_model=build_model,
            # The values are part of the model: references cached for others don't fit.
            fingerprint=module.__precsearch_fingerprint__
            + "-"
            + hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[
                :8
            ],
            **functions,
        )
