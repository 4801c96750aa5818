"""Running one trial honestly: FP32 references, interleaved step timing, numerics.

A :class:`Runner` holds one model problem (a :class:`~precsearch.loaders.ModelSpec`
built once): its initial weights, its data, an FP32 model per batch size traced once for
timing, and the FP32 reference runs per batch size and LR rule. Each
:meth:`Runner.run_trial` then

1. builds the candidate from the same initial weights, applies the policy, recompiles;
2. traces it (first step), and stops at once if the first step after tracing costs more
   than ``watchdog`` times the FP32 step per sample (``too_slow``);
3. trains it the full budget from the same data order as the FP32 reference, in blocks of
   ``block`` steps that alternate with blocks of the traced FP32 model, timing each step
   (not whole ``fit()`` calls, which here sometimes spend seconds outside their steps);
4. estimates each side's cost as the p10 of its step times (stalls only ever add time),
   and reports the median, min, max and count beside it;
5. records the loss per step, the dynamic loss scale and skipped steps, stops at the
   first non-finite loss, evaluates validation data, and judges fidelity against FP32.

TensorFlow is imported when a Runner is created, never at module import.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import resource
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from precsearch.errors import TrialFailed, UserInputError, one_line
from precsearch.loaders import ModelSpec
from precsearch.objectives import Fidelity, judge
from precsearch.policy import Policy, iter_layers

__all__ = [
    "Budget",
    "Reference",
    "Runner",
    "StepStats",
    "TrialResult",
    "downsample",
    "model_layers",
    "run_trial",
    "spread",
]

STATUSES = ("ok", "infeasible", "too_slow", "failed")
MIN_BLOCK_S = 0.25  # shortest timed block in a confirmation round


@dataclass(frozen=True)
class Budget:
    """How much a trial trains and measures.

    Args:
        steps: Training steps of the candidate (and of each FP32 reference run).
        warmup: Candidate steps after tracing that are not timed.
        block: Steps in one timing block; FP32 and candidate blocks alternate.
        max_blocks: Most FP32 blocks interleaved per trial (the candidate trains on,
            untimed, after that); ``None`` interleaves for the whole budget.
        ref_seeds: FP32 reference runs (data-order seeds) per batch size, at least 3.
        watchdog: Stop when the first step after tracing costs more than this many
            times the FP32 step (per sample).
    """

    steps: int = 120
    warmup: int = 3
    block: int = 5
    max_blocks: int | None = 12
    ref_seeds: int = 3
    watchdog: float = 5.0

    def __post_init__(self) -> None:
        for name in ("steps", "block", "ref_seeds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserInputError(f"budget {name} is {value!r}, expected a positive integer")
        if self.ref_seeds < 3:
            raise UserInputError(f"budget ref_seeds is {self.ref_seeds}, expected at least 3")
        if self.steps < self.warmup + 2 + self.block:
            raise UserInputError(
                f"budget steps is {self.steps}, expected at least warmup + 2 + block = "
                f"{self.warmup + 2 + self.block} so that one block is timed"
            )
        if not self.watchdog > 1:
            raise UserInputError(f"budget watchdog is {self.watchdog!r}, expected > 1")


@dataclass
class StepStats:
    """Per-step times of one configuration, in seconds.

    ``p10`` is the cost estimate (stalls only add time); ``samples_per_s`` is the batch
    size over ``p10``.
    """

    p10: float
    median: float
    min: float
    max: float
    n: int
    batch_size: int
    samples_per_s: float

    @classmethod
    def of(cls, times: list[float], batch_size: int) -> StepStats:
        """Statistics of a list of step times."""
        import numpy as np

        arr = np.asarray(times, dtype=float)
        p10 = float(np.percentile(arr, 10))
        return cls(
            p10=p10,
            median=float(np.median(arr)),
            min=float(arr.min()),
            max=float(arr.max()),
            n=len(times),
            batch_size=batch_size,
            samples_per_s=batch_size / p10,
        )


@dataclass
class TrialResult:
    """Everything one trial measured; serialises to JSON (never pickle).

    Attributes:
        policy: The policy's JSON form.
        status: ``ok`` (feasible), ``infeasible``, ``too_slow`` or ``failed``.
        reason: Why, for any status but ``ok``.
        speedup: Candidate samples/s over FP32 samples/s (p10 step times).
        block_ratios: The same ratio per pair of adjacent blocks (median of steps):
            ``{median, min, max, n}``, the spread of the estimate.
        fp32: FP32 step statistics (at the model's own batch size).
        candidate: The candidate's step statistics (at the policy's batch size).
        fidelity_gap: Distance from FP32 in units of the FP32 band (see objectives).
        curve: ``{"batch_size", "samples", "loss"}``: loss per step by samples seen.
        val: ``{"loss", "metric", "metric_name"}`` when there is validation data.
        peak_memory_mb: Peak process RSS during the trial (CPU) or device memory (GPU).
        memory_kind: ``"rss"`` or ``"gpu"`` (``"rss (process lifetime)"`` where the
            kernel's peak mark cannot be reset).
        numerics: ``nonfinite_step``, ``loss_scale`` (per step, dynamic scaling),
            ``min_loss_scale``, ``skipped_steps``, ``skipped_share``.
        timings: Wall seconds by phase: reference, build, trace, warmup, measured,
            train, evaluate, total.
    """

    policy: dict[str, Any]
    status: str = "failed"
    reason: str = ""
    speedup: float | None = None
    block_ratios: dict[str, float] = field(default_factory=dict)
    fp32: StepStats | None = None
    candidate: StepStats | None = None
    fidelity_gap: float | None = None
    curve: dict[str, Any] = field(default_factory=lambda: {"samples": [], "loss": []})
    val: dict[str, Any] = field(default_factory=dict)
    peak_memory_mb: float | None = None
    memory_kind: str = "rss"
    numerics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        """Whether the trial trained like FP32 (status ``ok``)."""
        return self.status == "ok"

    def to_dict(self, max_points: int | None = None) -> dict[str, Any]:
        """The JSON form; ``max_points`` down-samples the loss curve (and loss scale)."""
        data = asdict(self)
        if max_points is not None:
            data["curve"] = downsample(data["curve"], max_points)
            scale = data["numerics"].get("loss_scale")
            if scale:
                data["numerics"]["loss_scale"] = _pick(scale, max_points)
        return _json_safe(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        """Inverse of :meth:`to_dict`."""
        data = dict(data)
        for key in ("fp32", "candidate"):
            if data.get(key) is not None:
                data[key] = StepStats(**data[key])
        return cls(**data)

    def to_json(self, max_points: int | None = None) -> str:
        """JSON text (``NaN``/``inf`` become ``null``)."""
        return json.dumps(self.to_dict(max_points), allow_nan=False)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _pick(values: list[Any], max_points: int) -> list[Any]:
    if len(values) <= max_points:
        return list(values)
    step = (len(values) - 1) / (max_points - 1)
    return [values[round(i * step)] for i in range(max_points)]


def downsample(curve: dict[str, Any], max_points: int) -> dict[str, Any]:
    """A curve with at most ``max_points`` points, first and last kept.

    Points are picked evenly (not averaged) so that a NaN or a spike stays visible.
    """
    out = dict(curve)
    for key in ("samples", "loss"):
        if key in curve:
            out[key] = _pick(list(curve[key]), max_points)
    return out


@dataclass
class Reference:
    """FP32 reference runs at one batch size and LR rule.

    Attributes:
        batch_size, lr_rule, steps: What was trained.
        curves: Loss per step, one list per seed (seed i uses data order i).
        val_loss, val_metric: Final validation figures per seed (``None`` without
            validation data).
        metric_name: Name of the first compiled metric, if any.
        seconds: Wall time of all runs.
    """

    batch_size: int
    lr_rule: str
    steps: int
    curves: list[list[float]]
    val_loss: list[float | None]
    val_metric: list[float | None]
    metric_name: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return _json_safe(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reference:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux ≥ 4.0), so a peak is per trial."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def _peak_rss_mb() -> float:
    """Peak resident memory since the last reset (or of the process), in MiB."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Runner:
    """One model problem, built once, on which trials are run in this process.

    Args:
        spec: Where the model and data come from.
        work_dir: Where ``model_info.json``, the initial weights and the FP32
            references are cached (nothing is written when ``None``).
        budget: Default budget of each trial.
        fidelity: How closely trials must follow FP32.
        batch_size: The model's own batch size (default: ``precsearch_config`` or 32).

    Raises:
        UserInputError: The model file's functions return something that breaks the
            contract (wrong type, batched data, data that does not fit, no loss).
    """

    def __init__(
        self,
        spec: ModelSpec,
        work_dir: str | os.PathLike[str] | None = None,
        budget: Budget | None = None,
        fidelity: Fidelity | None = None,
        batch_size: int | None = None,
    ) -> None:
        t0 = time.perf_counter()
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import keras
        import tensorflow as tf

        self._keras = keras
        self._tf = tf
        self.spec = spec
        self.budget = budget or Budget()
        self.fidelity = fidelity or Fidelity()
        self.work_dir = Path(work_dir) if work_dir is not None else None
        if self.work_dir is not None:
            self.work_dir.mkdir(parents=True, exist_ok=True)
        self.batch_size = batch_size or int(spec.config.get("batch_size", 32))
        self.timings: dict[str, float] = {"import": time.perf_counter() - t0}

        t0 = time.perf_counter()
        keras.utils.set_random_seed(0)
        model = self._build()
        self._compile_config = self._find_compile_config(model)
        self.train_examples, self.n_train = self._examples("train_data")
        self.val_examples, self.n_val = (None, 0)
        if spec.val_data is not None:
            self.val_examples, self.n_val = self._examples("val_data")
        self._check_data_fits(model)
        self.initial_weights = model.get_weights()
        self.info = self._model_info(model)
        self.timings["build"] = time.perf_counter() - t0
        self._timing_models: dict[int, tuple[Any, Any]] = {}
        self._references: dict[tuple[int, str, int], Reference] = {}
        if self.work_dir is not None:
            model.save_weights(self.work_dir / "initial.weights.h5")
            (self.work_dir / "model_info.json").write_text(json.dumps(self.info, indent=2))

    def _where(self, function: str) -> str:
        return f"{self.spec.source}: {function}()"

    def _build(self) -> Any:
        keras = self._keras
        # Keras numbers unnamed layers per process (dense, dense_1, ...): start each
        # build from zero so that every build has the layer ids of model_info.json.
        from keras.src.utils.naming import reset_uids

        reset_uids()
        try:
            model = self.spec.build_model()
        except Exception as exc:
            raise UserInputError(f"{self._where('build_model')} raised {one_line(exc)}") from None
        if not isinstance(model, keras.Model):
            raise UserInputError(
                f"{self._where('build_model')} returned {type(model).__name__}, "
                "expected a keras.Model"
            )
        return model

    def _find_compile_config(self, model: Any) -> dict[str, Any] | None:
        if self.spec.compile_kwargs is not None:
            return None
        if not model.compiled:
            raise UserInputError(
                f"{self.spec.source}: no loss anywhere: compile the model in build_model() "
                "or define compile_kwargs() returning at least a loss"
            )
        return model.get_compile_config()

    def compile_kwargs(self) -> dict[str, Any]:
        """Fresh ``model.compile`` arguments (a new optimizer object on each call)."""
        keras = self._keras
        if self.spec.compile_kwargs is not None:
            try:
                kwargs = dict(self.spec.compile_kwargs())
            except Exception as exc:
                raise UserInputError(
                    f"{self._where('compile_kwargs')} raised {one_line(exc)}"
                ) from None
            optimizer = kwargs.get("optimizer", "rmsprop")
            if isinstance(optimizer, keras.optimizers.Optimizer):
                optimizer = type(optimizer).from_config(optimizer.get_config())
            kwargs["optimizer"] = optimizer
        else:
            from keras.src.saving import serialization_lib

            kwargs = serialization_lib.deserialize_keras_object(self._compile_config)
        if kwargs.get("loss") is None:
            raise UserInputError(
                f"{self._where('compile_kwargs')} has no 'loss', expected a loss for training"
            )
        # Timing is per step: one train-function call must be exactly one step.
        for key in ("steps_per_execution", "run_eagerly", "jit_compile"):
            kwargs.pop(key, None)
        kwargs["optimizer"] = keras.optimizers.get(kwargs.get("optimizer", "rmsprop"))
        return kwargs

    def _examples(self, function: str) -> tuple[Any, int]:
        tf = self._tf
        try:
            data = getattr(self.spec, function)()
        except Exception as exc:
            raise UserInputError(f"{self._where(function)} raised {one_line(exc)}") from None
        expected = "expected (x, y) arrays or an unbatched tf.data.Dataset"
        if isinstance(data, tf.data.Dataset):
            dataset = data
        elif isinstance(data, (tuple, list)) and len(data) in (2, 3):
            try:
                dataset = tf.data.Dataset.from_tensor_slices(tuple(data))
            except Exception as exc:
                raise UserInputError(
                    f"{self._where(function)} returned arrays that do not line up "
                    f"({one_line(exc)}), {expected}"
                ) from None
        else:
            raise UserInputError(
                f"{self._where(function)} returned {type(data).__name__}, {expected}"
            )
        n = int(dataset.cardinality())
        if n == tf.data.INFINITE_CARDINALITY:
            raise UserInputError(
                f"{self._where(function)} returned a dataset that repeats forever, "
                "expected a finite one (precsearch repeats it itself)"
            )
        if n == tf.data.UNKNOWN_CARDINALITY:
            n = int(dataset.reduce(0, lambda count, _: count + 1))
        if n < 1:
            raise UserInputError(f"{self._where(function)} returned no examples")
        return dataset, n

    def _check_data_fits(self, model: Any) -> None:
        tf = self._tf
        spec = self.train_examples.element_spec
        first = tf.nest.flatten(spec)[0]
        inputs = getattr(model, "inputs", None) if model.built else None
        try:
            input_shapes = [tuple(t.shape) for t in inputs or []]
        except (AttributeError, ValueError):
            input_shapes = []
        if input_shapes and len(first.shape) == len(input_shapes[0]) and first.shape[0] is None:
            raise UserInputError(
                f"{self._where('train_data')} returned a batched dataset (element shape "
                f"{tuple(first.shape)}), expected unbatched examples: drop .batch() "
                "(precsearch batches itself)"
            )
        kwargs = self.compile_kwargs()
        try:
            batch = next(iter(self.train_examples.batch(2)))
            x, y = batch[0], batch[1]
            model.compile(**kwargs)
            y_pred = model(x, training=False)
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred, training=False)
            float(loss)
        except Exception as exc:
            raise UserInputError(
                f"{self._where('train_data')} examples do not fit build_model()'s model "
                f"({one_line(exc)})"
            ) from None

    def _model_info(self, model: Any) -> dict[str, Any]:
        keras = self._keras
        layers = model_layers(model)
        return {
            "source": self.spec.source,
            "fingerprint": self.spec.fingerprint,
            "model_name": model.name,
            "model_class": type(model).__name__,
            "params": int(model.count_params()),
            "layers": layers,
            "output_layers": [layer["id"] for layer in layers if layer["output"]],
            "batch_size": self.batch_size,
            "train_examples": self.n_train,
            "val_examples": self.n_val,
            "versions": {"tensorflow": self._tf.__version__, "keras": keras.__version__},
            "gpus": self._gpus(),
        }

    def _gpus(self) -> list[dict[str, Any]]:
        gpus = []
        for device in self._tf.config.list_physical_devices("GPU"):
            details = self._tf.config.experimental.get_device_details(device)
            gpus.append(
                {
                    "name": details.get("device_name", device.name),
                    "compute_capability": list(details.get("compute_capability") or []),
                }
            )
        return gpus

    def dataset(self, batch_size: int, seed: int) -> Any:
        """The training stream: shuffled (seeded), repeated, batched, prefetched.

        Repeating before batching makes the stream of examples the same at any batch
        size, so a batch-size change alters only how it is cut.
        """
        tf = self._tf
        return (
            self.train_examples.cache()
            .shuffle(min(self.n_train, 50_000), seed=seed, reshuffle_each_iteration=True)
            .repeat()
            .batch(batch_size, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE)
        )

    def _model_for(self, policy: Policy, seed: int) -> Any:
        keras = self._keras
        keras.utils.set_random_seed(seed)
        model = self._build()
        model.set_weights(self.initial_weights)
        kwargs = self.compile_kwargs()
        optimizer = kwargs.pop("optimizer")
        schedule = keras.optimizers.schedules.LearningRateSchedule
        if not isinstance(getattr(optimizer, "_learning_rate", None), schedule):
            optimizer.learning_rate = policy.scaled_learning_rate(float(optimizer.learning_rate))
        policy.compile(model, optimizer=optimizer, **kwargs)
        # Built now rather than inside the first traced step, so that its state can be
        # saved and restored (see _restore) instead of recompiling and retracing.
        model.optimizer.build(model.trainable_variables)
        model.make_train_function()
        return model

    def _restore(self, model: Any, optimizer_state: list[Any]) -> None:
        """Put a traced model back to the initial weights and a fresh optimizer state.

        Cheaper than building and tracing a new model (MobileNetV2: ~12 s a trace).
        """
        model.set_weights(self.initial_weights)
        for variable, value in zip(model.optimizer.variables, optimizer_state, strict=True):
            variable.assign(value)

    def _timing_model(self, batch_size: int) -> tuple[Any, Any]:
        """The FP32 model that candidates are timed against, traced once per batch size."""
        if batch_size not in self._timing_models:
            model = self._model_for(Policy(batch_size=batch_size), seed=0)
            iterator = iter(self.dataset(batch_size, seed=0))
            for _ in range(1 + self.budget.warmup):
                _step(model, iterator)
            self._timing_models[batch_size] = (model, iterator)
        return self._timing_models[batch_size]

    def _evaluate(self, model: Any, batch_size: int) -> dict[str, Any]:
        if self.val_examples is None:
            return {}
        tf = self._tf
        data = self.val_examples.batch(batch_size).prefetch(tf.data.AUTOTUNE)
        logs = model.evaluate(data, verbose=0, return_dict=True)
        names = [k for k in logs if k != "loss"]
        out: dict[str, Any] = {"loss": float(logs.get("loss", math.nan))}
        if names:
            out["metric_name"] = names[0]
            out["metric"] = float(logs[names[0]])
        return out

    def reference(self, batch_size: int, lr_rule: str = "none") -> Reference:
        """FP32 runs from the initial weights, one per data-order seed; cached.

        The cache is in memory and, with a ``work_dir``, a JSON file per batch size, LR
        rule and step count, keyed on the model file's fingerprint.
        """
        budget = self.budget
        if batch_size == self.batch_size:
            lr_rule = "none"  # every rule leaves the learning rate alone at the own size
        key = (batch_size, lr_rule, budget.steps)
        if key in self._references:
            return self._references[key]
        path = None
        if self.work_dir is not None:
            name = f"reference_{self.spec.fingerprint}_bs{batch_size}_{lr_rule}_{budget.steps}.json"
            path = self.work_dir / name
            if path.exists():
                ref = Reference.from_dict(json.loads(path.read_text()))
                if len(ref.curves) >= budget.ref_seeds:
                    self._references[key] = ref
                    return ref
        t0 = time.perf_counter()
        policy = Policy(batch_size=batch_size, lr_rule=lr_rule, base_batch_size=self.batch_size)
        curves, val_loss, val_metric, metric_name = [], [], [], None
        model = self._model_for(policy, seed=0)
        optimizer_state = [v.numpy() for v in model.optimizer.variables]
        for seed in range(budget.ref_seeds):
            if seed:
                self._restore(model, optimizer_state)
            iterator = iter(self.dataset(batch_size, seed=seed))
            losses = []
            for _ in range(budget.steps):
                _, loss = _step(model, iterator)
                losses.append(loss)
                if not math.isfinite(loss):
                    break
            curves.append(losses)
            val = self._evaluate(model, batch_size)
            val_loss.append(val.get("loss"))
            val_metric.append(val.get("metric"))
            metric_name = val.get("metric_name", metric_name)
        if batch_size == self.batch_size and batch_size not in self._timing_models:
            # Traced FP32 at the model's own batch size is all the timing model needs:
            # its weights do not matter, and a second trace would cost seconds.
            self._timing_models[batch_size] = (model, iterator)
        ref = Reference(
            batch_size=batch_size,
            lr_rule=lr_rule,
            steps=budget.steps,
            curves=curves,
            val_loss=val_loss,
            val_metric=val_metric,
            metric_name=metric_name,
            seconds=time.perf_counter() - t0,
        )
        if any(not math.isfinite(c[-1]) for c in curves):
            warnings.warn(
                f"{self.spec.source}: an FP32 reference run at batch size {batch_size} "
                "reached a non-finite loss; fidelity against it means little",
                stacklevel=2,
            )
        self._references[key] = ref
        if path is not None:
            path.write_text(json.dumps(ref.to_dict()))
        return ref

    def _normalise(self, policy: Policy) -> Policy:
        return dataclasses.replace(
            policy,
            batch_size=policy.batch_size or self.batch_size,
            base_batch_size=policy.base_batch_size or self.batch_size,
        )

    def confirm(
        self,
        candidates: list[Policy],
        global_policy: Policy | None = None,
        rounds: int = 5,
        block: int = 10,
    ) -> dict[str, Any]:
        """Re-measure candidates interleaved round by round with FP32 and the global recipe.

        Every configuration is traced and warmed up first; then each round times a
        block of ``block`` steps of each, in an order that rotates from round to round.
        A round's figure is the batch size over the block's median step time; a ratio
        compares two configurations within the same round only.

        Returns:
            ``{"candidates": [{"speedup_vs_fp32", "speedup_vs_global_mixed",
            "samples_per_s"}...], "global_vs_fp32", "null_vs_fp32", "fp32_samples_per_s",
            "rounds", "block"}`` where each speedup is ``{median, min, max, rounds}``;
            ``null_vs_fp32`` is a second FP32 copy against the first (ideally 1).
        """
        fp32 = Policy(batch_size=self.batch_size)
        # "null" is a second, identical FP32 model measured like a candidate: what it
        # scores against FP32 is the instrument's own error on this model and machine.
        configs: list[tuple[str, Policy]] = [("fp32", fp32), ("null", fp32)]
        if global_policy is not None:
            configs.append(("global", global_policy))
        configs += [(f"c{i}", policy) for i, policy in enumerate(candidates)]
        running = []
        for label, policy in configs:
            policy = self._normalise(policy)
            model = self._model_for(policy, seed=0)
            iterator = iter(self.dataset(policy.batch_size, seed=0))
            for _ in range(self.budget.warmup):
                _step(model, iterator)
            # Blocks of at least MIN_BLOCK_S: a few millisecond steps are too short a
            # window on a shared machine (FP32 against itself swung 0.8-1.25x that way).
            seconds = _step(model, iterator)[0]
            steps = max(block, math.ceil(MIN_BLOCK_S / max(seconds, 1e-6)))
            running.append((label, model, iterator, policy.batch_size, steps))
        rates: dict[str, list[float]] = {label: [] for label, *_ in running}
        order = random.Random(0)
        for _ in range(rounds):
            # A fresh order each round, so that no configuration always follows the same
            # one (what ran before leaves caches and data threads behind); one untimed
            # step lets that settle.
            for label, model, iterator, batch_size, steps in order.sample(running, len(running)):
                _step(model, iterator)
                times = [_step(model, iterator)[0] for _ in range(steps)]
                rates[label].append(batch_size / _median(times))

        def ratio(a: str, b: str) -> dict[str, float]:
            return spread([x / y for x, y in zip(rates[a], rates[b], strict=True)])

        out: dict[str, Any] = {
            "rounds": rounds,
            "block": block,
            "fp32_samples_per_s": _median(rates["fp32"]),
            "global_vs_fp32": ratio("global", "fp32") if global_policy is not None else None,
            "null_vs_fp32": ratio("null", "fp32"),
            "candidates": [],
        }
        for i in range(len(candidates)):
            label = f"c{i}"
            out["candidates"].append(
                {
                    "samples_per_s": _median(rates[label]),
                    "speedup_vs_fp32": ratio(label, "fp32"),
                    "speedup_vs_global_mixed": (
                        ratio(label, "global") if global_policy is not None else None
                    ),
                }
            )
        return out

    def train(self, policy: Policy) -> tuple[Any, list[float]]:
        """Train a model under ``policy`` for the budget, as a trial does (same initial
        weights, data order and seed); return it and its loss per step."""
        policy = self._normalise(policy)
        model = self._model_for(policy, seed=0)
        iterator = iter(self.dataset(policy.batch_size, seed=0))
        losses = []
        for _ in range(self.budget.steps):
            losses.append(_step(model, iterator)[1])
            if not math.isfinite(losses[-1]):
                break
        return model, losses

    def export(
        self, policy: Policy, exporters: list[str], directory: str | os.PathLike[str]
    ) -> dict[str, Any]:
        """Train under ``policy`` for the budget, then run model exporters on the result.

        Args:
            policy: The winner (its manifest travels into what is exported).
            exporters: Names (``NAME`` or ``NAME=ARG``) of exporters with ``needs_model``.
            directory: Where they write.

        Returns:
            ``{"paths": [...], "steps", "final_loss"}``.
        """
        from precsearch.plugins import Winner, create

        instances = [create("exporter", spec) for spec in exporters]
        model, losses = self.train(policy)
        if not losses or not math.isfinite(losses[-1]):
            raise TrialFailed("export failed", "the loss became non-finite while training")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths: list[str] = []
        for exporter in instances:
            paths += [
                str(p) for p in exporter.export(Winner(policy=policy, model=model), directory)
            ]
        return {"paths": paths, "steps": len(losses), "final_loss": losses[-1]}

    def run_trial(self, policy: Policy, budget: Budget | None = None) -> TrialResult:
        """Train and time one candidate policy against FP32 (see the module doc)."""
        budget = budget or self.budget
        if budget != self.budget:
            self.budget = budget
        keras = self._keras
        t_start = time.perf_counter()
        policy = self._normalise(policy)
        batch_size = policy.batch_size
        result = TrialResult(policy=policy.to_dict())
        timings = result.timings
        gpu = bool(self.info["gpus"])
        if gpu:
            self._tf.config.experimental.reset_memory_stats("GPU:0")
        result.memory_kind = "gpu" if gpu else "rss"
        if not gpu and not _reset_peak_rss():
            result.memory_kind = "rss (process lifetime)"

        t0 = time.perf_counter()
        reference = self.reference(batch_size, policy.lr_rule)
        fp32_model, fp32_iter = self._timing_model(self.batch_size)
        timings["reference"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        model = self._model_for(policy, seed=0)
        iterator = iter(self.dataset(batch_size, seed=0))
        timings["build"] = time.perf_counter() - t0

        optimizer = model.optimizer
        lso = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        losses: list[float] = []
        scales: list[float] = []
        numerics: dict[str, Any] = {"nonfinite_step": None}
        result.numerics = numerics
        skipped = 0

        def candidate_step() -> float:
            nonlocal skipped
            before = float(optimizer.dynamic_scale) if lso else None
            seconds, loss = _step(model, iterator)
            losses.append(loss)
            if lso:
                after = float(optimizer.dynamic_scale)
                scales.append(after)
                if before is not None and after < before:
                    skipped += 1
            if not math.isfinite(loss) and numerics["nonfinite_step"] is None:
                numerics["nonfinite_step"] = len(losses)
            return seconds

        def finish(status: str, reason: str) -> TrialResult:
            result.status, result.reason = status, reason
            result.curve = {
                "batch_size": batch_size,
                "samples": [batch_size * (i + 1) for i in range(len(losses))],
                "loss": losses,
            }
            if lso:
                numerics["loss_scale"] = scales
                numerics["min_loss_scale"] = min(scales) if scales else None
            numerics["skipped_steps"] = skipped
            numerics["skipped_share"] = skipped / max(1, len(losses))
            if gpu:
                peak = self._tf.config.experimental.get_memory_info("GPU:0")["peak"]
                result.peak_memory_mb = peak / 2**20
            else:
                result.peak_memory_mb = _peak_rss_mb()
            timings["total"] = time.perf_counter() - t_start
            return result

        t0 = time.perf_counter()
        candidate_step()
        timings["trace"] = time.perf_counter() - t0
        if numerics["nonfinite_step"] is not None:
            return finish("infeasible", f"non-finite loss at step {numerics['nonfinite_step']}")

        # Watchdog: the first step after tracing, per sample, against FP32 measured now.
        t0 = time.perf_counter()
        fp32_now = min(_step(fp32_model, fp32_iter)[0] for _ in range(2))
        first = candidate_step()
        slowdown = (first / batch_size) / (fp32_now / self.batch_size)
        numerics["watchdog_slowdown"] = slowdown
        if slowdown > budget.watchdog:
            timings["warmup"] = time.perf_counter() - t0
            return finish(
                "too_slow",
                f"first step after tracing {slowdown:.1f}x slower than FP32 per sample "
                f"({first * 1e3:.1f} ms vs {fp32_now * 1e3:.1f} ms; watchdog {budget.watchdog:g}x)",
            )
        for _ in range(budget.warmup):
            if numerics["nonfinite_step"] is not None:
                break
            candidate_step()
        timings["warmup"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        fp32_times: list[float] = []
        cand_times: list[float] = []
        ratios: list[float] = []
        blocks = 0
        while (
            len(losses) + budget.block <= budget.steps
            and numerics["nonfinite_step"] is None
            and (budget.max_blocks is None or blocks < budget.max_blocks)
        ):
            # ABBA order so that a drift in machine speed falls on both sides alike.
            fp32_first = blocks % 2 == 0
            block_fp32: list[float] = []
            block_cand: list[float] = []
            for side in (0, 1):
                if (side == 0) == fp32_first:
                    block_fp32 = [_step(fp32_model, fp32_iter)[0] for _ in range(budget.block)]
                else:
                    for _ in range(budget.block):
                        block_cand.append(candidate_step())
                        if numerics["nonfinite_step"] is not None:
                            break
            blocks += 1
            fp32_times += block_fp32
            cand_times += block_cand
            if block_cand and numerics["nonfinite_step"] is None:
                fp32_rate = self.batch_size / _median(block_fp32)
                ratios.append((batch_size / _median(block_cand)) / fp32_rate)
        timings["measured"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        while len(losses) < budget.steps and numerics["nonfinite_step"] is None:
            candidate_step()
        timings["train"] = time.perf_counter() - t0

        if fp32_times and cand_times:
            result.fp32 = StepStats.of(fp32_times, self.batch_size)
            result.candidate = StepStats.of(cand_times, batch_size)
            result.speedup = result.candidate.samples_per_s / result.fp32.samples_per_s
        if ratios:
            result.block_ratios = {
                "median": _median(ratios),
                "min": min(ratios),
                "max": max(ratios),
                "n": len(ratios),
            }
        if numerics["nonfinite_step"] is not None:
            return finish("infeasible", f"non-finite loss at step {numerics['nonfinite_step']}")

        t0 = time.perf_counter()
        result.val = self._evaluate(model, batch_size)
        timings["evaluate"] = time.perf_counter() - t0
        finish("ok", "")
        status, reason, gap = judge(result, reference, self.fidelity)
        result.status, result.reason = status, reason
        result.fidelity_gap = gap if math.isfinite(gap) else None
        return result


def spread(values: list[float]) -> dict[str, float]:
    """``{median, min, max, rounds}`` of a list of ratios."""
    return {
        "median": _median(values),
        "min": min(values),
        "max": max(values),
        "rounds": len(values),
    }


def model_layers(model: Any) -> list[dict[str, Any]]:
    """Every nested layer of a built model as the JSON records of ``model_info.json``."""
    return [
        {
            "id": record.id,
            "name": record.name,
            "class": record.class_name,
            "params": int(sum(int(math.prod(w.shape)) for w in layer.weights)),
            "output": record.is_output,
            "container": record.is_model,
            "floating": record.floating,
        }
        for record, layer in iter_layers(model)
    ]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _step(model: Any, iterator: Any) -> tuple[float, float]:
    """One training step: (seconds, loss of this step).

    Metrics are reset before the timer starts so that ``loss`` is this step's, not a
    running mean; reading it back waits for the step to finish.
    """
    model.reset_metrics()
    t0 = time.perf_counter()
    logs = model.train_function(iterator)
    loss = float(logs["loss"])
    return time.perf_counter() - t0, loss


_RUNNERS: dict[tuple[str, str], Runner] = {}


def run_trial(spec: ModelSpec, policy: Policy, budget: Budget | None = None) -> TrialResult:
    """Run one trial in this process, reusing a :class:`Runner` per model spec."""
    key = (spec.source, spec.fingerprint)
    if key not in _RUNNERS:
        _RUNNERS[key] = Runner(spec, budget=budget)
    return _RUNNERS[key].run_trial(policy, budget)
