"""The spec quote checker finds what it must: a quote changed by one word, a quote under
the wrong section, a citation of a file; and passes the repository's own quotes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import spec_quotes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

GOOD = """\
//= https://www.rfc-editor.org/rfc/rfc9000#section-13.2.1
//# An endpoint MUST acknowledge all ack-eliciting Initial and Handshake
//# packets immediately and all ack-eliciting 0-RTT and 1-RTT packets
//# within its advertised max_ack_delay, with the following exception.
fn f() {}
"""


def check(tmp_path: Path, source: str) -> list[str]:
    (tmp_path / "crates" / "x" / "src").mkdir(parents=True, exist_ok=True)
    (tmp_path / "crates" / "x" / "src" / "lib.rs").write_text(source)
    problems, _, _ = spec_quotes.check(tmp_path, REPO / "specs")
    return problems


def test_a_word_for_word_quote_passes(tmp_path):
    assert check(tmp_path, GOOD) == []


def test_a_changed_word_fails_naming_the_place(tmp_path):
    problems = check(tmp_path, GOOD.replace("MUST acknowledge", "SHOULD acknowledge"))
    assert len(problems) == 1 and problems[0].startswith("crates/x/src/lib.rs:1: not in rfc9000")


def test_a_quote_under_the_wrong_section_fails(tmp_path):
    problems = check(tmp_path, GOOD.replace("section-13.2.1", "section-13.2.2"))
    assert len(problems) == 1 and "the words are in section 13.2.1" in problems[0], problems


def test_a_citation_of_a_file_fails(tmp_path):
    problems = check(tmp_path, "//= shared/seeds/000_x.txt#section-5\n//# A sentence.\n")
    assert len(problems) == 1 and "cites a file" in problems[0], problems


def test_the_repository_quotes_match():
    problems, counts, _ = spec_quotes.check(REPO, REPO / "specs")
    assert problems == [] and counts["checked"] > 400, (problems, counts)
