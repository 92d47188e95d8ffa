"""status_counts.txt and top_ips.txt match what the test computes from its own copy of the log."""

from collections import Counter
from pathlib import Path

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
ORIGINAL = Path(__file__).resolve().parent / "access_original.log"


def requests():
    for line in ORIGINAL.read_text().splitlines():
        ip = line.split()[0]
        status = line.rsplit('"', 1)[1].split()[0]
        yield ip, status


def lines_of(name):
    path = WORK / name
    assert path.is_file(), f"{name} is missing"
    return [" ".join(line.split()) for line in path.read_text().splitlines() if line.strip()]


def test_log_unchanged():
    assert (WORK / "access.log").read_bytes() == ORIGINAL.read_bytes()


def test_status_counts():
    counts = Counter(status for _ip, status in requests())
    assert lines_of("status_counts.txt") == [f"{code} {counts[code]}" for code in sorted(counts, key=int)]


def test_top_ips():
    counts = Counter(ip for ip, _status in requests()).most_common()
    assert counts[2][1] > counts[3][1]  # the shipped log has no tie at the cut
    assert lines_of("top_ips.txt") == [f"{ip} {n}" for ip, n in counts[:3]]
