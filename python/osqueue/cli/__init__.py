"""The ``osqueue`` command line: inspect, produce to, tail and garbage-collect a queue.

Every command takes the queue's store root as ``PATH`` (``/dir``, ``file:/dir``,
``s3://bucket/prefix``, ``s3a://bucket/prefix``; docs/format.md §1) plus ``--manifest-path``,
``--data-prefix`` and repeatable ``--store-option KEY=VALUE`` (the ``fs.s3a.*`` settings of
:class:`osqueue.store.S3Store`; credentials otherwise come from boto3's default chain).

Each command is a module here (inspect.py, produce.py, tail.py, gc.py, seal.py, subscriptions.py); app.py holds the group.
Failures print one line, ``osqueue: error: <message>``, on stderr: exit code 2 for osqueue's
own errors (bad path, unreachable store, corrupt manifest, ...), 1 for anything unexpected.
``osqueue --debug ...`` adds the traceback.
"""

from osqueue.cli import gc, inspect, produce, retention, seal, subscriptions, tail  # noqa: F401  (each module adds its command to the group)
from osqueue.cli.app import cli, main

__all__ = ["cli", "main"]
