"""Write the own-task files the benchmarks train on: tasks unlike the arithmetic demo, as a user's own
files would be, of each kind a user brings (benchmarks/preflight_verdicts.py says what each is for):

- learnable: number words -> digits and opposites (answers that run past 16 tokens when the model
  explains), sentiment labels (conversations with a system message, answers from a label set), the
  larger of two numbers (a CSV with its own column names);
- hopeless for a 135M model: products of two 4-digit primes, a random string reversed;
- solved: repeat a small number;
- unscored: opposites scored by a reward of the user's (unscored_reward.py) that reads a JSON field the
  model never writes;
- added for the sampling fit (the model answers them in a sentence greedily, noisily when sampled): small
  word sums with other column names (question, result), and a label CSV (text, label) of words that name an
  animal or a colour;
- added when a held-back file of its kind was refused and learned when forced: rounding a number to the nearest
  ten (columns ask, result; greedy answers almost never right, a few samples are);
- added when a held-back file of its kind trained to replies a whole-word match scored right ('seven hundred and
  seventy-zero' for 'seventy'): numbers to write in words (columns request, spelled; answers of one to two words).

parity.csv, units.csv and past_tense.jsonl are not written here: they were held-back files (docs/benchmarks.md), kept
as they were measured.

    .venv/bin/python benchmarks/make_tasks.py   # -> benchmarks/tasks/*
"""

from __future__ import annotations

import csv
import json
import random
import string
from pathlib import Path

TASKS = Path(__file__).parent / "tasks"
ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
       "seventeen eighteen nineteen".split()
TENS = {20: "twenty", 30: "thirty", 40: "forty", 50: "fifty", 60: "sixty", 70: "seventy", 80: "eighty", 90: "ninety"}
OPPOSITES = """hot cold|big small|fast slow|up down|open closed|happy sad|light dark|old young|high low|wet dry
hard soft|early late|full empty|rich poor|strong weak|long short|loud quiet|clean dirty|thick thin|heavy light
in out|push pull|buy sell|win lose|start finish|before after|inside outside|left right|top bottom|day night
north south|east west|love hate|true false|alive dead|always never|asleep awake|brave cowardly|cheap expensive
deep shallow|easy difficult|enter exit|first last|friend enemy|give take|good bad|laugh cry|near far|new old
noisy quiet|polite rude|remember forget|rough smooth|safe dangerous|same different|sharp blunt|sweet sour
tall short|tight loose|wide narrow|wild tame|accept refuse|add subtract|arrive leave|attack defend|begin end
borrow lend|bright dim|calm angry|come go|cool warm|correct wrong|dry wet|float sink|forward backward
gentle rough|guilty innocent|healthy sick|hello goodbye|increase decrease|lazy busy|major minor|many few
maximum minimum|more less|morning evening|never always|odd even|on off|past future|plus minus|question answer
raise lower|sit stand|sunny cloudy|under over|visible invisible|vertical horizontal|whisper shout|yes no"""
# Other opposites a dictionary gives for the same word, so a fair answer is not scored wrong (a run named friend ->
# foe, wild -> domesticated, loud -> soft; the first list had lazy -> busy alone). Keyed by the question's word.
ANSWER_ALSO = {
    "open": ["shut"], "easy": ["hard"], "healthy": ["ill", "unhealthy"], "bright": ["dark", "dull"],
    "calm": ["agitated", "nervous", "anxious", "stormy"], "big": ["little"], "old": ["new"],
    "light": ["heavy", "darkness"], "hard": ["easy"], "start": ["end", "stop"], "loud": ["soft", "silent"],
    "brave": ["fearful", "timid"], "cheap": ["costly"], "enter": ["leave"], "friend": ["foe"], "give": ["receive"],
    "good": ["evil"], "new": ["used"], "noisy": ["silent"], "polite": ["impolite"], "safe": ["unsafe"],
    "sharp": ["dull"], "sweet": ["bitter"], "wild": ["domestic", "domesticated"], "accept": ["reject", "decline"],
    "arrive": ["depart"], "begin": ["finish"], "cool": ["hot"], "correct": ["incorrect"], "gentle": ["harsh"],
    "hello": ["bye"], "lazy": ["hardworking", "hard-working", "diligent", "industrious", "energetic"],
    "question": ["reply"], "sunny": ["overcast", "rainy"], "under": ["above"], "whisper": ["yell"],
    "true": ["untrue"], "happy": ["unhappy"], "rough": ["gentle"], "forward": ["backwards", "back"],
    "more": ["fewer"],
}


def number_word(n: int) -> str:
    if n < 20:
        return ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens * 10] + ("" if ones == 0 else "-" + ONES[ones])


def write(name: str, rows: list[dict]) -> None:
    TASKS.mkdir(exist_ok=True)
    (TASKS / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{TASKS / name}.jsonl: {len(rows)} rows")


GOOD = "delicious friendly wonderful excellent fantastic lovely helpful beautiful perfect great".split()
BAD = "terrible rude awful disgusting horrible broken dirty boring useless disappointing".split()
THINGS = "food staff room service film book hotel phone coffee concert".split()
SENTIMENT_SYSTEM = "You label product and place reviews as positive or negative."
ANIMALS = ("dog cat horse cow sheep goat pig lion tiger bear wolf fox rabbit mouse deer zebra giraffe monkey camel "
           "elephant whale dolphin shark eagle owl duck goose parrot frog snake turtle bee ant spider")
COLOURS = ("red blue green yellow orange purple pink brown black white grey violet indigo turquoise magenta cyan "
           "maroon navy olive beige crimson scarlet amber lavender teal gold silver ivory peach lilac ochre tan")


def primes(lo: int, hi: int) -> list[int]:
    return [n for n in range(lo, hi) if all(n % d for d in range(2, int(n ** 0.5) + 1))]


def main() -> None:
    rng = random.Random(0)
    write("number_words", [{"prompt": f"Write the number {number_word(n)} in digits.", "answer": str(n)}
                           for n in range(100)])
    pairs = [line.split() for line in OPPOSITES.replace("\n", "|").split("|")]
    write("opposites", [{"prompt": f"What is the opposite of '{a}'?", "answer": [b, *ANSWER_ALSO.get(a, [])]}
                        for a, b in pairs])
    reviews = [(f"The {thing} was {word}.", label) for thing in THINGS
               for words, label in ((GOOD, "positive"), (BAD, "negative")) for word in rng.sample(words, 5)]
    rng.shuffle(reviews)
    write("sentiment", [{"messages": [{"role": "system", "content": SENTIMENT_SYSTEM},
                                      {"role": "user", "content": f"Review: {text} Is this review positive or "
                                                                  "negative?"}], "label": label}
                        for text, label in reviews])
    pairs = rng.sample([(a, b) for a in range(10, 100) for b in range(10, 100) if a != b], 120)
    write_csv("larger", ["question", "solution"], [(f"Which number is larger, {a} or {b}?", max(a, b))
                                                   for a, b in pairs])
    p = primes(1000, 10000)
    write("prime_products", [{"prompt": f"What is {a} times {b}?", "answer": str(a * b)}
                             for a, b in (rng.sample(p, 2) for _ in range(100))])
    letters = ["".join(rng.choices(string.ascii_lowercase, k=9)) for _ in range(100)]
    write("reverse_letters", [{"prompt": f"Write the letters '{w}' in reverse order.", "answer": w[::-1]}
                              for w in letters])
    write("copy_number", [{"prompt": f"Repeat this number: {n}", "answer": str(n)} for n in range(1, 101)])
    people = "Sam Ana Tom Mia Leo Zoe Max Ivy Ben Eva".split()
    things = "apples pens books cards shells coins stamps marbles cookies stickers".split()
    sums = rng.sample([(who, what, a, b) for who in people for what in things for a in range(2, 10)
                       for b in range(2, 10)], 120)
    write("word_sums", [{"question": f"{who} has {a} {what} and gets {b} more. How many {what} does {who} have now?",
                         "result": a + b} for who, what, a, b in sums])
    words = [(w, "animal") for w in ANIMALS.split()] + [(w, "colour") for w in COLOURS.split()]
    rng.shuffle(words)
    write_csv("animal_or_colour", ["text", "label"], [(f"Is '{w}' an animal or a colour?", label)
                                                      for w, label in words])
    tens = rng.sample([n for n in range(11, 100) if n % 10 != 5], 80)  # no ties: 35 rounds either way by habit
    write("rounding", [{"ask": f"Round {n} to the nearest ten.", "result": round(n, -1)} for n in tens])
    write_csv("spelled_numbers", ["request", "spelled"], [(f"Write the number {n} in words.", number_word(n))
                                                          for n in range(100)])


def write_csv(name: str, header: list[str], rows: list[tuple]) -> None:
    with (TASKS / f"{name}.csv").open("w", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    print(f"{TASKS / name}.csv: {len(rows)} rows")


if __name__ == "__main__":
    main()
