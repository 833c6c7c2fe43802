"""The garbage collector's settings for a serving worker.

Python collects its youngest generation whenever 700 more container objects are alive than at the
last collection. A gateway holding 50 requests in flight keeps about that many alive at any
moment, so under load it collected every few requests, each time walking every in-flight request's
objects, and regularly walked the whole heap, start-up objects included, with a pause each time: a
real share of a worker's CPU (bench/README.md, "Garbage collection"). Requests free their objects
by reference counting; the collector only has to find
cycles, which are rare on the request path.

``settle`` runs once, when a worker has started (its runtime built): it collects, freezes what
exists then (modules, config, clients: never garbage, no longer walked by any collection) and
raises the youngest generation's threshold to ``server.gc_young_threshold``. ``0`` keeps Python's
settings.
"""

from __future__ import annotations

import gc


def settle(young_threshold: int) -> bool:
    """Collect, freeze the start-up objects and set the threshold; False (nothing changed) for 0."""
    if not young_threshold:
        return False
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, older, oldest)
    return True
