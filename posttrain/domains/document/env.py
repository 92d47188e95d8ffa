"""The document environment: question answering over a long generated report, with retrieval tools.

    env = make_env("document", resources)        # tasks of source `document` (posttrain/domains/document/source.py)
    messages = await env.reset(task)             # system (tools, citation rule) + the question
    obs, done, info = await env.step(action)     # toc / search / read_section; `answer` ends the episode
    scores = env.score(task, env.state())        # right answer AND cited spans that support it (cite.py)

The report is rebuilt from `task.reference` (seed, level, depth) at reset and at scoring
(report.py, cached). Tools: `toc()` the table of contents; `search(query, k=5)` BM25 over
paragraphs and table rows (search.py), each hit with its "[3.2 ¶2]" marker and a snippet;
`read_section(section, page=1)` the section's text with paragraph markers, PAGE_CHARS a page (a
longer section ends its page with how to read the next); `answer(answer, citations)` records the
final answer, done. A missing section, a page past the end or an empty query is a `tool_failed`
observation naming it (an unknown section also lists the nearby ids); a turn without calls ends
the episode with its text as an answer without citations. `state()` is {"answer", "citations",
"answered_by": "answer" | "text" | None, "calls": {tool: count}}.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from posttrain.envs.env import Action, Observation, Resources, StepResult, error_observation
from posttrain.domains.document.cite import score_state, section_id
from posttrain.domains.document.report import Report, build_report
from posttrain.domains.document.search import format_hits
from posttrain.core.types import Message, Score, Task

PAGE_CHARS = 3000
MAX_K = 10
SYSTEM = (
    "You answer a question about a long document with tools. toc() lists its sections; search(query, k) finds "
    "passages (paragraphs and table rows) with their markers like [3.2 ¶2]; read_section(section, page) shows a "
    "section. When a later section restates a figure, the restated figure counts. Finish with answer(answer, "
    "citations): `answer` is the value alone (its unit optional) or the name; `citations` lists "
    '{"section": "3.2", "quote": "..."} for every sentence or table row your answer uses, each quote copied '
    "verbatim from that section (at most 400 characters, markers optional).")


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


TOOLS = [
    _tool("toc", "The document's table of contents: chapters and section ids with titles.", {}, []),
    _tool("search", "The top-k passages matching the query (BM25), each with its section marker and a snippet.",
          {"query": {"type": "string", "description": "words to look for"},
           "k": {"type": "integer", "description": f"how many passages (1-{MAX_K})", "default": 5}}, ["query"]),
    _tool("read_section", "A section's full text with paragraph markers; long sections come in pages.",
          {"section": {"type": "string", "description": "a section id such as 3.2"},
           "page": {"type": "integer", "description": "page number, from 1", "default": 1}}, ["section"]),
    _tool("answer", "Give the final answer with citations; ends the episode.",
          {"answer": {"type": "string", "description": "the value or name"},
           "citations": {"type": "array", "description": "the quoted spans that support the answer", "items": {
               "type": "object", "properties": {"section": {"type": "string"}, "quote": {"type": "string"}},
               "required": ["section", "quote"]}}}, ["answer", "citations"]),
]


def load_report(reference: Mapping[str, Any]) -> Report:
    return build_report(int(reference["seed"]), int(reference["level"]), float(reference["depth"]))


def pages(text: str) -> list[str]:
    """The text in pages of at most PAGE_CHARS, split between lines (a longer line is cut)."""
    out, page = [], ""
    for line in text.split("\n"):
        while len(line) > PAGE_CHARS:
            out, page, line = out + ([page] if page else []) + [line[:PAGE_CHARS]], "", line[PAGE_CHARS:]
        if page and len(page) + 1 + len(line) > PAGE_CHARS:
            out.append(page)
            page = line
        else:
            page = f"{page}\n{line}" if page else line
    return out + [page] if page else out


def nearby(report: Report, sid: str) -> str:
    ids = [s.id for s in report.sections]
    chapter = sid.split(".")[0]
    same = [i for i in ids if i.split(".")[0] == chapter]
    return f"sections run {ids[0]} .. {ids[-1]}" + (f"; chapter {chapter} has {', '.join(same)}" if same else "")


class DocumentEnv:
    def __init__(self, resources: Resources) -> None:
        self._resources = resources
        self.tools = TOOLS
        self._task: Task | None = None
        self._report: Report | None = None
        self._state: dict = {}

    async def reset(self, task: Task) -> list[Message]:
        ref = task.reference
        if not isinstance(ref, Mapping) or not {"seed", "level", "depth", "evidence"} <= set(ref):
            raise ValueError(f"task {task.id!r}: not a document task (its reference lacks seed/level/depth/evidence)")
        self._task = task
        self._report = await self._resources.run_blocking(load_report, ref)
        self._state = {"answer": None, "citations": [], "answered_by": None, "calls": {}}
        return [{"role": "system", "content": SYSTEM}, *task.prompt]

    async def step(self, action: Action) -> StepResult:
        assert self._report is not None, "step() before reset()"
        started = time.perf_counter()
        observations = [error_observation("malformed", e.message) for e in action.errors]
        if not action.tool_calls:
            if action.errors:
                return StepResult(observations, False, {})
            self._state.update(answer=action.content or action.text, answered_by="text")
            return StepResult([], True, {})
        done = False
        for call in action.tool_calls:
            if done:
                break
            calls = self._state["calls"]
            calls[call.name] = calls.get(call.name, 0) + 1
            if call.name == "answer":
                obs, done = self._answer(call.arguments)
            elif call.name == "search":
                obs = await self._search(call.arguments)
            elif call.name == "read_section":
                obs = self._read(call.arguments)
            elif call.name == "toc":
                obs = Observation(self._report.toc(), name="toc")
            else:
                obs = error_observation("unknown_tool", f"no tool {call.name!r} (tools: toc, search, "
                                        "read_section, answer)", call.name)
            observations.append(obs)
        return StepResult(observations, done, {"env_seconds": time.perf_counter() - started,
                                               "tool_calls": len(action.tool_calls)})

    async def _search(self, args: Mapping[str, Any]) -> Observation:
        query, k = args.get("query"), args.get("k", 5)
        if not isinstance(query, str):
            return error_observation("bad_arguments", "query must be a string", "search")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            return error_observation("bad_arguments", f"k must be an integer in 1..{MAX_K}, got {k!r}", "search")
        if not query.strip():
            return error_observation("tool_failed", "empty query", "search")
        hits = await self._resources.run_blocking(self._report.index.search, query, k)
        return Observation(format_hits(hits, query), name="search")

    def _read(self, args: Mapping[str, Any]) -> Observation:
        raw, page = args.get("section"), args.get("page", 1)
        if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
            return error_observation("bad_arguments", "section must be a string such as '3.2'", "read_section")
        if isinstance(page, bool) or not isinstance(page, int):
            return error_observation("bad_arguments", f"page must be an integer, got {page!r}", "read_section")
        sid = section_id(raw)
        sec = self._report.section(sid)
        if sec is None:
            return error_observation("tool_failed", f"no section {sid!r}; {nearby(self._report, sid)}", "read_section")
        parts = pages(sec.text)
        if not 1 <= page <= len(parts):
            return error_observation("tool_failed", f"section {sid} has {len(parts)} page(s); no page {page}",
                                     "read_section")
        text = parts[page - 1]
        if len(parts) > 1:
            more = f"; read_section('{sid}', page={page + 1}) for more" if page < len(parts) else ""
            text += f"\n[page {page} of {len(parts)}{more}]"
        return Observation(text, name="read_section")

    def _answer(self, args: Mapping[str, Any]) -> tuple[Observation, bool]:
        answer, citations = args.get("answer"), args.get("citations", [])
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
        if not isinstance(answer, str) or not isinstance(citations, list):
            return error_observation("bad_arguments", "answer must be a string and citations a list of "
                                     "{section, quote}", "answer"), False
        self._state.update(answer=answer, citations=[dict(c) if isinstance(c, Mapping) else c for c in citations],
                           answered_by="answer")
        return Observation("Answer recorded.", name="answer"), True

    def state(self) -> dict:
        return {**self._state, "calls": dict(self._state.get("calls", {})),
                "citations": list(self._state.get("citations", []))}

    def score(self, task: Task, state: Any) -> list[Score]:
        return [score_state(load_report(task.reference), task.reference, state)]

    async def close(self) -> None:
        self._report = None
