"""`pip install` of the built wheel into a fresh venv gives the client, the CLI and a jar with the core,
and nothing that is not for users (the benchmark harness, the tests)."""
import ast
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
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
                   check=True, timeout=900)
    return next(wheels.glob("osqueue-*.whl"))


def test_wheel_in_a_fresh_venv_bundles_the_connector_jar_with_the_core(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=900)
    check = (
        "import zipfile, osqueue\n"
        "path = osqueue.jar_path()\n"
        "names = set(zipfile.ZipFile(path).namelist())\n"
        "assert 'osqueue/format/ManifestCodec$.class' in names, 'core classes missing'\n"
        "assert 'osqueue/spark/OsqueueSourceProvider.class' in names, 'connector missing'\n"
        "assert 'META-INF/services/org.apache.spark.sql.sources.DataSourceRegister' in names\n"
        "assert not any(n.startswith('software/amazon/awssdk/') for n in names), 'AWS SDK not relocated'\n"
        "assert not any(n.startswith('scala/') for n in names), 'Scala library must come from Spark'\n"
        "print(path)\n"
    )
    out = subprocess.run([str(py), "-c", check], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert str(env_dir) in out.stdout
    cli = subprocess.run([str(env_dir / "bin" / "osqueue"), "--help"], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0 and "inspect" in cli.stdout
    assert "bench" not in cli.stdout  # a development tool of the checkout, not a user command


def test_wheel_holds_no_benchmark_or_test_code(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "osqueue/cli.py" in names
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
