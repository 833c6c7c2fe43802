"""What the surfaces that run the tool loop share: their common run (``surface.LoopSurface``), the route a
request names and starting its loop (``planning``), resuming a paused one (``resume``), and the request
options read the same way on each (``stream_options``)."""
