"""Filler prose for the long-context probes: varied, plain English sentences built from local word
lists (no downloads), reproducible from a `random.Random`.

    rng = random.Random(7)
    units = sentences(rng, chars=3000)   # sentences whose total length (with one space each) <= 3000
    text = join(rng, units)              # paragraphs of 3-6 sentences

The filler holds no digits and none of the probes' key words (their nouns, names and the phrases
"secret number" / "access code"), so a needle's value and key appear only where they are hidden.
"""

from __future__ import annotations

import random

SUBJECTS = (
    "the old ferryman", "a young botanist", "the village baker", "our neighbour", "the museum guard",
    "a travelling musician", "the harbour master", "the librarian", "a retired teacher", "the night nurse",
    "two schoolchildren", "the shepherd", "a tired cyclist", "the choir", "the painter", "my grandmother",
    "the gardener", "a street vendor", "the mayor", "the beekeeper", "the postman", "a quiet student",
    "the fisherman's daughter", "the innkeeper", "a group of hikers", "the blacksmith", "the carpenter",
    "the weaver", "an elderly couple", "the station master",
)
VERBS = (
    "walked along", "looked across", "wandered through", "swept", "painted", "visited", "described",
    "photographed", "sketched", "repaired", "talked about", "returned to", "waited near", "tidied",
    "remembered", "crossed", "explored", "admired", "avoided", "wrote a letter about",
)
PLACES = (
    "the river bank", "the market square", "the narrow bridge", "the orchard", "the train station",
    "the quiet reading room", "the hillside vineyard", "the abandoned mill", "the chapel garden",
    "the harbour wall", "the pine forest", "the old granary", "the meadow behind the school",
    "the covered market", "the windy cliff path", "the potter's workshop", "the town hall steps",
    "the village green", "the frozen pond", "the long avenue of plane trees", "the bakery on the corner",
    "the lighthouse road", "the botanical greenhouse", "the sheep pasture", "the ruined castle",
)
TIMES = (
    "at dawn", "before the storm", "late in the autumn", "on a grey afternoon", "after the festival",
    "during the long winter", "every other morning", "just before supper", "in the first week of spring",
    "while the tide was out", "on the coldest night of the year", "after the harvest", "at midday",
    "under a pale moon", "as the shops were closing",
)
CLAUSES = (
    "while the bells rang in the distance", "and nobody seemed to notice", "as the fog lifted slowly",
    "because the roads were closed", "though the wind kept changing direction",
    "and the gulls followed for a while", "as if nothing had happened", "with a basket of apples",
    "humming an old tune", "before anyone else was awake", "and then sat down to rest",
    "while the children played nearby", "without saying a word", "as the rain began again",
)
ADJECTIVES = (
    "calm", "crowded", "peaceful", "muddy", "bright", "strangely silent", "busy", "cheerful", "damp",
    "golden", "windswept", "gloomy", "fragrant", "noisy", "sleepy",
)
SMELLS = (
    "fresh bread", "wet leaves", "salt and tar", "wood smoke", "cut grass", "rain", "cinnamon",
    "lavender", "old paper", "ripe plums",
)
TOPICS = (
    "the history of the canal", "migrating birds", "forgotten recipes", "the stars of the northern sky",
    "sailing ships", "mountain villages", "the making of glass", "wild mushrooms", "ancient roads",
    "the habits of foxes", "weather lore", "the first railways",
)
THINGS = (
    "wild roses", "tall hedges", "stone walls", "lanterns", "chestnut trees", "wooden benches",
    "flower boxes", "iron railings", "moss-covered steps", "willow trees",
)

TEMPLATES = (
    "{Subject} {verb} {place} {time}, {clause}.",
    "{Place} smelled of {smell} {time}.",
    "People said that {subject} had never once been late to {place}.",
    "It was {adj} weather, and {subject} {verb} {place}.",
    "Nobody could remember when {place} had last been so {adj}.",
    "In the evenings, {subject} liked to read about {topic}.",
    "The way to {place} was lined with {things}.",
    "{Time_cap}, {subject} {verb} {place} {clause}.",
    "According to {subject}, {place} was at its best {time}.",
    "There was a small argument about {topic}, but {subject} only smiled.",
    "{Subject} kept a notebook full of drawings of {things}.",
    "By the time {subject} reached {place}, it had become {adj}.",
    "Visitors often asked {subject} about {topic}.",
    "The air near {place} was {adj}, {clause}.",
    "{Subject} and {subject2} met by chance near {place} {time}.",
    "For many years {place} had been known for its {things}.",
)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def sentence(rng: random.Random) -> str:
    """One filler sentence."""
    subject, subject2 = rng.sample(SUBJECTS, 2)
    place, time = rng.choice(PLACES), rng.choice(TIMES)
    return rng.choice(TEMPLATES).format(
        Subject=_cap(subject), subject=subject, subject2=subject2, verb=rng.choice(VERBS), place=place,
        Place=_cap(place), time=time, Time_cap=_cap(time), clause=rng.choice(CLAUSES),
        adj=rng.choice(ADJECTIVES), smell=rng.choice(SMELLS), topic=rng.choice(TOPICS), things=rng.choice(THINGS),
    )


def sentences(rng: random.Random, chars: int) -> list[str]:
    """Filler sentences whose total length, one separator each, stays within `chars`."""
    out: list[str] = []
    used = 0
    while True:
        s = sentence(rng)
        if used + len(s) + 1 > chars:
            return out
        out.append(s)
        used += len(s) + 1


def join(rng: random.Random, units: list[str]) -> str:
    """The units as paragraphs of 3-6 sentences (a blank line between paragraphs)."""
    out: list[str] = []
    left = rng.randint(3, 6)
    for i, unit in enumerate(units):
        out.append(unit)
        if i == len(units) - 1:
            break
        left -= 1
        if left == 0:
            out.append("\n\n")
            left = rng.randint(3, 6)
        else:
            out.append(" ")
    return "".join(out)
