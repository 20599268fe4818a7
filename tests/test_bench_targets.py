"""The benchmark's servers (bench/targets.py): a cost line's variant restarted between blocks
of rounds is a new process that keeps its home, its port and its counts."""

from __future__ import annotations

from pathlib import Path

from bench import procs
from bench.payloads import request_body
from bench.run import olp_argv, olp_config, olp_env
from bench.targets import SMOKE_REQUESTS, OlpLaunch, Targets, Variant, chat_headers


def test_a_restarted_variant_is_a_new_process_with_its_home_port_and_counts(
    tmp_path: Path,
) -> None:
    variant = Variant("olp-miss", lambda port: olp_config(port, cache=True))
    targets = Targets(tmp_path)
    try:
        targets.start(OlpLaunch(variants=(variant,), argv=olp_argv, env=olp_env))
        endpoint = targets.endpoints["olp-miss"]
        headers = chat_headers(endpoint.token)
        first = targets.servers["olp-miss"].pid
        for seed in (1, 2, 3):
            status, _ = procs.http("POST", endpoint.url, request_body(False, seed=seed), headers)
            assert status == 200
        targets.restart("olp-miss")
        assert targets.servers["olp-miss"].pid != first
        status, _ = procs.http("POST", endpoint.url, request_body(False, seed=4), headers)
        assert status == 200
        status, _ = procs.http("POST", endpoint.url, request_body(False, seed=1), headers)
        assert status == 200  # kept in the cache file across the restart: a hit
        targets.restart("olp-miss")
        for seed in (5, 2):  # a miss, and a hit again
            status, _ = procs.http("POST", endpoint.url, request_body(False, seed=seed), headers)
            assert status == 200
        stats = targets.cache_stats("olp-miss")
        assert stats is not None
        # The smoke check's (its streaming request repeats the first: a hit), then five
        # distinct requests over three processes, and a hit after each restart.
        assert SMOKE_REQUESTS == 2
        assert (stats["misses"], stats["hits"], stats["shared"]) == (1 + 5, 1 + 2, 0)
    finally:
        targets.stop()
    # All three processes wrote their ledger into the one home: every request is there.
    assert targets.ledger_rows("olp-miss") == SMOKE_REQUESTS + 7
