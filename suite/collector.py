"""Python's cyclic garbage collector and the objects that live as long as a run.

A text run holds about 600,000 objects that live as long as the process: the modules of torch,
transformers, TextAttack, NLTK and flair, the model, the data. CPython's collector scans every
one of them at each full collection (several per run, 0.1–0.4 s each on a 2-core CPU) and at
interpreter exit, and finds nothing to free among them. ``gc.freeze`` moves the objects alive
at one moment out of the collector's scans (the Python docs' advice for long-lived objects);
what is created after it is collected as before, and reference counting frees every object
frozen or not the moment nothing refers to it. Measured in ``docs/attacks/measured.md``
(start-up and exit of a text run).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Within the block, the collector does not scan the objects alive when it starts.

    On leaving they go back to the collector's oldest generation (``gc.unfreeze``), so a
    reference cycle among them that became garbage during the block is collected as it would
    have been, only later. The block leaves the collector alone where its caller manages it:
    collection disabled, or objects frozen already (a server that froze before forking keeps
    its frozen objects frozen).
    """
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def before_exit() -> None:
    """For a command about to end its process: no scan of the objects alive now at exit.

    The interpreter's shutdown runs full collections over every object (1.5 s after a text
    run, 0.4 s after an image run on this CPU) to finalise cycles. The command has closed and
    flushed everything it wrote (results are written atomically), logging's handlers are
    flushed by their own exit hook, and the operating system takes back the memory, so those
    scans have nothing left to do. Only the command-line entry point calls this: a library
    call never decides how its caller's process ends.
    """
    gc.freeze()
