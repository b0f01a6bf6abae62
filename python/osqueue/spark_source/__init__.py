"""``osqueue`` as a PySpark Python data source: ``register(spark)``, then ``format("osqueue_python")``."""

from osqueue.spark_source.data_source import PYTHON_SOURCE_NAME, OsqueueDataSource, register
from osqueue.spark_source.options import OsqueueSparkError

__all__ = ["PYTHON_SOURCE_NAME", "OsqueueDataSource", "OsqueueSparkError", "register"]
