"""Kept for plugins written against the README before the layout split the package:
``from precsearch.space import SHORT_DTYPES`` was its documented import. The names now
live in :mod:`precsearch.records`; the search space itself is :mod:`precsearch.study.space`.
"""

from __future__ import annotations

from precsearch.records import SHORT_DTYPES

__all__ = ["SHORT_DTYPES"]
