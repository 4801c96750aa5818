"""The ``precsearch`` command line (:func:`main`): the parser (:mod:`.parser`) and what
each command does (:mod:`.commands`)."""

from __future__ import annotations

from precsearch.cli.parser import build_parser, main

__all__ = ["build_parser", "main"]
