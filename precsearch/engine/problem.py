"""The user's problem: their model and data, checked against the contract and built once.

A :class:`Problem` builds the model file's model once (to check it, take its initial
weights and describe it as a :class:`~precsearch.records.ModelInfo`), wraps its data in
the stream every trial shares (shuffled with a fixed seed, repeated, batched), and makes
compiled models under any policy from those same initial weights. Whatever the user's
functions return that breaks the contract is a one-line ``UserInputError`` naming the
file and the function.

The backend's framework is imported when a Problem is created, never at module import;
what differs by backend goes through :mod:`precsearch.backend` and
:mod:`precsearch.engine.examples`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any

from precsearch.backend import import_backend, import_tensorflow
from precsearch.engine.examples import ArrayExamples, DatasetExamples, read_examples
from precsearch.engine.inputs import integer_inputs
from precsearch.engine.own_loss import why_no_loss
from precsearch.errors import (
    UserInputError,
    is_resource_problem,
    missing_module,
    one_line,
    users_fault,
)
from precsearch.model_file import custom_objects
from precsearch.policy import Policy
from precsearch.policy.layers import model_layers
from precsearch.policy.serving import SIGNATURE, output_kinds, serving_names
from precsearch.records import ModelInfo, ModelSpec

__all__ = ["Problem"]


class Problem:
    """One model file's model and data, built once in this process.

    Args:
        spec: Where the model and data come from.
        batch_size: The model's own batch size (default: ``precsearch_config`` or 32).
        strategy: ``"none"``, or ``"mirrored"``: every model trains data-parallel, under
            ``tf.distribute.MirroredStrategy`` over the visible GPUs (or logical CPUs) on
            TensorFlow, ``keras.distribution.DataParallel`` on JAX.

    Attributes:
        keras: The module, imported here.
        backend: What differs by Keras backend (:class:`~precsearch.backend.Backend`).
        info: The model's description (layers, batch size, data sizes, hardware).
        initial_weights: The weights every trial and reference starts from.
        batch_size: The model's own batch size.

    Raises:
        UserInputError: The model file's functions return something that breaks the
            contract (wrong type, batched data, data that does not fit, no loss).
    """

    def __init__(
        self, spec: ModelSpec, batch_size: int | None = None, strategy: str = "none"
    ) -> None:
        self.backend = import_backend()
        import keras

        self.keras = keras
        self.strategy = self.backend.strategy(strategy)
        self.spec = spec
        self.batch_size = batch_size or int(spec.config.get("batch_size", 32))
        keras.utils.set_random_seed(0)
        model = self.build()
        # Set on the model after compiling, it is in no compile config: seen here only.
        self._eager_model = bool(getattr(model, "run_eagerly", False))
        self._compile_config = self._find_compile_config(model)
        self._custom_objects = custom_objects(model)
        self._own_train_step = type(model).train_step is not keras.Model.train_step
        self._no_loss: str | None = None  # read once, where the model compiles no loss
        self.train_examples, self.n_train = self._examples("train_data")
        self.val_examples, self.n_val = (None, 0)
        if spec.val_data is not None:
            self.val_examples, self.n_val = self._examples("val_data")
        self._check_data_fits(model)
        self.initial_weights = model.get_weights()
        self.info = self._model_info(model)

    def _scope(self) -> Any:
        return self.strategy.scope() if self.strategy else contextlib.nullcontext()

    def iterator(self, batch_size: int, seed: int) -> Any:
        """An iterator over :meth:`dataset`, split across replicas under a strategy."""
        data = self.dataset(batch_size, seed)
        if self.strategy is not None and self.backend.name == "tensorflow":
            data = self.strategy.experimental_distribute_dataset(data)
        return iter(data)

    def _where(self, function: str) -> str:
        return f"{self.spec.source}: {function}()"

    def _call(self, function: str) -> Any:
        """Call one of the model file's functions; what it raises is the user's error,
        except running out of memory, which is the machine's (it fails a trial)."""
        try:
            return getattr(self.spec, function)()
        except ModuleNotFoundError as exc:
            raise missing_module(exc, self._where(function)) from None
        except Exception as exc:
            if is_resource_problem(exc):
                raise
            raise UserInputError(f"{self._where(function)} raised {one_line(exc)}") from None

    def build(self) -> Any:
        """A new model from ``build_model()`` (its layer ids always those of ``info``)."""
        keras = self.keras
        # Keras numbers unnamed layers per process (dense, dense_1, ...): start each
        # build from zero so that every build has the layer ids of model_info.json.
        from keras.src.utils.naming import reset_uids

        reset_uids()
        model = self._call("build_model")
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

    def _why_no_loss(self) -> str:
        """Why a model that compiles no loss has none (``""``: its call() adds one)."""
        if self._no_loss is None:
            where = self._where("compile_kwargs" if self.spec.compile_kwargs else "build_model")
            x = self.first_batch(2)[0]
            self._no_loss = why_no_loss(self.build(), x, where, self._own_train_step)
        return self._no_loss

    def compile_kwargs(self, user: bool = False) -> dict[str, Any]:
        """Fresh ``model.compile`` arguments (a new optimizer object on each call).

        Args:
            user: The user's own arguments as they are; by default those a policy
                compiles with: ``jit_compile`` left to the policy (the user's resolved
                setting is the FP32 baseline's, :meth:`baseline`) and ``run_eagerly``
                dropped (steps are timed as graphs). ``steps_per_execution`` stays: it
                is part of the user's training, and one call is that many steps.
        """
        keras = self.keras
        if self.spec.compile_kwargs is not None:
            kwargs = dict(self._call("compile_kwargs"))
            optimizer = kwargs.get("optimizer", "rmsprop")
            if isinstance(optimizer, keras.optimizers.Optimizer):
                optimizer = type(optimizer).from_config(optimizer.get_config())
            kwargs["optimizer"] = optimizer
        else:
            from keras.src.saving import serialization_lib

            kwargs = serialization_lib.deserialize_keras_object(
                self._compile_config, custom_objects=self._custom_objects
            )
        if kwargs.get("loss") is None and (why := self._why_no_loss()):
            raise UserInputError(why)
        if not user:
            for key in ("run_eagerly", "jit_compile"):
                kwargs.pop(key, None)
        kwargs["optimizer"] = keras.optimizers.get(kwargs.get("optimizer", "rmsprop"))
        return kwargs

    def _examples(self, function: str) -> tuple[ArrayExamples | DatasetExamples, int]:
        examples = read_examples(
            self._call(function),
            self._where(function),
            as_dataset=self.backend.name == "tensorflow",
            tensorflow=import_tensorflow,
        )
        return examples, examples.n

    def _check_data_fits(self, model: Any) -> None:
        keras = self.keras
        if isinstance(self.train_examples, DatasetExamples):
            spec = self.train_examples.dataset.element_spec
            first = keras.tree.flatten(spec)[0]
        else:
            first = None
        inputs = getattr(model, "inputs", None) if model.built else None
        try:
            input_shapes = [tuple(t.shape) for t in inputs or []]
        except (AttributeError, ValueError):
            input_shapes = []
        if (
            first is not None
            and input_shapes
            and len(first.shape) == len(input_shapes[0])
            and first.shape[0] is None
        ):
            raise UserInputError(
                f"{self._where('train_data')} returned a batched dataset (element shape "
                f"{tuple(first.shape)}), expected unbatched examples: drop .batch() "
                "(precsearch batches itself)"
            )
        kwargs = self.compile_kwargs(user=True)
        eager = kwargs.get("run_eagerly") or self._eager_model
        self.dropped_compile_args = ["run_eagerly"] if eager else []
        where = self._where("train_data")
        with users_fault(
            lambda cause: f"{where} examples do not fit build_model()'s model ({cause})"
        ):
            x, y = self.first_batch(2)
            model.compile(**kwargs)
            # The user's training as Keras runs it here: "auto" XLA resolves to on with
            # TensorFlow on GPUs, off on CPUs.
            self.jit_compile = bool(model.jit_compile)
            self.steps_per_execution = int(model.steps_per_execution or 1)
            y_pred = model(x, training=False)
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred, training=False)
            float(loss)

    def _model_info(self, model: Any) -> ModelInfo:
        layers = model_layers(model)
        return ModelInfo(
            source=self.spec.source,
            fingerprint=self.spec.fingerprint,
            model_name=model.name,
            model_class=type(model).__name__,
            params=int(model.count_params()),
            layers=layers,
            output_layers=[layer["id"] for layer in layers if layer["output"]],
            batch_size=self.batch_size,
            train_examples=self.n_train,
            val_examples=self.n_val,
            jit_compile=self.jit_compile,
            steps_per_execution=self.steps_per_execution,
            replicas=self.strategy.num_replicas_in_sync if self.strategy else 1,
            versions={
                "keras_backend": self.backend.name,
                self.backend.name: self.backend.version(),
                "keras": self.keras.__version__,
            },
            gpus=self.backend.gpus(),
            dropped_compile_args=self.dropped_compile_args,
            optimizer=self._optimizer_name(),
            serving=self._serving(model),
            integer_inputs=integer_inputs(
                self.first_batch(min(self.n_train, 256))[0], getattr(model, "inputs", None)
            ),
        )

    def _serving(self, model: Any) -> dict[str, Any]:
        """The SavedModel signature's names and what each output holds."""
        loss = self.compile_kwargs(user=True).get("loss")
        names = serving_names(model)
        return {
            "signature": SIGNATURE,
            "inputs": names[0] if names else [],
            "outputs": output_kinds(model, loss),
        }

    def _optimizer_name(self) -> str:
        """The class name of the user's optimizer (inside a loss-scale wrapper)."""
        optimizer = self.keras.optimizers.get(self.compile_kwargs(user=True)["optimizer"])
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        return type(inner).__name__

    def dataset(self, batch_size: int, seed: int) -> Any:
        """The training stream: shuffled (seeded), repeated, batched, prefetched.

        Repeating before batching makes the stream of examples the same at any batch
        size, so a batch-size change alters only how it is cut.
        """
        return self.train_examples.stream(batch_size, seed)

    def baseline(self) -> Policy:
        """The user's own training in FP32: their batch size and XLA setting (normalised:
        ``normalise(baseline()) == baseline()``, so that a reference run under it is known
        for the user's own training and its traced model is kept for the timing)."""
        return Policy(
            batch_size=self.batch_size,
            base_batch_size=self.batch_size,
            jit_compile=self.jit_compile,
        )

    def normalise(self, policy: Policy) -> Policy:
        """``policy`` with its batch sizes filled in from the model's own."""
        return dataclasses.replace(
            policy,
            batch_size=policy.batch_size or self.batch_size,
            base_batch_size=policy.base_batch_size or self.batch_size,
        )

    def model_for(self, policy: Policy, seed: int) -> Any:
        """A model from the initial weights under ``policy``, compiled and traceable.

        The learning rate follows the policy's batch size by its LR rule (a schedule is
        scaled whole: :meth:`Policy.scale_optimizer`); the optimizer is built and the
        train function made, so that the state can be saved and restored (see
        :meth:`restore`) instead of retraced.
        """
        keras = self.keras
        keras.utils.set_random_seed(seed)
        with self._scope():
            model = self.build()
            model.set_weights(self.initial_weights)
            kwargs = self.compile_kwargs()
            optimizer = policy.scale_optimizer(kwargs.pop("optimizer"))
            policy.compile(model, optimizer=optimizer, **kwargs)
            model.optimizer.build(model.trainable_variables)
            if self.strategy is not None:
                # Keras resolves a metric named "accuracy" on its first update; inside a
                # replica that fails ("must feed a value for placeholder"): do it here.
                x, y = self.first_batch(2)
                model.compute_metrics(x, y, model(x), sample_weight=None)
                model.reset_metrics()
            self.backend.prepare(model, self.first_batch(2))
            model.make_train_function()
        return model

    def restore(self, model: Any, optimizer_state: list[Any]) -> None:
        """Put a traced model back to the initial weights and a saved optimizer state.

        Cheaper than building and tracing a new model (MobileNetV2: ~12 s a trace).
        """
        model.set_weights(self.initial_weights)
        for variable, value in zip(model.optimizer.variables, optimizer_state, strict=True):
            variable.assign(value)

    def gradient_norms(self, model: Any, batch_size: int) -> dict[str, float]:
        """The gradient's norm on the first training batch (at most 64 examples), global
        and per layer (:func:`precsearch.policy.numerics.gradient_norms`)."""
        from precsearch.policy.numerics import gradient_norms

        return gradient_norms(model, self.first_batch(min(batch_size, 64)))

    def first_batch(self, size: int) -> tuple[Any, Any]:
        """``(x, y)`` of the first ``size`` training examples, in the file's order."""
        return self.train_examples.first(size)

    def evaluate(self, model: Any, batch_size: int) -> dict[str, Any]:
        """``{loss, metric, metric_name}`` on the validation data (empty without any)."""
        if self.val_examples is None:
            return {}
        arguments = self.val_examples.fit_arguments(batch_size)
        logs = model.evaluate(**arguments, verbose=0, return_dict=True)
        names = [k for k in logs if k != "loss"]
        out: dict[str, Any] = {"loss": float(logs.get("loss", math.nan))}
        if names:
            out["metric_name"] = names[0]
            out["metric"] = float(logs[names[0]])
        return out
