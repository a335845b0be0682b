"""``python -m cpe.benchmark``: the same as ``cpe bench``."""

import sys

from cpe.benchmark import run

sys.exit(run.main(prog="python -m cpe.benchmark"))
