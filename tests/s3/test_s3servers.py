"""The S3 test servers do real conditional writes, and stop without leaving anything behind."""

import json
import os
import signal
import subprocess
import sys

import pytest
from botocore.exceptions import ClientError

from tests.s3 import s3server
from tests.s3.fixtures import KINDS, SCRIPT, new_bucket, run_s3_server, s3_bucket, s3_server  # noqa: F401


def http_status(call):
    try:
        call()
    except ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"]
    return 200


# What each server answers to If-Match (docs/format.md §8): the right tag quoted (as S3 returns
# ETags) and unquoted, and any tag on a missing key.
IF_MATCH = {
    "moto": {"quoted": 200, "unquoted": 200, "missing": 404},
    "localstack": {"quoted": 200, "unquoted": 200, "missing": 404},
    "ceph": {"quoted": 412, "unquoted": 200, "missing": 412},  # RGW matches only the bare tag
}


@pytest.mark.parametrize("kind", KINDS)
def test_conditional_writes_then_clean_stop(kind):
    with run_s3_server(kind) as server:
        port = int(server.endpoint.rsplit(":", 1)[1])
        tree = s3server.descendants(server.proc.pid)
        assert tree, "the S3 server runs as a child of s3server.py"
        assert s3server.port_open(port)
        c = server.client()
        b = new_bucket(server, c)

        etag = c.put_object(Bucket=b, Key="k", Body=b"v1", IfNoneMatch="*")["ETag"]
        assert http_status(lambda: c.put_object(Bucket=b, Key="k", Body=b"x", IfNoneMatch="*")) == 412
        assert c.get_object(Bucket=b, Key="k")["Body"].read() == b"v1"

        expected = IF_MATCH[kind]
        assert http_status(lambda: c.put_object(Bucket=b, Key="k", Body=b"q", IfMatch=etag)) == expected["quoted"]
        etag = c.head_object(Bucket=b, Key="k")["ETag"]
        unquoted = http_status(lambda: c.put_object(Bucket=b, Key="k", Body=b"v2", IfMatch=etag.strip('"')))
        assert unquoted == expected["unquoted"]
        assert (
            http_status(lambda: c.put_object(Bucket=b, Key="missing", Body=b"x", IfMatch=etag)) == expected["missing"]
        )
        etag = c.head_object(Bucket=b, Key="k")["ETag"]
        etag2 = c.put_object(Bucket=b, Key="k", Body=b"v3", IfMatch=etag.strip('"') if kind == "ceph" else etag)["ETag"]
        assert etag2 != etag
        for stale in (etag, etag.strip('"')):  # a stale tag fails in either form
            assert http_status(lambda stale=stale: c.put_object(Bucket=b, Key="k", Body=b"x", IfMatch=stale)) == 412
        assert c.get_object(Bucket=b, Key="k")["Body"].read() == b"v3"

    assert server.proc.returncode == 0
    assert not s3server.port_open(port)
    assert not [p for p in tree if s3server.alive(p)], "child processes outlived s3server.py"


@pytest.mark.parametrize("kind", KINDS)
def test_server_starts_on_a_machine_that_never_ran_it_and_keeps_its_files_in_the_state_dir(kind, tmp_path):
    """An empty home and an empty state dir: what a new machine has. LocalStack then makes its TLS
    certificate at start (the code path a cached certificate once hid from CI); every file either
    server writes is under the state dir, which is gone after the stop, and the home stays empty."""
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(HOME=str(home), TMPDIR=str(tmp_path))  # defaults that would otherwise land in home or /tmp
    with run_s3_server(kind, state_dir=state, env=env) as server:
        c = server.client()
        b = new_bucket(server, c)
        c.put_object(Bucket=b, Key="k", Body=b"v", IfNoneMatch="*")
        assert c.get_object(Bucket=b, Key="k")["Body"].read() == b"v"
        assert (state / "server.log").is_file()
        if kind == "localstack":
            certs = list(state.rglob("server.test.pem"))
            assert certs and all(p.stat().st_size > 0 for p in certs), "LocalStack made no certificate in its state dir"
        outside = sorted(str(p) for p in tmp_path.rglob("*") if state not in p.parents and p not in (state, home))
        assert outside == [], f"{kind} wrote outside its state dir: {outside}"
    assert server.proc.returncode == 0
    assert not state.exists(), "the state dir outlived the server"
    assert list(home.iterdir()) == []


def test_state_dir_that_exists_is_refused(tmp_path):
    (tmp_path / "state").mkdir()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--kind", "moto", "--state-dir", str(tmp_path / "state")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "already exists" in done.stderr


def test_sigterm_stops_cleanly():
    with subprocess.Popen(
        [sys.executable, str(SCRIPT), "--kind", "moto"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        info = json.loads(proc.stdout.readline())
        assert info.keys() == {"endpoint", "region", "access_key", "secret_key", "kind"}
        tree = s3server.descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert not s3server.port_open(int(info["endpoint"].rsplit(":", 1)[1]))
    assert not [p for p in tree if s3server.alive(p)]


def test_failed_start_is_reported(tmp_path, monkeypatch):
    fake = tmp_path / "fakepython"
    fake.write_text("#!/bin/sh\necho 'no moto here' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("OSQUEUE_MOTO_PYTHON", str(fake))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the failed server's log dir is kept: keep it in here
    # stdin stays open: EOF would mean "stop" and could win the race against the failure.
    with subprocess.Popen(
        [sys.executable, str(SCRIPT), "--kind", "moto"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        out, err = proc.stdout.read(), proc.stderr.read()
        assert proc.wait(60) == 1 and out == ""
    assert "exited with code 3" in err and "no moto here" in err


@pytest.mark.parametrize("kind", KINDS)
def test_fixture_gives_fresh_buckets(kind, s3_bucket, s3_server):  # noqa: F811
    a, b = s3_bucket(kind), s3_bucket(kind)
    assert a.name != b.name and a.server is b.server is s3_server(kind)
    a.client.put_object(Bucket=a.name, Key="k", Body=b"1")
    assert b.client.list_objects_v2(Bucket=b.name)["KeyCount"] == 0
