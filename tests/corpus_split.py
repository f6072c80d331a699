"""Which split a corpus record is in: by a fixed hash of its repository's name, never by line.

Lines of one repository share its formats and its users' habits; a split by line would put near
copies on both sides. The test split is where the rules are judged, and no rule is written while
looking at it (tests/test_classify_corpus.py gates on it; README says both splits' scores).
"""

from __future__ import annotations

import hashlib

#: Share of repositories, in percent of the hash's range, that form the test split.
TEST_PERCENT = 36


def split_of(repo: str) -> str:
    """"test" or "train" for the repository `owner/name` (case-insensitive, fixed across runs)."""
    digest = hashlib.sha256(f"pulse-corpus:{repo.lower()}".encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") % 100 < TEST_PERCENT else "train"
