"""Every Spark line a connector is built for, oldest first, as (Spark line, Scala binary version).

Written here once: build.sbt (``sparkLines``), the wheel's build backend and ``osqueue._jar`` read
this list. A new line also needs its sbt project in build.sbt and its pyspark in
.ci/pyspark-lines.env; tests/python/test_spark_lines.py fails until they agree with this list.
"""

SPARK_LINES: tuple[tuple[str, str], ...] = (
    ("3.5", "2.12"),
    ("3.5", "2.13"),
    ("4.0", "2.13"),
    ("4.1", "2.13"),
    ("4.2", "2.13"),
)
