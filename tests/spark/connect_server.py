"""A Spark Connect server with the osqueue connector, started as a user starts one from PySpark:
`configure_spark_with_osqueue(SparkSession.builder.remote("local[2]"))` (the server runs in this
process's JVM). Run by tests/spark/test_connect.py as its own process, so that the tests' Connect
client is never mixed with the classic session the other Spark tests share in the pytest process.

`python connect_server.py PORT` prints `ready` once the server listens on 127.0.0.1:PORT and
exits when its stdin closes. On PySpark 4 the server requires the token in
$SPARK_CONNECT_AUTHENTICATE_TOKEN (the caller sets it; PySpark makes one up otherwise).

`getOrCreate()` starts the server, then makes this process a client of `sc://localhost` at the
default port (15002), not PORT; so it runs in a thread of its own, never used, and readiness is the
server accepting connections on PORT with the session it serves made (PySpark makes that session
after the server starts listening: a request in between fails, on 3.5 at least).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from pyspark.sql import SparkSession  # noqa: E402

from osqueue.spark import configure_spark_with_osqueue  # noqa: E402


def main() -> None:
    port = sys.argv[1]
    # Static settings only: a local Connect builder passes its runtime SQL settings to the client it
    # makes for this process (on the default port, not PORT); the tests' client sets its own.
    builder = (
        SparkSession.builder.remote("local[2]")
        .appName("osqueue-connect-tests")
        .config("spark.connect.grpc.binding.port", port)
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.python.authenticate.socketTimeout", "120s")  # Python workers under load (support.py)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )
    configure_spark_with_osqueue(builder)
    failed: list[BaseException] = []

    def start() -> None:
        try:
            builder.getOrCreate()
        except BaseException as e:  # noqa: BLE001 - reported below if the server never came up
            failed.append(e)

    threading.Thread(target=start, daemon=True).start()
    while True:  # the caller bounds the wait
        if failed:
            raise SystemExit(f"the Connect server did not start: {failed[0]!r}") from failed[0]
        if SparkSession._instantiatedSession is not None:  # the classic session the server serves
            try:
                socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
                break
            except OSError:
                pass
        time.sleep(0.2)
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes the pipe (or dies)


if __name__ == "__main__":
    main()
