"""``python -m precsearch`` runs the command line."""

import sys

from precsearch.cli import main

sys.exit(main())
