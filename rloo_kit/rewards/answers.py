"""How a reply is matched against its gold answer: the one rule that rewards, the pre-flight and evaluation share.

A number is matched on the reply's final answer (an explicit "answer: ..." or "#### ..." first, else the last
number), numerically; a word or phrase on the reply's last sentence, punctuation aside, and case aside unless it
is part of the answer ('APPLE'); a classification label on the one label the reply names. `is_correct` is the
rule; the rest are its parts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

NUMBER = r"-?\$?-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?"

_ANSWER_PATTERNS = (  # most explicit first; the last number in the text is the fallback
    re.compile(rf"####\s*({NUMBER})"),
    re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}"),
    re.compile(r"<answer>\s*(.*?)\s*</answer>", re.S),
    re.compile(rf"answer is\s*:?\s*({NUMBER})", re.I),
    re.compile(rf"answer\s*:\s*({NUMBER})", re.I),
)

def completion_text(completion) -> str:
    """The text of one completion, whether a string or a list of chat messages, one line each (a system turn's
    last word and the user's first stay two words)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return "\n".join(str(m.get("content", "")) for m in completion)

def parse_number(text: str | None) -> float | None:
    """'1,234' / '$18.00' / '45%' / '-3' / '−3' -> float; None when it is not a number, as '3,5,9' (a list) and
    '12,5' are not: commas only between groups of three digits."""
    if text is None:
        return None
    text = text.strip().replace("−", "-")
    if "," in text and not re.fullmatch(NUMBER, text.rstrip(".")):
        return None
    cleaned = text.replace(",", "").replace("$", "").replace("%", "").rstrip(".")
    try:
        return float(cleaned)
    except ValueError:
        return None

def extract_answer(text: str, question: str = "") -> str | None:
    """The final answer of a completion: '#### N', '\\boxed{N}', '<answer>N</answer>', 'the answer
    is N', 'answer: N', else the last number in the text. A reply that writes no number in digits is read for one
    in words, in its marked answer or else its last sentence, in digits: 'A spider has eight legs.' -> '8'; one the
    `question` states (in digits or words) is not the answer ('Write the number one in digits.' is not answered by
    'The number one is one.').

    >>> extract_answer("3 + 4 = 7."), extract_answer("A spider has eight legs."), extract_answer("It is one.", "one?")
    ('7', '8', None)
    """
    marked = marked_answer(text)
    if marked is not None:
        return marked if parse_number(marked) is not None else _number_in_words(marked, question) or marked
    numbers = re.findall(NUMBER, text)
    return numbers[-1] if numbers else _number_in_words(_answer_span(text), question)


def _number_in_words(span: str, question: str) -> str | None:
    """The last number `span` writes in words that `question` does not state, in digits; None where none."""
    stated = {parse_number(n) for n in re.findall(NUMBER, question)} | set(numbers_in_words(question))
    said = [n for n in numbers_in_words(span) if n not in stated]
    return str(said[-1]) if said else None

def marked_answer(text: str) -> str | None:
    """The answer a completion marks as its answer (the patterns of `extract_answer`), else None."""
    for pattern in _ANSWER_PATTERNS:
        matches = pattern.findall(text)
        if matches:
            inner = re.findall(NUMBER, matches[-1])
            return inner[-1] if inner else matches[-1].strip()
    return None

def sentences(text: str) -> list[str]:
    """A reply's sentences, split after . ! ? and at line breaks."""
    return re.split(r"(?<=[.!?])\s+|\n+", text.strip())

_ARTICLES = re.compile(r"^(?:the|a|an)\s+")

_EDGE_PUNCTUATION = " \t\n.,;:!?\"'`*()[]{}<>«»“”‘’"

_WORD_HYPHEN = re.compile(r"(?<=[^\W\d_])[-\u2010\u2011](?=[^\W\d_])")  # a hyphen between two letters


def normalize_text(text: str) -> str:
    """Lower case, surrounding punctuation and quotes stripped, a leading article dropped, spaces collapsed, a hyphen
    between two letters read as a space (a file's 'forty-two' is a reply's 'forty two'): 'The Cold.' -> 'cold'."""
    text = " ".join(_WORD_HYPHEN.sub(" ", str(text).lower()).split()).strip(_EDGE_PUNCTUATION)
    return _ARTICLES.sub("", text).strip(_EDGE_PUNCTUATION)

# British and American spellings of words an answer or a label often is, one meaning each: a model trained mostly
# on American English writes 'color' where a file's label says 'colour', and is right.
_BRITISH_AMERICAN = (
    ("colour", "color"), ("grey", "gray"), ("favourite", "favorite"), ("flavour", "flavor"), ("neighbour", "neighbor"),
    ("honour", "honor"), ("humour", "humor"), ("behaviour", "behavior"), ("harbour", "harbor"), ("centre", "center"),
    ("metre", "meter"), ("litre", "liter"), ("theatre", "theater"), ("organise", "organize"), ("realise", "realize"),
    ("recognise", "recognize"), ("analyse", "analyze"), ("aluminium", "aluminum"), ("jewellery", "jewelry"),
    ("moustache", "mustache"), ("pyjamas", "pajamas"), ("defence", "defense"))
_OTHER_SPELLING = {**dict(_BRITISH_AMERICAN), **{american: british for british, american in _BRITISH_AMERICAN}}


def spellings(phrase: str) -> set[str]:
    """`phrase` (normalized) with each of its words in either spelling, British or American, plural or not:
    'light grey' -> {'light grey', 'light gray'}; 'colours' -> {'colours', 'colors'}."""
    variants = [[]]
    for word in phrase.split():
        variants = [[*head, w] for head in variants for w in (word, _other_spelling(word)) if w]
    return {" ".join(words) for words in variants} | {phrase}


def _other_spelling(word: str) -> str | None:
    if word in _OTHER_SPELLING:
        return _OTHER_SPELLING[word]
    if word.endswith("s") and word[:-1] in _OTHER_SPELLING:
        return _OTHER_SPELLING[word[:-1]] + "s"
    return None


def answers_match(predicted: str | None, gold: str) -> bool:
    """Numeric comparison when both are numbers (18 == 18.00, 1,000 == 1000), else normalized text
    ('The cold.' == 'cold'), either spelling ('Color' == 'colour')."""
    if predicted is None:
        return False
    p, g = parse_number(predicted), parse_number(gold)
    if p is not None and g is not None:
        return math.isclose(p, g, rel_tol=1e-9, abs_tol=1e-6)
    return normalize_text(predicted) in spellings(normalize_text(gold))

def row_rules(dataset) -> list[dict]:
    """Each row's keyword arguments to `is_correct` beside its answer: its `labels` (a label set) and `choices`
    (what its question offers), where the dataset (a `datasets.Dataset`, data.load_local's) has those columns."""
    names = [c for c in ("labels", "choices") if c in dataset.column_names]
    columns = {c: list(dataset[c]) for c in names}
    return [{c: columns[c][i] for c in names} for i in range(len(dataset))]

def accepted_answers(gold) -> list[str]:
    """An `answer` cell as the list of accepted answers: a string is one; a list (or tuple) is several."""
    if isinstance(gold, (list, tuple)):
        return [str(g) for g in gold]
    return [str(gold)]

def is_correct(completion, gold, match: str = "final", labels: Sequence[str] | None = None,
               prompt=None, choices: Sequence[str] | None = None) -> bool:
    """One completion against its gold answer (a string, or a list of accepted strings).

    Numbers (gold parses as one): match="final" compares the final number of the reply (see
    `extract_answer`), numerically.
    Text: both sides normalized (`normalize_text`). match="final" looks for the gold answer, as whole
    words, in the reply's explicit answer ('answer: ...', '<answer>', '####', boxed) or else in its
    last sentence: 'The opposite of hot is cold.' is right for 'cold'. Case counts only where the question writes
    the answer in another case (`keeps_case`: 'APPLE' for 'Write apple in capitals.'); a list ('3, 5, 9') is its
    items in order and no more (`names_list`); a number with its unit ('5 km') is the reply's final number, in that
    unit where it names one; a time of day ('5 PM') is the reply's time, however written (`clock_time`); a
    one-letter answer named beside other letters is a hedge.
    match="exact" wants the reply to be the answer alone, in both cases.
    labels: a classification task's label set: with match="final" a reply that also names a label other than the
    accepted ones ('positive or negative') is wrong, as a hedge is no answer. A text or label named only to deny it
    ('not true', 'positive, not negative') is not named (`denied`).
    prompt: the row's prompt (text or chat messages). A text answer without labels that the reply names only where
    it repeats the question's words is not its answer: for 'What is the plural of moose?', 'The plural of moose is
    mooses.' answers 'mooses' (`restates`); so is one named only in repeating the text the question quotes, or
    beside other words of it where one word is asked for (`echoes_quote`, `picks_among_quoted`). Without it (None),
    any mention counts.
    Short forms are written out on both sides (`spelled_out`: "I don't like tea." answers 'I do not like tea'),
    except where the question, the gold or a label writes one: the task may then be about the form itself.
    choices: what the row's question offers to choose among, numbers ('Which is larger, 70 or 95?') or things
    ('glacier or pear?'): with match="final" the reply's pick is scored (`picked_choice`), as '95 is larger than
    70.' names both.
    """
    if match not in ("final", "exact"):
        raise ValueError(f"match must be 'final' or 'exact', not {match!r}.")
    text = completion_text(completion)
    accepted = accepted_answers(gold)
    if match == "final" and choices:
        pick = picked_choice(text, choices, completion_text(prompt) if prompt is not None else "")
        return pick is not None and any(answers_match(pick, g) for g in accepted)
    asked = completion_text(prompt) if prompt is not None else ""
    if not any(map(writes_short, [asked, *accepted, *(labels or ())])):  # else the task may be about the form itself
        text, asked, accepted = spelled_out(text), spelled_out(asked), [spelled_out(g) for g in accepted]
        labels = labels and [spelled_out(lab) for lab in labels]
    if not any(_matches(text, g, match, asked, label=bool(labels)) for g in accepted):
        return False
    others = [lab for lab in labels or () if normalize_text(lab) not in {normalize_text(g) for g in accepted}]
    return match == "exact" or not any(_matches(text, lab, match, label=True) for lab in others)

def answered_earlier(completion, gold, prompt=None, labels: Sequence[str] | None = None,
                     choices: Sequence[str] | None = None) -> bool:
    """Whether a reply scored wrong (`is_correct`, match="final") names its right text answer in a sentence before its
    last one, that sentence alone scored right: an answer given first and then gone on from. *The chemical symbol of
    gold is Au. It is a metal that is used to make coins.* is scored on its last sentence, so wrong; a run learns to
    end on the answer, and a held-out gain then counts that as well as what the model learned to know. Numbers,
    with a unit or not, are left out (an intermediate result is often the answer's value), as are rows with labels
    or choices (a hedge names two) and sentences that ask (*Is it Au? No, it is Ag.* retracts its guess). `gold`: a
    string or a list of accepted ones.

    >>> answered_earlier("The symbol of gold is Au. It is a metal.", "Au")
    True
    """
    accepted = accepted_answers(gold)
    if (labels or choices or any(parse_number(g) is not None or _measure(g) or clock_time(g) for g in accepted)
            or is_correct(completion, gold, prompt=prompt)):
        return False
    said = [s for s in sentences(completion_text(completion)) if normalize_text(s)]
    return any(is_correct(s, accepted, prompt=prompt) for s in said[:-1] if not s.rstrip().endswith("?"))

def predicted_answer(completion, labels: Sequence[str] | None = None, match: str = "final",
                     choices: Sequence[str] | None = None, prompt=None) -> str | None:
    """The answer a reply is scored on, for showing beside its gold answer: the one label it names where the row
    has a label set ('Red is a colour.' -> 'colour'; None for a hedge or no label), its pick among a choice
    question's offers (`picked_choice`), else the time of day it answers with (`answer_time`: '5:30 PM', not
    '30'), else its final number (`extract_answer`). `match` and `prompt` as `is_correct`'s."""
    text = completion_text(completion)
    if choices:
        return picked_choice(text, choices, completion_text(prompt) if prompt is not None else "")
    if labels:
        return next((label for label in labels if is_correct(text, label, match, prompt=prompt, labels=labels)), None)
    time = answer_time(text)
    if time is not None:
        return time_text(time)
    return extract_answer(text, completion_text(prompt) if prompt is not None else "")

def offers_numbers(choices: Sequence[str] | None) -> bool:
    """Whether a row's choices are the numbers its question offers, not things it lists (data.load_local)."""
    return bool(choices) and all(parse_number(c) is not None for c in choices)

def picked_choice(text: str, choices: Sequence[str], question: str = "") -> str | None:
    """The one of `choices` a reply picks: named in its marked answer if it marks one ('answer: 95'), else in the last
    of its sentences that picks one (in a comparison question, the one its stated comparisons agree on, below). A
    sentence that names several picks the first only where the words before the next one set it against them ('than',
    'not', 'rather', 'instead', 'before', 'over', 'unlike'): '95 is larger than 70.' picks 95, 'The larger is 95, not
    70.' too, 'A brick is heavier than a feather.' picks 'brick'. A list or a contrast picks none: a held-back
    smallest-of-three run learned to reply with the three numbers sorted ('19, 82, and 90.'), which a first-named rule
    paid on 10 of its 18 held-out replies, an alphabetical-order run to reply 'glacier and pear.' to every pair, and a
    which-is-bigger file's base model wrote 'A car is a vehicle, while a chair is a piece of furniture.' Things not set
    apart are picked where one choice's clause alone says what `question` asks (`_says_what_is_asked`): 'The pliers are
    a tool, while the piano is an instrument.' answers 'Which of these is a tool: pliers, piano or cat?'. A sentence
    that picks none leaves the pick to the one before: 'The Earth is the larger of the two. The Earth is 4.5 billion
    years old, while a coin is new.' picks the Earth, where the last naming sentence alone picked nothing (2 of 18
    held-out replies of a which-is-bigger run; 8 of 288 in twelve evaluations of the benchmark's larger file, each the
    pick its reply states). Numbers are compared as numbers, things as `normalize_text` leaves them, singular or plural
    ('ants' names 'an ant', `either_number`). A sentence whose one choice is named right after 'than' or 'unlike' picks
    none (*the largest number that is exactly 10 units larger than 92* is about neither choice), nor does one that names
    one choice in a comparison question without comparing (`_answers_the_comparison`). A choice named only to deny it is
    not named (*It's not a colour.*, `_negated_before`), nor does a question (*Is a bus heavier than a spoon? No, a
    spoon is.*). In a comparison question the reply's answer is what its stated comparisons agree on (one choice set
    against the other, a comparison word, a short answer; `_states`), and what it only describes in plain words does not
    overturn it: *A horse is lighter than a stamp. A stamp is a small, flat piece of metal.* picks the horse; stated
    comparisons that disagree pick none: *A spoon is heavier than a bus. A bus is a larger, heavier vehicle.* (3 of the
    10 prompts a held-back heavier-or-lighter run gained were of these kinds, paid by a last sentence that did not
    answer).

    >>> picked_choice("Let me see. 70 is a larger integer than 95.", ["70", "95"])
    '70'
    >>> picked_choice("19, 82, and 90.", ["82", "19", "90"]) is None
    True
    >>> picked_choice("Glacier comes before pear.", ["glacier", "pear"])
    'glacier'

    A pick said in the opposite of the question's comparison ('smaller' where it asks 'larger') picks the other of
    two choices, and none of more: '57 is less than 79.' answers 'Which is larger, 79 or 57?' with 79, and 'The
    smaller number is 86.' with the other number, where the last-sentence rule paid 86 (`_said_the_other_way`).

    >>> picked_choice("The smaller number is 86.", ["86", "79"], "Which number is larger, 86 or 79?")
    '79'
    """
    text, numbers = _mentions_blanked(text, question), offers_numbers(choices)
    mark = _mark(text)
    spans = sentences(mark.group(1))[:1] if mark else sentences(text)  # a mark's own sentence, not the rest
    marked = mark is not None and any(_named_choices(_as_said(span, numbers), choices) for span in spans)
    if mark and not marked:  # a mark that names no choice is a frame where the reply goes on to pick ('The answer is
        # a bit ambiguous. A pencil is indeed lighter than a bus.'), an answer where it ends ('..., the answer is 9.')
        spans = sentences(text[mark.start(1):])[1:]
    spans = [span for span in spans if not span.rstrip().endswith("?")]  # a question states nothing
    saids = [_before_the_reason(_as_said(span, numbers), choices) for span in spans]
    nameds = [_affirmed(said, _named_choices(said, choices)) for said in saids]
    first_naming = next((i for i, named in enumerate(nameds) if named), None)
    asked = _asked_way(question, choices)  # once a reply, not once a sentence: this runs on every completion
    stated, described = set(), None  # comparisons the reply states; the last pick it makes by description alone
    for i in reversed(range(len(spans))):
        said, named = saids[i], nameds[i]
        if not named:
            continue
        (start, end, first), *others = named
        rival = next((start for start, _, choice in others if choice != first), None)
        plain = _blanked(said, named)  # a choice's own words compare nothing: 'New York', 'a light bulb'
        if rival is None or _sets_apart(said[end:rival]):
            own = _clause_at(plain, start)  # '..., whereas peahogs are smaller' says nothing of the pick
            # a short answer stands where it is whole and first: 'A ship is bigger. Snails are slow.' picks the ship
            short = marked or i == first_naming and (len(spans) == 1 or re.search(r"[.!?]\W*$", spans[i]))
            if (how := _answers_the_comparison(own, asked, short)) is None:
                continue
            if _either_way(own if rival is None else plain[start:rival], asked):  # 'either lighter or heavier than'
                continue
            if rival is None and _AGAINST.search(said[:start]):  # '... exactly 10 units larger than 92.' picks no 92
                continue
            upto = own if rival is None else _clause_at(plain[:rival], start)  # not the reason after the rival
            picked = _the_other(first, choices) if _said_the_other_way(upto, asked) else first
            if asked is None:
                return picked
            elsewhere = rival is None and "than" in _lower_words(own)  # 'Koalas can run faster than you think.'
            if rival is not None or how == "stated" and not elsewhere:  # 'A spoon is heavier than a bus.', 'The ship.'
                stated.add(picked)
            else:
                described = described or picked
        elif not numbers and (picked := _says_what_is_asked(plain, named, choices, question, asked)) is not None:
            if asked is None:
                return picked
            described = described or picked
    if len(stated) > 1:
        return None  # the reply says both: 'A spoon is heavier than a bus. A bus is a larger, heavier vehicle.'
    return next(iter(stated), described)


def _mentions_blanked(text: str, question: str) -> str:
    """`text` with what it mentions rather than says blanked: each place it repeats a line of `question` from its
    start, whole or cut short (*the answer to the question "Which is bigger, a lion or* picks no lion), and each
    statement it quotes, of more than `_FEW_WORDS` words, but for a marked answer (*The statement "a plane is faster
    than a turtle" is an example of the ad hominem fallacy*; *The answer is "A bus is heavier."* stays)."""
    spans = [m.span() for m in _QUOTED.finditer(text)
             if len(m.group().split()) > _FEW_WORDS and not _MARK_BEFORE.search(text, 0, m.start())]
    for line in filter(lambda line: len(line) >= _REPEAT_HEAD, map(str.strip, question.splitlines())):
        for found in re.finditer(re.escape(line[:_REPEAT_HEAD]), text, re.I):
            at, n = found.start(), _REPEAT_HEAD
            while at + n < len(text) and n < len(line) and text[at + n].lower() == line[n].lower():
                n += 1
            spans.append((at, at + n))
    blanked = list(text)
    for start, end in spans:
        blanked[start:end] = " " * (end - start)
    return "".join(blanked)


_REPEAT_HEAD = 20  # characters a repeat of the question shares with a line of it from its start: 'Which is bigger, a l'
# (12 took the reply's own 'which is hot' for a repeat of 'Which is hotter, ...?')
_MARK_BEFORE = re.compile(r"\banswer(?:\s+is)?\s*:?\s*$", re.I)  # 'The answer is "..."' marks what it quotes


def _before_the_reason(said: str, choices: Sequence[str]) -> str:
    """`said` up to the reason it gives for its pick ('because', 'since'), where that part names a choice: *The
    snail, because cheetahs are fast.* answers 'Which is faster?' with the snail, and *A toaster is much colder than
    an ice cube because an ice cube is hot.* 'Which is hotter?' with the ice cube."""
    cut = next((m.start() for m in _REASON.finditer(said) if m.start() > 0), None)
    return said[:cut] if cut is not None and _named_choices(said[:cut], choices) else said


_REASON = re.compile(r"\b(?:because|since)\b", re.I)


def _affirmed(said: str, named: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """`named` without the choices `said` names only to deny them: right after a negation (*It's not a colour.*), or
    listed after a denied one (*Violet is a flower, not an animal or a colour.*)."""
    kept, denied_end = [], None
    for start, end, choice in named:
        if _negated_before(said, start) or denied_end is not None and _LISTED.fullmatch(said[denied_end:start]):
            denied_end = end
        else:
            kept.append((start, end, choice))
            denied_end = None
    return kept


_LISTED = re.compile(r"\s*,?\s*(?:or|nor|and)?\s*(?:a|an|the)?\s*['\"\u2018\u201c]?", re.I)


def _as_said(span: str, numbers: bool) -> str:
    """A sentence as `picked_choice` reads it: numbers as written, things normalized."""
    return span if numbers else normalize_text(span)


def _sets_apart(between: str) -> bool:
    """Whether the words between two named choices set the first against the second ('than', 'not', ...), within
    one clause: 'Trains can be longer than a mile, but a pea is small.' sets no train against the pea."""
    return bool(_SETS_APART & set(_lower_words(between))) and not _CONTRAST.search(between)


def _lower_words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _clause_at(said: str, at: int) -> str:
    """The clause of `said` that holds position `at`, cut where a contrast or a conclusion begins (`_CONTRAST`):
    '18 is less than 92, so 92 is larger.' reads '18 is less than 92, ' for 18."""
    cuts = [m.start() for m in _CONTRAST.finditer(said) if m.start() > 0]
    before = [c for c in cuts if c <= at]
    return said[before[-1] if before else 0:next((c for c in cuts if c > at), len(said))]


_CONTRAST = re.compile(r"\b(?:while|whereas|but|although|though|so|therefore|thus|hence)\b", re.I)


def _blanked(said: str, named: list[tuple[int, int, str]]) -> str:
    """`said` with the choices it names blanked out, each place kept."""
    for start, end, _ in named:
        said = said[:start] + " " * (end - start) + said[end:]
    return said


def _answers_the_comparison(plain: str, asked: tuple[int, bool] | None, short: bool) -> str | None:
    """How a clause that picks a choice (`plain`: its choices blanked) answers the comparison the question asks
    (`asked`, `_asked_way`): 'stated' where it calls its pick the answer, compares in comparison words of one direction
    in the kind asked or a kin one (`_states`: 'taller' for 'bigger'), is the choice alone, or may be `short` and says
    little else ('The ship, of course.', 'A ship is huge.'), or the question asks none; 'described' where it says the
    kind asked in plain words only ('Ships are massive machines.', `_DEGREE`); else None. The rambles of a
    which-is-bigger file's base model pick in sentences that compare nothing asked (*Rabbits, on the other hand,
    belong to the Leporidae family.*, *Some argue that elephants are more intelligent and social than kittens.*), and
    a rule that took them for picks paid 12 of 80 greedy replies."""
    if asked is None or _CALLS_IT_THE_ANSWER.search(plain) or _states(plain, asked):
        return "stated"
    rest = [w for w in re.findall(r"\w+(?:['\u2019]\w+)?", plain.lower()) if w not in ("a", "an", "the")]
    other_kind = any(not _kin(d, asked[0]) for d, _ in _comparisons(_lower_words(plain), _DEGREE))  # 'Snails are slow.'
    if not rest or short and len(rest) <= _FEW_WORDS and not other_kind:
        return "stated"
    return "described" if _ways(plain, asked) else None


_FEW_WORDS = 3  # besides the choice and articles: 'The ship, of course.', "I think it's a ship." ('The number 92 is a
# prime number.' has four)
_CALLS_IT_THE_ANSWER = re.compile(r"\b(?:answer|choice)\s*(?:is\b|:)|\b(?:the|my)\s+answer\b", re.I)
_SIZE_LIKE = frozenset({0, 1, 2})  # size, weight, length: 'A giraffe is taller.' answers 'Which is bigger?'


def _kin(dimension: int, asked: int) -> bool:
    """Whether a comparison in `dimension` answers one asked in `asked` (`_SIZE_LIKE`)."""
    return dimension == asked or {dimension, asked} <= _SIZE_LIKE


_AGAINST = re.compile(r"\b(?:than|unlike)\s+(?:(?:a|an|the)\s+)?$", re.I)


def _the_other(choice: str, choices: Sequence[str]) -> str | None:
    """The other of two choices; None among more, where the rest are several."""
    rest = {c for c in choices if not answers_match(choice, c)}
    return rest.pop() if len(rest) == 1 else None


def _said_the_other_way(said: str, asked: tuple[int, bool] | None) -> bool:
    """Whether `said` compares in the opposite direction of the question's (`asked`, `_asked_way`: 'smaller' where it
    asks 'larger') and nowhere in its direction. A comparison word up to two words after 'not' or 'no' says the other
    way: '79 is not larger than 86.' compares as 'smaller', '86 is not the smaller.' as 'larger'. A held-out reply to a
    which-is-larger file, 'The smaller number is 86, which is 86.', was paid as picking 86. Only a question that asks
    which of its choices ('Which is larger, 86 or 79?') has a direction its choices answer: in 'Is 36 smaller than 74?
    Reply yes or no.' the comparison is between things that are not the choices. Plain words and kin kinds count as they
    do for `_answers_the_comparison`: 'A train is longer.' answers 'Which is smaller?' with the other thing."""
    return asked is not None and _ways(said, asked) == {not asked[1]}


def _either_way(said: str, asked: tuple[int, bool] | None) -> bool:
    """Whether `said` offers both directions of the comparison asked as alternatives ('lighter or heavier', 'more or
    less'): a hedge."""
    words = _lower_words(said)
    return asked is not None and any(
        _ways(" ".join(words[i - 1:i + 2]), asked) == {True, False} or {words[i - 1], words[i + 1]} == _AMOUNT
        for i, w in enumerate(words) if w == "or" and 0 < i < len(words) - 1)


def _states(said: str, asked: tuple[int, bool]) -> bool:
    """Whether `said` states a comparison in the kind asked in comparison words of one direction ('The spoon is
    heavier.', 'a larger, heavier vehicle'), where plain words only describe ('a massive creature') and both
    directions leave it open ('much smaller than the largest land animals')."""
    return len(_ways(said, asked, _DIRECTION)) == 1


def _ways(said: str, asked: tuple[int, bool] | None, table: dict[str, tuple[int, bool]] | None = None) -> set[bool]:
    """The directions `said` compares in, in the dimension `asked` or a kin one, by `table`'s words (by default plain
    words included, `_DEGREE`): {True} for 'The ship is huge.' where it asks 'bigger', {True, False} for a hedge."""
    if asked is None:
        return set()
    found = _comparisons(_lower_words(said), _DEGREE if table is None else table)
    return {up for dimension, up in found if _kin(dimension, asked[0])}


def _asked_way(question: str, choices: Sequence[str] = ()) -> tuple[int, bool] | None:
    """The one comparison a which-question asks its choices about ('Which is larger, 86 or 79?': size, upward), else
    None; the choices' own words aside ('Which is older, New York or Rome?')."""
    own = {w for c in choices for w in _lower_words(str(c))}
    words = [w for w in _lower_words(question) if w not in own]
    if not _ASKS_WHICH & set(words) or "than" in words:
        return None
    asked = _comparisons(words)
    return next(iter(asked)) if len(asked) == 1 else None


def _comparisons(words: list[str], table: dict[str, tuple[int, bool]] | None = None) -> set[tuple[int, bool]]:
    """The directions lower-case `words` compare in (`table`, by default `_DIRECTION`), a negated comparison word
    ('not larger') the other way; an idiom compares nothing ('Which is the least like the others?', 'a long time',
    'in short')."""
    table = _DIRECTION if table is None else table
    return {(_WEIGHT if w in _AMOUNT and _MEASURES & set(words[i + 1:i + 2]) else table[w][0],
             table[w][1] != (bool(_NEGATIONS & set(words[max(0, i - 2):i])) != (words[i - 1:i] == ["less"])))
            for i, w in enumerate(words) if w in table and _compares_here(words, i)}


def _compares_here(words: list[str], i: int) -> bool:
    """Whether comparison word `words[i]` compares: not in an idiom, an equality or a change, and 'more' or 'less' only
    as an amount ('more than', 'weighs much more', 'less weight', 'Which is less?'), not as the degree of the next
    word ('more intelligent than'; 'less heavy' is read as 'heavy' turned round, by `_comparisons`)."""
    after = words[i + 1:i + 2]
    before = words[max(0, i - 1):i]
    equal = before == after == ["as"] and not _TIMES & set(words[max(0, i - 2):i - 1])  # not 'twice as large as'
    if _IDIOM_AFTER & set(after) or before == ["in"] or equal or _CHANGE & set(before):
        return False  # 'least like', 'in short', 'as cold as' (the same), 'gets warmer' (a change, not a comparison)
    return (words[i] not in _AMOUNT or after in ([], ["than"]) or bool(_MEASURES & set(after))
            or bool(_WEIGHS & set(words[max(0, i - 3):i])))


_IDIOM_AFTER = frozenset({"like", "time", "period", "ago"})  # 'least like the others', 'a long time', 'long ago'
_TIMES = frozenset({"twice", "thrice", "times"})
_CHANGE = frozenset("get gets getting got grow grows growing grew become becomes becoming became".split())
_AMOUNT = frozenset({"more", "less"})
_WEIGHS = frozenset({"weigh", "weighs", "weighed", "weighing"})  # 'A brick weighs much more than a feather.'
_MEASURES = frozenset({"weight", "mass"})  # 'A feather has less weight than a brick.'


_NEGATIONS = frozenset({"not", "no", "never", "t"})  # 't' as in "isn't"
_ASKS_WHICH = frozenset({"which", "what", "who"})


def _directions(*dimensions: tuple[str, str]) -> dict[str, tuple[int, bool]]:
    """Comparison words -> (dimension, upward): 'smaller' is (0, False), 'largest' (0, True)."""
    return {word: (i, upward) for i, (up, down) in enumerate(dimensions)
            for upward, words in ((True, up), (False, down)) for word in words.split()}


_DIRECTION = _directions(
    ("larger bigger greater higher more largest biggest greatest highest maximum",
     "smaller less lesser lower fewer smallest least lowest minimum"),
    ("heavier heaviest", "lighter lightest"),
    ("longer longest taller tallest", "shorter shortest"),
    ("older oldest", "younger youngest"),
    ("hotter hottest warmer warmest", "colder coldest cooler coolest"),
    ("faster fastest", "slower slowest"),
    ("earlier earliest", "later latest"),
)
_WEIGHT = _DIRECTION["heavier"][0]
# the same directions in plain words, as a contrast says them: 'Snails are small, while a ship is massive.'
_DEGREE = {**_DIRECTION, **_directions(
    ("large big huge massive enormous giant gigantic vast", "small tiny"), ("heavy", "light"),
    ("long tall", "short"), ("old ancient", "young new"), ("hot warm", "cold cool"), ("fast quick", "slow"),
    ("early", "late"),
)}


def _says_what_is_asked(said: str, named: list[tuple[int, int, str]], choices: Sequence[str], question: str,
                        way: tuple[int, bool] | None) -> str | None:
    """The one choice whose clauses (each from where it is named to where a choice is named next: the subject first, as
    in 'X is a tool'; `said` with the choices blanked) have a word of `question` that is neither a choice nor a
    question's frame ('which', 'these', 'reply'), else None: a contrast that says of one choice what was asked ('tool'),
    of the others something else. Base replies to a held-back category file (*Which of these is a tool: violin, pliers
    or bus?*) were of this kind on 4 of 16 prompts. A clause that says the comparison asked (`way`, `_asked_way`) in any
    word (`_DEGREE`: 'massive' where it asks 'bigger') picks its choice, one that says the opposite ('small') the other
    of two: *Snails are incredibly small and delicate, while a ship is a massive and complex machine.* answers 'Which is
    bigger, a snail or a ship?' with the ship, and *Elephants are massive ..., while frogs are much smaller.* 'Which is
    smaller?' with the frog. Choices only listed ('a snail or a ship is bigger') are a hedge."""
    def stems(text: str) -> set[str]:
        return {w.rstrip("s") for w in _lower_words(text) if len(w) > 3}

    asked = stems(question) - _QUESTION_FRAME - {w for *_, c in named for w in stems(c)}
    ends = [start for start, _, _ in named[1:]] + [len(said)]  # '..., so ice is colder.': the clause is the ice's
    clauses = [(c, said[start:end]) for (start, _, c), end in zip(named, ends, strict=True)]
    pairs = zip(named, named[1:], strict=False)
    if any(c != d and set(_lower_words(said[e:s])) <= _LIST_WORDS for (_, e, c), (s, _, d) in pairs):
        return None  # 'a snail or a ship is bigger', 'Both a snail and a ship can be big.': a hedge
    picks = set()
    for choice, clause in clauses:
        ways = _ways(clause, way)
        if asked & stems(clause) or way is not None and way[1] in ways:
            picks.add(choice)
        if way is not None and (not way[1]) in ways and (other := _the_other(choice, choices)) is not None:
            picks.add(other)
    return picks.pop() if len(picks) == 1 else None


# stems, as _says_what_is_asked compares them ('thi' is 'this', 'doe' is 'does')
_QUESTION_FRAME = frozenset({"which", "these", "thi", "that", "what", "doe", "word", "reply", "answer", "with",
                             "from", "following", "only", "just", "name", "choose", "pick", "option", "one"})


_SETS_APART = frozenset({"than", "not", "rather", "instead", "before", "over", "unlike"})
_LIST_WORDS = frozenset({"or", "and", "a", "an", "the", "nor", "either", "neither", "both"})


def _named_choices(said: str, choices: Sequence[str]) -> list[tuple[int, int, str]]:
    """Where `said` names one of `choices`, in order: (start, end, the choice as `choices` has it), numbers compared
    as numbers, things in either spelling (`said` normalized)."""
    if offers_numbers(choices):
        value = {parse_number(c): c for c in choices}
        return [(m.start(), m.end(), value[parse_number(m.group())]) for m in re.finditer(NUMBER, said)
                if parse_number(m.group()) in value]
    def found(c: str, forms) -> set[tuple[int, int, str]]:
        return {(m.start(), m.end(), c) for form in forms if form
                for m in re.finditer(rf"(?<!\w){re.escape(form)}(?!\w)", said)}

    named = set()
    for c in choices:  # in the other number only where the choice is not named as given: 'a plane flies ... a fly'
        spelled = spellings(normalize_text(c))
        named |= found(c, spelled) or found(c, {form for s in spelled if s for form in either_number(s)})
    return sorted(named)


_IRREGULAR_PLURALS = dict(pair.split("/") for pair in (
    "man/men woman/women child/children person/people mouse/mice goose/geese tooth/teeth foot/feet ox/oxen "
    "louse/lice die/dice").split())
_IRREGULAR_SINGULARS = {plural: singular for singular, plural in _IRREGULAR_PLURALS.items()}


def either_number(phrase: str) -> set[str]:
    """`phrase` with its last word singular and plural, as a reply names a listed thing: the question offers 'an
    ant or a giraffe', the reply says *Ants are much more agile and can run faster than the giraffe.*, which named
    the giraffe alone and so picked it. Regular forms ('fox' -> 'foxes', 'fly' -> 'flies', 'leaf' -> 'leaves') and
    the common irregular ones ('mouse' -> 'mice'); a form that is no word ('leafs') matches nothing.

    >>> sorted(either_number("a fly"))
    ['a flies', 'a fly']
    """
    *head, last = phrase.split() or [""]
    return {" ".join([*head, form]) for form in {last, *_other_numbers(last)}}


def _other_numbers(word: str) -> set[str]:
    """The plural of a singular `word`, the singular of a plural one (more than one where the ending is ambiguous:
    'potatoes' -> 'potato', 'potatoe')."""
    if word in _IRREGULAR_PLURALS or word in _IRREGULAR_SINGULARS:
        return {_IRREGULAR_PLURALS.get(word) or _IRREGULAR_SINGULARS[word]}
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):  # 'ants' -> 'ant'
        return {word[:-1], re.sub(r"ies$", "y", word), re.sub(r"(?:(?<=[sxzo])|(?<=[cs]h))es$", "", word),
                re.sub(r"ves$", "f", word), re.sub(r"ves$", "fe", word)} - {word}
    if re.search(r"[^aeiou]y$", word):
        return {word[:-1] + "ies"}
    if re.search(r"(?:s|x|z|ch|sh|o)$", word):
        return {word + "es", word + "s"}  # 'buses', 'viruses', 'pianos'
    if re.search(r"(?:[^f]f|fe)$", word):
        return {re.sub(r"fe?$", "ves", word), word + "s"}  # 'leaves', 'roofs'
    return {word + "s"}


def mentions(text: str, phrase: str) -> bool:
    """Whether `phrase` occurs in `text` as whole words, not inside a longer word ('cold' in 'It is cold.', not
    in 'coldest'), in either British or American spelling ('color' for 'colour', `spellings`). Both as given:
    normalize them first where case or articles should not count. The choice letters that are also words, 'a' and
    'i', count only where no word follows them: 'a)' and 'answer: a', not the article in 'a cat' nor 'i think'.

    Args:
        text: where to look.
        phrase: what to look for.

    Returns:
        True where it occurs with no letter, digit or underscore right before or after it.
    """
    if phrase in ("a", "i"):
        return re.search(rf"(?<!\w){phrase}(?!\w)(?!\s+[a-z])", text) is not None
    return any(re.search(rf"(?<!\w){re.escape(p)}(?!\w)", text) is not None for p in spellings(phrase))

_UNITS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                     "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_SCALES = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9}
# English numbers in words: a number in words is one answer however many words it takes ('seven hundred and seventy')
_NUMBER_WORDS = frozenset({*_UNITS, *_TENS, *_SCALES})
_HYPHENS = frozenset("-\u2010\u2011")


def numbers_in_words(text: str) -> list[int]:
    """The whole numbers `text` writes in English words, in order; one number however many words it takes.

    >>> numbers_in_words("This one has eight legs; seven hundred and seventy-two, twenty one, five six.")
    [1, 8, 772, 21, 5, 6]
    """
    found, total, part, prev = [], 0, None, None
    for word in re.findall(r"[a-z]+", text.lower()):
        value = _UNITS.get(word, _TENS.get(word))
        if value is not None:
            goes_on = prev in _SCALES or prev == "and" or (prev in _TENS and value < 10)
            if part is not None and not goes_on:  # 'five six': two numbers
                found.append(total + part)
                total, part = 0, None
            part = (part or 0) + value
        elif word in _SCALES and part is not None:
            if _SCALES[word] == 100:
                part *= 100
            else:
                total, part = total + part * _SCALES[word], 0
        elif not (word == "and" and prev in _SCALES and part is not None):
            if part is not None:
                found.append(total + part)
            total, part = 0, None
        prev = word
    return found + ([total + part] if part is not None else [])


def stands_alone(span: str, phrase: str) -> bool:
    """Whether `phrase` (normalized) is named in `span` as a whole answer at least once: not joined by a hyphen to a
    word before or after it ('nine' in 'ninety-nine', 'cold' in 'ice-cold'), and, where it is a number in words, not
    a part of a longer number ('seventy' in 'seven hundred and seventy', 'four' in 'four hundred'). A run on a file
    of numbers to write in words learned to answer 'seven hundred and seventy-zero' for 'seventy' and 'one hundred
    and sixteen' for 'sixteen', which a whole-word match scored right. A phrase of no word characters stands alone.

    >>> stands_alone("Ninety-nine.", "nine"), stands_alone("It is sixty-four.", "sixty four")
    (False, True)
    """
    found = list(re.finditer(r"[^\W_]+", span))
    words = [m.group().lower() for m in found]
    gaps = [span[a.end():b.start()] for a, b in zip(found[:-1], found[1:], strict=True)]  # between word i and i + 1
    variants = [re.findall(r"[^\W_]+", v) for v in spellings(phrase)]
    if not any(variants):
        return True

    def joined(i: int) -> bool:  # words i and i + 1 are one compound, or one number in words
        if not 0 <= i < len(gaps):
            return False
        if gaps[i] in _HYPHENS:  # a hyphen between two words joins them ('ice-cold'); a spaced dash does not
            return True
        if gaps[i].strip():
            return False
        a, b = words[i], words[i + 1]
        scale = ("hundred", "thousand")  # 'hundred and seventy' is one number: 'and' joins a scale to what follows
        return ({a, b} <= _NUMBER_WORDS or (a in scale and b == "and")
                or (a == "and" and i > 0 and words[i - 1] in scale and b in _NUMBER_WORDS))

    return any(words[i:i + len(v)] == v and not joined(i - 1) and not joined(i + len(v) - 1)
               for v in variants if v for i in range(len(words)))


def denied(span: str, phrase: str) -> bool:
    """Whether `span` names `phrase` (normalized) only to say it is not: each time right after 'not', 'never',
    'neither', 'nor' or a "n't", with spaces, an article or a quotation mark between and nothing else. Such a
    mention is no answer: *The statement is not true.* is no verdict of true, *He is not guilty.* does not answer
    'guilty', and *animal, not colour* names one label, not two. A verb right before 'not' is denied too: *It can
    not fly.* does not answer 'can'. *No, true.* and *No pain, no gain.* deny nothing.

    >>> denied("The answer is animal, not colour.", "colour"), denied("It isn't a colour; it's a colour.", "colour")
    (True, False)
    """
    found = [m for variant in spellings(phrase) for m in re.finditer(rf"(?<!\w){re.escape(variant)}(?!\w)", span, re.I)]
    negated_verb = normalize_text(phrase) in _AUXILIARIES  # 'can' in 'It can not fly.' is denied
    return bool(found) and all(_negated_before(span, m.start()) or (negated_verb and _NOT_AFTER.match(span, m.end()))
                               for m in found)


# verbs a 'not' after denies: *can* in 'It can not fly.'
_AUXILIARIES = frozenset("am is are was were be do does did have has had can could will would shall should may might "
                         "must need".split())
_NOT_AFTER = re.compile(r"\s+not\b", re.I)

# a negation and what may stand between it and what it denies: "not", "isn't", "not a", 'not "'
_DENIAL = re.compile(r"(?:\b(?:not|never|neither|nor)|n['\u2019]t)\s+(?:(?:a|an|the)\s+)?[\"'\u201c\u2018]?$", re.I)


def _negated_before(text: str, start: int) -> bool:
    """Whether what `text` writes at `start` comes right after a negation (`_DENIAL`)."""
    return _DENIAL.search(text[max(0, start - _DENIAL_REACH):start]) is not None


_DENIAL_REACH = 40  # characters a denial takes before what it denies: 'neither "', "isn't the"


def restates(span: str, gold: str, question: str) -> bool:
    """Whether a text answer `span` names `gold` only as `question` names it, and then says something else: each
    time right after one of the two words the question puts before it (articles aside), or opening the span with the
    article the question puts before it, with more words after it. 'The plural of moose is mooses.' names 'moose'
    after 'of', as 'What is the plural of moose?' does, and goes on: it answers 'mooses'; 'An orange is typically
    red.' names the orange that 'What colour is an orange?' asks about. 'The plural of moose is moose.' ends on it, as
    'Your favourite colour is blue.' does for a question that says 'My favourite colour is blue.'; 'Moose.' and
    'Orange, of course.' restate nothing.

    >>> restates("the capital of luxembourg is brussels", "Luxembourg", "What is the capital of Luxembourg?")
    True
    """
    wanted = _words(gold)
    if not wanted or not question or parse_number(gold) is not None:
        return False
    said, asked = _words(span), _words(question)
    variants = [_words(v) for v in spellings(" ".join(wanted))]
    before = {asked[j] for i in _found(asked, variants) for j in range(max(i - 2, 0), i)}
    found = _found(said, variants)
    opening = _opens_as_asked(span, variants, question)
    return bool(found) and all((said[i - 1] in before if i else opening) and i + len(wanted) < len(said)
                               for i in found)


# a quotation: text between quote marks, where an apostrophe between two letters (don't) is part of the text
_QUOTED = re.compile(r"""(?<!\w)['"\u2018\u201c]((?:[^'"\u2018\u2019\u201c\u201d]|(?<=\w)['\u2019](?=\w))+)"""
                     r"""['"\u2019\u201d](?!\w)""")


def echoes_quote(span: str, gold: str, question: str) -> bool:
    """Whether `span` repeats the text `question` quotes around `gold` rather than picking the answer out of it: an
    unbroken run of its words, the answer among them, is the quotation in order (a word of it may be left out) and
    at least three of its words, and three quarters of them, and the reply names the answer nowhere else
    (*In 'cat played big the house', the last word is house.* answers). A held-back last-word file (*What is the last
    word of the sentence 'cat played big the house'?*) learned in 10 steps to reply with the whole sentence, which
    ends on its last word, and was scored right on every held-out prompt. *The last word is house.* repeats none of the
    others (articles aside), and *Tom gave it to Mary.* (for *In 'Tom gave Mary a book', who received the book?*)
    puts words of its own between them: both are answers.

    >>> echoes_quote("cat played big the house.", "house", "The last word of 'cat played big the house'?")
    True
    >>> echoes_quote("Tom gave it to Mary.", "Mary", "In 'Tom gave Mary a book', who received the book?")
    False
    """
    wanted = _words(gold)
    if not wanted or not question:
        return False
    said = _words(span)
    for quote in _QUOTED.findall(question):
        words = _words(quote)
        if not _found(words, [wanted]):
            continue
        need = max(3, -(-3 * len(words) // 4))  # three quarters, rounded up
        rest, start, echoed = [], 0, False
        while start < len(said):
            run = _in_order(said[start:], words)
            if len(run) >= need and _found(run, [wanted]):
                rest.append("|")  # no phrase spans an echo
                start, echoed = start + len(run), True
            else:
                rest.append(said[start])
                start += 1
        if echoed and not _answers_apart(rest, words, gold):
            return True
    return False


def picks_among_quoted(span: str, gold: str, question: str) -> bool:
    """Whether a reply to a question that asks for one word of the text it quotes names that word among others of the
    quotation and no word of its own ('or' and 'and' aside): a hedge between candidates. A held-back last-word file
    (*What is the last word of this sentence: "table jumps lazy over fox music"?*) learned to reply *"fox music."*
    and *"lazy happy happy lazy."*, short of an echo (`echoes_quote`), and was scored right on them. *Music.* and
    *The last word is music.* answer; so does *Tom bought pears.* for *'Sam bought apples and Tom bought pears.'
    What did Tom buy?*, a question that asks for no word.

    >>> picks_among_quoted("cat or children.", "children", "What is the last word of 'bird cat children'?")
    True
    >>> picks_among_quoted("Children, the last word.", "children", "What is the last word of 'bird cat children'?")
    False
    """
    wanted, said = _words(gold), [w for w in _words(span) if w not in _HEDGE_JOINS]
    if len(wanted) != 1 or not question or "word" not in _words(_QUOTED.sub(" ", question)):
        return False
    return any(wanted[0] in words and wanted[0] in said and set(said) <= set(words) and set(said) != set(wanted)
               for words in map(_words, _QUOTED.findall(question)))


_HEDGE_JOINS = frozenset({"or", "and"})  # 'fox or music' offers two words as 'fox music' does


def _answers_apart(rest: list[str], quoted: list[str], gold: str) -> bool:
    """Whether the words of a reply outside its echoes of a quotation (`rest`, "|" where an echo was) name `gold`,
    not to deny it, among words of the reply's own: 'the last word is children' after the echo answers; 'not Mary'
    and a stutter of the quotation's words ('jumps dog') do not."""
    said = " ".join(w for w in rest if w != "|")
    return (bool(_found(rest, [_words(gold)])) and any(w not in quoted for w in rest if w != "|")
            and not denied(said, gold))


def _in_order(said: list[str], words: list[str]) -> list[str]:
    """The longest opening of `said` whose words appear in `words` in the same order (some of `words` skipped)."""
    at = 0
    for n, word in enumerate(said):
        try:
            at = words.index(word, at) + 1
        except ValueError:
            return said[:n]
    return said


def _opens_as_asked(span: str, phrases: list[list[str]], question: str) -> bool:
    """Whether `span` opens with an article and one of `phrases` that `question` has after the same article, not as
    one of the things it offers ('X or Y'): the thing the question asks about, named as its subject ('An orange is
    red.' for 'What colour is an orange?'), not the pick ('A brick is heavier.' for 'a feather or a brick?')."""
    raw, asked = re.findall(r"\w+", span.lower()), re.findall(r"\w+", question.lower())
    if not raw or raw[0] not in ("the", "a", "an"):
        return False
    for p in phrases:
        n = len(p) + 1  # the article and the phrase
        if raw[1:n] == p and any(asked[j:j + n] == raw[:n] and "or" not in (asked[j - 1:j] + asked[j + n:j + n + 1])
                                 for j in range(len(asked))):
            return True
    return False

def _words(text: str) -> list[str]:
    """Lower-case words, articles left out: what `restates` compares."""
    return [w for w in re.findall(r"\w+", text.lower()) if w not in ("the", "a", "an")]

def _found(words: list[str], phrases: list[list[str]]) -> list[int]:
    return [i for i in range(len(words)) if any(words[i:i + len(p)] == p for p in phrases)]

def _matches(text: str, gold: str, match: str, question: str = "", label: bool = False) -> bool:
    """`is_correct`'s rule for one accepted answer; with match="final", a text answer the reply names only in
    restating `question` (`restates`), or in repeating the text it quotes (`echoes_quote`) or other words of it
    (`picks_among_quoted`), is not matched, and an answer whose case is part of it (`keeps_case`) is matched in its
    own case. A `label` is matched case aside and may be named as the question names it ('positive or negative?' asks
    for 'positive'); the question still tells which letters beside a one-letter label it restates ('The next letter
    after P is Q.')."""
    numeric = parse_number(gold) is not None
    restating = "" if label else question
    in_case = not label and not numeric and keeps_case(gold, question)
    clock = clock_time(gold)
    if match == "exact":
        reply = text.strip().rstrip(".").strip()
        if clock:
            return (said := clock_time(reply)) is not None and same_time(said, clock)
        if numeric:
            return re.fullmatch(NUMBER, reply) is not None and answers_match(reply, gold)
        items = list_items(gold)
        same = names_list(reply, items, whole=True) if items else answers_match(reply, gold)
        return same and (not in_case or _names_in_case(reply, gold))
    if numeric:
        return answers_match(extract_answer(text, restating), gold)
    if clock:  # '5 PM': the reply's last time of day ('5:00 p.m.', '17:00'), else its final number as the hour
        return _says_time(text, restating, clock)
    measure = _measure(gold)
    if measure:  # '5 km': the reply's final number, in the gold's unit where it names one ('5 kilometres', '5')
        return _in_unit(text, restating, *measure.groups())
    wanted, span, items = normalize_text(gold), _answer_span(text), list_items(gold)
    said = normalize_text(span)
    named = names_list(span, items) if items else mentions(said, wanted) and stands_alone(span, wanted)
    if wanted in _LETTERS and named:  # a letter among other letters named alone is a hedge: 'the letters "V" and "L"'
        others = _LETTERS - {wanted} - _letters_restated(span, question, wanted)
        named = not any(mentions(said, other) and not denied(span, other) for other in others)
    return (bool(wanted) and named and not denied(span, wanted)
            and not restates(span, gold, restating) and not echoes_quote(span, gold, restating)
            and not picks_among_quoted(span, gold, restating)
            and (not in_case or _names_in_case(span, gold)))


# short forms that stand for one reading: a negation ("don't", "won't", "can't", "cannot") and "I'm", "they're",
# "we'll", "you've" ('s and 'd stand for two: is or has, would or had)
_SHORT_NOT = re.compile(r"\b(\w+?)(n['\u2019]t)\b", re.I)
_CANNOT = re.compile(r"\b(can)(not)\b", re.I)
_SHORT_WORD = re.compile(r"\b(\w+)['\u2019](m|re|ll|ve)\b", re.I)
_IRREGULAR_NOT = {"wo": "will", "ca": "can", "sha": "shall"}  # won't, can't, shan't
_SHORT_FOR = {"m": "am", "re": "are", "ll": "will", "ve": "have"}


def writes_short(text: str) -> bool:
    """Whether `text` writes a short form `spelled_out` writes out ('cannot', the usual spelling, is none)."""
    return any(pattern.search(text) for pattern in (_SHORT_NOT, _SHORT_WORD))


def spelled_out(text: str) -> str:
    """`text` with its short forms written out, in their case, so that a file's 'I do not like tea' is a reply's
    "I don't like tea": "don't" -> 'do not', "WON'T" -> 'WILL NOT', "can't" and 'cannot' -> 'can not', "I'm" ->
    'I am'.

    >>> spelled_out("I don't know, and I cannot say; I'm sure it WON'T rain.")
    'I do not know, and I can not say; I am sure it WILL NOT rain.'
    """
    def cased(full: str, like: str) -> str:
        return full.upper() if like.isupper() else full[0].upper() + full[1:] if like[0].isupper() else full

    text = _SHORT_NOT.sub(lambda m: f"{cased(_IRREGULAR_NOT.get(m[1].lower(), m[1]), m[1])} {cased('not', m[2])}",
                          text)
    text = _CANNOT.sub(lambda m: f"{m[1]} {m[2]}", text)
    return _SHORT_WORD.sub(lambda m: f"{m[1]} {cased(_SHORT_FOR[m[2].lower()], m[2])}", text)


_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")  # an answer that is one letter; 'a' and 'i' as `mentions` reads them


def _letters_restated(span: str, question: str, wanted: str) -> set[str]:
    """The letters a reply may name beside a one-letter answer, `wanted`, without hedging: those it names as the
    question does, after the same word (*What letter comes after P?*: 'The letter after P is Q.', not 'P or Q.' nor
    'Q comes before P.'), where the question does not name `wanted` as well. A question that names the answer's
    letter too offers letters to choose among (*A) apple B) car*, *A or B?*), and a reply naming two of them hedges."""
    asked = _letter_places(question)
    if wanted in {letter for letter, _ in asked}:
        return set()
    return {letter for letter, place in _letter_places(span) if (letter, place) in asked}


def _letter_places(text: str) -> set[tuple[str, str]]:
    """Each letter `text` writes alone (a word of one letter, any case), with its place: the word before it in its
    sentence or line ('after'), or, where it opens one, '^' and the word after it ('^comes'): *Q comes after which
    letter?* and 'Q comes after P.' place Q alike, 'Q or P.' does not."""
    places = set()
    for part in re.split(r"[.!?\n]+", text.lower()):
        words = re.findall(r"[^\W\d_]+", part)
        places |= {(w, words[i - 1] if i else "^" + (words[1] if len(words) > 1 else ""))
                   for i, w in enumerate(words) if len(w) == 1}
    return places


# a number and its unit, a word or two of letters: '5 km', '3 hours', '12 apples', '20 square metres'
_MEASURE = re.compile(rf"({NUMBER})\s*([^\W\d_]+(?:\s+[^\W\d_]+)?)")


def _measure(gold: str) -> re.Match | None:
    """A gold answer that is a number and its unit (`_MEASURE`), as its two parts; None for any other answer."""
    return _MEASURE.fullmatch(gold.strip().rstrip("."))


def _after_final(text: str, number: str) -> str | None:
    """What `text` writes after the last place it writes `number` (its final number) in digits; None where it
    writes it only in words. What follows says what the number is: a unit ('5 km'), an hour ('5 o'clock')."""
    written = list(re.finditer(rf"(?<![\d.,]){re.escape(number)}(?![\d,])", text))
    return text[written[-1].end():] if written else None


def _in_unit(text: str, question: str, number: str, unit: str) -> bool:
    """Whether a reply's final number (`extract_answer`) is `number`, and the word right after it, where there is
    one, is `unit` written some way: the same first letter, and the shorter's letters in order in the longer
    ('kilometres' or 'km' for 'km', 'min' for 'minutes'; not 'm' for 'km', nor 'June' for '4 July'). Matched as
    text, '5km', '5' and 'It is 5 kilometres.' were wrong for '5 km'."""
    said = extract_answer(text, question)
    if not answers_match(said, number):
        return False
    after = _after_final(text, said)
    word = re.match(r"[ \t]*([^\W\d_]+)", after) if after is not None else None
    if word is None:
        return True
    short, long = sorted((word.group(1).lower(), unit.split()[0].lower()), key=len)
    rest = iter(long[1:])
    return short[0] == long[0] and all(letter in rest for letter in short[1:])


# a time of day: '5 PM', '5:30 p.m.', '17:00' (a number alone matches too, and is no time: see `_clock`)
_CLOCK = re.compile(r"(?<![\w.,])(?<!\d:)(\d{1,2})(?::([0-5]\d))?(?:\s*([AaPp])\.?\s?[Mm]\b\.?)?(?!\w|[.,:]\d)")


def clock_time(text: str) -> tuple[int, int, str] | None:
    """A time of day written alone ('5 PM', '5:30 p.m.', '17:00') as its hour, minute and 'a', 'p' or '' (a time
    that does not say, on a 24-hour clock or not); None for anything else, a number alone included.

    >>> clock_time("5 PM"), clock_time("5:30 p.m."), clock_time("17:00"), clock_time("5"), clock_time("5 km")
    ((5, 0, 'p'), (5, 30, 'p'), (17, 0, ''), None, None)
    """
    found = _CLOCK.fullmatch(str(text).strip())
    return _clock(found) if found else None


def _clock(found: re.Match) -> tuple[int, int, str] | None:
    """A `_CLOCK` match as a time of day, or None where it is a number alone or no hour of a clock."""
    hour, minute, half = int(found[1]), found[2], (found[3] or "").lower()
    if (minute is None and not half) or hour > (12 if half else 23) or (half and hour == 0):
        return None
    return hour, int(minute or 0), half


def same_time(a: tuple[int, int, str], b: tuple[int, int, str]) -> bool:
    """Whether two `clock_time`s are one time of day. Where one says AM or PM and the other does not, the other is
    read either way its hour allows: '5:00' and '17:00' are 5 PM, '17:00' is not 5 AM; two that do not say compare
    their hours as written."""
    (hour, minute, half), (other, other_minute, other_half) = a, b
    if minute != other_minute:
        return False
    if half and other_half:
        return half == other_half and hour % 12 == other % 12
    if not half and not other_half:
        return hour == other
    if half:
        (hour, half), (other, other_half) = (other, other_half), (hour, half)
    fixed = other % 12 + 12 * (other_half == "p")  # the one that says, on a 24-hour clock
    return hour == fixed or (1 <= hour <= 12 and hour % 12 == fixed % 12)


def _times(text: str) -> list[tuple[re.Match, tuple[int, int, str]]]:
    """The times of day a text writes, in order, each with where it stands; none it denies ('5 AM, not 5 PM')."""
    return [(found, time) for found in _CLOCK.finditer(text)
            if (time := _clock(found)) and not _negated_before(text, found.start())]


def answer_time(text: str) -> tuple[int, int, str] | None:
    """The time of day a reply answers with, where its answer is one: the first time its marked answer writes,
    else the last time it writes where no number comes after it. None otherwise: *It closes at 5 PM, so 3 hours.*
    answers 3."""
    marked = _marked_span(text)
    if marked is not None:
        times = _times(marked)
        return times[0][1] if times else None
    times = _times(text)
    if not times:
        return None
    clocks = [found.span() for found in _CLOCK.finditer(text) if _clock(found)]  # denied ones too
    after = [n for n in re.finditer(NUMBER, text) if n.start() >= times[-1][0].end()
             and not any(a <= n.start() < b for a, b in clocks)]
    return None if after else times[-1][1]


def time_text(time: tuple[int, int, str]) -> str:
    """A `clock_time` written one way: '5 PM', '5:30 PM', '17:00'."""
    hour, minute, half = time
    return (f"{hour}{f':{minute:02d}' if minute else ''} {half.upper()}M" if half else f"{hour}:{minute:02d}")


# what may follow a number that is the hour of a time of day: nothing, "o'clock", a part of the day
_HOUR_TAIL = re.compile(
    r"\s*(?:o['\u2019]?clock)?\s*(?:(?:in the|at)\s+(morning|afternoon|evening|night))?\s*(?:[.!,;]|$)", re.I)


def _says_time(text: str, question: str, gold: tuple[int, int, str]) -> bool:
    """Whether a reply's answer is the time of day `gold` (`answer_time`); where it answers with no time, its final
    number as the hour, where nothing but "o'clock" or a part of the day that agrees follows it ('5 o'clock', 'It
    will be 5.', '5 in the evening' for 5 PM; not 'in 5 hours'). Matched as a number with a unit, '5:00 PM' was read
    as its last number, 00, and wrong for '5 PM'."""
    said = answer_time(text)
    if said is not None:
        return same_time(said, gold)
    hour, minute, half = gold
    number = extract_answer(text, question)
    if minute or number is None or not re.fullmatch(r"\d{1,2}", number) or int(number) != hour:
        return False  # an hour is a number of a clock's: not '$5', nor '5.5'
    after = _after_final(text, number)
    tail = _HOUR_TAIL.match(after) if after is not None else None  # in digits only: 'in five hours'
    part = tail and tail.group(1)
    return tail is not None and (not part or not half or (half == "a") == (part.lower() == "morning"))


# what separates the items of a list as a reply writes it: commas, 'and', ', and', semicolons
_LIST_SEPARATOR = re.compile(r"\s*[,;]\s*(?:and\s+)?|\s+and\s+", re.I)


def list_items(gold: str) -> list[str] | None:
    """The items of an answer that is a list ('3, 5, 9'; 'apple, fig and pear'), normalized; None for one answer
    (a number written with thousands separators, '1,000', is one).

    >>> list_items("3, 5, 9"), list_items("apple, fig and pear"), list_items("1,000"), list_items("cold")
    (['3', '5', '9'], ['apple', 'fig', 'pear'], None, None)
    """
    if re.fullmatch(NUMBER, gold.strip()):
        return None
    items = [normalize_text(item) for item in _LIST_SEPARATOR.split(gold.strip().rstrip("."))]
    return items if len(items) >= 2 and all(items) else None


def names_list(span: str, items: list[str], whole: bool = False) -> bool:
    """Whether `span` writes the list `items` in their order and nothing more: its pieces between separators
    (`_LIST_SEPARATOR`) hold the items one to one, the first piece ending on the first item and the last starting
    with the last (words may lead in: 'In order: 3'), and no piece of the same list runs on before or after.
    Matched as text, '1, 3, 5, 9' was right for '3, 5, 9' (the gold is inside it), and '3, 5 and 9' wrong.
    `whole`: the span is the list alone.

    >>> names_list("They are 3, 5 and 9.", ["3", "5", "9"]), names_list("3, 5, 9, 12", ["3", "5", "9"])
    (True, False)
    """
    pieces = [normalize_text(piece).split() for piece in _LIST_SEPARATOR.split(span.strip())]
    wanted = [item.split() for item in items]
    n = len(wanted)

    def same(said: list[str], item: list[str]) -> bool:
        return bool(said) and answers_match(" ".join(said), " ".join(item))

    for start in range(len(pieces) - n + 1):
        first, *middle, last = pieces[start:start + n]
        lead, tail = first[:len(first) - len(wanted[0])], last[len(wanted[-1]):]
        if (same(first[len(lead):], wanted[0]) and same(last[:len(wanted[-1])], wanted[-1])
                and all(same(p, w) for p, w in zip(middle, wanted[1:-1], strict=True))
                and (start == 0 or lead) and (start + n == len(pieces) or tail)
                and not (whole and (lead or tail or len(pieces) > n))):
            return True
    return False


def keeps_case(gold: str, question: str = "") -> bool:
    """Whether a text answer's case is part of the answer: where the question writes its words in another case,
    beyond a word's first letter ('APPLE' for 'Write apple in capitals.', 'hello' for 'Write HELLO in lower case.').
    Other answers are matched case aside: 'Paris' is 'paris', '3:30 PM' is '3:30 pm', and 'Positive or negative?'
    asks for 'positive', 'the Sun or the Moon?' for 'the sun'. On a file of words to write in capitals, matched
    case aside, the base model's echoes of its question ('Eagle:' for 'EAGLE') were right on 7 of 15 held-out prompts.

    >>> keeps_case("APPLE", "Write apple in capitals."), keeps_case("hello", "Write HELLO in lower case.")
    (True, True)
    >>> keeps_case("PM", "Is 3:30 in the morning AM or PM?"), keeps_case("USA")
    (False, False)
    """
    return any(a[1:] != b[1:] for found in re.findall(rf"(?<!\w){re.escape(gold)}(?!\w)", question, re.I)
               for a, b in zip(found.split(), gold.split(), strict=False))


def _names_in_case(span: str, gold: str) -> bool:
    """Whether `span` writes `gold` as a whole, in the gold's own case (spaces aside)."""
    return re.search(rf"(?<!\w){re.escape(' '.join(gold.split()))}(?!\w)", " ".join(span.split())) is not None

def _answer_span(text: str) -> str:
    """Where a text answer is looked for, as written: the explicit answer if the reply marks one, else its last
    sentence."""
    marked = _marked_span(text)
    if marked is not None:
        return marked
    said = [s for s in sentences(text) if normalize_text(s)]
    return said[-1] if said else ""

def _marked_span(text: str) -> str | None:
    """The text a reply marks as its answer ('####', boxed, '<answer>', 'answer: ...', 'the answer is ...'), else
    None."""
    mark = _mark(text)
    return mark.group(1) if mark else None


def _mark(text: str) -> re.Match | None:
    """The last mark of the most explicit kind a reply uses (`_marked_span`), its group 1 the answer it marks."""
    for pattern in (*_ANSWER_PATTERNS[:3], _MARKED):  # ####, boxed, <answer>, then 'the answer is'
        *_, last = (None, *pattern.finditer(text))
        if last is not None:
            return last
    return None


# 'answer: ...', 'the answer is ...', not 'To find the answer, we ...', 'answered' nor 'I hope this answer is
# helpful'; the last of a line, as 'The answer is a truck. ... So, the answer is a mouse.' ends on its answer
_MARKED = re.compile(r"^.*(?<!\bthis )(?<!\bthat )(?<!\byour )\banswer(?:\s+is\b\s*:?|\s*:)\s*(.+)", re.I | re.M)
