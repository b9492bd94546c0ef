"""Write the own-task files the benchmarks train on: tasks unlike the arithmetic demo, one with
number answers and one with word answers, as a user's own file would be (prompt + answer columns).

    .venv/bin/python benchmarks/make_tasks.py   # -> benchmarks/tasks/*.jsonl
"""

from __future__ import annotations

import json
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
ANSWER_ALSO = {"difficult": ["hard"], "closed": ["shut"], "sick": ["ill"], "dim": ["dark"], "angry": ["agitated"]}


def number_word(n: int) -> str:
    if n < 20:
        return ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens * 10] + ("" if ones == 0 else "-" + ONES[ones])


def write(name: str, rows: list[dict]) -> None:
    TASKS.mkdir(exist_ok=True)
    (TASKS / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{TASKS / name}.jsonl: {len(rows)} rows")


def main() -> None:
    write("number_words", [{"prompt": f"Write the number {number_word(n)} in digits.", "answer": str(n)}
                           for n in range(100)])
    pairs = [line.split() for line in OPPOSITES.replace("\n", "|").split("|")]
    write("opposites", [{"prompt": f"What is the opposite of '{a}'?", "answer": [b, *ANSWER_ALSO.get(b, [])]}
                        for a, b in pairs])


if __name__ == "__main__":
    main()
