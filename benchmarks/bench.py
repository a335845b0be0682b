"""Run the side-by-side benchmark from a checkout: the same as ``cpe bench``.

    python benchmarks/bench.py [--quick] [--json PATH] [--only ...]

The benchmark itself lives in the package (``cpe.benchmark``), so that an
installed cpe can run it too.
"""

import sys

from cpe.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
