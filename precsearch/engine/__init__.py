"""The TensorFlow side: the worker process that builds, trains and times models.

Everything here runs where TensorFlow is imported: the model file's problem, the FP32
references, one trial, the timing instrument, the confirmation's measuring, memory, the
graph-rewrite peer, and the worker's command loop (:mod:`precsearch.engine.serve`).
The study process reaches it only through an executor
(:mod:`precsearch.study.executors`); ``doctor`` and ``train`` are commands that run it
in their own process. This package imports nothing when it is imported.
"""
