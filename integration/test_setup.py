""".ci/setup.sh and the demo's use of it, run on a copy of the repository's scripts with stand-ins
for the JDK, apt, pip and the venv's Python (nothing is installed; each stand-in logs its calls)."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import stat
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]

# The venv's Python: `-m pip ...` is logged (and "installing" tomli makes the tomli stand-in
# importable), the demo script only logged; anything else runs the real interpreter with the shims first on sys.path.
VENV_PYTHON = """#!/usr/bin/env bash
if [ "$1 $2" = "-m pip" ]; then
  echo "pip ${*:3}" >> "$FAKE_LOG"
  case " $* " in *" tomli "*) touch "$FAKE_SHIMS/tomli_installed" ;; esac
  exit 0
fi
echo "python $*" >> "$FAKE_LOG"
case "$1" in *demo.py) exit 0 ;; esac  # the demo itself is integration/test_demo.py's
PYTHONPATH="$FAKE_SHIMS" exec "$REAL_PYTHON" "$@"
"""

# With FAKE_NO_TOMLLIB=1 this shadows the standard library's tomllib, as on Python 3.10.
TOMLLIB_SHIM = """import os
if os.environ.get("FAKE_NO_TOMLLIB") == "1":
    raise ModuleNotFoundError("No module named 'tomllib' (Python 3.10, simulated)", name="tomllib")
import sys
_here = os.path.dirname(os.path.abspath(__file__))
del sys.modules[__name__]
_saved = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
try:
    import tomllib as _real
finally:
    sys.path[:] = _saved
sys.modules[__name__] = _real
"""

# tomli, once the pip stand-in "installed" it: the real tomllib under the backport's name.
TOMLI_SHIM = """import os, sys
_here = os.path.dirname(os.path.abspath(__file__))
if not os.path.exists(os.path.join(_here, "tomli_installed")):
    raise ModuleNotFoundError("No module named 'tomli'", name="tomli")
_saved = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
sys.modules.pop("tomllib", None)
try:
    import tomllib as _real
finally:
    sys.path[:] = _saved
load, loads = _real.load, _real.loads
"""

TOOLS = {
    "javac": 'echo "javac ${FAKE_JAVAC_VERSION:-17.0.15}"',
    "mvn": "exit 0",
    "id": 'if [ "$1" = -u ]; then echo "${FAKE_UID:-0}"; else exec /usr/bin/id "$@"; fi',
    "apt-get": 'echo "apt-get $*" >> "$FAKE_LOG"',
}


def _executable(path: pathlib.Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class Sandbox:
    """A repository root holding only what setup.sh and demo.sh read, plus the stand-ins."""

    def __init__(self, tmp: pathlib.Path, *, venv: bool = True, deps_stamp: bool = True) -> None:
        self.root = tmp / "repo"
        for rel in (".ci/setup.sh", ".ci/setup-localstack.sh", "integration/demo.sh", "pyproject.toml"):
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, self.root / rel)
        self.bin, self.shims, self.log = tmp / "bin", tmp / "shims", tmp / "calls.log"
        self.bin.mkdir()
        self.shims.mkdir()
        self.log.touch()
        for name, body in TOOLS.items():
            _executable(self.bin / name, f"#!/usr/bin/env bash\n{body}\n")
        (self.shims / "tomllib.py").write_text(TOMLLIB_SHIM)
        (self.shims / "tomli.py").write_text(TOMLI_SHIM)
        self.stamp = (
            self.root
            / ".venv"
            / (".osqueue-deps-" + hashlib.sha256((self.root / "pyproject.toml").read_bytes()).hexdigest()[:16])
        )
        if venv:
            self.make_venv()
            if deps_stamp:
                self.stamp.touch()
        self.env = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "FAKE_LOG": str(self.log),
            "FAKE_SHIMS": str(self.shims),
            "REAL_PYTHON": sys.executable,
            "OSQUEUE_BOOTSTRAP_PYTHON": sys.executable,
            # LocalStack's setup fails fast here: no Python 3.12 at this path.
            "OSQUEUE_PYTHON312": str(tmp / "no-python3.12"),
            "OSQUEUE_LOCALSTACK_VENV": str(tmp / "venv-localstack"),
        }

    def make_venv(self) -> None:
        (self.root / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
        _executable(self.root / ".venv" / "bin" / "python", VENV_PYTHON)

    def run(self, *cmd: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", *cmd], cwd=self.root, env={**self.env, **env}, capture_output=True, text=True, timeout=120
        )

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines()


def test_no_s3_skips_localstack_and_the_full_setup_still_needs_it(tmp_path):
    box = Sandbox(tmp_path)
    core = box.run(".ci/setup.sh", "--no-s3")
    assert core.returncode == 0, core.stderr
    assert "skipping LocalStack" in core.stderr
    assert not (tmp_path / "venv-localstack").exists()
    full = box.run(".ci/setup.sh")
    assert full.returncode == 1
    assert "no working Python 3.12" in full.stderr
    bad = box.run(".ci/setup.sh", "--bogus")
    assert bad.returncode == 2 and "--bogus" in bad.stderr


def test_the_demo_command_runs_without_localstack(tmp_path):
    box = Sandbox(tmp_path)
    p = box.run("integration/demo.sh", "--short")
    assert p.returncode == 0, p.stderr
    assert not (tmp_path / "venv-localstack").exists()
    assert box.calls() == ["pip install -q --no-deps --force-reinstall .", "python integration/demo.py --short"]


def test_without_tomllib_setup_installs_tomli_first_and_reads_the_requirements(tmp_path):
    box = Sandbox(tmp_path, deps_stamp=False)
    p = box.run(".ci/setup.sh", "--no-s3", FAKE_NO_TOMLLIB="1")
    assert p.returncode == 0, p.stderr
    pips = [c for c in box.calls() if c.startswith("pip ")]
    assert pips == ["pip install -q --upgrade pip", "pip install -q tomli", "pip install -q -r .venv/requirements.txt"]
    import tomllib

    project = tomllib.loads((box.root / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    want = project["dependencies"] + extras["test"] + extras["bench"] + extras["lint"]
    assert (box.root / ".venv" / "requirements.txt").read_text().split("\n")[:-1] == want
    assert box.stamp.exists()


def test_with_tomllib_no_tomli_is_installed(tmp_path):
    box = Sandbox(tmp_path, deps_stamp=False)
    p = box.run(".ci/setup.sh", "--no-s3")
    assert p.returncode == 0, p.stderr
    assert "pip install -q tomli" not in box.calls()
    assert "pip install -q -r .venv/requirements.txt" in box.calls()


def test_an_old_jdk_is_replaced_with_17_by_apt_as_root(tmp_path):
    box = Sandbox(tmp_path)
    # The apt stand-in installs nothing: the old javac stays first on PATH, which must be reported.
    p = box.run(".ci/setup.sh", "--no-s3", FAKE_JAVAC_VERSION="11.0.20", FAKE_UID="0")
    assert p.returncode == 1
    assert any(c.startswith("apt-get install") and "openjdk-17-jdk-headless" in c for c in box.calls()), box.calls()
    assert "JDK >= 17" in p.stderr and "version 11" in p.stderr


def test_an_old_jdk_without_root_is_a_clear_message(tmp_path):
    box = Sandbox(tmp_path)
    for version in ("11.0.20", "1.8.0_292"):
        p = box.run(".ci/setup.sh", "--no-s3", FAKE_JAVAC_VERSION=version, FAKE_UID="1000")
        assert p.returncode == 1
        assert "openjdk-17-jdk-headless" in p.stderr and "JDK >= 17" in p.stderr
    assert not any(c.startswith("apt-get") for c in box.calls())
    ok = box.run(".ci/setup.sh", "--no-s3", FAKE_JAVAC_VERSION="21.0.1", FAKE_UID="1000")
    assert ok.returncode == 0, ok.stderr


def test_a_python_without_ensurepip_gets_its_venv_package(tmp_path):
    box = Sandbox(tmp_path, venv=False)
    # A Debian python3 without python3.X-venv: `import ensurepip` fails.
    bootstrap = tmp_path / "bin" / "python3-no-venv"
    _executable(
        bootstrap,
        '#!/usr/bin/env bash\ncase "$*" in *ensurepip*|"-m venv"*) exit 1 ;; esac\nexec "$REAL_PYTHON" "$@"\n',
    )
    ver = "{}.{}".format(*sys.version_info[:2])
    user = box.run(".ci/setup.sh", "--no-s3", OSQUEUE_BOOTSTRAP_PYTHON=str(bootstrap), FAKE_UID="1000")
    assert user.returncode == 1
    assert f"install python{ver}-venv" in user.stderr
    assert not (box.root / ".venv" / "bin" / "python").exists()
    root = box.run(".ci/setup.sh", "--no-s3", OSQUEUE_BOOTSTRAP_PYTHON=str(bootstrap), FAKE_UID="0")
    assert f"apt-get install -y -qq python{ver}-venv" in box.calls()
    # The apt stand-in installed nothing, so creating the venv then fails: setup stops there.
    assert root.returncode != 0
