"""A one-node Ceph cluster behind a RADOS Gateway, every file in one directory (run by s3server.py --kind ceph).

    python ceph_cluster.py WORKDIR HOST RGW_PORT MON_PORT

One monitor, one OSD on memstore (objects live in memory), cephx keys made here, an RGW on
HOST:RGW_PORT and the S3 user test/test. The daemons run in the foreground as children of this
supervisor (so s3server.py's SIGTERM to the process tree reaches all of them); when one of them
dies the rest are stopped and this exits 1. Stdlib only; the programs come from Debian's
radosgw, ceph-mon, ceph-osd and ceph-common packages.
"""

import signal
import subprocess
import sys
import uuid
from pathlib import Path

CONF = """[global]
fsid = {fsid}
mon host = v2:{host}:{mon_port}
mon initial members = a
public addr = {host}
cluster addr = {host}
ms bind ipv6 = false
ms bind msgr1 = false
keyring = {work}/keyring
run dir = {work}/run
admin socket = {work}/run/$name.asok
log file = {work}/log/$name.log
mon data = {work}/mon/$cluster-$id
osd data = {work}/osd/$cluster-$id
osd objectstore = memstore
memstore device bytes = 2147483648
# One OSD: one replica, few placement groups (RGW makes ~7 pools), no disk-space alarms.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon max pg per osd = 1000
mon data avail warn = 1
mon data avail crit = 0

[client.rgw]
rgw frontends = beast endpoint={host}:{rgw_port}
rgw enable usage log = false
# Stopped together with the monitor and OSD: do not wait for them on the way out.
rgw exit timeout secs = 1
"""
KEYS = (  # entity, caps
    ("client.admin", ("mon", "allow *", "osd", "allow *", "mgr", "allow *")),
    ("osd.0", ("mon", "allow profile osd", "osd", "allow *")),
    ("client.rgw", ("mon", "allow rw", "osd", "allow rwx")),
)


def main(work, host, rgw_port, mon_port):
    work = Path(work)
    fsid = str(uuid.uuid4())
    for d in ("run", "log", "mon", "osd/ceph-0"):
        (work / d).mkdir(parents=True, exist_ok=True)
    conf, keyring, monmap = str(work / "ceph.conf"), str(work / "keyring"), str(work / "monmap")
    Path(conf).write_text(CONF.format(fsid=fsid, host=host, rgw_port=rgw_port, mon_port=mon_port, work=work))
    c = ["-c", conf]

    def run(*argv):
        subprocess.run(argv, check=True, stdout=sys.stderr)

    run("ceph-authtool", "--create-keyring", keyring, "--gen-key", "-n", "mon.", "--cap", "mon", "allow *")
    for name, caps in KEYS:
        run(
            "ceph-authtool",
            keyring,
            "--gen-key",
            "-n",
            name,
            *[a for i in range(0, len(caps), 2) for a in ("--cap", caps[i], caps[i + 1])],
        )
    run("monmaptool", "--create", "--fsid", fsid, "--addv", "a", f"[v2:{host}:{mon_port}]", monmap)
    run("ceph-mon", *c, "--mkfs", "-i", "a", "--monmap", monmap, "--keyring", keyring)

    daemons = []
    stopping = []

    def stop(*_):
        stopping.append(True)
        for d in daemons:
            d.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    daemons.append(subprocess.Popen(["ceph-mon", *c, "-f", "-i", "a"]))
    run("ceph", *c, "osd", "create")
    run("ceph-osd", *c, "--mkfs", "-i", "0")
    daemons.append(subprocess.Popen(["ceph-osd", *c, "-f", "-i", "0"]))
    daemons.append(subprocess.Popen(["radosgw", *c, "-f", "-n", "client.rgw"]))
    # As client.admin: client.rgw's admin socket is the gateway's.
    run(
        "radosgw-admin",
        *c,
        "user",
        "create",
        "--uid",
        "test",
        "--display-name",
        "test",
        "--access-key",
        "test",
        "--secret-key",
        "test",
    )
    while not stopping and all(d.poll() is None for d in daemons):
        try:
            daemons[0].wait(1)
        except subprocess.TimeoutExpired:
            pass
    stop()
    for d in daemons:
        d.wait()
    return 0 if len(stopping) > 1 else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
