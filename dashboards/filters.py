"""The sidebar filters (period, cluster, team, partition) and page choices, kept in the URL query string.

A link reproduces the view: ``?period=30d&team=alpha`` opens any page on the last 30 days of team alpha. Values
are remembered for the session, so switching pages keeps them (and writes them back into the URL); the URL wins
when it names a value (a pasted link). A value the URL gives that is not valid (an unknown period, a date that
does not parse) is ignored with a warning in the sidebar.

Someone who sees one team (:mod:`dashboards.login`) has the team filter fixed to theirs on every page, whether the
page offers the filter or not; a ``team`` the URL names is then ignored with a warning.

URL parameters: ``period`` (``mtd`` month to date, ``24h``, ``7d``, ``30d``, ``prev`` the previous calendar month,
``custom`` with ``from`` and ``to`` as ``YYYY-MM-DD``, both days included), ``cluster``, ``team``, ``partition``
(absent: all), and page-specific ones such as ``job``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from dashboards import data, login
from finops.analysis.filters import Scope
from finops.timeutil import month_start, utc_now

PERIODS: dict[str, str] = {
    "mtd": "Month to date",
    "24h": "Last 24 hours",
    "7d": "Last 7 days",
    "30d": "Last 30 days",
    "prev": "Previous month",
    "custom": "Custom dates",
}
DEFAULT_PERIOD = "mtd"
ALL = "All"
_STATE = "finops_url_state"


@dataclass(frozen=True, slots=True)
class View:
    """What a page shows: the period [start, end) (UTC, whole hours or days) and its label, and the filters
    (None: all)."""

    start: datetime
    end: datetime
    period_label: str
    cluster: str | None = None
    team: str | None = None
    partition: str | None = None

    @property
    def scope(self) -> Scope:
        """The filters as a :class:`~finops.analysis.filters.Scope`, the argument of the cached queries in
        :mod:`dashboards.data`."""
        return Scope(cluster=self.cluster, team=self.team, partition=self.partition)

    @property
    def filters(self) -> dict[str, str | None]:
        """``cluster``, ``team`` and ``partition`` by name."""
        return {"cluster": self.cluster, "team": self.team, "partition": self.partition}

    def describe(self) -> str:
        """``Last 7 days: 2026-11-16 08:00 – 2026-11-23 08:00 UTC · team alpha``, for captions."""
        text = f"{self.period_label}: {self.start:%Y-%m-%d %H:%M} – {self.end:%Y-%m-%d %H:%M} UTC"
        chosen = [f"{name} {value}" for name, value in self.filters.items() if value is not None]
        return " · ".join([text, *chosen])


def period_bounds(
    period: str, now: datetime, first_day: date | None = None, last_day: date | None = None
) -> tuple[datetime, datetime]:
    """[start, end) of ``period`` (a key of :data:`PERIODS`) at ``now``: the rolling ones end at the next whole
    hour (the current hour's ledger rows included); ``prev`` is the previous calendar month; ``custom`` runs
    from ``first_day`` 00:00 to the day after ``last_day`` (both UTC). ValueError for an unknown period or a
    custom one without its days or with the last day before the first."""
    end = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    if period == "mtd":
        return month_start(now), end
    if period == "prev":
        this_month = month_start(now)
        return month_start(this_month - timedelta(seconds=1)), this_month
    rolling = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
    if period in rolling:
        return end - rolling[period], end
    if period == "custom":
        if first_day is None or last_day is None or last_day < first_day:
            raise ValueError("a custom period needs a first day on or before its last day")
        start = datetime(first_day.year, first_day.month, first_day.day, tzinfo=UTC)
        stop = datetime(last_day.year, last_day.month, last_day.day, tzinfo=UTC) + timedelta(days=1)
        return start, stop
    raise ValueError(f"unknown period {period!r}; one of {', '.join(PERIODS)}")


def _saved() -> dict[str, str]:
    """The session's remembered URL values, refreshed from the URL (which wins when it names a value)."""
    saved: dict[str, str] = st.session_state.setdefault(_STATE, {})
    for name in st.query_params:
        saved[name] = st.query_params[name]
    return saved


def _unlink(name: str) -> None:
    """Take ``name`` out of the URL but keep it remembered (a custom period's days while another is shown)."""
    if name in st.query_params:
        del st.query_params[name]


def _remember(name: str, value: str | None) -> None:
    """Store ``value`` for ``name`` in the session and the URL (None removes it from both)."""
    saved: dict[str, str] = st.session_state.setdefault(_STATE, {})
    if value is None:
        saved.pop(name, None)
        if name in st.query_params:
            del st.query_params[name]
    else:
        saved[name] = value
        if st.query_params.get(name) != value:
            st.query_params[name] = value


def url_selectbox(
    name: str,
    label: str,
    options: Sequence[str],
    *,
    default: str | None = None,
    format_func: Callable[[str], str] = str,
    container: DeltaGenerator | None = None,
) -> str:
    """A selectbox whose value is the URL parameter ``name`` (an option; ``default``, or the first option, when
    the URL names none or one not offered). Returns the chosen option."""
    saved = _saved()
    fallback = default if default is not None else options[0]
    wanted = saved.get(name, fallback)
    if wanted not in options:
        if name in saved:
            st.sidebar.warning(f"{label}: {wanted!r} is not one of the choices; showing {format_func(fallback)}.")
        wanted = fallback
    key = f"url_{name}"

    def changed() -> None:
        chosen = st.session_state[key]
        _remember(name, None if chosen == fallback else chosen)

    st.session_state[key] = wanted
    place = container if container is not None else st.sidebar
    chosen: str = place.selectbox(label, list(options), key=key, format_func=format_func, on_change=changed)
    _remember(name, None if chosen == fallback else chosen)
    return chosen


def _filter(name: str, label: str, choices: list[str]) -> str | None:
    saved = _saved()
    options = [ALL, *choices]
    if name in saved and saved[name] not in options:
        options.append(saved[name])  # a link to a value with no rows yet still applies (and shows nothing)
    chosen = url_selectbox(name, label, options, default=ALL)
    return None if chosen == ALL else chosen


def _custom_days(now: datetime) -> tuple[date, date]:
    saved = _saved()
    default_first, default_last = month_start(now).date(), now.date()
    days = []
    for name, label, fallback in (("from", "From (UTC)", default_first), ("to", "To (UTC, included)", default_last)):
        try:
            chosen = date.fromisoformat(saved[name]) if name in saved else fallback
        except ValueError:
            st.sidebar.warning(f"{name}={saved[name]!r} is not a date (YYYY-MM-DD); showing {fallback}.")
            chosen = fallback
        key = f"url_{name}"

        def changed(name: str = name, key: str = key) -> None:
            _remember(name, st.session_state[key].isoformat())

        st.session_state[key] = chosen
        picked = st.sidebar.date_input(label, key=key, on_change=changed)
        days.append(picked if isinstance(picked, date) else chosen)
        _remember(name, days[-1].isoformat())
    return days[0], days[1]


def sidebar(
    *,
    period: bool = True,
    cluster: bool = True,
    team: bool = True,
    partition: bool = True,
    default_period: str = DEFAULT_PERIOD,
) -> View:
    """Render the filters this page uses in the sidebar (from and into the URL) and return the :class:`View`.

    Filters a page leaves out are None (everything) and stay remembered for the pages that use them; the team of
    someone who sees one team is always theirs (:func:`_own_team`)."""
    now = utc_now()
    period_key = default_period
    first_day = last_day = None
    if period:
        period_key = url_selectbox(
            "period", "Period", list(PERIODS), default=default_period, format_func=PERIODS.__getitem__
        )
        if period_key == "custom":
            first_day, last_day = _custom_days(now)
            if last_day < first_day:
                st.sidebar.warning("The last day is before the first: showing the first day only.")
                last_day = first_day
        else:
            _unlink("from")
            _unlink("to")
    start, end = period_bounds(period_key, now, first_day, last_day)
    own_team = login.current().team
    for name, shown in (("cluster", cluster), ("team", team and own_team is None), ("partition", partition)):
        if not shown:
            _unlink(name)
    choices = data.choices(data.database_url()) if cluster or team or partition else data.NO_CHOICES
    chosen_cluster = _filter("cluster", "Cluster", choices.clusters) if cluster else None
    if own_team is not None:
        chosen_team: str | None = _own_team(own_team)
    else:
        chosen_team = _filter("team", "Team", choices.teams) if team else None
    return View(
        start=start,
        end=end,
        period_label=PERIODS[period_key],
        cluster=chosen_cluster,
        team=chosen_team,
        partition=_filter("partition", "Partition", choices.partitions) if partition else None,
    )


def _own_team(team: str) -> str:
    """The team filter of someone who sees only ``team``: shown fixed (a disabled selectbox); a ``team`` the URL
    names is ignored with a warning and taken out of the URL."""
    asked = _saved().get("team")
    if asked is not None and asked != team:
        st.sidebar.warning(f"team={asked!r} in the URL is ignored: you see team {team} only.")
    _remember("team", None)
    st.sidebar.selectbox("Team", [team], disabled=True, help="Your team: you see its costs only.")
    return team
