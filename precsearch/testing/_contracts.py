"""The contract suites; see :mod:`precsearch.testing`."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest

from precsearch.errors import UserInputError
from precsearch.model_file import CONFIG_KEYS
from precsearch.plugins import GROUPS, Dimension, Exporter, Loader, Objective, available
from precsearch.policy import Policy
from precsearch.records import ModelSpec, SpaceOptions, StepStats, TrialResult, Winner
from precsearch.stored import record_result
from precsearch.study.space import SearchSpace

NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def sample_model_info() -> dict[str, Any]:
    """A small model's info: two hidden Dense layers, an activation, a Dense output."""
    layers = [
        ("block_1_dense", "Dense", 1056, False),
        ("block_1_relu", "ReLU", 0, False),
        ("block_2_dense", "Dense", 1056, False),
        ("logits", "Dense", 330, True),
    ]
    return {
        "source": "<sample>",
        "fingerprint": "sample",
        "model_name": "sample",
        "params": sum(p for _, _, p, _ in layers),
        "layers": [
            {
                "id": name,
                "name": name,
                "class": cls,
                "params": params,
                "output": output,
                "container": False,
                "floating": True,
            }
            for name, cls, params, output in layers
        ],
        "output_layers": ["logits"],
        "batch_size": 32,
        "train_examples": 1024,
        "val_examples": 0,
        "versions": {},
        "gpus": [],
    }


def sample_result(status: str = "ok") -> TrialResult:
    """A plausible trial result of each status (``ok``, ``infeasible``, ``too_slow``)."""
    result = TrialResult(policy=Policy(batch_size=32).to_dict(), status=status)
    result.peak_memory_mb = 812.5
    result.numerics = {"nonfinite_step": None, "skipped_steps": 0, "skipped_share": 0.0}
    if status == "too_slow":
        result.numerics["watchdog_slowdown"] = 40.0
        result.reason = "first step after tracing 40.0x slower than FP32 per sample"
        return result
    result.fp32 = StepStats(0.010, 0.011, 0.009, 0.02, 40, 32, 3200.0)
    result.candidate = StepStats(0.008, 0.009, 0.007, 0.02, 40, 32, 4000.0)
    result.speedup = 1.25
    result.block_ratios = {"median": 1.24, "min": 1.1, "max": 1.3, "n": 8}
    result.curve = {"batch_size": 32, "samples": [32 * i for i in range(1, 41)], "loss": [1.0] * 40}
    if status == "ok":
        result.fidelity_gap = 0.4
    else:
        result.numerics["nonfinite_step"] = 12
        result.reason = "non-finite loss at step 12"
    return result


class _Contract:
    kind: ClassVar[str]
    plugin_class: ClassVar[type]
    arg: ClassVar[str | None] = None

    def test_name_is_a_plain_identifier(self) -> None:
        assert isinstance(self.plugin_class.name, str) and NAME.match(self.plugin_class.name)

    def test_registered_under_its_name_if_installed(self) -> None:
        entries = [e for e in available(self.kind) if e.name == self.plugin_class.name]
        if not entries:
            pytest.skip(f"not registered in entry-point group {GROUPS[self.kind]}")
        assert entries[0].load() is self.plugin_class

    def test_has_a_docstring(self) -> None:
        assert (self.plugin_class.__doc__ or "").strip()


class DimensionContract(_Contract):
    """What every :class:`~precsearch.plugins.Dimension` must do."""

    kind = "dimension"
    plugin_class: ClassVar[type[Dimension]]

    def make_info(self) -> dict[str, Any]:
        """The model info the dimension is built for."""
        return sample_model_info()

    def make_options(self) -> SpaceOptions:
        """The space options it is built with."""
        return SpaceOptions(dtypes=["float32", "bfloat16", "float16"])

    def make_space(self) -> SearchSpace:
        return SearchSpace(self.make_info(), self.make_options(), [self._spec()])

    def _spec(self) -> Any:
        if self.arg is None:
            return self.plugin_class
        return lambda info, options: self.plugin_class(info, options, arg=self.arg)

    def test_choices_are_short_lists_of_json_scalars(self) -> None:
        for name, values in self.make_space().choices().items():
            assert isinstance(name, str) and name
            assert values and len(values) == len({json.dumps(v) for v in values})
            for value in values:
                assert value is None or isinstance(value, (bool, int, float, str))

    def test_every_choice_writes_a_valid_policy(self) -> None:
        space = self.make_space()
        choices = space.choices()
        rng = random.Random(0)
        picks = [{k: v[0] for k, v in choices.items()}, {k: v[-1] for k, v in choices.items()}]
        picks += [{k: rng.choice(v) for k, v in choices.items()} for _ in range(8)]
        for params in picks:
            policy = space.policy(params)
            assert isinstance(policy, Policy)
            assert Policy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy

    def test_baselines_use_offered_choices(self) -> None:
        space = self.make_space()
        choices = space.choices()
        for dim in space.dimensions:
            for dtype in space.dtypes:
                for name, value in dim.baseline(dtype).items():
                    assert value in choices[name]


class ObjectiveContract(_Contract):
    """What every :class:`~precsearch.plugins.Objective` must do."""

    kind = "objective"
    plugin_class: ClassVar[type[Objective]]

    def make(self) -> Objective:
        return self.plugin_class(arg=self.arg)

    def test_direction(self) -> None:
        assert self.plugin_class.direction in ("minimize", "maximize", None)

    def _check(self, status: str, reference: TrialResult | None) -> None:
        """A number for Optuna (finite for a trial that ran ``ok``), and a constraint
        that is ``None`` or a number that is not NaN."""
        plugin = self.make()
        result = sample_result(status)
        if plugin.direction is not None:
            value = plugin.value(result, reference)
            assert value is None or isinstance(value, (int, float))
            if status == "ok":
                assert value is not None and math.isfinite(value), value
        constraint = plugin.constraint(result, reference)
        assert constraint is None or (
            isinstance(constraint, (int, float)) and not math.isnan(constraint)
        ), constraint

    @pytest.mark.parametrize("status", ["ok", "infeasible", "too_slow"])
    def test_value_and_constraint_of_every_status(self, status: str) -> None:
        self._check(status, sample_result("ok"))

    @pytest.mark.parametrize("status", ["ok", "infeasible", "too_slow"])
    def test_works_without_a_reference(self, status: str) -> None:
        # The FP32 trial itself, and any trial before it has run, has no reference.
        self._check(status, None)


class LoaderContract(_Contract):
    """What every :class:`~precsearch.plugins.Loader` must do.

    Subclasses provide :meth:`make_source` (a good source) and :meth:`make_bad_source`.
    """

    kind = "loader"
    plugin_class: ClassVar[type[Loader]]

    def make(self) -> Loader:
        return self.plugin_class(arg=self.arg)

    def make_source(self, tmp_path: Path) -> Any:
        raise NotImplementedError("return a source this loader reads")

    def make_bad_source(self, tmp_path: Path) -> Any:
        raise NotImplementedError("return a source this loader must refuse")

    def test_load_gives_a_spec_that_builds(self, tmp_path: Path) -> None:
        import keras

        spec = self.make().load(self.make_source(tmp_path))
        assert isinstance(spec, ModelSpec)
        assert callable(spec.build_model) and callable(spec.train_data)
        assert isinstance(spec.build_model(), keras.Model)

    def test_config_is_a_dict(self, tmp_path: Path) -> None:
        source = self.make_source(tmp_path)
        config = self.make().config(source)
        assert isinstance(config, dict)
        # Read without building, it is what loading finds, in keys a study knows.
        assert config == self.make().load(source).config
        for key, value in config.items():
            assert key in CONFIG_KEYS, f"unknown precsearch_config key {key!r}"
            assert isinstance(value, CONFIG_KEYS[key]) and not isinstance(value, bool)

    def test_bad_source_is_a_user_input_error(self, tmp_path: Path) -> None:
        with pytest.raises(UserInputError):
            self.make().load(self.make_bad_source(tmp_path))


class ExporterContract(_Contract):
    """What every :class:`~precsearch.plugins.Exporter` must do."""

    kind = "exporter"
    plugin_class: ClassVar[type[Exporter]]

    def make(self) -> Exporter:
        return self.plugin_class(arg=self.arg)

    def make_winner(self, tmp_path: Path) -> Winner:
        """A winner: a policy, a tiny trained model (if needed) or a one-trial study."""
        policy = Policy(default="mixed_bfloat16", batch_size=32, manifest={"study": "contract"})
        if self.plugin_class.needs_model:
            import keras
            import numpy as np

            model = keras.Sequential(
                [keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(2)]
            )
            policy.compile(model, optimizer="sgd", loss="mse")
            model.fit(np.zeros((8, 4), "float32"), np.zeros((8, 2), "float32"), verbose=0)
            return Winner(policy=policy, model=model)
        import optuna

        study = optuna.create_study(directions=["maximize", "minimize"])
        trial = study.ask()
        record_result(trial, sample_result("ok"), max_points=100)
        trial.set_constraint("fidelity", -0.6)
        study.tell(trial, [1.25, 0.4])
        return Winner(policy=policy, study=study)

    def test_writes_inside_the_directory(self, tmp_path: Path) -> None:
        directory = tmp_path / "out"
        directory.mkdir()
        paths = self.make().export(self.make_winner(tmp_path), directory)
        assert paths
        for path in paths:
            path = Path(path)
            assert path.exists() and directory.resolve() in path.resolve().parents
