"""The language a text is written in, told without a network or a model (a language check).

By script first: Russian (Cyrillic), Arabic, Hindi (Devanagari), Japanese (any kana), Korean
(Hangul) and Chinese (Han with no kana). Then, among Latin-script texts, by the share of each
known language's commonest words (`_STOPWORDS`): a text of fewer than MIN_WORDS_FOR_LANGUAGE
words, or one in which no profile's common words make MIN_COMMON_SHARE of the words, is not told.
types.LanguageCheck says what this can and cannot tell apart.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import regex

LANGUAGE_NAMES: dict[str, str] = {
    "en": "English",
    "es": "Spanish",
    "fr": "French",
    "de": "German",
    "it": "Italian",
    "pt": "Portuguese",
    "nl": "Dutch",
    "pl": "Polish",
    "tr": "Turkish",
    "sv": "Swedish",
    "ru": "Russian",
    "ar": "Arabic",
    "hi": "Hindi",
    "ja": "Japanese",
    "ko": "Korean",
    "zh": "Chinese",
}
#: The commonest words of each Latin-script language, chosen to overlap little.
_STOPWORDS: dict[str, frozenset[str]] = {
    code: frozenset(words.split())
    for code, words in {
        "en": "the and of to is in that it was for on are with as be at by this have from or "
        "an but not what all were we when your can which their there been has would they will "
        "you he she its our these those than then into",
        "es": "el la los las de que y en un una es por con no para se del al lo como más pero "
        "sus le ya o este esta son entre cuando muy sin sobre también hay donde desde todo "
        "nos durante uno ni contra ese eso",
        "fr": "le la les de des et est un une du en que qui dans pour pas sur au aux ce cette "
        "il elle nous vous ils sont avec plus par ne se mais ou son sa ses été être leur comme "
        "très aussi",
        "de": "der die das und ist nicht ein eine zu den mit von sich des auf für im dem auch "
        "es an als wie noch aber nach bei aus wird sind oder wenn ich sie er wir kann nur über "
        "einer einen",
        "it": "il lo la gli le di che e è un una per non in con del della dei si sono anche "
        "come ma più nel nella al alla questo questa ha gli ci da essere stato loro molto "
        "quando",
        "pt": "o a os as de que e do da dos das em um uma é não para com por se na no mais "
        "mas ao como foi são seu sua também pelo pela isso este esta está muito quando ou",
        "nl": "de het een en van is dat op te in zijn niet met voor die er aan ook als bij "
        "maar om dan nog wel naar door uit worden wordt heeft hebben deze dit zo was",
        "pl": "i w na z się nie do to że jest o jak ale po co tak za od już przez jego jej są "
        "dla czy tym być może tylko ich oraz gdy także bardzo który która które",
        "tr": "ve bir bu da de için ile çok ne daha gibi olan o ama kadar en her ben sen biz "
        "onlar değil mi olarak sonra şey ya veya ise var yok",
        "sv": "och i att det som en på är av för med till den har inte om ett de jag men så "
        "var från eller kan sig vi ska när också efter hur detta alla",
    }.items()
}
#: Fewer words than this and the language is not told (too little to go on).
MIN_WORDS_FOR_LANGUAGE = 4
#: The share of a text's words a profile's common words must make for the text to read as its
#: language: in ordinary prose they make a quarter to a half; in a list of names, almost none.
MIN_COMMON_SHARE = 0.1
_LATIN_WORD = regex.compile(r"\p{Latin}+(?:['’]\p{Latin}+)*")
_SCRIPTS: tuple[tuple[str, regex.Pattern[str]], ...] = (
    ("ko", regex.compile(r"\p{Hangul}")),
    ("ja", regex.compile(r"[\p{Hiragana}\p{Katakana}]")),
    ("zh", regex.compile(r"\p{Han}")),
    ("ar", regex.compile(r"\p{Arabic}")),
    ("hi", regex.compile(r"\p{Devanagari}")),
    ("ru", regex.compile(r"\p{Cyrillic}")),
)


@dataclass(frozen=True)
class LanguageGuess:
    """What `detect_language` made of a text: a code, or None and why not."""

    code: str | None
    reason: str = ""


def describe_language(code: str) -> str:
    return f"{LANGUAGE_NAMES.get(code, code)} ({code})"


def detect_language(text: str) -> LanguageGuess:
    """The text's language, by script and then by its commonest words (LanguageCheck says what
    this can tell apart)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return LanguageGuess(None, "no letters to tell a language by")
    sample = "".join(letters)
    latin = len(regex.findall(r"\p{Latin}", sample))
    if latin * 2 < len(letters):
        for code, script in _SCRIPTS:
            if code == "ja" and script.search(sample):
                return LanguageGuess("ja")
            if code != "ja" and len(script.findall(sample)) * 2 >= len(letters) - latin:
                return LanguageGuess(code)
        return LanguageGuess(None, "a script this check does not know")
    words = [unicodedata.normalize("NFC", w.lower()) for w in _LATIN_WORD.findall(text)]
    if len(words) < MIN_WORDS_FOR_LANGUAGE:
        return LanguageGuess(None, f"too short to tell ({len(words)} word(s))")
    shares = {
        code: sum(1 for w in words if w in common) / len(words)
        for code, common in _STOPWORDS.items()
    }
    best = max(shares, key=lambda code: shares[code])
    if shares[best] < MIN_COMMON_SHARE:
        return LanguageGuess(None, "too few common words of any language it knows")
    return LanguageGuess(best)
