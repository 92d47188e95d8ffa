"""A report's parts: sections of paragraphs and tables, and the spans (sentences, table rows) that state
its figures. report.py builds them; search.py indexes them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Span:
    section: str
    text: str  # a sentence or a rendered table row, verbatim in the section's text
    figure: str  # the key figure as printed ("1,234.5"; a name for a named fact)
    offset: int  # where `figure` starts in `text`
    fact: tuple  # ("num", metric index, group, entity, column) | ("named", role) | ("ptr", metric, group)
    value: float | str
    kind: str  # "sentence" | "row" | "restatement" | "pointer" | "named"
    depth: float = 0.0


@dataclass(frozen=True)
class Table:
    number: int
    caption: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    @staticmethod
    def line(cells) -> str:
        return "| " + " | ".join(cells) + " |"


@dataclass
class Section:
    id: str
    title: str
    blocks: list = field(default_factory=list)  # paragraphs (str) and Tables, in order
    text: str = ""  # rendered: "ID TITLE" then "[ID ¶k] ..." per block (a table: caption, header, rows)
    start: int = 0  # where it starts in the whole document
