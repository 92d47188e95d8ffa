"""Every file under conf/ equals the expected copy: the key renamed in .ini files only, nothing else changed."""

from pathlib import Path

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
EXPECTED = Path(__file__).resolve().parent / "expected" / "conf"


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_same_files():
    assert files_under(WORK / "conf") == files_under(EXPECTED)


def test_no_links():
    """The agent's files are its own: a link to our expected copy would compare a file with itself."""
    links = [str(p) for p in (WORK / "conf").rglob("*") if p.is_symlink()]
    assert not links, links


def test_ini_files_renamed():
    for rel in files_under(EXPECTED):
        if rel.endswith(".ini"):
            assert (WORK / "conf" / rel).read_text() == (EXPECTED / rel).read_text(), rel


def test_other_files_untouched():
    for rel in files_under(EXPECTED):
        if not rel.endswith(".ini"):
            assert (WORK / "conf" / rel).read_bytes() == (EXPECTED / rel).read_bytes(), rel
