"""``workers=``: how many threads fill one large output, as in ``scipy.fft``.

The count is a positive int, or ``-k`` for ``os.cpu_count() + 1 - k`` (``-1``:
every CPU); ``None`` is the default of the innermost ``set_workers`` block of the
calling thread (or task), 1 outside any. A library that depends on cpe therefore
never gets threads it did not ask for. Every part of an output is a range of its
rows, and a row's value never depends on the call that fills it, so the result
is the same bits whatever the count.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import operator
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

# Per thread and per asyncio task: a new thread starts with the default, 1 (where
# threads inherit the context of the thread that starts them, as by default in
# free-threaded Python 3.14, with that thread's).
_DEFAULT: contextvars.ContextVar[int] = contextvars.ContextVar("cpe_workers", default=1)
# More threads than this would cost more to start than any output could give them.
_MOST = 256
# A part of an output has at least this many bytes: smaller outputs are filled on
# the calling thread, as starting a thread costs more than it would save them.
PART_BYTES = 4 * 1024 * 1024


def part_count(workers: int, items: int, nbytes: int) -> int:
    """How many parts an output of ``nbytes`` in ``items`` indivisible pieces (rows)
    is split into for ``workers`` threads: 1 unless each part gets PART_BYTES, and
    never more than the CPUs."""
    return max(1, min(workers, _cpus(), items, nbytes // PART_BYTES))


# The parameter's text in the docstrings of the functions that take it.
WORKERS_PARAMETER = """workers : int, optional
        Threads that fill a large output, as in ``scipy.fft``: a positive count,
        or ``-k`` for ``os.cpu_count() + 1 - k`` (``-1``: every CPU). ``None``
        (the default) is the count of the enclosing `set_workers` block, 1
        outside any. Only outputs of several MiB are split (by rows); the values
        are the same bits whatever the count."""


def part_bounds(items: int, parts: int, item_bytes: int, addresses: tuple[int, ...]) -> list[int]:
    """The first items (rows) of the parts of an output, and ``items`` last: equal
    shares, each first row moved up to the first one whose bytes start a cache line
    in every table (at ``addresses``), so that no two threads store into one line.
    The offsets repeat within 64 rows; a part keeps at least 15/16 of its rows (a
    row so wide that this shift is needed shares at most one line)."""
    reach = min(64, max(1, items // parts // 16))
    bounds = [0]
    for k in range(1, parts):
        first = items * k // parts
        for row in range(first, min(first + reach, items)):
            if all((address + row * item_bytes) % 64 == 0 for address in addresses):
                first = row
                break
        bounds.append(max(first, bounds[-1]))
    bounds.append(items)
    return bounds


def as_workers(workers: Any) -> int:
    """``workers`` as a count of threads (see the module), or the error naming it."""
    if workers is None:
        return _DEFAULT.get()
    if type(workers) is int and 1 <= workers <= _MOST:
        return workers
    if isinstance(workers, bool) or not hasattr(workers, "__index__"):
        raise TypeError(
            f"workers must be an int (a count of threads, or -1 for every CPU), "
            f"got {type(workers).__name__}"
        )
    count = operator.index(workers)
    if count < 0:
        count += _cpus() + 1
    if count < 1:
        raise ValueError(
            f"workers must be a positive count of threads, or -k for os.cpu_count() + 1 - k "
            f"(-1: every CPU), got {workers}"
        )
    return min(count, _MOST)


@functools.cache
def _cpus() -> int:
    """os.cpu_count(), read once: it reads a file on Linux, which would cost a small
    call more than its fill."""
    return os.cpu_count() or 1


def get_workers() -> int:
    """The count of threads that ``workers=None`` means here (see `set_workers`).

    Examples
    --------
    >>> import cpe
    >>> cpe.get_workers()
    1
    """
    return _DEFAULT.get()


@contextlib.contextmanager
def set_workers(workers: int) -> Iterator[None]:
    """Set the default of ``workers=`` for the calls inside the block.

    As ``scipy.fft.set_workers``: the default belongs to the calling thread (and
    asyncio task), so other threads keep theirs, and blocks nest.

    Parameters
    ----------
    workers : int
        A positive count of threads, or ``-k`` for ``os.cpu_count() + 1 - k``
        (``-1``: every CPU).

    Examples
    --------
    >>> import cpe, os
    >>> with cpe.set_workers(2):
    ...     cpe.get_workers()
    2
    >>> with cpe.set_workers(-1):
    ...     cpe.get_workers() == os.cpu_count()
    True
    >>> cpe.get_workers()
    1
    """
    if workers is None:
        raise TypeError(
            "workers must be an int (a count of threads, or -1 for every CPU), got None"
        )
    token = _DEFAULT.set(as_workers(workers))
    try:
        yield
    finally:
        _DEFAULT.reset(token)


def run_parts(work: Callable[[int], None], count: int) -> None:
    """``work(k)`` for every ``k < count``: the parts of one output, which cannot
    fail and may be done twice (they write the same values). Part ``k > 0`` runs
    on a thread of its own, part 0 on the calling thread, which then waits for
    every thread and does each part whose thread did not finish it (a thread
    that could not be started, or died before its part: a tracing hook that
    raises), so a part costs time, never a wait for ever nor a hole. Returns once
    every part is done and no thread is left writing into the caller's memory;
    an interrupt of the calling thread meanwhile (a KeyboardInterrupt) is raised
    then, and so is an exception ``work`` raised."""
    if count == 1:  # the calling thread alone: no thread to wait for
        work(0)
        return
    done = [False] * count
    errors: list[BaseException] = []

    def part(k: int) -> None:
        work(k)
        done[k] = True

    threads: list[threading.Thread] = []
    try:
        for k in range(1, count):
            thread = threading.Thread(target=part, args=(k,), name=f"cpe-part-{k}", daemon=True)
            threads.append(thread)
            thread.start()
    except Exception:  # no thread to be had: the calling thread does its part below
        pass
    except BaseException as exc:  # an interrupt: the output is finished first
        errors.append(exc)
    _surely(work, 0, errors)
    _join(threads, errors)
    for k in range(1, count):
        if not done[k]:
            _surely(work, k, errors)
    if errors:
        raise errors[0]


def _surely(work: Callable[[int], None], k: int, errors: list[BaseException]) -> None:
    """``work(k)`` done, again if an interrupt (a KeyboardInterrupt) stopped it;
    what stopped it goes to ``errors``."""
    while True:
        try:
            work(k)
            return
        except Exception as exc:  # noqa: PERF203 (work's own error: done again, it would recur)
            errors.append(exc)
            return
        except BaseException as exc:
            errors.append(exc)


def _join(threads: list[threading.Thread], errors: list[BaseException]) -> None:
    """Wait for every started thread, through interrupts, which go to ``errors``."""
    for thread in threads:
        while thread.ident is not None:  # (a thread whose start failed never runs)
            try:
                thread.join()
                break
            except BaseException as exc:
                errors.append(exc)
