"""Silences and inhibition: which alerts are muted, as pure functions of labels and time.

Matchers follow Alertmanager's syntax (``pkg/labels`` matchers): ``name=value``, ``name!=value``,
``name=~regex``, ``name!~regex``; a regex must match the whole value; a missing label is the empty string.
Regexes are RE2's, as Alertmanager's (Go ``regexp``): matching takes time linear in the label's length, so a
tenant's pattern cannot backtrack catastrophically (``(a+)+$``), and what RE2 refuses (backreferences, lookaround)
is refused when the matcher is parsed.
A silence mutes every alert all of whose labels match all its matchers, from its start until its end.
An inhibition rule mutes target alerts while a source alert fires with equal values of the ``equal`` labels
(e.g. a silent collector on node X inhibits the idle and throttling alerts of node X).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import re2

MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"?(.*?)"?\s*$')
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is a ValueError to the caller, not a line on stderr


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (cached: alert rules match the same silences every run); ``re2.error`` if RE2
    refuses it."""
    return re2.compile(pattern, _RE2_OPTIONS)


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher; ``op`` is one of ``=``, ``!=``, ``=~``, ``!~``."""

    name: str
    op: str
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this matcher (missing label = "")."""
        actual = labels.get(self.name, "")
        if self.op in ("=~", "!~"):
            found = _regex(self.value).fullmatch(actual) is not None
            return found if self.op == "=~" else not found
        return (actual == self.value) if self.op == "=" else (actual != self.value)


def parse_matcher(text: str) -> Matcher:
    """``team="vision"`` → Matcher. ValueError naming the text when it is not a matcher or its regex is not one RE2
    takes."""
    found = MATCHER.match(text)
    if found is None:
        raise ValueError(f"{text!r}: not a matcher (name=value, name!=value, name=~regex, name!~regex)")
    name, op, value = found.groups()
    if op in ("=~", "!~"):
        try:
            _regex(value)
        except re2.error as exc:
            reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
            raise ValueError(f"{text!r}: invalid regular expression (RE2 syntax, as Alertmanager): {reason}") from exc
    return Matcher(name, op, value)


@dataclass(frozen=True, slots=True)
class Silence:
    """Mutes matching alerts in [starts_at, ends_at)."""

    matchers: tuple[Matcher, ...]
    starts_at: datetime
    ends_at: datetime
    comment: str = ""

    def mutes(self, labels: Mapping[str, str], now: datetime) -> bool:
        """Whether this silence is active at ``now`` and matches ``labels``."""
        return self.starts_at <= now < self.ends_at and all(m.matches(labels) for m in self.matchers)


@dataclass(frozen=True, slots=True)
class InhibitRule:
    """While an alert matching ``source`` fires, alerts matching ``target`` with the same ``equal`` labels are muted."""

    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]


DEFAULT_INHIBITIONS = (
    InhibitRule(
        source=(Matcher("rule", "=", "collector-silent"),),
        target=(Matcher("rule", "=~", "idle-gpu|throttling"),),
        equal=("node",),
    ),
)
"""A silent collector's node has no fresh readings: its idle and throttling alerts would be stale."""


def silenced(labels: Mapping[str, str], silences: Iterable[Silence], now: datetime) -> bool:
    """Whether any silence mutes ``labels`` at ``now``."""
    return any(silence.mutes(labels, now) for silence in silences)


def inhibited(
    labels: Mapping[str, str],
    firing: Sequence[Mapping[str, str]],
    rules: Iterable[InhibitRule] = DEFAULT_INHIBITIONS,
) -> bool:
    """Whether a firing alert (``firing``: their label sets) inhibits the alert with ``labels``.

    An alert never inhibits itself (Alertmanager: an alert matching both sides is not muted by itself).
    """
    for rule in rules:
        if not all(m.matches(labels) for m in rule.target):
            continue
        for source in firing:
            if source is labels or dict(source) == dict(labels):
                continue
            if all(m.matches(source) for m in rule.source) and all(
                source.get(name, "") == labels.get(name, "") for name in rule.equal
            ):
                return True
    return False


def names_team(matchers: Sequence[str], team: str) -> bool:
    """Whether one of ``matchers`` (Alertmanager syntax) is the equality ``team="<team>"``: a silence a ``team`` API
    token may see. Matchers that do not parse count as not naming it."""
    for text in matchers:
        with contextlib.suppress(ValueError):
            matcher = parse_matcher(text)
            if (matcher.name, matcher.op, matcher.value) == ("team", "=", team):
                return True
    return False
