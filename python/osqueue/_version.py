# Single source of the osqueue version: read by pyproject (setuptools) and build.sbt.
__version__ = "0.1.0"
