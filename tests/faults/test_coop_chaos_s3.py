"""The cooperative chaos run's S3 mode, small (integration/chaos/coop_chaos.py ``--store s3``; the
documented 16-process run is docs/reliability.md §3.13): Python cooperative producer processes on moto
behind the fault proxy, with lost replies of applied CAS writes (every fifth) and 503s injected. Every call that
returned durable is in the queue once at its sequence, in its producer's order; a failed call at most once."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "python"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from integration.chaos import coop_chaos  # noqa: E402


def test_cooperative_producers_on_s3_behind_faults_land_every_durable_call_once(tmp_path: pathlib.Path) -> None:
    with coop_chaos.s3_behind_faults(
        tmp_path / "s3-state",
        seed=29,
        faults={"503": 0.02},
        conditional={},
        delay_s=0.05,
        drop_reply_every=5,  # every 5th CAS write applied, its reply lost: the ambiguous case, for sure
    ) as (spec, proxy):
        report = coop_chaos.run(spec, py=2, jvm=0, calls=6, kills=0, seed=29, deadline_s=120, faults=True)
        injected = proxy.injected()
    assert report["duplicates"] == 0 and report["missing"] == 0 and report["wrong_sequence"] == 0, report
    assert report["out_of_order"] == [] and report["last_batch_exact"], report
    assert report["returned_durable"] + report["failed_calls"] == 2 * 6, report
    assert injected["drop_reply"] > 0, injected
