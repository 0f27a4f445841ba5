"""Code that only moves changes no verdict: every shown verdict of the bundled recordings and of a
synthetic day hashes as stored in tests/data/verdict_hashes.json (see tests/verdict_hashes.py, which
rewrites the file when a change is meant to move verdicts)."""

from __future__ import annotations

import json

from verdict_hashes import GOLDEN, all_digests


def test_every_shown_verdict_hashes_as_stored():
    stored = json.loads(GOLDEN.read_text())
    now = all_digests()
    assert now.keys() == stored.keys()
    moved = {name: parts for name, parts in now.items() if parts != stored[name]}
    assert not moved, (f"verdicts moved for {sorted(moved)}; if that is meant, run "
                       "`python tests/verdict_hashes.py --write` and say why in the commit")
