"""The side-by-side benchmark of cpe against the code users write, and the floors.

``main`` is what ``cpe bench`` and ``python -m cpe.benchmark`` run; see
``cpe.benchmark.run`` for the method and the options.
"""

from cpe.benchmark.run import main

__all__ = ["main"]
