"""checks/language.py: the language a text is in, told by script and by common words."""

from __future__ import annotations

import pytest

from aeonloop.checks.language import detect_language
from aeonloop.checks.running import run_check
from aeonloop.checks.types import (
    LanguageCheck,
    parse_check,
)

# ---- language -----------------------------------------------------------------------------------

SAMPLES = {
    "en": "The capital of France is Paris, and it is known for the Eiffel Tower.",
    "fr": "La capitale de la France est Paris, et elle est connue pour la tour Eiffel.",
    "de": "Die Hauptstadt von Frankreich ist Paris, und sie ist für den Eiffelturm bekannt.",
    "es": "La capital de Francia es París, y es conocida por la torre Eiffel en el centro.",
    "it": "La capitale della Francia è Parigi, ed è famosa per la torre Eiffel che non ha pari.",
    "pt": "A capital da França é Paris, e é conhecida pela torre Eiffel e muito mais.",
    "nl": "De hoofdstad van Frankrijk is Parijs, en het is bekend om de Eiffeltoren.",
    "pl": "Stolicą Francji jest Paryż, i jest znana z wieży Eiffla, która jest bardzo wysoka.",
    "tr": "Fransa'nın başkenti Paris ve bu şehir Eyfel Kulesi ile çok ünlü bir yer.",
    "sv": "Huvudstaden i Frankrike är Paris, och den är känd för Eiffeltornet som är högt.",
    "ru": "Столица Франции — Париж, и он известен Эйфелевой башней.",
    "ja": "フランスの首都はパリで、エッフェル塔で知られています。",
    "zh": "法国的首都是巴黎，以埃菲尔铁塔闻名。",
    "ko": "프랑스의 수도는 파리이며 에펠탑으로 유명합니다.",
    "ar": "عاصمة فرنسا هي باريس، وهي مشهورة ببرج إيفل.",
    "hi": "फ्रांस की राजधानी पेरिस है, और यह एफिल टॉवर के लिए प्रसिद्ध है।",
}


@pytest.mark.parametrize("code", sorted(SAMPLES))
def test_language_tells_each_known_language(code: str) -> None:
    assert detect_language(SAMPLES[code]).code == code
    assert run_check(LanguageCheck(code=code), SAMPLES[code]).held
    other = "en" if code != "en" else "fr"
    outcome = run_check(LanguageCheck(code=other), SAMPLES[code])
    assert not outcome.held and outcome.details.startswith("reads as ")


def test_language_too_short_or_unknown_does_not_hold() -> None:
    assert detect_language("Paris.").code is None
    outcome = run_check(LanguageCheck(code="en"), "Paris.")
    assert not outcome.held and "too short to tell" in outcome.details
    assert not run_check(LanguageCheck(code="en"), "").held
    assert not run_check(LanguageCheck(code="en"), "zzq xkcd brrt vvv plo").held
    with pytest.raises(ValueError, match="not one this check can tell"):
        parse_check({"type": "language", "code": "xx"})
