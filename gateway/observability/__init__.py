"""Observability: logs, access records, metrics and traces, beneath every other layer of the gateway.

Modules, one concept each:

* ``logs``: the two log formats (text, JSON) that escape caller text and scrub configured secrets;
* ``access_log``: the access record writer (``logging.access``), one line per request;
* ``startup``: what a process sets up once: its logging and its tracer;
* ``metrics``: the process's Prometheus registry; ``metrics_shared``: one scrape over every worker;
* ``tracing``: the facade the rest of the gateway calls (a no-op unless tracing is on);
* ``recorder``: the in-process span recorder behind that facade when tracing is on;
* ``span_entries``: the format a request's recorded spans are shipped in, and their rebuilding in the exporter;
* ``shipper``: hands the recorded spans to the exporter process, never blocking a request;
* ``exporter``: that process (``python -m gateway.observability.exporter``), over the OpenTelemetry SDK;
* ``otlp_encoder``: the exporter's OTLP protobuf encoding.

Nothing here imports the API, the loop, routing, providers, tools or stores
(``tests/test_architecture.py``): they import this package, and this package learns what it
needs from them through arguments and callbacks. Importing the package imports none of its modules.
"""
