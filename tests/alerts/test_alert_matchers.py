"""Silences by label matchers until a time, and inhibition of a silent node's idle and throttling alerts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from alerts.matchers import Silence, inhibited, parse_matcher, silenced

T0 = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
IDLE = {"rule": "idle-gpu", "team": "vision", "node": "gpu-a-01", "job": "4242"}


def test_matcher_syntax_and_semantics() -> None:
    assert parse_matcher('team="vision"').matches(IDLE)
    assert not parse_matcher("team!=vision").matches(IDLE)
    assert parse_matcher("node=~gpu-a-.*").matches(IDLE)
    assert not parse_matcher("node=~gpu-a").matches(IDLE), "a regex matches the whole value"
    assert parse_matcher("partition!~.+").matches(IDLE), "a missing label is the empty string"
    with pytest.raises(ValueError, match="not a matcher"):
        parse_matcher("team")
    with pytest.raises(ValueError, match="invalid regular expression"):
        parse_matcher("team=~(")


def test_a_silence_mutes_matching_alerts_until_it_ends() -> None:
    silence = Silence((parse_matcher("team=vision"), parse_matcher("rule=idle-gpu")), T0, T0 + timedelta(hours=2))
    assert silenced(IDLE, [silence], T0 + timedelta(hours=1))
    assert not silenced(IDLE, [silence], T0 + timedelta(hours=2)), "[start, end)"
    assert not silenced(IDLE, [silence], T0 - timedelta(seconds=1))
    assert not silenced({**IDLE, "team": "nlp"}, [silence], T0 + timedelta(hours=1))


def test_a_silent_collector_inhibits_idle_and_throttling_alerts_of_its_node_only() -> None:
    silent = {"rule": "collector-silent", "node": "gpu-a-01", "team": ""}
    throttled = {"rule": "throttling", "node": "gpu-a-01", "gpu": "3"}
    assert inhibited(IDLE, [silent, IDLE])
    assert inhibited(throttled, [silent])
    assert not inhibited({**IDLE, "node": "gpu-a-02"}, [silent]), "another node"
    assert not inhibited({"rule": "budget-80", "node": "gpu-a-01"}, [silent]), "budget alerts are not inhibited"
    assert not inhibited(silent, [silent]), "an alert never inhibits itself"
    assert not inhibited(IDLE, [IDLE])


def test_regexes_are_matched_in_linear_time() -> None:
    """A tenant's pattern is matched by RE2, as Alertmanager's Go ``regexp``: a nested quantifier on a long
    non-matching value answers (Python's backtracking ``re`` takes 2ⁿ steps there and never returns)."""
    nested = parse_matcher('job=~"(a+)+$"')
    assert not nested.matches({"job": "a" * 10_000 + "!"})
    assert nested.matches({"job": "a" * 10_000})


def test_regexes_re2_cannot_run_are_refused() -> None:
    """What RE2 cannot run in linear time (backreferences, lookaround) is refused when the silence is made."""
    for pattern in (r"(a)\1", "(?=a)a", "(?<!b)a"):
        with pytest.raises(ValueError, match="invalid regular expression"):
            parse_matcher(f"job=~{pattern}")
