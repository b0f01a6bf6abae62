"""One spooled Python producer process for the outage chaos test (tests/faults/test_outage_chaos.py).

    python outage_producer.py CONFIG_JSON

CONFIG_JSON: bucket, prefix, endpoint, access_key, secret_key, region, spool_dir, name, durable_log,
stop_file, pace_s. Produces one-entry calls ``<name>-<pid>-<i>`` with ``durability="local"``; after
each ``produce()`` returns (the call is fsync'd in the spool) it appends the value to ``durable_log``
(one line, flushed: the page cache survives kill -9). The pid keeps a restarted process's values
apart from those of the one it replaces: a kill -9 between ``produce()`` and the log line leaves a
value spooled (and replayed) but unlogged, which a restart counting from the log would reuse. When
``stop_file`` exists it closes the producer (every spooled call in the queue) and exits 0."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from osqueue.producer import Producer  # noqa: E402
from osqueue.store import S3Store  # noqa: E402


def main(config_path: str) -> None:
    cfg = json.loads(pathlib.Path(config_path).read_text(encoding="utf-8"))
    log = pathlib.Path(cfg["durable_log"])
    store = S3Store(
        cfg["bucket"],
        cfg["prefix"],
        options={
            "fs.s3a.endpoint": cfg["endpoint"],
            "fs.s3a.path.style.access": "true",
            "fs.s3a.access.key": cfg["access_key"],
            "fs.s3a.secret.key": cfg["secret_key"],
            "fs.s3a.endpoint.region": cfg["region"],
            "fs.s3a.connection.establish.timeout": "1s",
            "fs.s3a.connection.timeout": "2s",
        },
    )
    producer = Producer(store=store, spool_dir=cfg["spool_dir"], durability="local", flush_interval=0.05)
    stop = pathlib.Path(cfg["stop_file"])
    with log.open("a", encoding="utf-8") as out:
        i = 0
        while not stop.exists():
            value = f"{cfg['name']}-{os.getpid()}-{i}"
            producer.produce([value.encode()])  # returns once fsync'd: durable locally
            out.write(value + "\n")
            out.flush()
            i += 1
            time.sleep(cfg["pace_s"])  # a steady load, not a wait for anything
    producer.close()
    store.close()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
