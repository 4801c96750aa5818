"""Files and text for people, from a study's storage alone: no TensorFlow.

The trials table and the policy's manifest (:mod:`.export`), text tables
(:mod:`.report`), figures and ``report.html`` (:mod:`.figures`, :mod:`.html_report`),
and TensorBoard runs (:mod:`.tensorboard_logs`). This package imports nothing when it
is imported.
"""
