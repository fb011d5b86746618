"""The training corpus: the King James Bible from Debian's bible-kjv, split into chapters.

`bible -f Gen1:1-Rev22:21` prints one verse per line as "<abbrev><chapter>:<verse> <text>", in
canonical order. The Book of Revelation is the held-out text: nothing here ever puts it into a
training document (it is returned separately for perplexity and continuation tests).
"""

import re
import subprocess
from dataclasses import dataclass

# The 66 books in the order `bible` prints them; the abbreviations are mapped by that order.
BOOKS = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth", "1 Samuel",
    "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra", "Nehemiah", "Esther", "Job",
    "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon", "Isaiah", "Jeremiah", "Lamentations", "Ezekiel",
    "Daniel", "Hosea", "Joel", "Amos", "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai",
    "Zechariah", "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
    "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "1 Thessalonians",
    "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James", "1 Peter", "2 Peter",
    "1 John", "2 John", "3 John", "Jude", "Revelation",
]
HELD_OUT_BOOK = "Revelation"
VERSE_COUNT = 31102
_LINE = re.compile(r"^(\S+?)(\d+):(\d+) (.*)$")


@dataclass(frozen=True)
class Verse:
    book: str
    chapter: int
    verse: int
    text: str


def read_verses():
    """Every verse of the KJV, in order (needs Debian's bible-kjv and bible-kjv-text)."""
    try:
        out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    except FileNotFoundError as e:
        raise SystemExit("the `bible` command is missing: apt-get install bible-kjv bible-kjv-text") from e
    verses, abbrevs = [], []
    for line in out.splitlines():
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            raise SystemExit(f"unexpected line from `bible`: {line[:80]!r}")
        abbrev, chapter, verse, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).strip()
        if not abbrevs or abbrevs[-1] != abbrev:
            abbrevs.append(abbrev)
        verses.append(Verse(BOOKS[len(abbrevs) - 1], chapter, verse, text))
    if len(verses) != VERSE_COUNT or len(abbrevs) != len(BOOKS):
        raise SystemExit(f"expected {VERSE_COUNT} verses in {len(BOOKS)} books, got {len(verses)} in {len(abbrevs)}")
    return verses


def chapters(verses):
    """[(book, chapter, [verses])] in order."""
    out = []
    for v in verses:
        if not out or out[-1][0] != v.book or out[-1][1] != v.chapter:
            out.append((v.book, v.chapter, []))
        out[-1][2].append(v)
    return out


def chapter_text(book, chapter, verses):
    """A chapter as a training document: a heading line, then one verse per line."""
    return f"{book} {chapter}\n" + "\n".join(v.text for v in verses) + "\n"


def split(verses):
    """(training chapters, held-out chapters): Revelation is held out whole."""
    train, held = [], []
    for book, chapter, vs in chapters(verses):
        (held if book == HELD_OUT_BOOK else train).append((book, chapter, vs))
    return train, held
