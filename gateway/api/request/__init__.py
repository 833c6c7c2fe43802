"""One request on its way through the lifecycle: its ``Work`` (``lifecycle``), the record it leaves
(``exchange``: access record, span, metrics) and the error a failure becomes (``errors``)."""
