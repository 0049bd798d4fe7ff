"""PromQL selectors of GPUs' series and the packing of many asks into few queries, for the TSDB paths
(:mod:`finops.ingest.tsdb_metering`, :mod:`finops.ingest.tsdb_source`, :mod:`finops.ingest.tsdb_idle`): a window of
readings to the millisecond, the raw readings of a span, a matcher of GPUs by UUID label, groups of UUIDs or terms
that fit one query, and many instant expressions asked in few queries (:func:`ask_packed`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta

from finops.ingest.amd_exporter import AMD_FIELDS
from finops.ingest.prometheus import InstantSample, PrometheusClient, RangeSeries, promql_string, selector_matchers
from finops.ingest.prometheus_pull import PullOptions
from finops.timeutil import from_epoch

MAX_QUERY_CHARS = 4096
"""Most characters of one PromQL query the metering packs (see the module documentation; a single term longer than
that is sent alone). Queries are sent in the body of a POST (:func:`finops.ingest.prometheus.form_body`); 4 KiB of
PromQL stays well within VictoriaMetrics' ``-search.maxQueryLen`` (16 KiB by default) and, URL-encoded, within the
8 KiB request line that proxies commonly accept (nginx's ``large_client_header_buffers``) should a proxy turn it
into a GET."""
SEGMENT_LABEL = "finops_segment"
"""The label the expressions packed into one query are told apart by (``label_replace``, :func:`ask_packed`)."""
_REGEX_SPECIAL = re.compile(r"[\\.+*?()|\[\]{}^$]")


def window(a: int, b: int) -> str:
    """The range and ``@`` modifier selecting the readings of [a, b) (epoch seconds) to the millisecond:
    ``[<b − a>s] @ <b − 0.001>`` (see the module documentation)."""
    return f"[{b - a}s] @ {b - 1}.999"


def raw_readings(client: PrometheusClient, selector: str, a: int, b: int) -> list[RangeSeries]:
    """The raw samples of [a, b) (epoch seconds) of ``selector``'s series (each series' in time order, at their
    own times, to the millisecond): an instant query of ``selector`` and :func:`window`, evaluated at the ``@``
    instant ``b − 1 ms``. The instant matters: VictoriaMetrics (1.79) ends such a range at the query's time and
    ignores ``@``, Prometheus honours ``@``."""
    return client.samples(f"{selector}{window(a, b)}", from_epoch(b) - timedelta(milliseconds=1))


def uuid_matcher(options: PullOptions, uuids: Sequence[str], amd: bool = False) -> str:
    """The matcher of some GPUs' series by their UUID label (AMD's exporter's when ``amd``, else dcgm-exporter's):
    ``<UUID label>="<uuid>"`` for one, ``<UUID label>=~"<uuid>|<uuid>|…"`` (each regex-escaped) for several.
    ValueError when ``uuids`` is empty."""
    if not uuids:
        raise ValueError("uuids: at least one GPU UUID expected")
    label = options.labels.uuid_label(amd)
    if len(uuids) == 1:
        return f"{label}={promql_string(uuids[0])}"
    return f"{label}=~{promql_string('|'.join(map(regex_literal, uuids)))}"


def regex_literal(text: str) -> str:
    """``text`` as an RE2 regular expression (PromQL's ``=~``) matching itself: its metacharacters escaped."""
    return _REGEX_SPECIAL.sub(r"\\\g<0>", text)


def gpu_selector(options: PullOptions, dcgm_field: str, uuids: Sequence[str]) -> str:
    """``dcgm_field``'s series (a DCGM field or an AMD exporter series) of some GPUs: ``options``' selector and
    :func:`uuid_matcher` on that exporter's UUID label."""
    return fields_selector(options, [dcgm_field], uuids)


def fields_selector(options: PullOptions, names: Sequence[str], uuids: Sequence[str]) -> str:
    """The series of several fields of one exporter (DCGM fields, or AMD exporter series: the first name tells which)
    of some GPUs, in one selector: as :func:`gpu_selector`, the names matched by ``__name__=~"<name>|<name>…"``
    where there are several (each regex-escaped). ValueError when ``names`` is empty."""
    if not names:
        raise ValueError("names: at least one series name expected")
    matchers = [selector_matchers(options.selector), uuid_matcher(options, uuids, names[0] in AMD_FIELDS)]
    if len(names) == 1:
        return f"{names[0]}{{{', '.join(filter(None, matchers))}}}"
    matchers.insert(0, f"__name__=~{promql_string('|'.join(map(regex_literal, names)))}")
    return f"{{{', '.join(filter(None, matchers))}}}"


def packed(sizes: Sequence[int], budget: int) -> list[list[int]]:
    """The indexes of ``sizes`` in consecutive groups whose sizes add up to at most ``budget`` (an index whose size
    alone is larger in a group of its own)."""
    groups: list[list[int]] = []
    used = budget
    for index, size in enumerate(sizes):
        if used + size > budget:
            groups.append([])
            used = 0
        groups[-1].append(index)
        used += size
    return groups


def uuid_groups(uuids: Sequence[str], budget: int = MAX_QUERY_CHARS // 2) -> list[list[str]]:
    """``uuids`` in consecutive groups whose :func:`uuid_matcher` regex takes at most ``budget`` characters (a UUID
    longer than that alone in its group), so that a query naming one group stays under :data:`MAX_QUERY_CHARS`."""
    sizes = [len(promql_string(regex_literal(uuid))) - 1 for uuid in uuids]  # escaped, quotes less one, with its |
    return [[uuids[index] for index in group] for group in packed(sizes, budget)]


def ask_packed(client: PrometheusClient, asks: Sequence[tuple[str, int]]) -> list[list[InstantSample]]:
    """The samples each of ``asks`` (an instant PromQL expression whose ranges end by ``@`` modifiers, and the epoch
    second the latest of them ends at) answers, in the order of ``asks``. They are asked in as few instant queries
    of at most :data:`MAX_QUERY_CHARS` characters as they fit in (:func:`packed`): each expression tagged with its
    index in :data:`SEGMENT_LABEL` (``label_replace``), the tagged ones joined by ``or`` (whose operands then never
    share a label set; :func:`either`), each query evaluated at the latest second of its asks. Raises
    :class:`~finops.ingest.prometheus.PrometheusError` when a query fails."""
    parts = [f'label_replace({expression}, "{SEGMENT_LABEL}", "{index}", "", "")' for index, (expression, _) in
             enumerate(asks)]  # fmt: skip
    answers: list[list[InstantSample]] = [[] for _ in asks]
    joint = len("( or )")
    for group in packed([len(part) + joint for part in parts], MAX_QUERY_CHARS + joint):
        at = max(asks[index][1] for index in group)
        for sample in client.query(either([parts[index] for index in group]), from_epoch(at)):
            answers[int(sample.labels[SEGMENT_LABEL])].append(sample)
    return answers


def either(parts: Sequence[str]) -> str:
    """``parts`` joined by ``or`` as a balanced tree, ``((a or b) or (c or d))``: each ``or`` matches the series of
    its two sides (PromQL documentation, "Logical/set binary operators"), so a chain ``a or b or c …`` matches the
    first operand's series again at every step, which costs where it is the fleet's (measured on VictoriaMetrics
    1.79: a quarter more CPU for four fleet-wide terms); the tree matches each series some log2(parts) times."""
    joined = list(parts)
    while len(joined) > 1:
        joined = [
            f"({joined[i]} or {joined[i + 1]})" if i + 1 < len(joined) else joined[i] for i in range(0, len(joined), 2)
        ]
    return joined[0]
