"""A long professional report generated from (seed, level, depth): numbered sections, paragraphs, tables.

    report = build_report(seed=7, level=3, depth=0.4)     # deterministic; cached (LRU) by its arguments
    report.section("3.2").text                            # "3.2 Enterprise division: outlook\n[3.2 ¶1] ..."
    [s for s in report.spans if s.kind == "row"]          # every figure with the span that states it

A report has an intro chapter, one chapter per group (a division, an audited process, a
subsystem, a treatment arm: templates.py) and closing chapters. A group's sections are tables
(one metric by entity x column, e.g. revenue by region and year) or narrative (paragraphs whose
sentences state single figures, filler, and cross-references "is given in Table 7 (see Section
9.1)"). Every figure (metric, group, entity, column) is stated at most once, so each question
has one evidence span; the distractors are its neighbours: the same metric for another year,
region or division, the same table for another division. From level 4, restatements in later
sections replace earlier figures ("originally reported in Section 3.2 as X, has been restated to
Y"); at level 5 one of them sits at the requested depth (a level-5 question may ask for it).

`Span` is one piece of evidence: a sentence or a table row, with the offset of its key figure.
Every span's text occurs verbatim in its section's text, and `depth` is where it starts in the
whole document (0 = the first character, 1 = the last).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property, lru_cache

from posttrain.domains.document.blocks import Section, Span, Table  # noqa: F401  (re-exported)
from posttrain.domains.document.search import Index
from posttrain.domains.document.templates import TEMPLATES, Template

# level -> (sections, entities, columns, groups, paragraphs per section)
SHAPES = {1: (5, 4, 3, 2, 2), 2: (12, 5, 3, 3, 3), 3: (36, 6, 4, 6, 3), 4: (80, 7, 4, 9, 4), 5: (160, 8, 4, 12, 4)}
TABLE_SHARE = 0.3  # of a group chapter's sections (level 1: one table in all)
RESTATEMENTS = {4: 3, 5: 8}
PATTERNS = ("{Colp}, {metric} for {gp} {where} was {fig}.",
            "{Gp} recorded {metric} of {fig} {where} {colp}.",
            "{Where}, {gp} reported {metric} of {fig} {colp}.")
POINTERS = ("The {ek} breakdown of {metric} for {gp} is given in Table {t} (see Section {sec}).",
            "{Metric} for {gp} by {ek} is reported in Table {t}.",
            "For the {ek} figures on {metric} of {gp}, see Table {t} in Section {sec}.")


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def fact_phrase(t: Template, fact: tuple) -> str:
    """'the revenue of the Enterprise division in Oceania in FY2022': how a figure is named."""
    _, mi, g, e, c = fact
    return (f"the {t.metrics[mi].name} of {t.group_phrase.format(g=g)} {t.entity_phrase.format(e=e)} "
            f"{t.col_phrase.format(c=c)}")


@dataclass
class Report:
    seed: int
    level: int
    depth: float
    template: Template
    subject: str  # the company, system or study
    title: str
    columns: tuple[str, ...]
    sections: list[Section]
    chapters: list[tuple[str, str, list[str]]]  # (number, title, section ids)
    spans: list[Span]
    restated: dict  # fact -> its restatement Span (the figure that counts)
    chars: int = 0

    @cached_property
    def by_id(self) -> dict[str, Section]:
        return {s.id: s for s in self.sections}

    def section(self, sid: str) -> Section | None:
        return self.by_id.get(sid)

    @cached_property
    def index(self) -> Index:
        return Index.of(self)

    def text(self) -> str:
        return "\n\n".join([self.title] + [s.text for s in self.sections])

    def toc(self) -> str:
        """One line per chapter; a section title's "CHAPTER TITLE: " prefix is left out."""
        return "\n".join(f"{num} {title}: " + "; ".join(
            f"{sid} {cap(self.by_id[sid].title.removeprefix(title + ': '))}" for sid in ids)
            for num, title, ids in self.chapters)


# a step's episodes and their scoring rebuild each report: 64 holds every task of a step (a level-5
# report with its search index is ~4 MB; 6 made a step's interleaved groups rebuild it per episode)
@lru_cache(maxsize=64)
def build_report(seed: int, level: int, depth: float) -> Report:
    return _Builder(seed, level, depth).build()


class _Builder:
    def __init__(self, seed: int, level: int, depth: float) -> None:
        self.seed, self.level, self.depth = seed, level, depth
        self.rng = rng = random.Random(f"document/{seed}/{level}")
        self.t = t = TEMPLATES[rng.randrange(len(TEMPLATES))]
        n, ne, nc, ng, self.paras = SHAPES[level]
        self.n = n + rng.randint(-(n // 10), n // 10)
        self.subject = rng.choice(t.subjects)
        year = rng.randint(*t.years)
        if len(t.col_labels) == 1:
            self.cols = tuple(t.col_labels[0].format(y=year - nc + 1 + i) for i in range(nc))
        else:
            self.cols = tuple(c.format(y=year) for c in t.col_labels[:nc])
        self.title = t.title.format(company=self.subject, year=year)
        self.entities = rng.sample(t.entities, ne)
        self.groups = rng.sample(t.groups, ng)
        self.values: dict[tuple, float] = {}
        for mi, m in enumerate(t.metrics):
            for g in self.groups:
                for e in self.entities:
                    v = rng.uniform(m.low, m.high)
                    for c in self.cols:
                        v = min(max(v * rng.uniform(0.86, 1.18), m.low), m.high * 1.3)
                        self.values[("num", mi, g, e, c)] = max(round(v, m.decimals), 10 ** -m.decimals)
        self.spans: list[Span] = []

    # phrases
    def fig(self, mi: int, value: float) -> str:
        return f"{value:,.{self.t.metrics[mi].decimals}f}"

    def where(self, e: str) -> str:
        return self.t.entity_phrase.format(e=e)

    def gp(self, g: str) -> str:
        return self.t.group_phrase.format(g=g)

    def colp(self, c: str) -> str:
        return self.t.col_phrase.format(c=c)

    def fillers(self, k: int, g: str | None = None) -> list[str]:
        """k different filler sentences (placeholders filled)."""
        rng = self.rng
        out = []
        for pattern in rng.sample(self.t.filler, k):
            e = rng.choice(self.entities)
            out.append(pattern.format(company=self.subject, group=g or rng.choice(self.groups), entity=e,
                                      where=self.where(e), col=rng.choice(self.cols), n=rng.randint(2, 40),
                                      sec=rng.choice(self.ids)))
        return out

    def fact_sentence(self, sid: str, fact: tuple) -> str:
        _, mi, g, e, c = fact
        m = self.t.metrics[mi]
        fig = self.fig(mi, self.values[fact])
        words = {"colp": self.colp(c), "metric": m.name, "gp": self.gp(g), "where": self.where(e),
                 "fig": "\0"}
        words.update({cap(k): cap(v) for k, v in list(words.items())})
        before, after = self.rng.choice(PATTERNS).format(**words).split("\0")
        text = before + m.prefix + fig + m.suffix + after
        self.spans.append(Span(sid, text, fig, len(before) + len(m.prefix), fact, self.values[fact], "sentence"))
        return text

    # layout
    def layout(self) -> list[dict]:
        rng, n, t = self.rng, self.n, self.t
        n_intro, n_close = min(4, max(1, n // 12)), min(8, max(1, n // 10))
        body = n - n_intro - n_close
        tab_pool = rng.sample(range(len(t.metrics)), 3)
        boiler = rng.sample(t.boiler_titles, n_intro + n_close)
        plan: list[dict] = [{"chapter": 0, "role": "front", "title": title} for title in boiler[:n_intro]]
        chapters = [t.intro_chapter]
        for gi, g in enumerate(self.groups):
            k = body // len(self.groups) + (gi < body % len(self.groups))
            if self.level == 1:
                n_tab = int(gi == 0)
            else:
                n_tab = min(3, max(int(k >= 2), round(k * TABLE_SHARE)))
            roles = [("table", mi) for mi in rng.sample(tab_pool, n_tab)] + [("narrative", None)] * (k - n_tab)
            rng.shuffle(roles)
            aspects = rng.sample(t.aspects, len(t.aspects))
            chapters.append(f"{cap(g)} {t.group_label}")
            for i, (role, mi) in enumerate(roles):
                title = (self.table_title(mi) if role == "table"
                         else f"{cap(g)} {t.group_label}: {aspects[i % len(aspects)]}")
                plan.append({"chapter": len(chapters) - 1, "role": role, "group": g, "metric": mi, "title": title})
        closing = t.closing_chapters[:min(len(t.closing_chapters), n_close)]
        for i in range(n_close):
            plan.append({"chapter": len(chapters) + i * len(closing) // n_close, "role": "back",
                         "title": boiler[n_intro + i]})
        chapters += list(closing)
        if self.level in (2, 3):
            self.table_at_depth(plan, tab_pool)
        counts: dict[int, int] = {}
        for p in plan:
            counts[p["chapter"]] = counts.get(p["chapter"], 0) + 1
            p["id"] = f"{p['chapter'] + 1}.{counts[p['chapter']]}"
        self.plan_chapters, self.ids = chapters, [p["id"] for p in plan]
        return plan

    def table_title(self, mi: int) -> str:
        return f"{cap(self.t.metrics[mi].name)} by {self.t.entity_kind.lower()}"

    def table_at_depth(self, plan: list[dict], tab_pool: list[int]) -> None:
        """Levels 2-3 ask for a table cell: the group section nearest the requested depth becomes a table."""
        j = round(self.depth * (len(plan) - 1))
        i = min((i for i, p in enumerate(plan) if p["role"] in ("table", "narrative")), key=lambda i: abs(i - j))
        p = plan[i]
        if p["role"] == "narrative":
            used = {q["metric"] for q in plan if q["role"] == "table" and q["group"] == p["group"]}
            free = ([mi for mi in tab_pool if mi not in used]
                    or [mi for mi in range(len(self.t.metrics)) if mi not in used])
            p["metric"] = mi = self.rng.choice(free)
            p.update(role="table", title=self.table_title(mi))

    def build(self) -> Report:
        rng, t = self.rng, self.t
        plan = self.layout()
        tables, number = {}, 0
        for p in plan:
            if p["role"] == "table":
                number += 1
                tables[p["id"]] = number
        # where each table is pointed to from: a narrative section of its group, else an intro section
        pointers: dict[str, list[dict]] = {}
        for p in plan:
            if p["role"] == "table":
                homes = [q["id"] for q in plan if q["role"] == "narrative" and q["group"] == p["group"]]
                home = rng.choice(homes or [q["id"] for q in plan if q["role"] == "front"])
                pointers.setdefault(home, []).append(p)
        tabled = {(p["metric"], p["group"]) for p in plan if p["role"] == "table"}
        pools = {g: [f for f in self.values if f[2] == g and (f[1], g) not in tabled] for g in self.groups}
        for pool in pools.values():
            rng.shuffle(pool)
        named_at = {nm.role: rng.choice(plan)["id"] for nm in t.named}
        sections = []
        for p in plan:
            sec = Section(p["id"], p["title"])
            if p["role"] == "table":
                sec.blocks = self.table_blocks(p, tables[p["id"]], pools[p["group"]])
            else:
                sec.blocks = self.paragraphs(p, pools, pointers.get(p["id"], []), tables)
            for nm in t.named:
                if named_at[nm.role] == p["id"]:
                    self.add_named(sec, nm)
            sections.append(sec)
        restated = self.restate(sections)
        chapters = [(str(i + 1), title, [s.id for s in sections if s.id.split(".")[0] == str(i + 1)])
                    for i, title in enumerate(self.plan_chapters)]
        report = Report(self.seed, self.level, self.depth, t, self.subject, self.title, self.cols, sections,
                        [c for c in chapters if c[2]], self.spans, restated)
        render(report)
        return report

    def table_blocks(self, p: dict, number: int, pool: list) -> list:
        t, mi, g = self.t, p["metric"], p["group"]
        m = t.metrics[mi]
        caption = f"Table {number}: {cap(m.name)} by {t.entity_kind.lower()}, {self.gp(g)} ({m.unit})"
        rows = []
        for e in self.entities:
            cells = [e] + [self.fig(mi, self.values[("num", mi, g, e, c)]) for c in self.cols]
            text = Table.line(cells)
            for j, c in enumerate(self.cols):
                offset = len(Table.line(cells[: j + 1])) + 1  # "| e | a | " then the cell
                fact = ("num", mi, g, e, c)
                self.spans.append(Span(p["id"], text, cells[j + 1], offset, fact, self.values[fact], "row"))
            rows.append(tuple(cells))
        intro = [f"Table {number} sets out {m.name} by {t.entity_kind.lower()} for {self.gp(g)}, in {m.unit}."]
        intro += self.fillers(self.rng.randint(1, 3), g)
        after = self.fillers(self.rng.randint(2, 4), g)
        if pool:
            after.insert(self.rng.randrange(len(after) + 1), self.fact_sentence(p["id"], pool.pop()))
        table = Table(number, caption, (t.entity_kind,) + self.cols, tuple(rows))
        return [" ".join(intro), table, " ".join(after)]

    def paragraphs(self, p: dict, pools: dict, pointers: list[dict], tables: dict) -> list:
        rng, sid = self.rng, p["id"]
        g = p.get("group")
        count = self.paras + rng.randint(0, 1)
        out = [self.fillers(rng.randint(3, 5), g) for _ in range(count)]
        facts = rng.randint(count, 2 * count) if g else rng.randint(1, 2)
        for _ in range(facts):
            pool = pools[g] if g else pools[rng.choice(self.groups)]
            if pool:
                para = rng.choice(out)
                para.insert(rng.randrange(len(para) + 1), self.fact_sentence(sid, pool.pop()))
        for q in pointers:
            m = self.t.metrics[q["metric"]]
            words = {"ek": self.t.entity_kind.lower(), "metric": m.name, "Metric": cap(m.name),
                     "gp": self.gp(q["group"]), "t": tables[q["id"]], "sec": q["id"]}
            text = rng.choice(POINTERS).format(**words)
            para = rng.choice(out)
            para.insert(rng.randrange(len(para) + 1), text)
            fig = f"Table {tables[q['id']]}"
            self.spans.append(Span(sid, text, fig, text.index(fig), ("ptr", q["metric"], q["group"]), q["id"],
                                   "pointer"))
        return [" ".join(para) for para in out]

    def add_named(self, sec: Section, nm) -> None:
        name = self.rng.choice(nm.pool)
        text = nm.sentence.format(name=name)
        paras = [i for i, b in enumerate(sec.blocks) if isinstance(b, str)]
        i = self.rng.choice(paras)
        sec.blocks[i] = sec.blocks[i] + " " + text
        self.spans.append(Span(sec.id, text, name, text.index(name), ("named", nm.role), name, "named"))

    def restate(self, sections: list[Section]) -> dict:
        """Restatements in later sections (level 4: distractors; level 5: one at the requested depth)."""
        rng, n = self.rng, len(sections)
        count = RESTATEMENTS.get(self.level, 0)
        targets = [rng.randrange(1, n) for _ in range(count)]
        if self.level == 5:
            targets[0] = max(1, round(self.depth * (n - 1)))
        order = {s.id: i for i, s in enumerate(sections)}
        restated: dict = {}
        for j in targets:
            earlier = [s for s in self.spans if s.kind in ("sentence", "row") and order[s.section] < j
                       and s.fact not in restated]
            if not earlier:
                continue
            old = rng.choice(earlier)
            _, mi, g, e, c = old.fact
            m = self.t.metrics[mi]
            step = 10 ** -m.decimals
            new = round(old.value * (1 + rng.choice((-1, 1)) * rng.uniform(0.03, 0.12)), m.decimals)
            if new == old.value or new <= 0:
                new = round(old.value + step, m.decimals)
            fig = self.fig(mi, new)
            before = (f"Restatement: {fact_phrase(self.t, old.fact)}, originally reported in Section {old.section} as "
                      f"{m.prefix}{old.figure}{m.suffix}, has been restated to {m.prefix}")
            text = f"{before}{fig}{m.suffix} following {rng.choice(self.t.reasons)}."
            sec = sections[j]
            sec.blocks.insert(rng.randrange(len(sec.blocks) + 1),
                              text + " Figures elsewhere in this report have not been updated.")
            span = Span(sec.id, text, fig, len(before), old.fact, new, "restatement")
            self.spans.append(span)
            restated[old.fact] = span
        return restated


def render(report: Report) -> None:
    """Each section's text and start, each span's depth, the report's length in characters."""
    start = len(report.title) + 2
    for sec in report.sections:
        lines = [f"{sec.id} {sec.title}"]
        for k, block in enumerate(sec.blocks, 1):
            if isinstance(block, Table):
                lines += [f"[{sec.id} ¶{k}] {block.caption}", Table.line(block.header)]
                lines += [Table.line(row) for row in block.rows]
            else:
                lines.append(f"[{sec.id} ¶{k}] {block}")
        sec.text, sec.start = "\n".join(lines), start
        start += len(sec.text) + 2
    report.chars = start - 2
    for span in report.spans:
        sec = report.by_id[span.section]
        span.depth = (sec.start + sec.text.index(span.text)) / report.chars
