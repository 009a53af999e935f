#!/usr/bin/env python3
"""Checks that the code's specification quotes are word for word what the cited specs say.

The code cites a sentence it implements with a comment block of the form

    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.2.1
    //# An endpoint MUST acknowledge all ack-eliciting Initial and Handshake
    //# packets immediately ...

For every citation of a specification whose text is in ``specs/`` (see its README), the
quoted words must appear, in order, in the cited section (or its subsections). Words are
compared case-insensitively, ignoring punctuation and line breaks, and a cross-reference of
the source text (``{{...}}``, rendered as "Section 17.2" or "[QUIC-TLS]") matches up to
eight quoted words. Citations of texts not in ``specs/`` are counted and listed as not
checked. A citation must be a URL or a title, never a file path outside the repository.

Usage: ``python3 tools/spec_quotes.py [--root DIR] [--list-unchecked]``; exits 1 naming
each quote that does not match.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

#: The specifications in ``specs/``: the name in a citation's URL, and the file.
SPECS = {
    "rfc9000": "rfc9000-quic-transport.md",
    "rfc9001": "rfc9001-quic-tls.md",
    "rfc9002": "rfc9002-quic-recovery.md",
    "rfc9221": "rfc9221-quic-datagram.md",
    "rfc9368": "rfc9368-quic-version-negotiation.md",
    "rfc9369": "rfc9369-quic-v2.md",
    "draft-ietf-quic-multipath": "draft-ietf-quic-multipath.md",
    "draft-ietf-quic-qlog-main-schema": "draft-ietf-quic-qlog-main-schema.md",
    "draft-ietf-quic-qlog-quic-events": "draft-ietf-quic-qlog-quic-events.md",
}

#: How many quoted words one cross-reference of the source text may stand for.
REFERENCE_WORDS = 8

TOKEN = re.compile(r"\{\{[^}]*\}\}|[A-Za-z0-9]+")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")


@dataclass
class Citation:
    """One ``//=`` line and the ``//#`` lines under it."""

    path: Path
    line: int
    target: str
    quote: list[str]

    def words(self) -> list[str | None]:
        """The quote's words (lower case); a cross-reference is ``None``. A line ending in
        a hyphen continues its word on the next line (the RFCs' line breaks)."""
        text = ""
        for part in self.quote:
            part = part.strip()
            text += part if text.endswith("-") else " " + part
        return tokens(text)


def tokens(text: str) -> list[str | None]:
    return [None if t.startswith("{{") else t.lower() for t in TOKEN.findall(text)]


def citations(root: Path) -> list[Citation]:
    """Every citation in the Rust sources under ``root/crates``."""
    found = []
    for path in sorted((root / "crates").rglob("*.rs")):
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            m = re.match(r"\s*//= (.+?)\s*$", lines[i])
            if not m:
                i += 1
                continue
            j, quote = i + 1, []
            while j < len(lines) and re.match(r"\s*//#", lines[j]):
                quote.append(re.sub(r"^\s*//#\s?", "", lines[j]))
                j += 1
            found.append(Citation(path, i + 1, m.group(1), quote))
            i = j
    return found


class Spec:
    """A specification's text, split into numbered sections."""

    def __init__(self, text: str):
        #: Section number ("13.2.1", "A.1") -> its words and those of its subsections.
        self.sections: dict[str, list[str | None]] = {}
        self.all: list[str | None] = []
        numbers: list[int] = []
        appendix = False
        current: list[str] = []
        body, fenced = False, False
        open_sections: list[str] = []
        for line in text.splitlines():
            if line.startswith("--- "):
                body = line.strip() in ("--- middle", "--- back")
                appendix = appendix or line.strip() == "--- back"
                if line.strip() == "--- back":
                    numbers = []
                continue
            if line.startswith("```") or line.startswith("~~~"):
                fenced = not fenced
            m = HEADING.match(line) if body and not fenced else None
            if m and "numbered=\"false\"" not in line:
                self._close(current, open_sections)
                current = []
                depth = len(m.group(1))
                numbers = numbers[:depth]
                while len(numbers) < depth:
                    numbers.append(0)
                numbers[-1] += 1
                first = (chr(ord("A") + numbers[0] - 1) if appendix else str(numbers[0]))
                number = ".".join([first] + [str(n) for n in numbers[1:]])
                open_sections = [s for s in open_sections if number.startswith(s + ".")]
                open_sections.append(number)
                self.sections.setdefault(number, [])
                continue
            if body:
                current.append(line)
        self._close(current, open_sections)

    def _close(self, lines: list[str], open_sections: list[str]) -> None:
        words = tokens("\n".join(lines))
        self.all += words
        for s in open_sections:
            self.sections[s] = self.sections[s] + words

    def find(self, quote: list[str | None], section: str | None) -> str | None:
        """Where ``quote`` is: the cited section if it is there, else the first section
        that has it (``"*"`` when only the whole text does), else ``None``."""
        if section is not None and contains(self.sections.get(section, []), quote):
            return section
        # The deepest section that has it (sections hold their subsections' words).
        for number, words in reversed(self.sections.items()):
            if contains(words, quote):
                return number
        return "*" if contains(self.all, quote) else None


def contains(text: list[str | None], quote: list[str | None]) -> bool:
    """Whether ``quote`` occurs in ``text``; a cross-reference (``None``) on either side
    matches up to ``REFERENCE_WORDS`` words of the other. A quote starts at one of the
    text's own words (after any leading cross-reference)."""
    while quote and quote[0] is None:
        quote = quote[1:]
    if not quote:
        return False
    starts = [k for k, w in enumerate(text) if w == quote[0]]
    return any(_walk(text, k, quote, 0) for k in starts)


def _walk(text: list[str | None], k: int, quote: list[str | None], i: int) -> bool:
    while i < len(quote):
        if k >= len(text):
            return False
        if text[k] is None:
            return any(_walk(text, k + 1, quote, i + n) for n in range(REFERENCE_WORDS + 1))
        if quote[i] is None:
            return any(_walk(text, k + n, quote, i + 1) for n in range(REFERENCE_WORDS + 1))
        if text[k] != quote[i]:
            return False
        i += 1
        k += 1
    return True


def spec_of(target: str) -> tuple[str | None, str | None]:
    """The ``SPECS`` key and the section number a citation names (either may be None)."""
    url, _, fragment = target.partition("#")
    key = next((k for k in SPECS if re.search(rf"/{re.escape(k)}(-\d+)?/?$", url)), None)
    m = re.fullmatch(r"section-([0-9A-Z][0-9.]*)", fragment)
    return key, (m.group(1).rstrip(".") if m else None)


def is_path(target: str) -> bool:
    """A citation that names a file rather than a document: a path outside the repository
    means nothing to a reader of the code."""
    first = target.split()[0]
    return "://" not in first and ("/" in first or re.search(r"\.(txt|md|pdf)$", first))


def check(root: Path, specs_dir: Path) -> tuple[list[str], Counter, Counter]:
    """Returns (problems, counts, unchecked targets)."""
    loaded: dict[str, Spec] = {}
    problems: list[str] = []
    counts: Counter = Counter()
    unchecked: Counter = Counter()
    for c in citations(root):
        where = f"{c.path.relative_to(root)}:{c.line}"
        if is_path(c.target):
            problems.append(f"{where}: cites a file ({c.target}); cite the document by "
                            "title and section, DOI or URL")
            continue
        key, section = spec_of(c.target)
        if key is None:
            unchecked[c.target.split("#")[0]] += 1
            counts["unchecked"] += 1
            continue
        if not c.quote:
            counts["no quote"] += 1
            continue
        if key not in loaded:
            loaded[key] = Spec((specs_dir / SPECS[key]).read_text(encoding="utf-8"))
        found = loaded[key].find(c.words(), section)
        quote = " ".join(q.strip() for q in c.quote)
        if found is None:
            problems.append(f"{where}: not in {key}: \"{quote}\"")
        elif section is not None and found != section:
            problems.append(f"{where}: cites section {section} of {key}, but the words are in "
                            f"section {found}: \"{quote}\"")
        else:
            counts["checked"] += 1
    return problems, counts, unchecked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parents[1]
    p.add_argument("--root", type=Path, default=here, help="repository root")
    p.add_argument("--specs", type=Path, default=None, help="specification texts (ROOT/specs)")
    p.add_argument("--list-unchecked", action="store_true",
                   help="list the cited documents whose text is not in specs/")
    a = p.parse_args(argv)
    problems, counts, unchecked = check(a.root, a.specs or a.root / "specs")
    for problem in problems:
        print(problem)
    print(f"spec quotes: {counts['checked']} match their cited section, {len(problems)} do "
          f"not; {counts['unchecked']} citations of {len(unchecked)} documents not in "
          f"specs/ are not checked")
    if a.list_unchecked:
        for target, n in unchecked.most_common():
            print(f"  {n:4} {target}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
