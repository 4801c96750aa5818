"""The study process: Optuna's side of the boundary, which never imports TensorFlow.

From the command line or a notebook to the answer: the options of a run, the search
space built from the model's description, the storage, the objective and the loop of
trials, the executors that run trials (a worker process, or this one), the
confirmation's decision, and the notebook API. (It is not called ``search``: that name
is :func:`precsearch.search`, the notebook's function.) This package imports nothing
when it is imported.
"""
