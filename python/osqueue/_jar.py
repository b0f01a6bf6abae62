"""The Spark connector jars bundled in this package, and the one for a given Spark.

The wheel carries, per Scala version, the protocol core with its relocated AWS SDK
(``osqueue-core-assembly_<scala>-<version>.jar``, the bulk) and, per Spark line, the thin connector
(``osqueue-spark-<line>_<scala>-<version>.jar``): five fat jars would not fit a reasonable wheel.
:func:`jar_path` joins the two for a Spark into one jar (the same classes as the Maven
``...-assembly`` artifact), once, in a cache directory, so that ``spark.jars`` gets a single file.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import tempfile
import warnings
import zipfile

from osqueue._spark_lines import SPARK_LINES
from osqueue._version import __version__

NEWEST_LINE = SPARK_LINES[-1][0]

JARS_DIR = pathlib.Path(__file__).resolve().parent / "jars"


def _line_key(line: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in line.split(".")[:2])
    except ValueError:
        raise ValueError(f"not a Spark version: {line!r} (expected e.g. '4.1' or '4.1.3')") from None


def _default_scala(line: str) -> str:
    """The Scala of a Spark line's default build (Spark 3.5's pyspark and downloads: 2.12)."""
    return "2.12" if _line_key(line) < (4, 0) else "2.13"


def connector_for(spark_version: str, scala_version: str | None = None) -> tuple[str, str, bool]:
    """The ``(line, scala)`` of the connector build for Spark ``spark_version`` with Scala
    ``scala_version`` (a full or binary version; None: the line's default Scala), and whether that
    Spark is newer than every line built (it then runs the newest build, untested).

    :raises RuntimeError: No build fits, with the builds that exist.
    """
    line = ".".join(spark_version.strip().split(".")[:2])
    _line_key(line)
    scala = ".".join(scala_version.split(".")[:2]) if scala_version else _default_scala(line)
    if (line, scala) in SPARK_LINES:
        return line, scala, False
    if _line_key(line) > _line_key(NEWEST_LINE) and (NEWEST_LINE, scala) in SPARK_LINES:
        return NEWEST_LINE, scala, True
    builds = ", ".join(f"Spark {line} with Scala {scala}" for line, scala in SPARK_LINES)
    raise RuntimeError(
        f"osqueue {__version__} has no Spark connector for Spark {spark_version} with Scala {scala}; "
        f"it is built for {builds}"
    )


def _pyspark_jars_dir() -> pathlib.Path | None:
    """The directory of the jars of the installed PySpark (pip's ``pyspark/jars`` or
    ``$SPARK_HOME/jars``), or None if there is none."""
    import pyspark

    candidates = [pathlib.Path(pyspark.__file__).resolve().parent / "jars"]
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home:
        candidates.append(pathlib.Path(spark_home) / "jars")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return None


def _jar_version(prefix: str) -> str | None:
    """The version in the name of ``<prefix><version>.jar`` among PySpark's jars."""
    jars = _pyspark_jars_dir()
    if jars is None:
        return None
    pattern = re.compile(re.escape(prefix) + r"(\d+(?:\.\d+)*)\.jar")
    for jar in sorted(jars.iterdir()):
        m = pattern.fullmatch(jar.name)
        if m:
            return m.group(1)
    return None


def installed_spark_version() -> str:
    """The installed pyspark's version."""
    import pyspark

    return str(pyspark.__version__)


def installed_scala_version() -> str | None:
    """The Scala version of PySpark's ``scala-library-*.jar`` (e.g. ``2.13.17``), or None."""
    return _jar_version("scala-library-")


def installed_connect_server() -> bool:
    """Whether the installed PySpark's jars hold the Spark Connect server (``spark-connect_*.jar``:
    PySpark 4 and later; 3.5's wheel does not)."""
    jars = _pyspark_jars_dir()
    return jars is not None and any(j.name.startswith("spark-connect_") for j in jars.iterdir())


def installed_hadoop_version() -> str | None:
    """The Hadoop version of PySpark's ``hadoop-client-api-*.jar`` (e.g. ``3.4.2``), or None."""
    return _jar_version("hadoop-client-api-")


def _installed_pyspark() -> tuple[str, str | None] | None:
    """The installed pyspark's Spark and Scala versions, or None without pyspark."""
    try:
        import pyspark
    except ImportError:
        return None
    return str(pyspark.__version__), installed_scala_version()


def bundled_jars(line: str, scala: str) -> tuple[pathlib.Path, pathlib.Path]:
    """The bundled (relocated core, thin connector) jars of a build."""
    core = JARS_DIR / f"osqueue-core-assembly_{scala}-{__version__}.jar"
    connector = JARS_DIR / f"osqueue-spark-{line}_{scala}-{__version__}.jar"
    for path in (core, connector):
        if not path.is_file():
            raise FileNotFoundError(
                f"osqueue's Spark jar is missing at {path}; reinstall osqueue with `pip install .` "
                "from a checkout (it builds the jars with sbt) or from a released wheel"
            )
    return core, connector


def _cache_dir() -> pathlib.Path:
    """``$OSQUEUE_CACHE_DIR``, else ``$XDG_CACHE_HOME/osqueue/jars`` (default ``~/.cache``)."""
    if os.environ.get("OSQUEUE_CACHE_DIR"):
        return pathlib.Path(os.environ["OSQUEUE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base) / "osqueue" / "jars"


def _join(core: pathlib.Path, connector: pathlib.Path, target: pathlib.Path) -> None:
    """Writes ``core`` + ``connector`` as one jar (the connector's manifest and service files win;
    service files present in both are concatenated), atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".osqueue-", suffix=".jar", dir=target.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
            services: dict[str, bytes] = {}
            written: set[str] = set()
            for source in (connector, core):
                with zipfile.ZipFile(source) as jar:
                    for info in jar.infolist():
                        name = info.filename
                        if name.startswith("META-INF/services/") and not name.endswith("/"):
                            services[name] = services.get(name, b"") + jar.read(info).rstrip(b"\n") + b"\n"
                        elif name not in written:
                            written.add(name)
                            out.writestr(info, jar.read(info))
            for name, data in services.items():
                out.writestr(name, data)
        os.replace(tmp, target)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def jar_path(spark_version: str | None = None, scala_version: str | None = None) -> str:
    """Absolute path of the osqueue Spark connector jar for a Spark (one self-contained jar).

    :param spark_version: The Spark (``"3.5"``, ``"4.1.3"``...); default: the installed pyspark's,
        or the newest line built when pyspark is not installed. A Spark newer than the newest line
        gets the newest line's jar, with a warning.
    :param scala_version: The Spark's Scala (``"2.13"``); default: the installed pyspark's when
        ``spark_version`` is not given, else the line's default (2.12 for Spark 3.5, else 2.13).
    :raises RuntimeError: No connector is built for that Spark/Scala.
    :raises FileNotFoundError: The package was installed without its jars (a broken build).
    """
    if spark_version is None:
        installed = _installed_pyspark()
        if installed is not None:
            spark_version, found_scala = installed
            scala_version = scala_version or found_scala
        else:
            spark_version = NEWEST_LINE
    line, scala, newer = connector_for(spark_version, scala_version)
    if newer:
        warnings.warn(
            f"Spark {spark_version} is newer than the newest Spark line osqueue {__version__} is built and tested "
            f"for ({NEWEST_LINE}); using the {NEWEST_LINE} connector",
            stacklevel=2,
        )
    core, connector = bundled_jars(line, scala)
    digest = hashlib.sha256()
    for path in (core, connector):
        digest.update(path.read_bytes())
    target = _cache_dir() / f"osqueue-spark-{line}-assembly_{scala}-{__version__}-{digest.hexdigest()[:12]}.jar"
    if not target.is_file():
        try:
            _join(core, connector, target)
        except OSError:  # a read-only home (some cluster images): a per-user temporary directory
            target = pathlib.Path(tempfile.gettempdir()) / f"osqueue-jars-{os.getuid()}" / target.name
            if not target.is_file():
                _join(core, connector, target)
    return str(target)
