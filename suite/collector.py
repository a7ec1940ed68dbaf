"""Python's cyclic garbage collector and the objects that live as long as a run.

A text run holds about 600,000 objects that live as long as the process: the modules of torch,
transformers, TextAttack, NLTK and flair, the model, the data. CPython's collector scans every
one of them at each full collection (0.1–0.3 s each on a 2-core CPU) and at interpreter exit,
and finds nothing to free among them. ``gc.freeze`` moves the objects alive at one moment out of
the collector's scans; what is created after it is collected as before, and reference counting
frees every object, frozen or not, the moment nothing refers to it. Measured by
``bench/collector.py``; the table is in ``docs/recipes.md`` (start-up and the collector).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: The youngest generation's threshold while a command starts (imports, loading): collections
#: every 50,000 new container objects instead of CPython's 700, so the full collections that
#: the objects of torch's, transformers' and TextAttack's imports set off are 70 times rarer.
STARTUP_THRESHOLD = 50_000
#: The thresholds to give back when the command's first run begins (empty: no start under way).
_starting: list[tuple[int, int, int]] = []


@contextmanager
def quick_start() -> Iterator[None]:
    """While a command starts or a model loads, the collector runs rarely; back to its
    thresholds when the command's first run begins (:func:`long_lived_frozen`) or when the
    block ends. Within a block already under way (a model loaded while the command starts) it
    changes nothing.

    A command starts with seconds of imports and loading whose objects all live as long as the
    process, and CPython scans them again at every full collection: 7–8 full collections,
    0.7–1.0 s, before a text run's first example (``bench/collector.py``). Garbage in reference cycles made
    meanwhile waits a little longer for its collection (reference counting frees the rest at
    once, as always). The suite's long loops (an evaluation's run, training, certification)
    begin in :func:`long_lived_frozen`, so none runs under the raised threshold. Left alone
    where the caller disabled the collector.
    """
    if not gc.isenabled() or _starting:
        yield
        return
    _starting.append(gc.get_threshold())
    gc.set_threshold(STARTUP_THRESHOLD, *_starting[0][1:])
    try:
        yield
    finally:
        _started()


def _started() -> None:
    """The start is over: the collector's own thresholds again."""
    if _starting:
        gc.set_threshold(*_starting.pop())


#: Whether a :func:`long_lived_frozen` block of the suite's own is under way (it unfreezes at its end).
_holding: list[bool] = []


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Within the block, the collector does not scan the objects alive when it starts.

    On leaving they go back to the collector's oldest generation (``gc.unfreeze``), so a
    reference cycle among them that became garbage during the block is collected as it would
    have been, only later. The block leaves the collector alone where its caller manages it:
    collection disabled, or objects frozen already (a server that froze before forking keeps
    its frozen objects frozen). A command's start (:func:`quick_start`) ends here.

    Inside a block of its own (a text recipe's searches within a run), it freezes the objects
    made since the outer block began as well (the recipe, WordNet's index, the memo of scored
    texts and the records of earlier batches: 400,000–550,000 objects for PWWS), and the outer
    block gives them all back at its end. Without it each full collection during PWWS's searches
    scanned them again: 4.8 s of full collections in a 71 s run at 960 sentences, 1.4 s with it
    (this project's 2-core CPU, ``bench/collector.py``; ``docs/recipes.md``). The searches leave
    no reference cycles behind (:meth:`~suite.attacks.text.cooperative.Search.release`), so
    the freeze holds back no garbage of theirs: frozen objects are still freed by reference
    counting, only cycles wait for the run's end.
    """
    _started()
    if _holding:
        gc.freeze()
        yield
        return
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    _holding.append(True)
    try:
        yield
    finally:
        _holding.pop()
        gc.unfreeze()


def hold_made_since() -> None:
    """Inside a :func:`long_lived_frozen` block of the suite's own, freeze what was made since
    its start (or since the last such call), as a nested block does; the outer block gives it
    all back at its end. Elsewhere it does nothing. A text attack's stream of searches calls
    it every few hundred finished examples: the memo of scored texts and the records of the
    searches before them live as long as the run."""
    if _holding:
        gc.freeze()


def before_exit() -> None:
    """For a command about to end its process: no scan of the objects alive now at exit.

    The interpreter's shutdown runs full collections over every object to finalise cycles:
    1.7 s after a text run and 1.3 s after an image run on a 2-core CPU, 0.3 s with this
    (``bench/collector.py``). Nothing the command wrote waits on them: its files are closed
    (results are written atomically), logging's handlers are flushed by logging's own exit
    hook, the standard streams are flushed at shutdown, and the operating system takes back
    the memory. Only a reference cycle whose ``__del__`` does more than free memory would go
    unfinalised; the suite has closed its files and released its output directory's lock
    before this point. Only the command-line entry point calls this: a library call never
    decides how its caller's process ends.
    """
    gc.freeze()
