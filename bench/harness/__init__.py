"""The benchmark harness of issue 7: a development tool, run from a source checkout (bench/README.md).

    python -m bench.harness run [--quick] [--only NAMES] ...   # measure, write bench-<time>.json/.md/.png
    python -m bench.harness plots RESULTS.json                 # redraw a results file's plots

Each benchmark runs against a moto server started with ``tests/s3/s3server.py --kind moto``
(or an endpoint given with ``--endpoint``), optionally through a loopback proxy that sleeps a
fixed time before forwarding each request (``--latency-ms``; the proxy runs in its own process
so it does not compete with the measured code for the GIL). Every figure is the median over
repeated runs together with its spread (min, max, and the quartiles).

One module per role:

* ``environment``: the S3 server (and the proxy process) the benchmarks use, the machine's facts,
  the settings of a run;
* ``proxy``: the latency proxy (standard library only; its own process);
* ``client_benchmarks``: the native Python client: ``contention`` (1, 2, 4, 8 producers on one
  manifest), ``depth`` (append cost vs queued entries), ``requests`` (object-store requests per
  1,000 entries, counted by :class:`CountingStore`);
* ``jvm_benchmarks``: ``py_vs_jvm`` (Python producer vs the JVM core's) and ``raw_put`` (the JVM
  producer vs raw PUTs of the same objects);
* ``spark_benchmarks``: one SparkSession for ``spark_file`` (source vs Spark's file source) and
  ``latency`` (produce -> row visible in ``foreachBatch``);
* ``kafka``: ``kafka`` (source vs Spark's Kafka source) with its Maven jar fetch and KRaft broker;
* ``report``: the goals table, the Markdown report and the plots;
* ``run``: runs the selected benchmarks and writes the results; ``__main__``: the command line.

Nothing here is part of the installed ``osqueue`` package; it imports ``osqueue`` like any user.
"""
