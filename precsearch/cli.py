"""The ``precsearch`` command line.

Only argument parsing and printing live here; each command calls the module that does
the work. TensorFlow is imported only by commands that build or train a model, so
``precsearch --help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from precsearch import __version__
from precsearch.errors import UserInputError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like a UserInputError
        self.exit(2, f"precsearch: error: {message} (see precsearch --help)\n")


def _cmd_policy(args: argparse.Namespace) -> int:
    from precsearch.policy import load_policy

    policy = load_policy(args.file)
    print(f"{args.file}: valid {policy.to_dict()['format']} policy")
    print(f"  default      {policy.default}")
    for name, dtype in policy.types.items():
        print(f"  type  {name:<24} {dtype}")
    for name, dtype in policy.layers.items():
        print(f"  layer {name:<24} {dtype}")
    scale = policy.loss_scale
    kind = "dynamic" if scale.dynamic else "fixed"
    print(f"  loss scale   {kind}, initial {scale.initial_scale:g}, growth {scale.growth_steps}")
    rule = f"lr rule {policy.lr_rule}, base {policy.base_batch_size}"
    print(f"  batch size   {policy.batch_size} ({rule})")
    print(f"  jit_compile  {policy.jit_compile}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every sub-command."""
    parser = _Parser(
        prog="precsearch",
        description="Search for the fastest mixed-precision policy that still trains like FP32.",
    )
    parser.add_argument("--version", action="version", version=f"precsearch {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    cmd = commands.add_parser("policy", help="check a policy file and print what it says")
    cmd.add_argument("file", help="a policy JSON file (precsearch.policy/1)")
    cmd.set_defaults(func=_cmd_policy)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``precsearch`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except UserInputError as exc:
        print(f"precsearch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("precsearch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
