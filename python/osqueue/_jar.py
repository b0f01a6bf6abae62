"""Where the bundled Spark connector jar is."""
from __future__ import annotations

import pathlib

from osqueue._version import __version__

SCALA_BINARY_VERSION = "2.13"
JAR_NAME = f"osqueue-spark_{SCALA_BINARY_VERSION}-{__version__}.jar"


def jar_path() -> str:
    """Absolute path of the osqueue Spark connector jar shipped inside this package.

    Raises:
        FileNotFoundError: the package was installed without its jar (a broken build).
    """
    path = pathlib.Path(__file__).resolve().parent / "jars" / JAR_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"osqueue's Spark jar is missing at {path}; reinstall osqueue with `pip install .` "
            "from a checkout (it builds the jar with sbt) or from a released wheel"
        )
    return str(path)
