"""A JFR profile of the spark_file comparison (supplementary; not part of `python -m bench.harness run`).

    PYTHONPATH=python .venv/bin/python bench/tools/profile_spark_file.py [MiB, default 1024]

Builds the same data set as `python -m bench.harness run --only spark_file`, warms both sources up, then records
JFR (`jcmd <driver pid> JFR.start settings=profile`) over 3 osqueue reads and, separately, 3 text
reads, and prints the top frames and selected inclusive frames of `jdk.ExecutionSample`. JFR's
profile settings slow both sides down (allocation events): read the shares, not the times.
Needs `jcmd` and `jfr` from the JDK.
"""

import collections
import pathlib
import re
import subprocess
import sys

sys.path[:0] = [
    str(pathlib.Path(__file__).resolve().parents[2] / "python"),
    str(pathlib.Path(__file__).resolve().parents[2]),
]
from bench.harness import spark_benchmarks as b  # noqa: E402 (after the sys.path setup)
from bench.harness.environment import Settings  # noqa: E402

s = Settings(False, 0, print, spark_mb=int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
h = b.SparkHolder(s)
ds = b.spark_dataset(h, s)
spark = h.spark
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()


def text():
    df = spark.readStream.format("text").load(str(ds.text_dir)).select("value")
    return b.stream_to_noop(spark, df, h.checkpoint("text"))


b.osqueue_read(h, ds)
text()
out = {}
for name, fn in (("osqueue", lambda: b.osqueue_read(h, ds)), ("text", text)):
    f = str(h.tmp / f"prof-{name}.jfr")
    subprocess.run(
        ["jcmd", str(pid), "JFR.start", f"name={name}", "settings=profile", f"filename={f}"],
        check=True,
        capture_output=True,
    )
    walls = [fn()["wall_s"] for _ in range(3)]
    subprocess.run(["jcmd", str(pid), "JFR.stop", f"name={name}"], check=True, capture_output=True)
    print(name, "wall", [round(w, 2) for w in walls])
    txt = subprocess.run(["jfr", "print", "--events", "jdk.ExecutionSample", f], capture_output=True, text=True).stdout
    top = collections.Counter()
    incl = collections.Counter()
    chains = collections.Counter()
    n = 0
    for ev in txt.split("jdk.ExecutionSample")[1:]:
        frames = re.findall(r"^\s+([\w$.<>/]+)\(", ev.split("stackTrace = [", 1)[-1], re.M)
        if not frames:
            continue
        n += 1
        top[frames[0]] += 1
        chains[" <- ".join(".".join(f.split(".")[-2:]) for f in frames[:5])] += 1
        for fr in set(frames):
            if any(
                k in fr
                for k in (
                    "osqueue",
                    "LineRecordReader",
                    "UTF8String",
                    "noop",
                    "Noop",
                    "BatchCodec",
                    "readAllBytes",
                    "FileInputStream",
                    "arraycopy",
                    "GeneratedClass",
                    "UnsafeRow",
                    "Checksum",
                    "CRC",
                )
            ):
                incl[fr] += 1
    print(f"{name}: {n} samples; top frames:")
    for fr, c in top.most_common(15):
        print(f"  {100 * c / n:5.1f}% {fr}")
    print(f"{name}: top call chains (5 innermost frames; JIT inlining can misname the innermost one):")
    for ch, c in chains.most_common(6):
        print(f"  {100 * c / n:5.1f}% {ch}")
    print(f"{name}: inclusive (selected):")
    for fr, c in incl.most_common(20):
        print(f"  {100 * c / n:5.1f}% {fr}")
h.close()  # also removes the data and the .jfr files
