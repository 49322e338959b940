"""Making many objects at once without the cyclic garbage collector walking them for nothing.

The collector runs every few hundred new objects and walks the young ones; an object that
survives is walked again on its way to the oldest generation. Validating a plan and starting
a wide level of tasks each make tens of thousands of objects in one go that none of those
walks can free: the plan's graph lives as long as the run, a worker as long as its task.
At 10,000 tasks the walks cost as much as the work itself. :func:`bulk` pauses the collector
while they are made and, for many, puts them straight into its oldest generation.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["MANY", "bulk"]

#: From this many (tasks, workers), what is made goes to the oldest generation (see bulk).
MANY = 1000


@contextlib.contextmanager
def bulk(count: int) -> Iterator[None]:
    """Pause the collector while the body makes objects for ``count`` tasks that will outlive
    the next collections (resumed as it was, also on an error). The body must not run code
    of anyone else's: garbage it made meanwhile would wait for a later collection.

    From :data:`MANY`, what the body made is put in the oldest generation at once
    (``gc.freeze`` then ``gc.unfreeze``: every tracked object there, without walking any),
    where only a full collection walks it; an object freed by its last reference going away
    (a worker whose task ended) is never walked at all. The young generations are collected
    first, so that no garbage made before goes along. Not when something else froze objects
    (a pre-fork server, say): those stay frozen. And not when the collector is off: it is
    left off.
    """
    if not gc.isenabled():
        yield
        return
    promote = count >= MANY and not gc.get_freeze_count()
    if promote:
        gc.collect(1)
    gc.disable()
    try:
        yield
    except BaseException:
        gc.enable()
        raise
    if promote:
        gc.freeze()
        gc.unfreeze()
    gc.enable()
