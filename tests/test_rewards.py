import json
import math

import pytest

from rloo_kit import RewardError
from rloo_kit.data import gold_answer
from rloo_kit.rewards import (
    brevity,
    combine,
    correct_answer,
    exact_answer,
    extract_answer,
    guard,
    is_correct,
    normalize_text,
    picked_choice,
    predicted_answer,
    required_columns,
    reward_model,
    safe,
    tag_format,
)
from rloo_kit.rewards.answers import (
    clock_time,
    completion_text,
    denied,
    either_number,
    list_items,
    numbers_in_words,
    parse_number,
    stands_alone,
)

from .conftest import SHARED_GSM8K


@pytest.mark.parametrize("text,expected", [
    ("She pays 5 + 3 = 8 dollars.\n#### 8", "8"),
    ("so the total is \\boxed{1,234}", "1,234"),
    ("<think>2+2</think><answer> 4 </answer>", "4"),
    ("The answer is $18.00.", "$18.00"),
    ("Answer: -7", "-7"),
    ("12 + 7 = 19", "19"),
    ("no digits here", None),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("completion,gold,score", [
    ("#### 1,000", "1000", 1.0), ("\\boxed{18}", "18.00", 1.0), ("The answer is 45%", "45", 1.0),
    ("9 - 12 = -3", "-3", 1.0), ("9 - 12 = 3", "-3", 0.0), ("$5", "5", 1.0), ("I don't know", "5", 0.0),
    ("<answer>0.5</answer>", "0.50", 1.0), ("The answer is 17", "71", 0.0),
])
def test_correct_answer_formats(completion, gold, score):
    assert correct_answer(prompts=["q"], completions=[completion], answer=[gold]) == [score]


def test_a_number_given_in_words_is_the_number_unless_the_question_states_it():
    """A new-user legs file: 'A spider has eight legs.' was scored wrong against 8. A number-words task ('Write the
    number seventeen in digits.') is not answered by its question's own words, and digits still come first."""
    legs = "How many legs does a spider have?"
    assert correct_answer([legs, legs, legs], ["A spider has eight legs.", "<answer>eight</answer>",
                                                "It has six legs."], answer=["8", "8", "8"]) == [1.0, 1.0, 0.0]
    digits = "Write the number seventeen in digits."
    replies = ["The number seventeen is seventeen.", "Seventeen: 17.", "It is 71, seventeen."]
    assert correct_answer([digits] * 3, replies, answer=["17"] * 3) == [0.0, 1.0, 0.0]
    minutes = "How many seconds are in one minute?"  # the question's 'one' is passed over, not the reply's answer
    assert extract_answer("There are sixty seconds in one minute.", minutes) == "60"
    assert numbers_in_words("two hundred and five, a hundred, twenty-one thousand") == [205, 21000]


def test_correct_answer_reads_chat_messages():
    completions = [[{"role": "assistant", "content": "3 + 4 = 7"}], [{"role": "assistant", "content": "8"}]]
    assert correct_answer(prompts=["a", "b"], completions=completions, answer=["7", "7"]) == [1.0, 0.0]


@pytest.mark.skipif(not SHARED_GSM8K.exists(), reason="shared GSM8K data not beside the checkout")
def test_every_gsm8k_solution_scores_its_own_gold_answer():
    rows = [json.loads(line) for line in SHARED_GSM8K.read_text().splitlines()]
    solutions = [r["answer"] for r in rows]
    golds = [gold_answer(s) for s in solutions]
    assert len(rows) > 7000
    assert correct_answer(prompts=[""] * len(rows), completions=solutions, answer=golds) == [1.0] * len(rows)
    wrong = [str(float(g) + 1) for g in golds]
    assert correct_answer(prompts=[""] * len(rows), completions=solutions, answer=wrong) == [0.0] * len(rows)


def test_gsm8k_style_solutions_without_shared_data():
    sols = ["Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "It costs $1,250 in total.\n#### 1,250"]
    golds = [gold_answer(s) for s in sols]
    assert golds == ["72", "1250"]
    assert correct_answer(prompts=["", ""], completions=sols, answer=golds) == [1.0, 1.0]


def test_the_docstring_examples_hold():
    import doctest

    from rloo_kit.rewards import answers, functions

    results = [doctest.testmod(m) for m in (answers, functions)]
    assert sum(r.attempted for r in results) >= 4 and not any(r.failed for r in results)


def test_tag_format_and_brevity():
    fmt = tag_format(("think", "answer"))
    assert fmt(prompts=["", ""], completions=["<think>x</think><answer>1</answer>", "<answer>1</answer>"]) == [1.0, 0.5]
    assert fmt.__name__ == "format_think_answer"
    short, long = brevity(max_chars=10)(prompts=["", ""], completions=["7", "x" * 30])
    assert short == pytest.approx(0.9) and long == 0.0


def test_gated_brevity_pays_short_replies_only_where_they_are_right():
    """A run whose answers are never right must find no spread in length, or it learns to empty its replies."""
    gated = brevity(max_chars=10, gate=correct_answer)
    scores = gated(prompts=["q"] * 4, completions=["7", "So it is 7.", "8", ""], answer=["7"] * 4)
    assert scores == [pytest.approx(0.9), pytest.approx(0.0), 0.0, 0.0]  # "So it is 7." is 11 characters
    assert required_columns(gated) == {"answer"} and gated.__name__ == "brevity"
    never_right = gated(prompts=["q"] * 3, completions=["1", "12", "a long wrong reply"], answer=["7"] * 3)
    assert set(never_right) == {0.0}


def test_combine_weights_and_required_columns():
    both = combine((correct_answer, 1.0), (brevity(max_chars=10), 0.5))
    assert required_columns(both) == {"answer"}
    assert both(prompts=[""], completions=["7"], answer=["7"]) == [pytest.approx(1.0 + 0.45)]


def test_required_columns_reads_the_signature():
    def needs(prompts, completions, answer, difficulty, **kwargs):
        return [0.0] * len(completions)

    assert required_columns(needs) == {"answer", "difficulty"}
    assert required_columns(brevity()) == set()


def flaky(prompts, completions, **kwargs):
    if any(c == "boom" for c in completions):
        raise ZeroDivisionError("boom")
    return [float("nan") if c == "nan" else math.inf if c == "inf" else "x" if c == "str" else 1.0
            for c in completions]


def test_safe_turns_bad_samples_into_none_and_counts_them():
    guarded = safe(flaky)
    out = guarded(prompts=[""] * 5, completions=["ok", "boom", "nan", "inf", "str"])
    assert out == [1.0, None, None, None, None]
    assert guarded.failures == {"raised ZeroDivisionError": 1, "NaN/inf": 2, "returned str": 1}
    guarded(prompts=[""], completions=["boom"])
    assert guarded.failures["raised ZeroDivisionError"] == 2


def test_safe_strict_raises():
    with pytest.raises(RewardError, match="flaky"):
        safe(flaky, strict=True)(prompts=["", ""], completions=["ok", "boom"])
    with pytest.raises(RewardError, match="NaN/inf"):
        safe(flaky, strict=True)(prompts=[""], completions=["nan"])


def test_wrong_length_is_always_an_error():
    def short(prompts, completions, **kwargs):
        return [1.0]

    with pytest.raises(RewardError, match="returned 1 values for 3 completions"):
        safe(short)(prompts=[""] * 3, completions=["a", "b", "c"])


@pytest.mark.parametrize("completion,gold,right", [
    ("cold", "cold", True), ("Cold.", "cold", True), ("The opposite of hot is cold.", "cold", True),
    ("The answer is: COLD!", "cold", True), ("<answer>the cold</answer>", "cold", True),
    ("Hot and cold are opposites. I would say warm.", "cold", False),  # the last sentence decides
    ("coldest", "cold", False), ("scold", "cold", False),  # whole words only
    ("It is New York.", "new york", True), ("The capital is Paris", ["paris", "paris, france"], True),
    ("It's chilly", ["cold", "chilly"], True), ("An apple.", "apple", True),
])
def test_text_answers(completion, gold, right):
    assert is_correct(completion, gold) is right
    assert correct_answer(["q"], [completion], answer=[gold]) == [float(right)]


def test_text_answers_exact_and_normalized():
    assert normalize_text("  The  Cold. ") == "cold" and normalize_text("'an apple'") == "apple"
    assert exact_answer(["q"] * 4, ["Cold.", "the cold", "It is cold.", "7."], answer=["cold", "cold", "cold", "7"]) \
        == [1.0, 1.0, 0.0, 1.0]
    assert is_correct("cold", ["warm", "cold"], match="exact")
    with pytest.raises(ValueError, match="final"):
        is_correct("x", "x", match="fuzzy")


def test_an_answer_whose_case_is_part_of_it_is_matched_in_its_case():
    """A file of words to write in capitals had 'apple' (the question's own word, echoed) scored right for 'APPLE'."""
    caps = "Write apple in capital letters."
    assert is_correct("APPLE", "APPLE", prompt=caps) and is_correct("In capitals it is APPLE.", "APPLE", prompt=caps)
    assert not is_correct("apple", "APPLE", prompt=caps) and not is_correct("It is Apple.", "APPLE", prompt=caps)
    assert not is_correct("apple", "APPLE", "exact", prompt=caps)
    assert is_correct("APPLE.", "APPLE", "exact", prompt=caps)
    lower = "Write HELLO in lower case."
    assert is_correct("hello", "hello", prompt=lower) and not is_correct("HELLO", "hello", prompt=lower)
    assert correct_answer([caps, lower], ["apple", "hello"], answer=["APPLE", "hello"]) == [0.0, 1.0]
    assert exact_answer([caps, caps], ["apple", "APPLE"], answer=["APPLE", "APPLE"]) == [0.0, 1.0]
    # case aside, as before: a capital the question or the reply puts first, and any case of a label
    assert is_correct("PARIS!", "Paris") and is_correct("Positive.", "positive", prompt="Positive or negative?")
    assert is_correct("It is positive.", "POSITIVE", labels=["POSITIVE", "NEGATIVE"])
    assert is_correct("At 3:30 pm.", "3:30 PM", prompt="When?") and is_correct("the usa", "USA")  # no case asked
    assert is_correct("The Sun is.", "the sun", prompt="Which is a star: The Sun or the Moon?")


def test_a_list_answer_is_its_items_in_order_and_no_more():
    """Matched as text, '1, 3, 5, 9' was right for '3, 5, 9' (the gold is inside it) and '3, 5 and 9' wrong (the
    gold's commas are not)."""
    asked = "Sort from smallest to largest: 9, 3, 5."
    for reply in ("3, 5, 9", "3, 5 and 9.", "They are 3, 5, and 9.", "3,5,9", "[3, 5, 9]", "9, 3, 5 sorted: 3, 5, 9."):
        assert is_correct(reply, "3, 5, 9", prompt=asked), reply
    for reply in ("1, 3, 5, 9", "3, 5, 9, 12", "9, 3, 5", "3, 5 or 9", "5, 9"):
        assert not is_correct(reply, "3, 5, 9", prompt=asked), reply
    fruit = "apple, fig, pear"
    assert is_correct("Apple, fig and pear.", fruit) and not is_correct("apple, fig, pear, kiwi", fruit)
    assert is_correct("3, 5 and 9", "3, 5, 9", match="exact") and not is_correct("So 3, 5, 9", "3, 5, 9", match="exact")
    assert is_correct("It costs 1,000.", "1,000") and list_items("1,000") is None  # a number, not a list
    assert is_correct("3, 5 and 9.", "3,5,9") and parse_number("3,5,9") is None  # a list, not 359


def test_a_number_with_its_unit_is_the_number_in_that_unit_however_written():
    """Matched as text, '5km', '5' and 'It is 5 kilometres.' were wrong for '5 km'."""
    asked = "How many kilometres is 5000 metres?"
    for reply in ("5 km", "5km", "5", "It is 5 kilometres.", "5000 metres is 5 km.", "It is five km."):
        assert is_correct(reply, "5 km", prompt=asked), reply
    for reply in ("6 km", "It is 5 m.", "15 km", "It is 5 km and 20 m.", "5 kg"):
        assert not is_correct(reply, "5 km", prompt=asked), reply
    assert is_correct("There are twelve apples.", "12 apples") and not is_correct("3:30 pm", "3 pm")
    assert is_correct("So 9 + 6 = 15 stickers.\n#### 15\nThe answer is: 15", "15 stickers")  # the final one
    assert is_correct("10 minutes", "10 min") and not is_correct("It is 4 June.", "4 July")


def test_a_letter_named_beside_other_letters_is_a_hedge():
    """A first-letters file had *... the first letter of the word "Valley" is a combination of the letters "V" and
    "L".* scored right for 'v'."""
    asked = "What is the first letter of the word 'valley'?"
    assert not is_correct('It is a combination of the letters "V" and "L".', "v", prompt=asked)
    assert not is_correct("V or W.", "v", prompt=asked)
    for reply in ('The first letter of valley is "V".', "V, as in valley.", "I think it is v.", "It is a v."):
        assert is_correct(reply, "v", prompt=asked), reply


def test_a_letter_the_question_names_is_restated_not_a_hedge():
    """A held-back file of neighbouring letters (*What is the next letter of the alphabet after P?*): 'The next letter
    after P is Q.' was a hedge of P and Q, so a right reply could never be scored right. Where the question names the
    answer's letter too, it offers letters to choose among, and naming two of them is still a hedge."""
    after = "What is the next letter of the alphabet after P?"
    assert is_correct("The next letter after P is Q.", "Q", prompt=after)
    assert is_correct("The letter after 'g' is 'h'.", "h", prompt="Which letter comes right after 'g' in the alphabet?")
    before = "Which letter comes right before 'm' in the alphabet?"
    assert is_correct("'l' comes right before 'm'.", "l", prompt=before)
    assert not is_correct("The letter before m is k.", "l", prompt=before)
    assert is_correct("B comes after A.", "B", prompt="What letter comes after A in the alphabet?")
    assert not is_correct("It is Q or R.", "Q", prompt=after)  # R is not the question's: a hedge
    assert not is_correct("P or Q.", "Q", prompt=after) and not is_correct("The letter Q comes before P.", "Q",
                                                                           prompt=after)  # not as the question has P
    assert not is_correct("C, D or E.", "D", prompt="Which letter comes between C and E?")
    assert not is_correct("The next letter after P is Q.", "Q")  # without the question, P is a letter named
    for offered in ("Which is a fruit? A) apple B) car C) dog", "Is the first letter of 'apple' A or B?"):
        assert not is_correct("B or A.", "A", prompt=offered), offered  # the question names the answer's letter
    assert is_correct("A) apple.", "A", prompt="Which is a fruit? A) apple B) car C) dog")


def test_a_letter_is_read_in_its_sentence_of_a_chat_prompt_and_on_label_rows():
    """Chat turns were joined with nothing between them, so a system turn's last word fused with a letter that
    begins the user's turn and the letter went unseen; and rows with a label set (a neighbouring-letters file with
    three rows per letter) passed no question to the letter rule, so 'The next letter after P is Q.' was a hedge."""
    chat = [{"role": "system", "content": "Reply in one sentence"},
            {"role": "user", "content": "Q comes after which letter?"}]
    assert completion_text(chat) == "Reply in one sentence\nQ comes after which letter?"
    assert is_correct("Q comes after P.", "P", prompt=chat)
    assert not is_correct("Q comes after P.", "P", prompt="Reply in one sentenceQ comes after which letter?")
    assert not is_correct("P or Q.", "P", prompt=chat) and not is_correct("Q or P.", "P", prompt=chat)
    before = [{"role": "system", "content": "Answer with a letter."},
              {"role": "user", "content": "P comes before which letter?"}]
    assert is_correct("P comes before Q.", "Q", prompt=before)  # P opens both sentences, before 'comes'
    assert not is_correct("P or Q.", "Q", prompt=before) and not is_correct("P, Q.", "Q", prompt=before)
    assert not is_correct("P or Q.", "Q", prompt="What comes after P? P is a consonant.")
    after, labels = "What letter comes after P?", ["q", "r"]
    assert is_correct("The next letter after P is Q.", "Q", prompt=after, labels=labels)
    assert not is_correct("The next letter after P is Q or R.", "Q", prompt=after, labels=labels)
    assert not is_correct("P or Q.", "Q", prompt=after, labels=labels + ["p"])
    assert predicted_answer("The next letter after P is Q.", labels, prompt=after) == "q"  # as it is scored
    assert is_correct("Positive.", "positive", prompt="Positive or negative: 'I loved it'?",
                      labels=["positive", "negative"])  # a label the question offers is still named


def test_british_and_american_spellings_of_an_answer_are_one_answer():
    labels = ["animal", "colour"]
    assert is_correct("Crimson is a color.", "colour", labels=labels)  # the label is British, the reply American
    assert is_correct("It is grey.", "gray") and is_correct("Colors!", "colours", match="exact")
    assert not is_correct("Crimson is a color or an animal.", "colour", labels=labels)  # a hedge either way
    assert not is_correct("A pig is an animal or a color.", "animal", labels=labels)
    assert not is_correct("It is grayish.", "grey") and not is_correct("It is four.", "for")  # whole known words only


def test_a_text_or_label_named_only_to_deny_it_is_not_named():
    """Stored replies of earlier runs: *The review is not negative.* was right for 'negative', *It is not a color.*
    for 'colour'; and *animal, not colour* was a hedge, although choices read *not* as a pick."""
    true_false, sentiment = ["true", "false"], ["positive", "negative"]
    assert not is_correct("The statement is not true.", "true", labels=true_false)
    assert predicted_answer("The statement is not true.", true_false) is None  # no label named: neither verdict
    assert predicted_answer("It isn't false, it's true.", true_false) == "true"
    assert not is_correct("The review is not negative.", "negative", labels=sentiment)
    assert is_correct("Positive, not negative.", "positive", labels=sentiment)
    assert not is_correct("Positive, not negative.", "negative", labels=sentiment)
    assert not is_correct("He is not guilty.", "guilty") and is_correct("He is not guilty.", "not guilty")
    assert not is_correct("It is never a colour.", "colour") and is_correct("No, it is a colour.", "colour")
    assert denied("It is not a colour.", "colour") and not denied("Not blue: it is a colour.", "colour")
    assert is_correct("The answer is C, not B.", "C", labels=["A", "B", "C", "D"]) and is_correct("C, not B.", "c")


def test_a_time_of_day_is_one_time_however_written():
    """A new-user file of clock sums (*What time is it 2 hours after 3 PM?*, answers like `5 PM`): as a number with
    a unit, *It is 5:00 PM.* was read as its last number, 00, and wrong; so was *It ends at 5 PM, 3 hours later.*"""
    for reply in ("It is 5:00 PM.", "5pm", "5 p.m.", "17:00", "It will be 5 o'clock.", "5 in the evening.",
                  "The answer is 5:00 PM. Then it is 6 PM.", "It's 5 PM, not 5 AM.", "From 3 PM, 3 + 2 = 5."):
        assert is_correct(reply, "5 PM"), reply
    for reply in ("It will be 5 AM.", "It is 6 PM.", "5:30 PM", "The answer is 6 PM.", "It's 5 AM, not 5 PM.",
                  "5 AM: early.", "It arrives in 5 hours.", "5 in the morning.", "It costs $5.",
                  "The film ends at 5 PM, 3 hours later."):  # its last number, as for a number: 3
        assert not is_correct(reply, "5 PM"), reply
    assert not is_correct("17:00", "5 AM") and is_correct("5 PM", "17:00") and not is_correct("5:00", "17:00")
    assert not is_correct("12 PM", "00:00") and is_correct("12:00", "12 AM")  # noon is not 0:00; 12:00 may be either
    assert is_correct("5:00 PM", "5 PM", match="exact") and not is_correct("It is 5 PM.", "5 PM", match="exact")
    assert predicted_answer("It is 5:00 p.m.") == "5 PM" and predicted_answer("Answer: 5:30 pm") == "5:30 PM"
    assert predicted_answer("At 5 PM he had 12 apples.") == "12" and is_correct("It closes at 5 PM.", "5")
    assert clock_time("5") is None and clock_time("5 km") is None and clock_time("25:00") is None


def test_a_hyphen_between_words_is_a_space():
    assert is_correct("42 in words is forty two.", "forty-two") and is_correct("Forty-Two", "forty two", match="exact")
    assert is_correct("It is well\u2011known.", "well known")  # a non-breaking hyphen too
    assert not is_correct("It is fortytwo.", "forty-two")  # two words are not one
    assert normalize_text("-3") == "-3" and normalize_text("3-4") == "3-4"  # only between letters


def test_a_text_answer_is_named_as_a_whole_not_as_a_part_of_a_longer_answer():
    """A run on a file of numbers to write in words learned replies that a whole-word match scored right: 'seven
    hundred and seventy-zero' for 'seventy', 'ninety-nine' for 'nine', 'one hundred and sixteen' for 'sixteen'."""
    hacks = [("seven hundred and seventy-zero", "seventy"), ("ninety-nine", "nine"), ("forty-zero", "forty"),
             ("one hundred and sixteen", "sixteen"), ("thirty-three", "three"), ("Four hundred.", "four"),
             ("It is ice-cold.", "cold")]
    assert not any(is_correct(reply, gold) for reply, gold in hacks)
    assert correct_answer(["q"] * 2, ["ninety-nine", "Ninety-nine."], answer=["nine", "ninety-nine"]) == [0.0, 1.0]
    whole = [("sixty-four", "sixty-four"), ("64 in words is sixty four.", "sixty-four"), ("Seventy.", "seventy"),
             ("The answer is four, not five.", "four"), ("cold - the opposite of hot.", "cold"),
             ("It is well-known.", "well known"), ("Seventy and four are numbers; I pick seventy.", "seventy")]
    assert all(is_correct(reply, gold) for reply, gold in whole)
    assert stands_alone("one hundred and sixteen", "one hundred and sixteen")


def test_a_text_answer_named_only_where_the_reply_repeats_its_question_is_not_its_answer():
    """A plurals run scored 'The plural of moose is mooses.' right: the gold word was the question's own, and the
    reply named it only in repeating the question. With the prompt, that is no answer; a reply that also says it
    as its answer, or says it alone, still is."""
    moose = "What is the plural of moose?"
    assert not is_correct("The plural of moose is mooses.", "moose", prompt=moose)
    assert is_correct("The plural of moose is mooses.", "moose")  # without its prompt, any mention counts
    assert is_correct("The plural of moose is moose.", "moose", prompt=moose) and is_correct("Moose.", "moose",
                                                                                               prompt=moose)
    assert is_correct("Moose is the plural of moose.", "moose", prompt=moose)
    capital = [{"role": "user", "content": "What is the capital of Luxembourg?"}]  # a chat prompt
    replies = ["The capital of Luxembourg is Brussels.", "The capital of Luxembourg is Luxembourg.", "Luxembourg City."]
    assert correct_answer([capital] * 3, replies, answer=[["Luxembourg", "Luxembourg City"]] * 3) == [0.0, 1.0, 1.0]
    heavier = "Which is heavier, a feather or a brick?"
    assert is_correct("A brick is heavier.", "brick", prompt=heavier)
    assert not is_correct("Of a feather or a brick, the feather.", "brick", prompt=heavier)  # it picks the feather
    # a colours file: the thing asked about, named as the reply's subject, is not its answer; the colour is
    orange = [{"role": "user", "content": "What colour is an orange? Reply with one word."}]
    assert not is_correct("An orange is typically red, not green.", "orange", prompt=orange)
    assert all(is_correct(r, "orange", prompt=orange) for r in ("An orange is orange.", "Orange, of course.",
                                                               "Orange."))
    assert is_correct("The opposite of hot is cold.", "cold", prompt="What is the opposite of hot?")
    verb = "What is the past tense of the verb 'put'?"  # the reply need not repeat all of it
    assert not is_correct('The past tense of "put" is "pushed".', "put", prompt=verb)
    assert is_correct("Past tense: put.", "put", prompt=verb) and is_correct("It is put, as in the present.", "put",
                                                                              prompt=verb)
    assert is_correct("Your favourite colour is blue.", "blue", prompt="My favourite colour is blue. What is it?")
    assert is_correct("7 times 1 is 7.", "7", prompt="What is 7 times 1?")  # a number: its final one, as before
    assert not is_correct("7 times 1 is 1.", "7", prompt="What is 7 times 1?")


def test_a_reply_that_repeats_the_quoted_text_its_answer_is_in_is_no_answer():
    """A held-back last-word file learned in 10 steps to reply with the whole quoted sentence, which ends on the
    answer: scored right on all 16 held-out prompts (0.12 -> 1.00). Naming most of the quotation's other words is
    repeating it; naming the answer, with the question's own wording around it, is an answer, the quotation
    repeated before it or not."""
    from rloo_kit.rewards import correct_answer

    question = "What is the last word of the sentence 'bird happily loudly cat children'? Reply with the word."
    replies = ["bird happily loudly children.", "Children.", 'The last word of the sentence is "children".',
               "In 'bird happily loudly cat children', the last word is children.", "cat children.",
               "In 'bird happily loudly cat children', the last word is cat.",
               "The last word of 'bird happily loudly cat children' is 'bird happily loudly cat children'."]
    assert correct_answer([question] * 7, replies, answer=["children"] * 7) == [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    sky = "What's the last word of 'the sky is blue'?"  # an apostrophe opens no quotation
    assert is_correct("The last word is blue.", "blue", prompt=sky) and not is_correct("Sky is blue.", "blue",
                                                                                       prompt=sky)
    assert is_correct("Put.", "put", prompt="What is the past tense of the verb 'put'?")  # nothing else quoted


def test_the_word_asked_for_named_among_other_words_of_its_quotation_is_a_hedge():
    """A held-back last-word file learned to reply with the answer and another word or two of the sentence, short of
    an echo, and was scored right on them; the answer alone, or with words of the reply's own, answers, and so does a
    sentence of the quotation's words where the question asks for no one word of it."""
    music = 'What is the last word of this sentence: "fox red lazy music"?'
    for hedge in ['"fox music."', "Lazy music music lazy.", "Red, music.", "fox or music."]:
        assert not is_correct(hedge, "music", prompt=music), hedge
    for answer in ['"Music."', "Music music.", "The last word is music.", "It ends on music, not fox."]:
        assert is_correct(answer, "music", prompt=music), answer
    assert is_correct("fox music.", "music")  # without the question nothing is known to be quoted
    assert not is_correct("The big dog.", "dog", prompt="Which word in 'The big dog barks' is a noun?")
    for reply, gold, passage in [("Tom bought pears.", "pears", "'Sam bought apples and Tom bought pears.' What did "
                                  "Tom buy?"), ("I saw a dog.", "dog", "Which animal is in 'I saw a dog at the park'?"),
                                 ("The French word for cat is chat.", "cat", "What is 'chat' in English?")]:
        assert is_correct(reply, gold, prompt=passage), reply


def test_an_answer_that_names_words_of_a_short_quotation_in_its_own_sentence_is_no_echo():
    """Two of a four-word quotation's words, with words of the reply's own between them, answer the question; the
    quotation repeated, an apostrophe inside it, does not."""
    book = "In 'Tom gave Mary a book', who received the book?"
    assert is_correct("Tom gave it to Mary.", "Mary", prompt=book) and is_correct("Mary received it.", "Mary",
                                                                                  prompt=book)
    assert not is_correct("Tom gave Mary a book.", "Mary", prompt=book)
    assert not is_correct("Tom gave Mary a book, not Mary.", "Mary", prompt=book)  # named apart only to deny it
    dog = 'What is the last word of this sentence: "lazy fox jumps dog"?'
    assert not is_correct("lazy fox jumps dog jumps dog", "dog", prompt=dog)  # a stutter of the quotation
    assert is_correct('The last word of the sentence "lazy fox jumps dog" is dog.', "dog", prompt=dog)
    rude = "What is the last word of 'I don't know you'? Reply with the word."
    assert not is_correct("I don't know you.", "you", prompt=rude) and is_correct("You.", "you", prompt=rude)


def test_a_negation_written_short_is_the_same_negation():
    """A file of sentences to negate says 'I do not like tea'; the model writes "I don't like tea.", which was wrong.
    Where the row writes a short form itself, the task may be about the form, and nothing is written out."""
    negate = "Make this sentence negative: 'I like tea'"
    for reply in ["I don't like tea.", "I don\u2019t like tea.", "I do not like tea."]:
        assert is_correct(reply, "I do not like tea", prompt=negate), reply
    assert not is_correct("I like tea.", "I do not like tea", prompt=negate)
    assert is_correct("It won't rain.", "it will not rain") and is_correct("I'm not happy.", "I am not happy")
    assert not is_correct("It isn't cold.", "cold")  # still named only to deny it
    assert not is_correct("No, it cannot.", "can", prompt="Can a penguin fly?")  # a verb before 'not' is denied
    assert is_correct("It cannot.", "cannot", labels=["can", "cannot"])  # not a hedge between the two
    assert is_correct("I can't help.", "I cannot help", prompt="Make this sentence negative: 'I can help'")
    assert not is_correct("do not", "don't", prompt="Write 'do not' as a contraction.")
    assert not is_correct("Won't.", "will not", prompt="What does 'won't' mean?")
    assert not is_correct("can't", "CAN'T", prompt="Write can't in capitals.")


def test_a_choice_letter_is_not_the_article_a():
    letters = ["a", "b", "c"]
    assert not is_correct("Bus is a vehicle.", "A", labels=letters)  # the article names no choice
    assert not is_correct("A cat is an animal.", "A", labels=letters)
    assert is_correct("A) cat.", "A", labels=letters) and is_correct("Answer: A", "A", labels=letters)
    assert is_correct("Plum is a fruit, so the answer is B.", "B", labels=letters)  # the article is no hedge
    assert is_correct("I think it is C, a tool.", "C", labels=letters) and not is_correct("b", "C", labels=letters)
    assert is_correct("B is correct.", "B", labels=letters)  # only A and I are also words
    assert is_correct("The answer is a.", "A", labels=letters) and not is_correct("I see.", "I", labels=["i", "v"])
    assert predicted_answer("The answer is b.", letters) == "b" and predicted_answer("It is a tool.", letters) is None


def test_a_label_replys_predicted_answer_is_the_one_label_it_is_scored_on():
    labels = ["animal", "colour"]
    assert predicted_answer("The word 'frog' is a color.", labels) == "colour"  # either spelling, the row's label
    assert predicted_answer("It is an animal or a colour.", labels) is None  # a hedge names no answer
    assert predicted_answer("It is an animal, not a colour.", labels) == "animal"  # a denied label is not named
    assert predicted_answer("I cannot say.", labels) is None and predicted_answer("It is 7.", None) == "7"


def test_lists_of_different_length_are_a_bug_not_a_score():
    with pytest.raises(ValueError):
        correct_answer(["q", "q"], ["1", "2"], answer=["1"])


def test_combine_propagates_none():
    def partial(prompts, completions, **kwargs):
        return [None if c == "skip" else 1.0 for c in completions]

    both = combine((partial, 1.0), (brevity(10), 0.5))
    assert both(prompts=["", ""], completions=["skip", "abcde"]) == [None, 1.0 + 0.5 * 0.5]


def test_reward_model_scores_with_a_tiny_sequence_classifier(tiny_model_dir):
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = LlamaConfig.from_pretrained(tiny_model_dir, num_labels=1, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config).eval()
    score = reward_model(model, tok, batch_size=2, name="rm")
    prompts = [[{"role": "user", "content": "Hi"}]] * 3
    completions = ["Hello there", "No", "A longer reply than the others"]
    values = score(prompts=prompts, completions=completions)
    assert score.__name__ == "rm" and len(values) == 3 and all(isinstance(v, float) for v in values)
    text = tok.apply_chat_template(prompts[1] + [{"role": "assistant", "content": "No"}], tokenize=False)
    with torch.no_grad():
        expected = model(**tok([text], return_tensors="pt")).logits[0, 0].item()
    assert values[1] == pytest.approx(expected, abs=1e-5)  # the first logit of prompt + completion, batched or not


def test_a_reward_that_never_scores_stops_with_its_cause():
    def as_text(prompts, completions, **kwargs):
        return ["1.0" for _ in completions]

    guarded = safe(as_text, patience=3)
    for _ in range(2):
        assert guarded(prompts=["", ""], completions=["a", "b"]) == [None, None]
    with pytest.raises(RewardError, match=r"as_text.*returned str.*float\("):
        guarded(prompts=["", ""], completions=["a", "b"])


def test_one_scored_batch_resets_the_count():
    def sometimes(prompts, completions, **kwargs):
        return [None if c == "n" else 1.0 for c in completions]

    guarded = safe(sometimes, patience=2)
    guarded(prompts=[""], completions=["n"])
    guarded(prompts=[""], completions=["y"])
    guarded(prompts=[""], completions=["n"])  # not two in a row: no error
    with pytest.raises(RewardError, match="returned None"):
        guarded(prompts=[""], completions=["n"])


def test_a_hub_id_string_offline_is_refused_with_the_way_out(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RewardError, match="reward_model"):
        guard(["some-org/some-reward-model"])
    with pytest.raises(RewardError, match="neither"):
        guard(["not a model"])


def test_guard_passes_local_reward_model_directories_to_trl(tmp_path):
    assert guard([str(tmp_path)]) == [str(tmp_path)]


def test_a_choice_is_picked_where_the_reply_sets_it_against_the_others():
    """Replies of the base model to a which-is-larger file: several offered numbers named in a sentence are a pick
    only where words between them set the first against the rest ('than', 'not', ...); a sum, a list or a contrast
    picks none, where naming one first was paid at chance."""
    offered = ["79", "57"]
    assert is_correct("79 is larger than 57.", "79", choices=offered)
    assert is_correct("The larger is 79, not 57.", "79", choices=offered)
    assert not is_correct("When you add them together, you get 79 + 57 = 136.", "79", choices=offered)
    assert not is_correct("The GCD of 79 and 57 is 1.", "79", choices=offered)
    things = ["car", "chair"]
    assert not is_correct("A car is a vehicle, while a chair is a piece of furniture.", "car", choices=things)
    assert is_correct("A car is bigger than a chair.", "car", choices=things)


def test_a_sentence_that_names_the_choices_without_picking_leaves_the_pick_to_the_one_before():
    """Held-out replies of a which-is-bigger file and a which-is-larger file picked in one sentence and went on to name
    both choices in a later one that picks neither; the last sentence alone read them as no pick."""
    question = "Which is bigger, a coin or the earth?"
    earth = "The Earth is the larger of the two. The Earth is 4.5 billion years old, while a coin is new."
    assert is_correct(earth, "the earth", prompt=question, choices=["a coin", "the earth"])
    numbers = "The number 90 is larger than the number 78. This is because 90 is a multiple of 78, which is 100."
    assert is_correct(numbers, "90", choices=["78", "90"])
    assert not is_correct("I like 78. 90 and 78 are numbers.", "90", choices=["78", "90"])  # the pick before is 78
    assert not is_correct("Let me compare 90 and 78. 90 + 78 = 168.", "90", choices=["78", "90"])  # none picks


def test_a_pick_said_the_other_way_round_answers_with_the_other_choice():
    """A held-out reply to a which-is-larger file, 'The smaller number is 86, which is 86.', was paid as picking 86:
    a comparison opposite to the question's picks the other of two choices, none of three; 'not larger' compares as
    'smaller', and both directions at once flip nothing."""
    larger = "Which number is larger, 86 or 79?"
    pair = ["86", "79"]
    assert not is_correct("The smaller number is 86, which is 86.", "86", prompt=larger, choices=pair)
    assert is_correct("79 is less than 86.", "86", prompt=larger, choices=pair)
    assert is_correct("86 is not smaller than 79.", "86", prompt=larger, choices=pair)
    assert is_correct("79 is not larger than 86.", "86", prompt=larger, choices=pair)
    assert is_correct("79 is not the larger number, 86 is.", "86", prompt=larger, choices=pair)
    assert is_correct("86 is larger than 79, and 79 is smaller.", "86", prompt=larger, choices=pair)
    assert is_correct("The smaller number is 86.", "86", choices=pair)  # no question: nothing to compare against
    smallest = "Which is the smallest: 19, 82 or 90?"
    assert not is_correct("82 is larger than 19.", "19", prompt=smallest, choices=["19", "82", "90"])
    yes_no = "Is 36 smaller than 74? Reply yes or no."  # the numbers compared are not the choices
    assert not is_correct("No, 36 is larger than 74.", "yes", prompt=yes_no, choices=["yes", "no"])
    heavier = "Which is heavier, a brick or a feather?"
    assert is_correct("A feather is lighter than a brick.", "brick", prompt=heavier, choices=["brick", "feather"])


def test_a_reply_that_only_mentions_the_word_answer_marks_none():
    """'To find the answer, we ...' marks no answer: its last sentence is read, as for any reply."""
    assert is_correct("To find the answer, we compare 24 and 56. The larger number is 56.", "56", choices=["24", "56"])
    assert is_correct("To find the answer, think of heat. The opposite of hot is cold.", "cold")
    assert not is_correct("To find the answer, think: is it cold? It is warm.", "cold")  # was read from 'answer' on
    assert is_correct("The answer is: cold.", "cold") and is_correct("I answered it. Answer: cold", "cold")


def test_a_contrast_picks_the_choice_it_says_the_asked_thing_of():
    """Base replies to a held-back category file: 'X is a tool, while Y is an instrument.' answers 'Which of these is
    a tool?'; a contrast that says nothing asked ('a car is a vehicle, while ...' for 'Which is bigger?') picks none."""
    tool = "Which of these is a tool: violin, pliers or bus?"
    assert is_correct("The pliers are a tool, while the violin is a musical instrument.", "pliers", prompt=tool,
                      choices=["violin", "pliers", "bus"])
    assert not is_correct("The violin is an instrument, while the bus is a vehicle.", "pliers", prompt=tool,
                          choices=["violin", "pliers", "bus"])
    vehicle = "Which of these is a vehicle: lion, bicycle or cup?"
    assert is_correct("A lion is a creature of the wild, while a bicycle is a vehicle.", "bicycle", prompt=vehicle,
                      choices=["lion", "bicycle", "cup"])
    bigger = "Which is bigger, a car or a chair?"
    assert not is_correct("A car is a vehicle, while a chair is furniture.", "car", prompt=bigger,
                          choices=["car", "chair"])


def test_a_choice_is_named_in_the_singular_or_the_plural():
    """Held-out replies of a which-is-bigger run: *Ants are much more agile and can run faster than the giraffe.* named
    the giraffe alone and was read as picking it; 'frogs' in a contrast went unseen."""
    ant = "Which is smaller, an ant or a giraffe?"
    reply = "The ant is a much smaller creature compared to the giraffe. Ants are much more agile and can run faster " \
            "than the giraffe."
    assert is_correct(reply, "ant", prompt=ant, choices=["ant", "giraffe"])
    assert not is_correct(reply, "giraffe", prompt=ant, choices=["ant", "giraffe"])
    frog = "Which is smaller, an elephant or a frog?"
    contrast = "Elephants are massive and can weigh up to 5 tons, while frogs are much smaller."
    assert is_correct(contrast, "frog", prompt=frog, choices=["elephant", "frog"])
    assert is_correct("Mice are smaller than geese.", "mouse", prompt="Which is smaller, a goose or a mouse?",
                      choices=["goose", "mouse"])
    assert {"a flies", "a fly"} <= either_number("a fly") and "leaves" in either_number("leaf")
    assert "fox" in either_number("foxes") and "child" in either_number("children")
    assert "jam" not in either_number("James")


def test_a_sentence_that_names_one_choice_after_than_or_compares_nothing_picks_none():
    """Rambles of the base model on a which-is-larger file and a which-is-bigger file: *... the largest number that is
    exactly 10 units larger than 92.* was read as picking 92, *Rabbits, on the other hand, belong to the Leporidae
    family.* as picking the rabbit. A sentence naming one choice picks it where it compares, calls it the answer or
    says little else."""
    larger = "Which number is larger, 92 or 18?"
    ramble = "We need the largest number that is exactly 10 units larger than 92."
    assert not is_correct(ramble, "92", prompt=larger, choices=["92", "18"])
    assert not is_correct(ramble, "18", prompt=larger, choices=["92", "18"])
    assert not is_correct("The number 92 is a prime number.", "92", prompt=larger, choices=["92", "18"])
    assert is_correct("92 is the larger.", "92", prompt=larger, choices=["92", "18"])
    assert is_correct("92.", "92", prompt=larger, choices=["92", "18"])
    smaller = "Which is smaller, a bear or a rabbit?"
    family = "Bears live in the forests of the north. Rabbits, on the other hand, belong to the Leporidae family."
    assert not is_correct(family, "rabbit", prompt=smaller, choices=["bear", "rabbit"])
    assert is_correct("It is the rabbit.", "rabbit", prompt=smaller, choices=["bear", "rabbit"])
    assert is_correct("Rabbits are tiny.", "rabbit", prompt=smaller, choices=["bear", "rabbit"])
    assert is_correct("Bears are much bigger.", "rabbit", prompt=smaller, choices=["bear", "rabbit"])  # the other way
    assert is_correct("So, the answer to your question is: rabbits.", "rabbit", prompt=smaller,
                      choices=["bear", "rabbit"])
    odd = "Which word does not belong: cat, dog, plum, horse?"  # no comparison asked: a sentence naming one picks it
    assert is_correct("Plums grow on trees, unlike the others.", "plum", prompt=odd,
                      choices=["cat", "dog", "plum", "horse"])


def test_a_contrast_in_plain_words_picks_by_the_direction_asked():
    """*Snails are incredibly small and delicate, while a ship is a massive and complex machine.*: the base model's
    reply to a which-is-bigger file says the comparison in plain words, not the question's 'bigger'."""
    reply = "Snails are incredibly small and delicate, while a ship is a massive and complex machine."
    assert is_correct(reply, "ship", prompt="Which is bigger, a snail or a ship?", choices=["snail", "ship"])
    assert is_correct(reply, "snail", prompt="Which is smaller, a snail or a ship?", choices=["snail", "ship"])
    assert not is_correct("A car is a fast vehicle, while a chair is furniture.", "car",
                          prompt="Which is bigger, a car or a chair?", choices=["car", "chair"])  # speed, not size
    assert picked_choice("Snails are small, while ships are small too.", ["snail", "ship"],
                         "Which is bigger, a snail or a ship?") is None


def test_the_last_marked_answer_is_the_answer():
    """'The answer is 5 PM. Sorry, the answer is 6 PM.' answers 6 PM: the first mark swallowed the second. A choice is
    read in the marked sentence alone: an animal-or-colour reply went on past its mark to name the other label."""
    red = ('The answer is: "Red" is a color. It is a fundamental color that exists on the spectrum of colors, but it '
           'is not an animal.')
    assert picked_choice(red, ["animal", "colour"], "Is 'red' an animal or a colour?") == "colour"
    assert is_correct("The answer is 5 PM. Sorry, the answer is 6 PM.", "6 PM")
    assert not is_correct("The answer is 5 PM. Sorry, the answer is 6 PM.", "5 PM")
    reply = "The answer is a truck. A mouse is small and a truck is large. So, the answer is a mouse."
    assert is_correct(reply, "mouse", prompt="Which is smaller, a truck or a mouse?", choices=["truck", "mouse"])


@pytest.mark.parametrize("question,choices,reply,pick", [
    ("Which number is larger, 92 or 18?", ["92", "18"], "The answer is 92. I hope this answer is helpful.", "92"),
    ("Which is older, New York or Rome?", ["New York", "Rome"], "The answer is New York.", "New York"),
    ("Which is heavier, a light bulb or a bowling ball?", ["light bulb", "bowling ball"], "A light bulb.",
     "light bulb"),
    ("Which is longer, a river or a pencil?", ["river", "pencil"], "In short, a river.", "river"),
    ("Which is bigger, a snail or a ship?", ["snail", "ship"], "Snails can live up to 15 years old.", None),
    ("Which is smaller, a bear or a rabbit?", ["bear", "rabbit"], "Bears have been around a long time in the north.",
     None),
    ("Which is bigger, a snail or a ship?", ["snail", "ship"], "To answer this, consider the snail and its shell.",
     None),
    ("Which number is larger, 92 or 18?", ["92", "18"], "Let me see.\n92", "92"),
    ("Which is bigger, a snail or a ship?", ["snail", "ship"], "I think it's the ship.", "ship"),
    ("Which is the biggest: a cat, a dog or a whale?", ["cat", "dog", "whale"],
     "Cats are tiny, while whales are massive.", "whale"),
    ("Which is faster, a fly or a plane?", ["fly", "plane"], "A plane flies faster than a fly.", "plane"),
    ("Which is the least like the others: cat, dog, plum, horse?", ["cat", "dog", "plum", "horse"],
     "Plum is a fruit, unlike the others.", "plum"),
    ("Which is bigger, a giraffe or an ant?", ["giraffe", "ant"], "The giraffe is much taller than the ant.",
     "giraffe"),
    ("Which is bigger, a lion or a pea?", ["lion", "pea"],
     "Lions are also more active and social animals, whereas peahogs are smaller and more agile.", None),
    ("Which is bigger, a snail or a ship?", ["snail", "ship"], "A ship is bigger. Snails are slow.", "ship"),
    ("Which is smaller, a pea or a train?", ["pea", "train"], "A train is longer than a pea.", "pea"),
    ("Which is smaller, a pea or a train?", ["pea", "train"],
     "A train is much larger than a pea, so the pea is smaller.", "pea"),
    ("Which is smaller, a pea or a train?", ["pea", "train"], "Trains can be longer than a mile, but a pea is small.",
     "pea"),
    ("Which is colder, ice or steam?", ["ice", "steam"],
     "Ice is at 0 degrees while steam is at 100 degrees, so ice is colder.", "ice"),
    ("Which is bigger, a snail or a ship?", ["snail", "ship"], "I am not sure whether a snail or a ship is bigger.",
     None),
    ("Which is bigger, a snail or a ship?", ["snail", "ship"], "Sure! The ship, of course.", "ship"),
    ("Which is smaller, a bear or a rabbit?", ["bear", "rabbit"], "Bears are huge.", "rabbit"),
    ("Which is bigger, a lion or a pea?", ["lion", "pea"], "The lion is smaller, whereas the elephant is huge.", "pea"),
    # base replies to a held-back heavier-or-lighter file
    ("Which is heavier, a brick or a feather?", ["brick", "feather"], "A brick weighs much more than a feather.",
     "brick"),
    ("Which is smaller, 79 or 57?", ["79", "57"], "79 is more than 57.", "57"),
    ("Which is bigger, an elephant or a kitten?", ["elephant", "kitten"],
     "Elephants are more intelligent than kittens.", None),
    ("Which is lighter, a pencil or a truck?", ["pencil", "truck"],
     "The answer is a classic lateral thinking puzzle. A pencil is indeed lighter than a truck.", "pencil"),
    ("Which number is larger, 92 or 85?", ["92", "85"], "Since 92 is larger than 85, the answer is 9.", None),
    ("Which is lighter, a coin or a bear?", ["coin", "bear"],
     "It goes like this: a coin is either lighter or heavier than a bear.", None),
    ("Which is bigger, a snail or an elephant?", ["snail", "elephant"],
     "Elephants are massive land animals that are much larger than the smallest snails.", "elephant"),
    ("Which is heavier, an ant or an elephant?", ["ant", "elephant"],
     "An ant is a type of small ant, whereas an elephant is a large, massive creature.", "elephant"),
    ("Which is faster, a plane or a turtle?", ["plane", "turtle"],
     'The statement "a plane is faster than a turtle" is an example of the "ad hominem" fallacy.', None),
    ("Which is bigger, a lion or a pea?", ["lion", "pea"],
     'The answer is a mathematical concept.\n\nIn logic, the answer to the question "Which is bigger, a lion or', None),
    ("Which is bigger, a ship or a grape?", ["ship", "grape"], 'The answer is "the ship".', "ship"),
    # a trained heavier-or-lighter run: a stated comparison is the answer, a description after it does not overturn it
    ("Which is heavier, a bus or a spoon?", ["bus", "spoon"],
     "A spoon is a heavier than a bus. A bus is a larger, heavier vehicle that can carry more people.", None),
    ("Which is lighter, a horse or a stamp?", ["horse", "stamp"],
     "A horse is a lighter-weight horse than a stamp. A stamp is a small, flat piece of metal.", "horse"),
    ("Which is lighter, a sock or a bus?", ["sock", "bus"], "A sock is a lighter item than a bus. Socks are soft.",
     "sock"),
    ("Which is bigger, a snail or a ship?", ["snail", "ship"], "Snails are slow. Ships are huge.", "ship"),
    ("Which is smaller, an ant or a giraffe?", ["ant", "giraffe"],
     "The ant is a much smaller creature than the giraffe. Ants are typically much larger than giraffes.", None),
    ("Which number is larger, 80 or 23?", ["80", "23"],
     "The positive number is 80, which is the answer.\n\nThe negative number is 23, which is the answer.", None),
    # a review's cases: a question states nothing, 'less heavy' is 'lighter', 'more or less' is a hedge, a quoted
    # answer after a mark stands, the mark is read where it stands, a system line's question is a question too
    ("Which is heavier, a bus or a spoon?", ["bus", "spoon"], "Is a bus heavier than a spoon? No, a spoon is heavier.",
     "spoon"),
    ("Which is lighter, a feather or a brick?", ["feather", "brick"], "A brick is less heavy than a feather.",
     "brick"),
    ("Which is lighter, a feather or a brick?", ["feather", "brick"], "A feather has less weight than a brick.",
     "feather"),
    ("Which is heavier, a bus or a spoon?", ["bus", "spoon"], "A spoon weighs more or less than a bus.", None),
    ("Which is heavier, a bus or a spoon?", ["bus", "spoon"], 'The answer is "A bus is heavier than a spoon."', "bus"),
    ("Which is heavier, a bus or a spoon?", ["bus", "spoon"], "The answer is heavier.\nThe bus is heavier.", "bus"),
    ("Which is heavier, a bus or a spoon?", ["bus", "spoon"],
     "A bus is heavier than a spoon, whether it is big or small.", "bus"),
    ("Answer in one sentence.\nWhich is bigger, a lion or a mouse?", ["lion", "mouse"],
     'Let me find the answer to the question "Which is bigger, a lion or', None),
    # a second review: a reason after the pick is not the pick, 'as cold as' and 'gets warmer' compare nothing, a
    # comparison with a third thing states nothing, a denial covers the alternative listed after it
    ("Which is hotter, an ice cube or a toaster?", ["ice cube", "toaster"],
     "A toaster is much colder than an ice cube because an ice cube is hot.", "ice cube"),
    ("Which is faster, a snail or a cheetah?", ["snail", "cheetah"],
     "A snail is much slower than a cheetah, which is the fastest land animal.", "cheetah"),
    ("Which is faster, a snail or a cheetah?", ["snail", "cheetah"], "The snail, because cheetahs are fast.", "snail"),
    ("Which number is larger, 62 or 44?", ["62", "44"], "62 is larger because 44 is smaller.", "62"),
    ("Which is colder, an oven or a snowman?", ["oven", "snowman"], "An oven is as cold as a snowman.", None),
    ("Which is bigger, a tree or a coin?", ["tree", "coin"], "A coin is twice as large as a tree.", "coin"),
    ("Which is colder, an oven or a snowman?", ["oven", "snowman"],
     "A snowman is colder than an oven. The snowman melts when it gets warmer.", "snowman"),
    ("Which is faster, a jet or a koala?", ["jet", "koala"],
     "A jet is faster than a koala. Koalas can run faster than you think.", "jet"),
    ("Is 'violet' an animal or a colour?", ["animal", "colour"], "Violet is a flower, not an animal or a colour.",
     None),
    ("Which is smaller, 95 or 70?", ["95", "70"], "The larger is 95, not 70.", "70"),
    ("Is 'owl' an animal or a colour?", ["animal", "colour"],
     'The word "owl" is a noun, referring to a specific animal. It\'s not a color.', "animal"),
    ("Is 'lilac' an animal or a colour?", ["animal", "colour"], "The answer is neither a colour nor an animal.", None),
])
def test_a_choice_reply_is_read_as_its_words_say(question, choices, reply, pick):
    """Replies a review wrote against the choice rule: a choice's own words ('New York', 'a light bulb') compare
    nothing, an idiom ('in short', 'a long time') compares nothing, a comparison of another kind ('years old' for
    'bigger') answers nothing, a short last line is an answer, a later 'this answer is' marks none, a verb ('flies')
    is no plural where the choice is named as given, and a comparison said of another thing in a contrast ('whereas
    peahogs are smaller', a trained which-is-bigger reply) does not turn the pick round; 'more' and 'less' compare as
    amounts only, a mark that names no choice is a frame the reply goes on from, 'lighter or heavier' is a hedge, and
    what a reply quotes (the question, a statement it calls a fallacy) is mentioned, not said."""
    assert picked_choice(reply, choices, question) == pick
