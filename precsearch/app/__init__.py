"""A whole study, from the command line or a notebook: the layer above both sides.

:mod:`precsearch.app.run` runs a study from start to end (options, storage, the
probes, the trials, the confirmation, the files for people); :mod:`precsearch.app.api`
is the notebook's view of it. They sit above :mod:`precsearch.study` (Optuna's side)
and :mod:`precsearch.results` (what is shown and written), which import neither this
package nor each other. This package imports nothing when it is imported.
"""
