"""The hostile-input sweep (bench/hostile.py) finds no 5xx and no dropped connection on a real gateway."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level package of the repository, not of the wheel
    sys.path.insert(0, str(ROOT))

from bench import hostile  # noqa: E402


def test_one_round_of_every_shape_gets_no_5xx(capsys):
    """One round of every hostile shape on every route over loopback: zero 5xx or resets, counts printed."""
    assert hostile.run(min_requests=1, deadline_s=300) == 0
    out = capsys.readouterr().out
    assert "5xx or dropped connections: 0" in out
    assert int(out.split(" requests")[0].rsplit(" ", 1)[1]) >= 250  # one round covers every shape
