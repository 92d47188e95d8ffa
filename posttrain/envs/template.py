"""Prompt and bridge tokens through the model's chat template, and the template's self-check.

    fmt = ChatFormat.of(tokenizer, parser)                 # checked once per model (check_template)
    ids, sources = fmt.prompt(messages, tools)             # the first prompt, add_generation_prompt
    ids, sources = fmt.bridge(history, turn_text, stopped, observations)   # after a sampled turn

Token-in, token-out: a sampled turn's ids go into the trajectory as sampled; only what the
environment says enters as "bridge" ids, the text the template puts between the end of that
assistant turn and the start of the next one:

    a = render(history + [assistant: turn])                          (no generation prompt)
    b = render(history + [assistant: turn] + observations, add_generation_prompt=True)
    bridge = a[after the turn's text, minus the end-of-turn token the model sampled] + b[len(a):]

so a template that writes "<|im_end|>\\n" after an assistant message gets its "\\n" back (naive
concatenation of sampled ids + rendered tool messages loses it). This needs `b` to extend `a`
(prefix-preserving) and the turn's text to appear verbatim in `a`.

Per token, `sources` says where it came from: ENV (message and observation text), TEMPLATE (the
template's own markup); sampled tokens are POLICY. Spans come from the fast tokenizer's offsets
(a slow tokenizer marks a whole bridge ENV); a fast one is called through its own Rust tokenizer
when that gives what the `transformers` wrapper would (tests/unit/envs/test_bridge_exact.py).

`check_template` renders a two-turn conversation with a tool call, a tool answer and a
`<think>` block, and rebuilds it the way episodes do; it names the first problem found: a lost
character between turns, a template that rewrites earlier assistant turns (e.g. strips `<think>`
blocks, as Qwen3's does), one that is not prefix-preserving at a tool message, or one that does
not end assistant turns with a token. `rollout.template_check: refuse` (default) turns a problem
into a ConfigError at start; `keep_history` accepts a template that only rewrites earlier
`<think>` blocks: episodes keep the turns as sampled (what the policy saw), which differs from
what the template would re-render at inference -- the documented fallback (docs/agents.md).
"""

from __future__ import annotations

import json
from typing import Mapping, Sequence

from posttrain.core.errors import ConfigError, ModelLoadError

POLICY, ENV, TEMPLATE = 0, 1, 2
PROMPT_CACHE_SIZE = 4096  # rendered first prompts kept per model
_PROBE_THINK = "<think>\nplan the call\n</think>\n"


class TemplateError(ValueError):
    """A rendered conversation the bridge rule cannot follow (names the problem)."""


def _render(tokenizer, messages: Sequence[Mapping], tools_kwargs: Mapping, generation: bool) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation,
                                         **tools_kwargs)


def _backend(tok):
    """The fast tokenizer's own (Rust) tokenizer when encoding with it directly gives exactly what
    `tok(text, add_special_tokens=False)` gives: no truncation or padding set on it, and its
    special-token splitting as the wrapper would set it; None otherwise (the wrapper is called)."""
    backend = getattr(tok, "_tokenizer", None)
    if backend is None or not getattr(tok, "is_fast", False) or not hasattr(backend, "encode"):
        return None
    try:
        if backend.truncation is not None or backend.padding is not None:
            return None
        if bool(getattr(backend, "encode_special_tokens", False)) != bool(getattr(tok, "split_special_tokens", False)):
            return None
    except AttributeError:
        return None
    return backend


def _sources(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """Per token: ENV when its (start, end) overlaps one of `spans` (sorted, disjoint), else TEMPLATE
    (a token with no characters is markup). One pass over both while token starts never go back (a
    fast tokenizer's offsets); each token against each span otherwise."""
    out, j, n, prev = [], 0, len(spans), -1
    for start, end in offsets:
        if end <= start:
            out.append(TEMPLATE)
            continue
        if start < prev:
            return [ENV if e > s and any(s < b and e > a for a, b in spans) else TEMPLATE for s, e in offsets]
        prev = start
        while j < n and spans[j][1] <= start:  # spans ending before this token end before every later one
            j += 1
        out.append(ENV if j < n and spans[j][0] < end else TEMPLATE)
    return out


class ChatFormat:
    _cache: dict[tuple[int, str], "ChatFormat"] = {}

    def __init__(self, tokenizer, parser=None, template_check: str = "refuse"):
        if not getattr(tokenizer, "chat_template", None):
            where = getattr(tokenizer, "name_or_path", "") or "the tokenizer"
            raise ModelLoadError(f"{where}: no chat template (episodes render task prompts as chat; "
                                 "add chat_template.jinja to the model directory)")
        if template_check not in ("refuse", "keep_history", "off"):
            raise ConfigError(f"rollout.template_check: {template_check!r} is not one of refuse, keep_history, off")
        self.tokenizer, self.parser, self.template_check = tokenizer, parser, template_check
        self.checked = False
        self.problems: list[str] = []
        self._prompts: dict[str, tuple] = {}
        self._stops: dict[int, str | None] = {}

    @classmethod
    def of(cls, tokenizer, parser=None, template_check: str = "refuse") -> "ChatFormat":
        key = (id(tokenizer), f"{getattr(parser, 'name', None)}:{template_check}")
        fmt = cls._cache.get(key)
        if fmt is None or fmt.tokenizer is not tokenizer:
            fmt = cls._cache[key] = cls(tokenizer, parser, template_check)
        return fmt

    def stop_text(self, token_id: int) -> str | None:
        """The special token `token_id` is, as text, when it is one (a turn that ends on it stopped
        there, not at a stop string); None otherwise. Kept per id: a turn's last token is checked each turn."""
        if token_id not in self._stops:
            text = self.decode([token_id])
            self._stops[token_id] = text if text in getattr(self.tokenizer, "all_special_tokens", ()) else None
        return self._stops[token_id]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """`tokenizer.decode(ids, skip_special_tokens=...)`, straight from a fast tokenizer's own
        tokenizer when the wrapper would add nothing (no clean-up of spaces)."""
        tok = self.tokenizer
        backend = getattr(tok, "_tokenizer", None)
        if backend is not None and getattr(tok, "is_fast", False) and getattr(tok, "clean_up_tokenization_spaces",
                                                                               True) is False:
            return backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # ---- rendering ----

    def _with_tools(self, messages: Sequence[Mapping], tools: Sequence[Mapping] | None) -> tuple[list[Mapping], dict]:
        if not tools:
            return list(messages), {}
        from posttrain.envs.tools.prompt import with_tools

        return with_tools(list(messages), tools, self.parser, self.tokenizer)

    def _encode(self, text: str, spans: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """Token ids of `text` and each one's source: ENV when it overlaps a content span."""
        tok = self.tokenizer
        backend = _backend(tok)
        if backend is not None:  # what tok(text, add_special_tokens=False) calls, without its wrapping
            enc = backend.encode(text, add_special_tokens=False)
            ids, offsets = enc.ids, enc.offsets
        else:
            try:
                enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
                ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
            except (NotImplementedError, ValueError, KeyError):  # a slow tokenizer: no offsets
                ids = tok(text, add_special_tokens=False)["input_ids"]
                return ids, [ENV if spans else TEMPLATE] * len(ids)
        return ids, _sources(offsets, spans)

    @staticmethod
    def _spans(text: str, contents: Sequence[str], start: int = 0) -> list[tuple[int, int]]:
        spans, at = [], start
        for c in contents:
            if not c:
                continue
            i = text.find(c, at)
            if i >= 0:
                spans.append((i, i + len(c)))
                at = i + len(c)
        return spans

    def prompt(self, messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None
               ) -> tuple[list[int], list[int], list[Mapping], dict]:
        """(ids, sources, rendered messages, tools kwargs) of the first prompt (cached: a group's
        samples share it; callers never mutate what they get)."""
        key = json.dumps([list(messages), tools or []], sort_keys=True, default=str)
        hit = self._prompts.get(key)
        if hit is None:
            msgs, kwargs = self._with_tools(messages, tools)
            text = _render(self.tokenizer, msgs, kwargs, True)
            ids, sources = self._encode(text, self._spans(text, [str(m.get("content", "")) for m in msgs]))
            if len(self._prompts) >= PROMPT_CACHE_SIZE:
                self._prompts.clear()
            hit = self._prompts[key] = (ids, sources, msgs, kwargs)
        return hit

    def bridge_text(self, history: Sequence[Mapping], turn_text: str, stop_text: str | None,
                    observations: Sequence[Mapping], tools_kwargs: Mapping) -> tuple[str, list[str]]:
        """The text between a sampled turn (ending with `stop_text`, None: cut by length) and the
        next turn; and the observation contents it holds, in order."""
        turn = {"role": "assistant", "content": turn_text}
        a = _render(self.tokenizer, [*history, turn], tools_kwargs, False)
        b = _render(self.tokenizer, [*history, turn, *observations], tools_kwargs, True)
        if not b.startswith(a):
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            raise TemplateError(f"the chat template is not prefix-preserving at a {observations[0]['role']} "
                                f"message: the conversation before it renders differently once it is added "
                                f"(first difference at char {at}: {a[at:at + 24]!r} vs {b[at:at + 24]!r})")
        i = a.rfind(turn_text) if turn_text else len(a.rstrip())
        if turn_text and i < 0:
            raise TemplateError("the chat template rewrites assistant turns (the sampled text is not rendered "
                                "verbatim), so a bridge cannot follow it")
        suffix = a[i + len(turn_text):] if turn_text else ""
        if stop_text and suffix.startswith(stop_text):
            suffix = suffix[len(stop_text):]
        elif stop_text:  # the model ended its turn with a token the template does not write there
            suffix = suffix.lstrip()
        return suffix + b[len(a):], [str(o.get("content", "")) for o in observations]

    def bridge(self, history: Sequence[Mapping], turn_text: str, stop_text: str | None,
               observations: Sequence[Mapping], tools_kwargs: Mapping) -> tuple[list[int], list[int]]:
        text, contents = self.bridge_text(history, turn_text, stop_text, observations, tools_kwargs)
        return self._encode(text, self._spans(text, contents))

    # ---- the self-check ----

    def check(self, tools: Sequence[Mapping] | None = None) -> list[str]:
        """Problems with this model's template for multi-turn bridges ([] = fine); cached."""
        if self.checked:
            return self.problems
        self.checked = True
        if self.template_check != "off":
            self.problems = check_template(self, tools)
        fatal = [p for p in self.problems if not (self.template_check == "keep_history" and p.startswith("think:"))]
        if fatal:
            where = getattr(self.tokenizer, "name_or_path", "") or "the model"
            kind, message = fatal[0].split(": ", 1)
            hint = " (rollout.template_check: keep_history keeps such turns as sampled)" if kind == "think" else ""
            raise ConfigError(f"{where}: chat template refused for multi-turn episodes: {message}{hint}")
        return self.problems


def end_of_turn_text(fmt: ChatFormat, tools_kwargs: Mapping | None = None) -> str | None:
    """The special token the template writes right after an assistant message's text, if any."""
    tok = fmt.tokenizer
    probe = "probe answer"
    text = _render(tok, [{"role": "user", "content": "q"}, {"role": "assistant", "content": probe}], tools_kwargs or {},
                   False)
    after = text[text.rfind(probe) + len(probe):]
    specials = sorted((s for s in getattr(tok, "all_special_tokens", []) if s and after.startswith(s)), key=len)
    return specials[-1] if specials else None


def check_template(fmt: ChatFormat, tools: Sequence[Mapping] | None = None) -> list[str]:
    """Rebuild a two-turn conversation the way episodes do and compare it with the template's own
    rendering of it; each problem is "kind: message" (kinds: think, bridge, turn_end)."""
    problems: list[str] = []
    stop = end_of_turn_text(fmt)
    if stop is None:
        problems.append("turn_end: the template writes no special token after an assistant message, so the end "
                        "of a sampled turn cannot be matched to it")
    from posttrain.envs.env import ToolCall
    from posttrain.envs.tools.parsers import get_parser

    turn1 = (fmt.parser or get_parser("hermes")).format_calls([ToolCall("lookup", {"q": "x"}, "call_0")], "checking")
    start = [{"role": "system", "content": "sys"}, {"role": "user", "content": "question one"}]
    msgs, kwargs = fmt._with_tools(start, tools)
    tool_msg = {"role": "tool", "name": "lookup", "content": "result one"}
    turn2 = _PROBE_THINK + "final answer"
    user2 = {"role": "user", "content": "question two"}
    try:
        probe = _render(fmt.tokenizer, [*msgs, {"role": "assistant", "content": turn2}, user2], kwargs, False)
        if _PROBE_THINK.strip() not in probe:
            problems.append("think: the chat template strips <think> blocks from earlier assistant turns, so a "
                            "trajectory (turns as sampled) differs from the template's rendering of it")
            turn2 = "final answer"  # the rest of the check without the think block
        text = _render(fmt.tokenizer, msgs, kwargs, True)
        b1, _ = fmt.bridge_text(msgs, turn1, stop, [tool_msg], kwargs)
        text += turn1 + (stop or "") + b1
        hist = [*msgs, {"role": "assistant", "content": turn1}, tool_msg]
        b2, _ = fmt.bridge_text(hist, turn2, stop, [user2], kwargs)
        text += turn2 + (stop or "") + b2
        full = _render(fmt.tokenizer, [*hist, {"role": "assistant", "content": turn2}, user2], kwargs, True)
    except TemplateError as e:
        return problems + [f"bridge: {e}"]
    except Exception as e:  # noqa: BLE001 - a template that cannot render a tool turn at all
        return problems + [f"bridge: the chat template fails on a tool message ({type(e).__name__}: {e})"]
    if text != full:
        at = next((i for i, (x, y) in enumerate(zip(text, full)) if x != y), min(len(text), len(full)))
        lost = full[at:at + 1] if len(full) > len(text) or text[at:at + 1] != full[at:at + 1] else ""
        what = f"a lost {lost!r} between turns" if lost.isspace() else "a difference between turns"
        problems.append(f"bridge: rebuilding a conversation turn by turn gives {what} (char {at}: "
                        f"{text[at:at + 24]!r} vs the template's {full[at:at + 24]!r})")
    return problems
