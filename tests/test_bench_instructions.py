"""bench.instructions: reading callgrind's per-thread dumps and the per-request arithmetic.

Running callgrind itself takes minutes and valgrind (`python -m bench.instructions`); these
tests hold the parts that turn its files into the table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.instructions import Count, per_request, read_dump, render


def _dump(path: Path, thread: int, total: int, *, word: str = "summary") -> Path:
    # The header callgrind writes, trimmed to what the reader looks at (and a decoy).
    path.write_text(
        "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 4242\n"
        f"cmd:  python -m olp start\npart: 1\nthread: {thread}\n\n"
        "events: Ir\nfn=(1) main\n5 123\n\n"
        f"{word}: {total}\n"
    )
    return path


def test_read_dump_gives_each_thread_its_total(tmp_path: Path) -> None:
    files = [
        _dump(tmp_path / "cg.4242.1-01", 1, 1_500_000),
        _dump(tmp_path / "cg.4242.1-03", 3, 90_000, word="totals"),
    ]
    assert read_dump(files) == {1: 1_500_000, 3: 90_000}


def test_read_dump_refuses_a_file_that_is_not_a_dump(tmp_path: Path) -> None:
    bad = tmp_path / "cg.4242.1-01"
    bad.write_text("not callgrind\n")
    with pytest.raises(ValueError, match="not a callgrind dump"):
        read_dump([bad])


def test_per_request_subtracts_the_idle_window_and_drops_idle_threads() -> None:
    loaded = {1: 1_100_000 + 1_000_000 * 10, 3: 640_000 + 50_000, 5: 7_000}
    idle = {1: 1_100_000, 3: 50_000, 5: 7_000}
    assert per_request(loaded, idle, 10) == {1: 1_000_000.0, 3: 64_000.0}


def test_per_request_needs_requests() -> None:
    with pytest.raises(ValueError, match="no request"):
        per_request({1: 10}, {}, 0)


def test_render_gives_each_cost_line_its_costs() -> None:
    counts = [
        Count("olp-distinct", False, 1000, {1: 1_000_000.0, 3: 60_000.0}),
        Count("olp-miss", False, 900, {1: 1_150_000.0, 3: 60_000.0, 4: 50_000.0}),
    ]
    table = render(counts)
    miss = next(line for line in table.splitlines() if "| olp-miss |" in line)
    # main: 1.15M / 1.0M; total: 1.26M / 1.06M
    assert miss.endswith("| +15.0% | +18.9% |")
    assert "| olp-distinct | 1,000 | 1,000,000 | 60,000 | 1,060,000 | | |" in table
    # A line whose rows were not counted (the member line here) is left out.
    assert "olp-member" not in table
