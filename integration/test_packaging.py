"""`pip install` of the built wheel into a fresh venv gives the client, the CLI and a jar with the core."""
import pathlib
import subprocess
import sys
import venv

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_wheel_in_a_fresh_venv_bundles_the_connector_jar_with_the_core(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
                   check=True, timeout=900)
    wheel = next(wheels.glob("osqueue-*.whl"))
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
