"""Run the side-by-side benchmark from a checkout: ``cpe bench``, then the targets.

    python benchmarks/bench.py [--quick] [--json PATH] [--only ...]

The benchmark itself lives in the package (``cpe.benchmark``), so that an
installed cpe can run it too; the performance issue's targets live here, beside
the results (``targets.py``), and are printed after the report.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from targets import evaluate_targets

from cpe.benchmark import main

if __name__ == "__main__":
    sys.exit(main(prog="python benchmarks/bench.py", evaluate=evaluate_targets))
