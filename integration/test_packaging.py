"""`pip install` of the built wheel into a fresh venv gives the client, the CLI, and the connector jars
of every Spark line (a relocated core per Scala version, a thin connector per line) that jar_path()
joins into one jar with the core; and nothing that is not for users (the benchmark harness, the tests)."""

import ast
import os
import pathlib
import subprocess
import sys
import venv
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)], check=True, timeout=900
    )
    wheel = next(wheels.glob("osqueue-*.whl"))
    assert wheel.stat().st_size < 40 * 2**20, f"the wheel is {wheel.stat().st_size} bytes"
    return wheel


def test_wheel_in_a_fresh_venv_bundles_the_connector_jar_with_the_core(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=900)
    check = (
        "import zipfile, osqueue, osqueue._jar as j\n"
        "bundled = sorted(p.name for p in j.JARS_DIR.glob('*.jar'))\n"
        "expected = sorted([f'osqueue-core-assembly_{s}-{osqueue.__version__}.jar' for s in ('2.12', '2.13')]\n"
        "                  + [f'osqueue-spark-{l}_{s}-{osqueue.__version__}.jar' for l, s in j.SPARK_LINES])\n"
        "assert bundled == expected, bundled\n"
        "print(j.JARS_DIR)\n"
        "path = osqueue.jar_path()\n"
        "names = set(zipfile.ZipFile(path).namelist())\n"
        "assert 'osqueue/format/ManifestCodec$.class' in names, 'core classes missing'\n"
        "assert 'osqueue/spark/OsqueueSourceProvider.class' in names, 'connector missing'\n"
        "assert 'META-INF/services/org.apache.spark.sql.sources.DataSourceRegister' in names\n"
        "assert not any(n.startswith('software/amazon/awssdk/') for n in names), 'AWS SDK not relocated'\n"
        "assert not any(n.startswith('scala/') for n in names), 'Scala library must come from Spark'\n"
        "print(path)\n"
    )
    env = dict(os.environ, OSQUEUE_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([str(py), "-c", check], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    bundled_dir, joined = out.stdout.split()
    assert bundled_dir.startswith(str(env_dir))
    # No pyspark in this venv: the newest line's jar, joined in the cache directory.
    assert joined.startswith(str(tmp_path / "cache" / "osqueue-spark-4.2-assembly_2.13-")), joined
    cli = subprocess.run([str(env_dir / "bin" / "osqueue"), "--help"], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0 and "inspect" in cli.stdout
    assert "bench" not in cli.stdout  # a development tool of the checkout, not a user command


def test_wheel_holds_no_benchmark_or_test_code(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "osqueue/cli/app.py" in names
    assert [n for n in names if not n.startswith(("osqueue/", "osqueue-"))] == []
    assert [n for n in names if any(part.startswith(("bench", "test")) for part in n.split("/"))] == []
    imported = set()
    with zipfile.ZipFile(wheel) as z:
        for name in (n for n in names if n.endswith(".py")):
            for node in ast.walk(ast.parse(z.read(name), name)):
                if isinstance(node, ast.Import):
                    imported |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imported |= {f"{node.module}.{a.name}" for a in node.names}
    assert "click" in imported and "osqueue.store.open_store" in imported  # the scan sees the CLI's imports
    assert sorted(m for m in imported if m.split(".")[0] in ("bench", "tests") or m.startswith("osqueue.bench")) == []
