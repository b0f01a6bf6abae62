"""The benchmarks (bench/README.md): a development tool of the source tree, not part of the osqueue package."""
