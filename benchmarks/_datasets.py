"""The three question sets of ``agent_vs_react.py``, each with its simulated tools and the
answers a scripted model gives, for the model server of ``_latency_model.py``.

Every set comes from LLMCompiler's repository (``benchmarks/data/``, licences in its NOTICE).
Its original tools search live Wikipedia; here every look-up is simulated: it sleeps for a
seeded latency and returns synthetic facts made for its question (a seeded number, or five
sentences shaped like the first five sentences of a Wikipedia page, which is what
LLMCompiler's ``search`` returns). The facts are built so that the right answer can be read
from them, and the scripted model reads it from the tool results in the prompt it is sent:
a result that does not reach the model makes a wrong answer. Accuracy checks that plumbing,
not a model's reasoning.

- **parallelqa** (113 questions, 2-5 look-ups): ``search`` returns fact ``j`` of the question,
  a whole number; ``math`` adds them; the right answer is their sum.
- **movie** (500 questions, 8 look-ups): ``search`` on each of the 4 liked movies and the 4
  options returns its synthetic page; the liked movies share two genres, the right option has
  both and the others neither; the model picks the option whose genres the liked movies name
  most often.
- **hotpotqa** (1,487 comparison questions, 2 look-ups): ``search`` on each of the two
  entities (read from the question by a fixed rule) returns its synthetic page; a yes/no
  question is answered by whether the two pages give the same category, a pick-one question by
  the name on the page with the larger recorded value.

The same look-ups are made in every mode, with the same arguments and the same results: the
plan and ReAct's tool calls name the same queries.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

import dagagent
from dagagent.toolkits.calc import evaluate

__all__ = ["DATASETS", "Dataset", "Question"]

SEARCH_S = (0.3, 1.2)  # seconds per simulated look-up (see SOURCES in agent_vs_react.py)
MATH_S = (0.001, 0.005)


@dataclass
class Question:
    id: str
    text: str  # the goal, as asked
    expected: str  # the right answer, in this simulation
    group: str  # how the tables break results down (branch, or question kind)
    queries: list[str]  # the look-ups, in the order the model makes them
    facts: dict[str, Any]  # query -> what the look-up returns
    extra: dict[str, Any] = field(default_factory=dict)


def _pages(text: str, names: list[str], tail: str) -> dict[str, re.Match[str]]:
    """Each name's page in ``text``: where the name is followed by ``tail`` (a pattern).
    Longer names first, each found page blanked out, so that a name inside another name
    ("Tower" in "Met Life Tower") does not find the other's page."""
    found: dict[str, re.Match[str]] = {}
    for name in sorted(set(names), key=len, reverse=True):
        match = re.search(re.escape(name) + tail, text, re.S)
        if match is not None:
            found[name] = match
            text = text[: match.start()] + " " * (match.end() - match.start()) + text[match.end() :]
    return found


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


class Dataset:
    """One question set: its file, questions, tools and scripted answers."""

    name = ""
    file = ""
    size = 0
    search_arg = "query"

    def questions(self, rows: list[dict[str, Any]], seed: int) -> list[Question]:
        raise NotImplementedError

    def pick(self, questions: list[Question], n: int) -> list[Question]:
        """``n`` questions spread over the groups, in file order (all when 0)."""
        if n <= 0 or n >= len(questions):
            return questions
        groups: dict[str, list[Question]] = {}
        for q in questions:
            groups.setdefault(q.group, []).append(q)
        chosen: list[Question] = []
        while len(chosen) < n:
            for g in sorted(groups):
                if groups[g] and len(chosen) < n:
                    chosen.append(groups[g].pop(0))
        return chosen

    def load(self, data_dir: Path, n: int, seed: int) -> list[Question]:
        path = data_dir / self.file
        if not path.is_file():
            raise SystemExit(f"the {self.name} data set is missing: {path}")
        return self.pick(self.questions(json.loads(path.read_text(encoding="utf-8")), seed), n)

    # -- tools ------------------------------------------------------------------------

    def registry(self, q: Question, seed: int, scale: float) -> dagagent.Registry:
        """The tools one question's runs use (every mode builds the same)."""
        registry = dagagent.Registry()
        facts = q.facts

        async def look_up(key: str) -> Any:
            rng = random.Random(f"{seed}:{q.id}:search:{key}")
            await anyio.sleep(rng.uniform(*SEARCH_S) * scale)
            if key not in facts:
                raise ValueError(f"nothing found for {key!r}")
            return facts[key]

        if self.search_arg == "query":

            @registry.tool
            async def search(query: str) -> int:
                """Search the web for one fact; returns it as a number.

                Args:
                    query: The fact to look up, e.g. "fact 1 of question 7".
                """
                return int(await look_up(query))

            @registry.tool
            async def math(expression: str) -> float | int:
                """Evaluate arithmetic such as "12 + 30 * 2".

                Args:
                    expression: The arithmetic to evaluate.
                """
                rng = random.Random(f"{seed}:{q.id}:math:{expression}")
                await anyio.sleep(rng.uniform(*MATH_S) * scale)
                return evaluate(expression)

        else:

            @registry.tool(name="search")
            async def search_entity(entity: str) -> str:
                """Look up an entity on Wikipedia; returns the first five sentences of its page.

                Args:
                    entity: The entity to look up, e.g. "Mount Everest" or "The Matrix".
                """
                return str(await look_up(entity))

        return registry

    # -- the scripted model -----------------------------------------------------------

    def plan_tasks(self, q: Question) -> list[dict[str, Any]]:
        """The tasks a model would plan: one look-up per query, no dependencies."""
        return [
            {"id": f"s{j}", "tool": "search", "args": {self.search_arg: query}}
            for j, query in enumerate(q.queries, 1)
        ]

    def react_reply(
        self, q: Question, results: list[str], parallel: bool
    ) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """ReAct's next turn: (text, tool calls) after ``results`` came back."""
        n = len(q.queries)
        if parallel and not results:
            return "", [("search", {self.search_arg: s}) for s in q.queries]
        if len(results) < n:
            return "", [("search", {self.search_arg: q.queries[len(results)]})]
        return self.answer_from(q, "\n".join(results)), []

    def join_reply(self, q: Question, prompt: str, ids: list[str]) -> tuple[str, list[str]]:
        """The joiner's answer and cites (``ids``: the plan's task ids), read from the results
        in its prompt."""
        return self.answer_from(q, prompt), ids

    def answer_from(self, q: Question, text: str) -> str:
        raise NotImplementedError

    def is_right(self, answer: str | None, q: Question) -> bool:
        return answer is not None and _norm(answer) == _norm(q.expected)


# ---------------------------------------------------------------------------------------------
# ParallelQA


class ParallelQA(Dataset):
    name = "parallelqa"
    file = "parallelqa_dataset.json"
    size = 113

    def questions(self, rows: list[dict[str, Any]], seed: int) -> list[Question]:
        out = []
        for row in rows:
            rng = random.Random(f"{seed}:{row['id']}")
            names = [f"fact {j} of question {row['id']}" for j in range(1, int(row["branch"]) + 1)]
            facts = {name: rng.randint(100, 9999) for name in names}
            out.append(
                Question(
                    id=str(row["id"]),
                    text=str(row["question"]).strip(),
                    expected=str(sum(facts.values())),
                    group=str(row["branch"]),
                    queries=names,
                    facts=facts,
                )
            )
        return out

    def plan_tasks(self, q: Question) -> list[dict[str, Any]]:
        tasks = super().plan_tasks(q)
        expression = " + ".join(f"${{{t['id']}}}" for t in tasks)
        tasks.append({"id": "total", "tool": "math", "args": {"expression": expression}})
        return tasks

    def react_reply(
        self, q: Question, results: list[str], parallel: bool
    ) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        k = len(q.queries)
        if len(results) < k:
            return super().react_reply(q, results, parallel)
        if len(results) == k:
            return "", [("math", {"expression": " + ".join(r.strip() for r in results)})]
        return results[-1].strip(), []

    def join_reply(self, q: Question, prompt: str, ids: list[str]) -> tuple[str, list[str]]:
        total = ids[-1]  # the sum, the plan's last task
        found = re.search(rf"^- {re.escape(total)}: [a-z]+, output: (.+)$", prompt, re.M)
        return (found.group(1).strip() if found else "unknown"), [total]

    def is_right(self, answer: str | None, q: Question) -> bool:
        """A number within 1 % of the expected one (a real model may write a sentence)."""
        if answer is None:
            return False
        want = float(q.expected)
        for found in re.findall(r"-?\d[\d,]*\.?\d*", answer):
            try:
                got = float(found.replace(",", ""))
            except ValueError:
                continue
            if abs(got - want) <= 0.01 * abs(want):
                return True
        return False


# ---------------------------------------------------------------------------------------------
# Synthetic pages (movie, hotpotqa)

_FIRST = [
    "Ada",
    "Ben",
    "Carla",
    "Dev",
    "Elena",
    "Farid",
    "Greta",
    "Hugo",
    "Iris",
    "Jonas",
    "Kira",
    "Luca",
    "Mara",
    "Nils",
    "Omar",
    "Petra",
]
_LAST = [
    "Abbott",
    "Brandt",
    "Castillo",
    "Duval",
    "Eriksen",
    "Fontaine",
    "Garber",
    "Holm",
    "Ibarra",
    "Jansen",
    "Kowalski",
    "Lindqvist",
    "Moreau",
    "Nakamura",
    "Okafor",
    "Petrov",
    "Quinn",
    "Rossi",
    "Sato",
    "Tanaka",
    "Ulrich",
    "Varga",
    "Weber",
    "Young",
    "Zielinski",
]
_COUNTRIES = [
    "American",
    "British",
    "French",
    "German",
    "Italian",
    "Japanese",
    "Canadian",
    "Spanish",
    "Korean",
]
_STUDIOS = [
    "Northlight Pictures",
    "Harbor Films",
    "Silver Reel",
    "Blue Mesa Studios",
    "Orchard Road",
]
_GENRES = [
    "action",
    "adventure",
    "animation",
    "comedy",
    "crime",
    "documentary",
    "drama",
    "fantasy",
    "horror",
    "musical",
    "mystery",
    "romance",
    "science-fiction",
    "thriller",
    "war",
    "western",
]
_THEMES = (
    "a family that must move across the country",
    "a detective who returns to her home town",
    "two friends who plan an unlikely journey",
    "a crew stranded far from home",
    "a young musician chasing a first record deal",
    "a small town shaken by a long-buried secret",
    "rivals forced to work together",
    "a stranger who changes everyone he meets",
)


def _person(rng: random.Random) -> str:
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


def movie_page(title: str, genres: tuple[str, str], rng: random.Random) -> str:
    year = rng.randint(1950, 2020)
    return " ".join(
        [
            f"{title} ({year}) is a {genres[0]} and {genres[1]} film, an "
            f"{rng.choice(_COUNTRIES)} production directed by {_person(rng)}.",
            f"It stars {_person(rng)}, {_person(rng)} and {_person(rng)}, with music by "
            f"{_person(rng)}.",
            f"The screenplay by {_person(rng)} follows {rng.choice(_THEMES)}.",
            f"It was produced by {rng.choice(_STUDIOS)} on a budget of "
            f"{rng.randint(2, 150)} million dollars and grossed {rng.randint(5, 900)} million "
            "dollars worldwide.",
            f"The film received {rng.randint(0, 12)} award nominations and is often listed "
            f"among the notable {genres[0]} films of the {year // 10 * 10}s.",
        ]
    )


_COMMA_TITLES = ("Monsters, Inc", "Lock, Stock & Two Smoking Barrels")


def _split_titles(text: str) -> list[str]:
    protected = text
    for i, title in enumerate(_COMMA_TITLES):
        protected = protected.replace(title, f"\x00{i}\x00")
    parts = [p.strip() for p in protected.split(", ")]
    for i, title in enumerate(_COMMA_TITLES):
        parts = [p.replace(f"\x00{i}\x00", title) for p in parts]
    return parts


class Movie(Dataset):
    name = "movie"
    file = "movie_recommendations_formatted.json"
    size = 500
    search_arg = "entity"

    def questions(self, rows: list[dict[str, Any]], seed: int) -> list[Question]:
        out = []
        for row in rows:
            first, _, rest = str(row["question"]).partition("\nOptions:\n")
            liked = _split_titles(first.removeprefix("Find a movie similar to "))
            options = [o.strip() for o in rest.splitlines() if o.strip()]
            answer = str(row["answer"]).strip()
            if len(liked) != 4 or len(options) != 4 or answer not in options:
                raise SystemExit(f"movie question {row['id']} is not in the expected shape")
            rng = random.Random(f"{seed}:movie:{row['id']}")
            shared = rng.sample(_GENRES, 2)
            others = [g for g in _GENRES if g not in shared]
            pages: dict[str, str] = {}
            for title in liked:
                genres = (rng.choice(shared), rng.choice(others))
                pages[title] = movie_page(title, (genres[0], genres[1]), rng)
            for title in options:
                if title in pages:  # a title both liked and offered keeps one page
                    continue
                if title == answer:
                    genres = (shared[0], shared[1])
                else:
                    pair = rng.sample(others, 2)
                    genres = (pair[0], pair[1])
                pages[title] = movie_page(title, genres, rng)
            out.append(
                Question(
                    id=str(row["id"]),
                    text=str(row["question"]).strip(),
                    expected=answer,
                    group="8",
                    queries=[*liked, *options],
                    facts=pages,
                    extra={"liked": liked, "options": options},
                )
            )
        return out

    def answer_from(self, q: Question, text: str) -> str:
        pages = _pages(text, q.queries, r" \(\d{4}\) is a ([a-z-]+) and ([a-z-]+) film")

        def genres(title: str) -> list[str]:
            found = pages.get(title)
            return [found.group(1), found.group(2)] if found else []

        counts = Counter(g for title in q.extra["liked"] for g in genres(title))
        scores = {o: sum(counts[g] for g in genres(o)) for o in q.extra["options"]}
        best = max(scores.values())
        if best == 0:
            return "none of the options could be compared"
        return next(o for o in q.extra["options"] if scores[o] == best)


# ---------------------------------------------------------------------------------------------
# HotpotQA comparison

_LEADS = (
    "which between",
    "between",
    "which",
    "who",
    "what",
    "were",
    "was",
    "are",
    "is",
    "do",
    "does",
    "did",
    "has",
    "have",
    "both",
    "in",
    "of",
    "the",
)
_SMALL = {"of", "the", "de", "la", "and", "&", "von", "van", "du", "der", "for", "in", "on"}


def _capital_run(words: list[str], backwards: bool) -> str:
    """The run of capitalised words (with small joining words inside it) at one end."""
    seq = list(reversed(words)) if backwards else words
    run: list[str] = []
    for w in seq:
        bare = w.strip("?,.'\"")
        if bare[:1].isupper() or bare[:1].isdigit() or (run and bare.lower() in _SMALL):
            run.append(bare)
        else:
            break
    while run and run[-1].lower() in _SMALL:
        run.pop()
    out = list(reversed(run)) if backwards else run
    while out and out[0].lower() in _LEADS:
        out.pop(0)
    return " ".join(out)


def entities(question: str) -> list[str]:
    """The two entities a hotpotqa comparison question names, by a fixed rule: two quoted
    names; else the capitalised words on either side of the last " or "; else of the first
    " and "; else the first two runs of capitalised words. A rule, not understanding: some
    pairs come out rough, the same in every mode."""
    quoted = re.findall(r"[\"“']([^\"”']{2,}?)[\"”']", question)
    if len(quoted) >= 2:
        return [quoted[0].strip(), quoted[1].strip()]
    text = question.strip().rstrip("?").strip()
    for sep in (" or ", " and "):
        if sep in text:
            left, right = text.rsplit(sep, 1) if sep == " or " else text.split(sep, 1)
            a = _capital_run(left.replace(",", " ,").split(), backwards=True)
            b = _capital_run(right.split(), backwards=False)
            if a and b and a != b:
                return [a, b]
    runs: list[str] = []
    words = text.split()
    i = 0
    while i < len(words) and len(runs) < 2:
        run = _capital_run(words[i:], backwards=False)
        if run:
            runs.append(run)
            i += len(run.split()) + 1
        else:
            i += 1
    if len(runs) == 2 and runs[0] != runs[1]:
        return runs
    half = len(words) // 2
    return [" ".join(words[:half]) or text, " ".join(words[half:]) or text]


_KINDS = ["person", "place", "organisation", "work", "species", "event", "band", "building"]


def entity_page(entity: str, category: str, value: int, label: str, rng: random.Random) -> str:
    kind = rng.choice(_KINDS)
    year = rng.randint(1800, 2015)
    return " ".join(
        [
            f"{entity} is a {kind} first described in {year}, listed under the name {label}.",
            f"Its category is {category}.",
            f"Sources connect it with {_person(rng)} and with {rng.choice(_STUDIOS)}, and its "
            f"recorded value is {value}.",
            f"It has been the subject of {rng.randint(2, 60)} studies and "
            f"{rng.randint(5, 400)} articles since the {year // 10 * 10}s.",
            f"It is often compared with other entries of the same kind from the "
            f"{rng.randint(180, 201) * 10}s.",
        ]
    )


_CATEGORIES = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


class HotpotQA(Dataset):
    name = "hotpotqa"
    file = "hotpotqa_comparison.json"
    size = 1487
    search_arg = "entity"

    def questions(self, rows: list[dict[str, Any]], seed: int) -> list[Question]:
        out = []
        for row in rows:
            answer = str(row["answer"]).strip()
            pair = entities(str(row["question"]))
            if pair[0] == pair[1]:
                pair = [pair[0], f"{pair[1]} (2)"]
            rng = random.Random(f"{seed}:hotpot:{row['id']}")
            yes_no = answer.lower() in ("yes", "no")
            if yes_no:
                first = rng.choice(_CATEGORIES)
                second = (
                    first
                    if answer.lower() == "yes"
                    else rng.choice([c for c in _CATEGORIES if c != first])
                )
                cats = [first, second]
                values = [rng.randint(1, 999), rng.randint(1, 999)]
                labels = list(pair)
            else:
                cats = [rng.choice(_CATEGORIES), rng.choice(_CATEGORIES)]
                high, low = rng.randint(500, 999), rng.randint(1, 499)
                winner = rng.randrange(2)
                values = [high, low] if winner == 0 else [low, high]
                labels = [answer if i == winner else pair[i] for i in range(2)]
            facts = {
                pair[i]: entity_page(pair[i], cats[i], values[i], labels[i], rng) for i in range(2)
            }
            out.append(
                Question(
                    id=str(row["id"]),
                    text=" ".join(str(row["question"]).split()),
                    expected=answer,
                    group="yes/no" if yes_no else "pick one",
                    queries=pair,
                    facts=facts,
                    extra={"yes_no": yes_no},
                )
            )
        return out

    def answer_from(self, q: Question, text: str) -> str:
        tail = (
            r" is a [a-z]+ first described in \d+, listed under the name (.+?)\. Its category "
            r"is ([a-z]+)\..*?recorded value is (\d+)\."
        )
        found = _pages(text, q.queries, tail)
        if len(found) < len(q.queries):
            return "the look-ups did not say"
        pages = [(m.group(1), m.group(2), int(m.group(3))) for m in map(found.get, q.queries) if m]
        if q.extra["yes_no"]:
            return "yes" if pages[0][1] == pages[1][1] else "no"
        return max(pages, key=lambda p: p[2])[0]


DATASETS: dict[str, Dataset] = {d.name: d for d in (ParallelQA(), Movie(), HotpotQA())}
