"""Long-context probes as task sources: facts hidden in filler prose at chosen prompt lengths and depths.

    tasks = make_source_tasks("needle", n=40, seed=0, options={"lengths": [1024, 4096], "depths": [0.0, 0.5, 1.0]})
    tasks = make_source_tasks("needle_multi", n=20, seed=0, options={"keys": 4})
    tasks = make_source_tasks("needle_multihop", n=20, seed=0)
    # in an eval suite: tasks: [{name: needle, n: 40, options: {lengths: [1024, 8192]}}]

Three sources, all verified by `needle` (posttrain/domains/longctx/needle.py):
- `needle`: one fact "The secret number of the amber compass is 4829174." at depth d; the question
  asks for that number;
- `needle_multi`: `keys` such facts (default 3, different keys and numbers); the first sits at depth d,
  the others evenly spaced after it over the rest of the document (as LangChain's multi-needle test
  places them); the question asks for every number, in a given order, on one line;
- `needle_multihop`: a chain "Dr. Halvorsen's office is in the cobalt wing." -> "The access code of the
  cobalt wing is 4829174.", plus a decoy chain for another person and wing at random depths; the code
  fact sits at depth d, the office fact at (d + 0.5) mod 1, so the answer needs both hops.

Options (unknown ones are a ConfigError naming the key): `lengths` (nominal prompt lengths in tokens,
default [1024, 2048, 4096, 8192]), `depths` (fractions 0..1 of the document where the (first) answer
fact sits, default [0.0, 0.25, 0.5, 0.75, 1.0]), and for `needle_multi` `keys` (2..10). Task i sits
in cell i mod (lengths x depths), cells length-major, so n >= cells covers every cell (n None: one
task per cell). Each task is generated from `random.Random(f"{source}:{seed + i}")`: the same seed
gives the same tasks. Values are random 7-digit numbers; the filler (longctx_filler.py) holds no digits.

Sizing: a source has no tokenizer, so the prompt is sized in characters: FILL x length tokens, less
TEMPLATE_TOKENS for the chat template's own text, less the question and facts at FIXED_CHARS_PER_TOKEN,
leave the filler's characters at FILLER_CHARS_PER_TOKEN. Measured with SmolLM2's tokenizer the rendered
prompt is 89-93% of the nominal length from 1024 tokens up (8192 -> ~7600 tokens; 300 -> 82-90%),
never above it, leaving room for the answer (`answer_tokens`) under SmolLM2's 8192 positions; the eval
records each prompt's real token count (SampleRecord.prompt_tokens). A tokenizer that packs English
less densely (the tiny test tokenizer) gives prompts longer than nominal.

Each Task: `id = "SOURCE/LENGTH/DEPTH/SEED+i"`, `reference = {"answer": "v1, v2", "values": ["v1", "v2"]}`,
`verifiers = ("needle",)`, `limits.max_new_tokens = answer_tokens(values)` (48 for one value, 20 more
per further one: small models answer in a sentence per value), `metadata = {"source": "longctx",
"variant": SOURCE, "length": L, "depth": d, "needle_depths": [where each answer fact starts, as a
fraction of the document]}`. The prompt asks for the last line `Answer: <number>` (comma-separated
for several).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from posttrain.core.errors import ConfigError
from posttrain.domains.longctx import filler
from posttrain.tasks.registry import register_source
from posttrain.core.types import Limits, Task

VARIANTS = ("needle", "needle_multi", "needle_multihop")
DEFAULT_LENGTHS = (1024, 2048, 4096, 8192)
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
DEFAULT_KEYS = 3
MAX_KEYS = 10
FILL = 0.95  # of the nominal length, before the margin the estimates below leave
FILLER_CHARS_PER_TOKEN = 4.7  # SmolLM2's tokenizer on the filler: 4.8-4.9 (a margin below it)
FIXED_CHARS_PER_TOKEN = 3.2  # on the question, format line and facts (digits are one token each): 3.2-3.7
TEMPLATE_TOKENS = 32  # the chat template's own tokens (SmolLM2: 30, a default system prompt and role tags)
MIN_FILLER_CHARS = 200
ANSWER_TOKENS = (28, 20)  # a task's max_new_tokens: 28 + 20 per value (48 for one; a sentence per value)

KEY_COLOURS = ("amber", "cobalt", "crimson", "ivory", "jade", "scarlet", "saffron", "indigo", "copper",
               "silver", "violet", "emerald", "turquoise", "maroon", "ochre", "teal")
KEY_OBJECTS = ("compass", "kettle", "telescope", "music box", "typewriter", "hourglass", "umbrella",
               "suitcase", "violin", "chessboard", "teapot", "globe", "sextant", "gramophone")
PEOPLE = ("Dr. Halvorsen", "Professor Okafor", "Ms. Lindqvist", "Mr. Delacroix", "Captain Moreau",
          "Dr. Ishikawa", "Mrs. Abernathy", "Mr. Castellano", "Dr. Petrova", "Professor Nakamura")

INTRO = "The document below hides {what} among ordinary text. Read it, then answer the question after it."
FORMAT = {1: "Reply with the number only, on the last line, as `Answer: <number>`.",
          2: "Reply on the last line with the numbers in this order, separated by commas, as `Answer: {slots}`."}


@dataclass(frozen=True)
class Probe:
    """What one task hides: its answer facts (in answer order), other facts, the question."""

    facts: tuple[str, ...]  # the facts holding the answer values (in answer order)
    depths: tuple[float, ...]  # where each of `facts` goes
    others: tuple[tuple[str, float], ...]  # other facts (multi-hop links, decoys) and their depths
    values: tuple[str, ...]
    question: str
    what: str  # "a fact" | "some facts"


def _values(rng: random.Random, k: int) -> list[str]:
    out: list[str] = []
    while len(out) < k:
        v = str(rng.randint(1_000_000, 9_999_999))
        if v not in out:
            out.append(v)
    return out


def _keys(rng: random.Random, k: int) -> list[str]:
    colours, objects = rng.sample(KEY_COLOURS, k), rng.sample(KEY_OBJECTS, k)
    return [f"{c} {o}" for c, o in zip(colours, objects)]


def _secret(key: str, value: str) -> str:
    return f"The secret number of the {key} is {value}."


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def needle_probe(rng: random.Random, depth: float) -> Probe:
    [key], [value] = _keys(rng, 1), _values(rng, 1)
    return Probe((_secret(key, value),), (depth,), (), (value,),
                 f"What is the secret number of the {key}?", "a fact")


def multi_probe(rng: random.Random, depth: float, k: int) -> Probe:
    keys, values = _keys(rng, k), _values(rng, k)
    step = (1.0 - depth) / k
    depths = tuple(depth + i * step for i in range(k))
    question = f"What are the secret numbers of {_and([f'the {key}' for key in keys])}?"
    return Probe(tuple(_secret(key, v) for key, v in zip(keys, values)), depths, (), tuple(values),
                 question, "some facts")


def multihop_probe(rng: random.Random, depth: float) -> Probe:
    person, decoy = rng.sample(PEOPLE, 2)
    wing, decoy_wing = rng.sample(KEY_COLOURS, 2)
    value, decoy_value = _values(rng, 2)
    others = ((f"{person}'s office is in the {wing} wing.", (depth + 0.5) % 1.0),
              (f"{decoy}'s office is in the {decoy_wing} wing.", rng.random()),
              (f"The access code of the {decoy_wing} wing is {decoy_value}.", rng.random()))
    return Probe((f"The access code of the {wing} wing is {value}.",), (depth,), others, (value,),
                 f"What is the access code of the wing where {person}'s office is?", "some facts")


PROBES = {  # source -> (rng, depth, keys) -> Probe
    "needle": lambda rng, depth, keys: needle_probe(rng, depth),
    "needle_multi": multi_probe,
    "needle_multihop": lambda rng, depth, keys: multihop_probe(rng, depth),
}


def frame(probe: Probe, document: str) -> str:
    """The user message: intro, the document, the question and the answer format."""
    k = len(probe.values)
    fmt = FORMAT[1] if k == 1 else FORMAT[2].format(slots=", ".join(["<number>"] * k))
    return (f"{INTRO.format(what=probe.what)}\n\n<document>\n{document}\n</document>\n\n"
            f"Question: {probe.question}\n{fmt}")


def haystack(rng: random.Random, probe: Probe, length: int, where: str) -> tuple[str, list[float]]:
    """The document for `probe` at nominal `length` tokens, and where each answer fact starts (fraction)."""
    hidden = list(zip(probe.facts, probe.depths)) + list(probe.others)
    fixed = len(frame(probe, "")) + sum(len(f) + 2 for f, _ in hidden)
    chars = int((FILL * length - TEMPLATE_TOKENS - fixed / FIXED_CHARS_PER_TOKEN) * FILLER_CHARS_PER_TOKEN)
    if chars < MIN_FILLER_CHARS:
        least = math.ceil((MIN_FILLER_CHARS / FILLER_CHARS_PER_TOKEN + fixed / FIXED_CHARS_PER_TOKEN
                           + TEMPLATE_TOKENS) / FILL)
        raise ConfigError(f"{where}: lengths: {length} tokens is too short for this probe's question "
                          f"and facts; use at least {least}")
    units = filler.sentences(rng, chars)
    starts = [0]
    for u in units:
        starts.append(starts[-1] + len(u) + 1)
    # each fact goes in front of the filler sentence nearest its depth (stable for equal slots)
    slots = [min(range(len(starts)), key=lambda b: abs(starts[b] - d * starts[-1])) for _, d in hidden]
    merged = list(units)
    for i in sorted(range(len(hidden)), key=lambda i: (slots[i], i), reverse=True):
        merged.insert(slots[i], hidden[i][0])
    text = filler.join(rng, merged)
    found = [text.index(f) / max(1, len(text)) for f in probe.facts]
    return text, found


def answer_tokens(values: int) -> int:
    return ANSWER_TOKENS[0] + ANSWER_TOKENS[1] * values


def check_options(name: str, options: Mapping[str, Any]) -> tuple[list[int], list[float], int]:
    """(lengths, depths, keys) of a source's options; a ConfigError names a bad or unknown key."""
    allowed = {"lengths", "depths"} | ({"keys"} if name == "needle_multi" else set())
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(f"{name}: unknown option {unknown[0]!r} (valid: {', '.join(sorted(allowed))})")
    lengths = options.get("lengths", list(DEFAULT_LENGTHS))
    depths = options.get("depths", list(DEFAULT_DEPTHS))
    keys = options.get("keys", DEFAULT_KEYS)
    if not isinstance(lengths, (list, tuple)) or not lengths or any(
            isinstance(x, bool) or not isinstance(x, int) or x <= 0 for x in lengths):
        raise ConfigError(f"{name}: lengths must be a non-empty list of positive token counts, got {lengths!r}")
    if not isinstance(depths, (list, tuple)) or not depths or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= x <= 1.0 for x in depths):
        raise ConfigError(f"{name}: depths must be a non-empty list of fractions in [0, 1], got {depths!r}")
    if len(set(lengths)) < len(lengths) or len(set(depths)) < len(depths):
        raise ConfigError(f"{name}: lengths and depths must not repeat a value")
    if isinstance(keys, bool) or not isinstance(keys, int) or not 2 <= keys <= MAX_KEYS:
        raise ConfigError(f"{name}: keys must be an integer in [2, {MAX_KEYS}], got {keys!r}")
    return [int(x) for x in lengths], [float(x) for x in depths], keys


def make_probe_tasks(name: str, n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]:
    lengths, depths, keys = check_options(name, options)
    cells = [(length, depth) for length in lengths for depth in depths]
    tasks = []
    for i in range(len(cells) if n is None else n):
        length, depth = cells[i % len(cells)]
        rng = random.Random(f"{name}:{seed + i}")
        probe = PROBES[name](rng, depth, keys)
        document, found = haystack(rng, probe, length, name)
        tasks.append(Task(
            id=f"{name}/{length}/{depth:g}/{seed + i}", domain=name,
            prompt=({"role": "user", "content": frame(probe, document)},),
            reference={"answer": ", ".join(probe.values), "values": list(probe.values)},
            verifiers=("needle",), limits=Limits(max_new_tokens=answer_tokens(len(probe.values))),
            metadata={"source": "longctx", "variant": name, "length": length, "depth": depth,
                      "needle_depths": [round(f, 4) for f in found]},
        ))
    return tasks


@register_source("needle", description="needle in a haystack: one number hidden in filler at each (length, depth)")
def needle(n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]:
    return make_probe_tasks("needle", n, seed, options)


@register_source("needle_multi", description="multi-needle: several keyed numbers hidden in filler, all to recall")
def needle_multi(n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]:
    return make_probe_tasks("needle_multi", n, seed, options)


@register_source("needle_multihop", description="multi-hop needle: person -> wing -> access code, with a decoy chain")
def needle_multihop(n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]:
    return make_probe_tasks("needle_multihop", n, seed, options)
