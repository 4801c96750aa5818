"""The plain records every part of precsearch exchanges; each serialises to JSON.

Nothing here runs a model or a study: these are the nouns of the data flow (ARCHITECTURE.md),
shared by the engine and by plugins, so a plugin author imports this module and
:mod:`precsearch.plugins` and nothing else. It imports nothing of precsearch's but
:mod:`precsearch.errors`.

The records stored on their own (``ModelInfo``, ``Reference`` and ``Confirmation``, in a
study's storage or a cache file) carry a ``"record"`` format tag; a ``TrialResult``, stored
in its trial's attributes, has none. Reading any of them ignores keys it does not know, so
that a study written by a newer precsearch still loads. A policy file
(:mod:`precsearch.policy`) is the exception: it is written by people, so an unknown key
there is a typo and an error.

The messages between the study process and its worker, one dataclass per command and
per reply, are :mod:`precsearch.records.messages` (not re-exported here: plugins never
send them).
"""

from __future__ import annotations

from precsearch.records._json import json_safe
from precsearch.records.decisions import (
    GRAPH_REWRITE,
    PARTS,
    PEERS,
    Confirmation,
    Measurement,
    Winner,
)
from precsearch.records.model import (
    CASTS,
    EXACT_INTEGERS,
    GROUP_BY,
    LR_RULES,
    SHORT_DTYPES,
    ModelInfo,
    ModelSpec,
    SpaceOptions,
    parse_dtypes,
    resolve_lr_rule,
)
from precsearch.records.results import (
    Budget,
    Fidelity,
    Reference,
    StepStats,
    TrialResult,
    downsample,
)

__all__ = [
    "CASTS",
    "GRAPH_REWRITE",
    "PARTS",
    "PEERS",
    "GROUP_BY",
    "LR_RULES",
    "EXACT_INTEGERS",
    "SHORT_DTYPES",
    "Budget",
    "Confirmation",
    "Fidelity",
    "Measurement",
    "ModelInfo",
    "ModelSpec",
    "Reference",
    "SpaceOptions",
    "StepStats",
    "TrialResult",
    "Winner",
    "downsample",
    "json_safe",
    "parse_dtypes",
    "resolve_lr_rule",
]
