"""Every inbox file is moved to sorted/<ext>/ with identical bytes; nothing is left behind or added."""

import hashlib
from pathlib import Path

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
EXPECTED = {
    "sorted/other/Makefile": "54fc1cc2a93eecec504e0cef2173878efa87a76fe793f8ef7dc5e0a0e6b60648",
    "sorted/other/README": "68e68d7711a5fb1dc175b117632914ad7997ae55860736750cc72131a4215b1c",
    "sorted/gz/backup.tar.gz": "48b6b1ae19565340801079599ef4321bca845ad91aefe3f320343c814d480535",
    "sorted/csv/budget.csv": "afc9f41bec0c3b2465050a0dd67e7ea9662085c6dca371cade446981a1fffff2",
    "sorted/csv/data.csv": "159f8bae5fa563fb61b540de391850552f9fe1d188273b1ca9ce182e4cbf4a26",
    "sorted/png/logo.png": "69952edb0f0b878c69e4e077a8640be5f3aea174f45ceb58a46a4751868a85b6",
    "sorted/txt/meeting notes.txt": "3e4f7766e20cddefd2b2bd5abbdbdd3cbf1893ce956901a88070f62e8aa239af",
    "sorted/txt/notes.txt": "29f31d5d0d22ecccecf4eb1de9e9cb44080ebe57a5838f544d8ec0698e5d4918",
    "sorted/jpg/photo.jpg": "b857b101c94214d9d6f3fc229e24b14d225f3e72ec83ea03f745686ff08b72bb",
    "sorted/py/script.py": "03e693d9f2f687e0f40e36a8df7fcb4d1c22974012b7c2a55c000eb30f305824",
}


def test_inbox_has_no_files_left():
    inbox = WORK / "inbox"
    left = [p.name for p in inbox.rglob("*") if not p.is_dir()] if inbox.exists() else []
    assert left == []


def test_every_file_moved_with_identical_bytes():
    for rel, digest in EXPECTED.items():
        path = WORK / rel
        assert path.is_file(), f"{rel} is missing"
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"{rel} changed"


def test_nothing_else_in_sorted():
    found = sorted(str(p.relative_to(WORK)) for p in (WORK / "sorted").rglob("*") if not p.is_dir())
    assert found == sorted(EXPECTED)
