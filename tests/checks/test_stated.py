"""The constraints a text states in so many words (checks/stated.py): what the host adopts as
PREPARE's floor and the offline model prepares from."""

from __future__ import annotations

import pytest

from aeonloop.checks.running import run_check
from aeonloop.checks.stated import (
    SHORT_ASK_WORDS,
    TITLE_PATTERN,
    line_form,
    one_short_ask,
    stated_checks,
    stated_constraints,
)
from aeonloop.checks.types import parse_check


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("List three fruits as three bullet points.", [("bullets", "count", 3, 3)]),
        ("Answer in one sentence.", [("sentences", "count", 1, 1)]),
        ("Explain it in under 100 words.", [("words", "count", None, 99)]),
        ("The answer names Mars.", [("mentions-mars", "phrase_count", 1, None)]),
        ("It must include Lisbon twice.", [("mentions-lisbon", "phrase_count", 2, None)]),
        ('Mention "Darjeeling".', [("mentions-darjeeling", "phrase_count", 1, None)]),
        ("Name two planets.", []),  # "two" is no name: nothing to check
        ("Explain how tides work.", []),
    ],
)
def test_what_a_text_states(text: str, expected: list[tuple]) -> None:
    found = [
        (name, check["type"], check.get("min"), check.get("max"))
        for name, _, check in stated_constraints(text)
    ]
    assert found == expected


def test_a_rule_in_words_keeps_its_id_and_the_request_gets_its_own() -> None:
    checks = stated_checks("Name two planets in one sentence.", "- mars: The answer names Mars.")
    assert [(c["rule_id"], c["description"]) for c in checks] == [
        ("mars", "mentions Mars"),
        ("request.sentences", "exactly 1 sentence"),
    ]


@pytest.mark.parametrize(
    ("request_text", "short"),
    [
        ("What is the capital of France?", True),
        ("List three fruits as bullet points, in lower case, and write nothing else.", True),
        ("What is 2.5 times 3?", True),  # a decimal point ends no sentence
        ("Explain how photosynthesis works, then rewrite it for a 10-year-old", False),
        ("Name two planets. Then say which is bigger.", False),
        ("Compare the two; say which is cheaper.", False),
        ("Summarise this:\nthe report's findings", False),
        (" ".join(["word"] * (SHORT_ASK_WORDS + 1)), False),
        ("   ", False),
    ],
)
def test_one_short_ask(request_text: str, short: bool) -> None:
    assert one_short_ask(request_text) is short


@pytest.mark.parametrize(
    ("rule", "phrase"),
    [
        ("Mention gravity.", "gravity"),
        ("Mention carbon dioxide.", "carbon dioxide"),
        ("Use the word wavelength.", "wavelength"),
        ("name the moon", "moon"),
        ("Name the Moon as a cause.", None),  # more than a thing to mention
        ("Name two planets.", None),  # any two: no phrase to find
        ("Use bullet points.", None),  # a form, not a word to use
        ("Include examples.", None),
        ("Mention the history of tides and their causes at length.", None),
    ],
)
def test_a_rule_in_words_that_only_says_mention_x(rule: str, phrase: str | None) -> None:
    """Issue 32's harness: "Mention gravity." went unchecked when the model prepared nothing,
    since the request's reading wants a capital or quotes."""
    checks = stated_checks("Explain tides.", f"- r: {rule}")
    assert [c["check"]["phrase"] for c in checks] == ([phrase] if phrase else [])


@pytest.mark.parametrize(
    ("rule", "holds", "fails"),
    [
        ("Mention leaves or autumn.", "Red Leaves fall.", "The trees are bare."),
        ("Name screens, light or caffeine.", "Avoid caffeine late.", "Sleep early."),
        ("Mention walking or exercise needs.", "Dogs need walking.", "Dogs need exercise."),
        ("Say Canberra.", "It is Canberra.", "It is Sydney."),
        ("Give 'bonjour'.", "Bonjour !", "Salut."),
        ("Give 'Answer: 80 km/h'.", "So: Answer: 80 km/h", "Answer: 80"),
        ("A line starting 'Pro:'.", "Remote work\n- **Pro:** no commute", "Pros: no commute"),
        ("A line starting '1.'.", "Tips:\n1. Sleep early", "Tip 1. Sleep early"),
        ("A last line starting 'Summary:'.", "Text.\nSummary: done\n", "Summary: x\nMore."),
        ("First line is 'The Painter'.", "# The Painter\nOnce upon", "The Painter went out"),
        ("A 'For' heading line.", "Intro.\n**FOR**\nSafer.", "For: safer."),
        ("Heading 'Against'.", "## Against\nCost.", "Against them: cost."),
        ("Contains z.", "A Zebra.", "A horse."),  # a letter anywhere, in any case
        ("Has the letter q.", "quick", "fast"),
        ('Has "name": "Ada".', '{"name" : "Ada"}', '{"name": "Adam"}'),
        ('Has "age": 36.', '{"age":36}', '{"age": 36.5}'),
        ("100 °C.", "It boils at 100°C.", "It boils at 1100 °C."),
        ("212 °F.", "or 212 degrees... 212 °F", "or 212 degrees Fahrenheit"),
        ("Say 5000 metres.", "That is 5,000 metres.", "That is 500 metres."),
        ("Say 3.11 miles.", "About 3.11 Miles.", "About 3.1 miles."),
        ("Central Processing Unit.", "The central processing unit.", "The processor."),
        ("Answer: 8.", "Answer: 8", "Answer: 80"),
        ("SELECT * FROM users.", "select *\nfrom users;", "SELECT name FROM users"),
        ("WHERE age > 30.", "WHERE age>30;", "WHERE age > 3;"),
        (
            "Mercury before Venus before Earth.",
            "mercury, then Venus, Earth",
            "Venus, Mercury, Earth",
        ),
        (
            "Jupiter, Saturn and Uranus in order.",
            "Jupiter; Saturn; Uranus",
            "Saturn, Jupiter, Uranus",
        ),
        ("Contains 2, 3, 5, 7 in order.", "2, 3, 5, and 7", "2, 3, 7, 5, 25"),
    ],
)
def test_a_rule_in_words_that_says_nothing_else_is_read_and_run(
    rule: str, holds: str, fails: str
) -> None:
    """Rules in words as people write them (the harness's cases held 30 of 93 the host read;
    these forms bring it to 68 with lines counted): one of several words, a name or quoted text
    to say, a line's opening, a heading, a quantity, a capitalised name, a label and its number,
    a line of code, a letter, a JSON member, things in order. Each check is run on a text that
    holds it and one that does not."""
    (check,) = [c["check"] for c in stated_checks("Explain it.", f"- r: {rule}")]
    made = parse_check(check)
    assert run_check(made, holds).held, (check, holds)
    assert not run_check(made, fails).held, (check, fails)


@pytest.mark.parametrize(
    "rule",
    [
        "Name one or two causes.",  # a count: any causes, not the words
        "Mention the cause or the effect at length.",  # more than names
        "Name a fruit or a vegetable.",  # any fruit
        "Say light cannot escape.",  # a claim, in words the answer may choose
        "Say something kind.",
        "Use Markdown.",  # a form, not a word to use
        "Contains zinc.",  # a word to contain: not a letter, nor a name
        'Has "name".',  # a key without its value: any value, not a literal
        "A line starting with a verb.",  # nothing quoted to start with
        "A heading line.",  # nothing quoted to head with
        "Say that most places get two high tides a day.",
        "Say 2 things.",  # a count of things, not a measure
        "JSON only.",  # a form, not code
        "Not Pluto.",  # a negation, not a name
        "No Third Tip.",
        "Use Markdown Tables.",  # an instruction
        "Saturday.",  # one word: a name, or a form ("Markdown.")
        "Exactly HELLO.",
        "A separator row.",
        "Note: be brief.",  # a label with words, not a number
        "Breakfast before lunch.",  # not names
        "List the steps in order.",  # nothing named to put in order
        "Put A before B.",  # an instruction
        "mercury before venus.",  # not capitalised: not read as names
    ],
)
def test_near_misses_of_a_rule_that_says_nothing_else(rule: str) -> None:
    assert stated_checks("Explain it.", f"- r: {rule}") == []


#: A request stating every form the host reads, and an answer that meets each of them.
EVERY_FORM = (
    'Start with "Yes" and end with "Done". List three bullet points in lower case, under 40 words, '
    'mention "tea" twice, and avoid the word "coffee". Give it as JSON.'
)


def test_every_check_the_host_reads_is_one_it_runs() -> None:
    """What the host reads is parsed as any prepared check is, and run: a form the reader writes
    and the vocabulary refuses (a field renamed, a unit gone) fails here, not in a run."""
    stated = stated_constraints(EVERY_FORM)
    assert {check["type"] for _, _, check in stated} == {
        "starts_with",
        "ends_with",
        "count",
        "case",
        "phrase_count",
        "forbidden_words",
        "json",
    }
    for _, said, check in stated:
        made = parse_check(check)
        assert run_check(made, "").details, said


def checks_of(text: str) -> list[dict]:
    return [check for _, _, check in stated_constraints(text)]


def count(unit: str, low: int | None, high: int | None) -> dict:
    return {"type": "count", "unit": unit, "min": low, "max": high}


def mentions(phrase: str, low: int = 1, high: int | None = None) -> dict:
    return {"type": "phrase_count", "phrase": phrase, "min": low, "max": high}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # counts stated apart from their unit (issue 40)
        ("List three benefits of exercise as a bulleted list", [count("bullets", 3, 3)]),
        ("Give me 4 tips in a numbered list.", [count("numbered_items", 4, 4)]),
        ("Write a bulleted list of three items about tea.", [count("bullets", 3, 3)]),
        ("Use at least 3 bullet points.", [count("bullets", 3, None)]),
        # paragraphs, sentences, words, placeholders
        ("There should be 3 paragraphs. Separate them with ***", [count("paragraphs", 3, 3)]),
        ("Answer in two paragraphs.", [count("paragraphs", 2, 2)]),
        ("Write a haiku in exactly three lines.", [count("lines", 3, 3)]),
        (
            "Give one pro and one con, with lines starting 'Pro:' and 'Con:'.",
            [
                {"type": "pattern", "pattern": "^[^\\w\\n]*Pro:"},
                {"type": "pattern", "pattern": "^[^\\w\\n]*Con:"},
            ],
        ),
        (
            "Explain it. End with a line 'Summary: ' followed by one sentence.",
            [{"type": "pattern", "pattern": "^[^\\w\\n]*Summary:[^\\n]*\\s*\\Z"}],
        ),
        (
            "Write a poem. Give it the title 'The Painter' on the first line.",
            [{"type": "pattern", "pattern": "\\A\\s*[^\\w\\n]*The Painter[^\\w\\n]*$"}],
        ),
        (
            "Give one argument for and one against, under headings 'For' and 'Against'.",
            [
                {"type": "pattern", "pattern": "^[^\\w\\n]*(?i:For)[^\\w\\n]*$"},
                {"type": "pattern", "pattern": "^[^\\w\\n]*(?i:Against)[^\\w\\n]*$"},
            ],
        ),
        (
            "Give a JSON object for Ada. Reply with the JSON only.",
            [{"type": "json", "json_schema": None}],
        ),
        ("Exactly three lines.", [count("lines", 3, 3)]),
        ("Write a poem of 4 lines.", [count("lines", 4, 4)]),
        ("Write a three-sentence summary.", [count("sentences", 3, 3)]),
        ("Your response should contain less than 5 sentences.", [count("sentences", None, 4)]),
        ("Answer with at least 300 words.", [count("words", 300, None)]),
        ("Use more than 2 paragraphs.", [count("paragraphs", 3, None)]),
        ("Answer in between 3 and 5 sentences.", [count("sentences", 3, 5)]),
        ("Use 3-5 bullet points.", [count("bullets", 3, 5)]),
        ("Write 5 sentences or fewer.", [count("sentences", None, 5)]),
        ("Answer in 50 words or more.", [count("words", 50, None)]),
        (
            "Include at least 2 placeholders in square brackets, such as [address].",
            [count("placeholders", 2, None)],
        ),
        (
            "Highlight at least 2 sections in your answer with markdown, i.e. *highlighted "
            "section*.",
            [count("highlights", 2, None)],
        ),
        ("Include at least 3 highlighted sections.", [count("highlights", 3, None)]),
        (
            "Your response must have 3 sections. Mark the beginning of each section with "
            "SECTION X.",
            [{**mentions("SECTION", 3), "case_sensitive": True}],
        ),
        # case
        ("Answer in all capital letters.", [{"type": "case", "case": "upper"}]),
        ("Respond using only lowercase letters.", [{"type": "case", "case": "lower"}]),
        ("Your answer should be written in lower case.", [{"type": "case", "case": "lower"}]),
        ("No capital letters are allowed.", [{"type": "case", "case": "lower"}]),
        # wrapping, edges, postscript, title
        (
            "Wrap your entire response with double quotation marks.",
            [{"type": "starts_with", "text": '"'}, {"type": "ends_with", "text": '"'}],
        ),
        (
            "End your answer with 'Is there anything else?'",
            [{"type": "ends_with", "text": "Is there anything else?"}],
        ),
        (
            "Finish your response with this exact phrase Any other questions?. No other words "
            "should follow this phrase.",
            [{"type": "ends_with", "text": "Any other questions?"}],
        ),
        (
            "At the end of your response, please explicitly add a postscript starting with P.S.",
            [{"type": "pattern", "pattern": r"^\s*P\.\s?S\.", "case_sensitive": False}],
        ),
        (
            "Your answer must contain a title, wrapped in double angular brackets, such as "
            "<<poem of joy>>.",
            [{"type": "pattern", "pattern": "<<[^\\n<>]+>>"}],
        ),
        # keywords, letters, commas, JSON, language, options
        ("Include keywords cat, dog in the response.", [mentions("cat"), mentions("dog")]),
        ("Use the words 'ember' and 'ash'.", [mentions("ember"), mentions("ash")]),
        (
            "Do not include keywords sun, moon in the response.",
            [{"type": "forbidden_words", "words": ["sun", "moon"]}],
        ),
        (
            "Avoid the words 'very' and 'really'.",
            [{"type": "forbidden_words", "words": ["very", "really"]}],
        ),
        ("Do not include the word 'fun'.", [{"type": "forbidden_words", "words": ["fun"]}]),
        ("The word banana should appear less than 2 times.", [mentions("banana", 0, 1)]),
        (
            "In your response, the letter q should appear at least 3 times.",
            [{**mentions("q", 3), "whole_word": False}],
        ),
        (
            "In your entire response, refrain from the use of any commas.",
            [{"type": "pattern", "pattern": ",", "present": False}],
        ),
        ("Use no commas.", [{"type": "pattern", "pattern": ",", "present": False}]),
        (
            "You are not allowed to use any commas in your response.",
            [{"type": "pattern", "pattern": ",", "present": False}],
        ),
        (
            "The resume should not contain any commas.",
            [{"type": "pattern", "pattern": ",", "present": False}],
        ),
        (
            "Do not use any commas and highlight at least 3 sections.",
            [{"type": "pattern", "pattern": ",", "present": False}, count("highlights", 3, None)],
        ),
        (
            'Write a haiku containing keywords "mom" and "mother" in your response.',
            [mentions("mom"), mentions("mother")],
        ),
        ("Make sure your entire response is in lowercase.", [{"type": "case", "case": "lower"}]),
        (
            "Write a letter in all lowercase letters ask them to vote.",
            [{"type": "case", "case": "lower"}],
        ),
        ("Please list 4 reasons to learn Python in bullet points.", [count("bullets", 4, 4)]),
        (
            "Can you list three benefits of exercise as a bulleted list?",
            [count("bullets", 3, 3)],
        ),
        (
            "Entire output should be wrapped in JSON format.",
            [{"type": "json", "json_schema": None}],
        ),
        ("Answer in JSON only.", [{"type": "json", "json_schema": None}]),
        (
            "Your ENTIRE response should be in French language, no other language is allowed.",
            [{"type": "language", "code": "fr"}],
        ),
        ("Respond in German.", [{"type": "language", "code": "de"}]),
        ("Can you answer in French?", [{"type": "language", "code": "fr"}]),  # a polite request
        ("What is the capital of France, in lower case?", [{"type": "case", "case": "lower"}]),
        (  # a question, and how to answer it
            "What are the benefits of exercise, in three bullet points?",
            [count("bullets", 3, 3)],
        ),
        (
            "Answer with one of the following options: ('My answer is yes.', 'My answer is no.')",
            [{"type": "pattern", "pattern": r"My\ answer\ is\ yes\.|My\ answer\ is\ no\."}],
        ),
    ],
)
def test_each_phrasing_the_host_reads(text: str, expected: list[dict]) -> None:
    found = checks_of(text)
    assert found == expected
    for check in found:
        parse_check(check)  # every check read is one the host runs


@pytest.mark.parametrize(
    "text",
    [
        # a count that is not a list's length
        "Give three reasons why lists are useful.",
        "List three benefits of exercise.",  # no list kind: bullets or numbers, either holds
        "List three benefits of diet and two of sleep as a bulleted list",
        "List three benefits of diet and exercise as a bulleted list",  # one list or two?
        "Summarise the three paragraphs below.",
        "Explain the three lines below.",
        "Why do lines starting 'Pro:' look odd?",
        "Explain what a line starting with '#' does in Python.",
        "Why end with a line 'Bye'?",
        "Explain the JSON only format.",
        "Why are two lines parallel?",
        "Explain why two sentences are enough.",
        "Write 100 words about tea.",  # about, or exactly, or at least: not said
        "It takes 2 to 3 words.",
        "Most people read 200 words or more a minute.",
        "A bulleted list of three or more items.",
        "Why highlight two sections?",
        "Give me three highlights of Paris.",
        "Summarise the 3 sections of the report.",
        "Why do people list 3 items in bullet points?",
        "Do not use commas and periods in numbers.",
        "Variable names are written in lowercase letters in Python.",
        "In your response, words with all capital letters should appear less than 4 times.",
        "Words with all capital letters are rare.",
        # case described, not asked
        "Explain why variable names are written in lower case.",
        "Why are emails in lower case?",
        "Write the name in lower case in Python.",
        'What does "in lower case" mean?',
        "Capitals, rivers and mountains of France.",
        # commas described, limited, or quoted
        "Explain why there are no commas in this list.",
        "Do not use commas in numbers like 1000.",
        'Fix this sentence: "Please, use no commas here."',
        # edges of something else
        "Explain why many English words start with 'th'.",
        # JSON as the topic, not the answer's form
        "Explain how data is stored in JSON.",
        "Explain what is in JSON files.",
        "Is this valid JSON?",
        # a language that is not the answer's
        "Answer in French or English.",
        "Translate 'thank you' into Japanese.",
        "Write the word 'cat' in French.",
        "Answer in English.",  # the check could only fail an answer too short to tell
        # titles, postscripts and letters talked about
        "Suggest a title for my essay.",
        "What does P.S. stand for?",
        "Write a PostScript program that draws a circle.",
        # a count of something else, and questions about a form rather than asking for it
        "Write a regex that matches two sentences.",
        "Why do teachers ask for answers in three sentences?",
        "Should emails be written in lower case?",
        "How do I respond in French to 'merci'?",
        "Put the title in quotes.",
        # headings talked about
        "Why do reports have headings?",
        "Explain the heading 'Risks' in my report.",
        "The letter q should appear in the word queen.",
    ],
)
def test_near_misses_the_reader_leaves_alone(text: str) -> None:
    """A wrong check is worse than none: it picks a worse sample, steers a rewrite and repairs
    an answer away from what was asked."""
    assert checks_of(text) == []


def test_a_phrase_stated_again_keeps_its_first_reading_and_both_quote_checks_stay() -> None:
    checks = stated_checks(
        "Wrap your entire response in double quotes. Use three bullet points, not five "
        "bullet points.",
        "",
    )
    assert [(c["rule_id"], c["check"]["type"]) for c in checks] == [
        ("request.quoted", "starts_with"),
        ("request.quoted", "ends_with"),
        ("request.bullets", "count"),
    ]
    assert checks[2]["check"]["min"] == 3


@pytest.mark.parametrize(
    ("made", "form"),
    [
        (stated_checks("Write it. Give it the title 'A.B (c)' on the first line.", ""), "first"),
        (stated_checks("Compare them under headings 'Pros' and 'Cons'.", ""), "heading"),
        (stated_checks("Explain it.", "- r: Heading 'Risk [1]'."), "heading"),
    ],
)
def test_the_host_reads_its_own_line_patterns_back(made: list[dict], form: str) -> None:
    """What checks.repairs reads of a first-line or heading check: the form and the text asked,
    from the pattern alone (a check that came in an event), escapes undone."""
    for check in made:
        where, asked = line_form(check["check"]["pattern"])
        assert where == form and asked in check["description"]


@pytest.mark.parametrize(
    "pattern", [r"^[^\w\n]*Pro:", TITLE_PATTERN, r"\A\s*[^\w\n]*[^\w\n]*$", r"(?i)^\W*for\W*$"]
)
def test_no_line_form_in_a_pattern_the_host_did_not_write(pattern: str) -> None:
    assert line_form(pattern) is None
