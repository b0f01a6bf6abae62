"""The harness's command line, from the repository root: ``python -m bench.harness run|plots``."""

from __future__ import annotations

import click

from bench.harness.report import replot
from bench.harness.run import normalize_names, run_benchmarks


@click.group()
def main() -> None:
    """osqueue's benchmarks (bench/README.md): a development tool, run from a source checkout."""


@main.command()
@click.option("--quick", is_flag=True, help="Short runs (under 2 min on 2 cores, no Kafka); no speed goals checked.")
@click.option(
    "--only",
    "only",
    multiple=True,
    help="Run only these benchmarks (repeatable, or comma-separated): contention, depth, py_depth, deep_v1, jvm_depth, spark_depth, "
    "spark_depth_s3, py_vs_jvm, requests, raw_put, spark_file, kafka, latency, producers_processes ('-' works for '_').",
)
@click.option(
    "--latency-ms",
    type=click.FloatRange(min=0),
    default=20.0,
    show_default=True,
    help="Round-trip latency injected per S3 request by a loopback proxy (0: no proxy).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default="bench/results",
    show_default=True,
    help="Directory for the JSON and Markdown results.",
)
@click.option("--endpoint", default=None, help="Use this S3 endpoint (keys test/test) instead of starting moto.")
@click.option(
    "--spark-mb",
    type=click.IntRange(min=1),
    default=None,
    help="Payload of the Spark source comparisons in MiB [1024; 8 with --quick].",
)
@click.option(
    "--record-bytes",
    type=click.IntRange(min=16),
    default=1024,
    show_default=True,
    help="Record size of the Spark source comparisons.",
)
@click.option(
    "--eager-flush",
    is_flag=True,
    help="The latency row's producer flushes a batch at once when none of its batches is in flight (eager_flush).",
)
@click.option(
    "--latency-modes",
    default=None,
    help="The latency row's modes besides micro-batch, which always runs, comma-separated, run in this order "
    "(micro-batch-jvm, real-time, real-time-jvm; a mode may carry settings a latency-bound user can make, e.g. "
    "micro-batch-jvm+async: see LATENCY_TWEAKS in bench/harness/spark_benchmarks.py) [all the Spark line has].",
)
@click.option(
    "--latency-runs",
    type=click.IntRange(min=1),
    default=None,
    help="Runs per latency mode, the modes alternating run by run [3; 1 with --quick].",
)
def run(
    quick: bool,
    only: tuple[str, ...],
    latency_ms: float,
    out: str,
    endpoint: str | None,
    spark_mb: int | None,
    record_bytes: int,
    eager_flush: bool,
    latency_modes: str | None,
    latency_runs: int | None,
) -> None:
    """Run the benchmarks against a local moto S3 server.

    Prints each figure as it is measured, then writes bench-<time>.json and .md to --out.
    """
    try:
        names = normalize_names(only)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--only") from None
    command = (
        "python -m bench.harness run" + (" --quick" if quick else "") + (f" --only {','.join(names)}" if names else "")
    )
    command += f" --latency-ms {latency_ms:g} --out {out}"
    command += (f" --spark-mb {spark_mb}" if spark_mb else "") + (
        f" --record-bytes {record_bytes}" if record_bytes != 1024 else ""
    )
    command += " --eager-flush" if eager_flush else ""
    command += f" --latency-modes {latency_modes}" if latency_modes else ""
    command += f" --latency-runs {latency_runs}" if latency_runs else ""
    _, path = run_benchmarks(
        spark_mb=spark_mb or 0,
        record_bytes=record_bytes,
        eager_flush=eager_flush,
        latency_modes=tuple(m.strip() for m in latency_modes.split(",")) if latency_modes else (),
        latency_runs=latency_runs or 0,
        quick=quick,
        only=names,
        latency_ms=latency_ms,
        out=out,
        endpoint=endpoint,
        command=command,
        log=lambda line: click.echo(line, err=False),
    )
    click.echo("")
    click.echo(path.with_suffix(".md").read_text().rstrip())
    click.echo(f"\nresults: {path} and {path.with_suffix('.md')}")


@main.command()
@click.argument("results", type=click.Path(exists=True, dir_okay=False))
def plots(results: str) -> None:
    """(Re)draw the PNG plots of a results JSON beside it."""
    click.echo("\n".join(replot(results)))


if __name__ == "__main__":
    main()
