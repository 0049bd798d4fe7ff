"""Import bounds: sacct lines over a stored field's width or naming too many hosts are refused one by one, named by
line and field, and the other lines are imported (both databases); a hostlist's size is known before it is
expanded, so a few kilobytes naming billions of hosts cost no memory."""

from __future__ import annotations

import tracemalloc

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.models import Job
from finops.jobs.slurm import FIELD_MAX_LENGTHS, NODE_LIST_MAX_LENGTH
from finops.jobs.slurm_hostlist import compress_hostlist, expand_hostlist, hostlist_size
from finops.jobs.slurm_import import import_sacct
from tests.support.sacct_lines import make_line


def test_the_field_bounds_are_the_columns_widths() -> None:
    columns = Job.__table__.columns
    pairs = {"JobID": "job_id", "JobIDRaw": "job_id_raw", "Cluster": "cluster", "Partition": "partition",
             "Account": "account", "User": "user", "JobName": "name"}  # fmt: skip
    for field, column in pairs.items():
        assert FIELD_MAX_LENGTHS[field] == columns[column].type.length, field
    assert columns["node_list"].type.length == NODE_LIST_MAX_LENGTH


def test_lines_over_their_bounds_are_refused_by_name_and_the_rest_imported(sessions: sessionmaker[Session]) -> None:
    many = ",".join(f"gpu-{i}x" for i in range(1000))  # 1000 hosts no bracket can shorten: 8,889 characters
    lines = [
        make_line(JobID="1", JobIDRaw="1", JobName="n" * 256),
        make_line(JobID="2", JobIDRaw="2", NodeList=many),
        make_line(JobID="3", JobIDRaw="3", NodeList="gpu-[0001-4096]"),  # 4096 hosts, stored in 15 characters
        make_line(JobID="4", JobIDRaw="4", User="u" * 129),
        make_line(JobID="5", JobIDRaw="5", AllocTRES=f"gres/gpu:{'t' * 65}=8"),
        make_line(JobID="6", JobIDRaw="6", NodeList="a[0-65535]b[0-65535]"),
    ]
    with sessions.begin() as session:
        result = import_sacct(session, lines, source="sacct.txt")
        stored = session.execute(select(Job.job_id, Job.name, Job.node_list)).all()
    assert [(e.line_number, e.message) for e in result.errors] == [
        (1, "sacct.txt:1: field JobName: 256 characters, more than the 255 stored"),
        (2, "sacct.txt:2: field NodeList: 1000 hosts written in 8889 characters, more than the 4096 stored"),
        (4, "sacct.txt:4: field User: 129 characters, more than the 128 stored"),
        (5, f"sacct.txt:5: field AllocTRES: GPU type '{'t' * 65}' is longer than the 64 characters stored"),
        (6, "sacct.txt:6: field NodeList: hostlist 'a[0-65535]b[0-65535]': more than 65536 hosts"),
    ]
    assert [(job_id, node_list) for job_id, _, node_list in stored] == [("3", "gpu-[0001-4096]")]


def test_a_hostlist_is_counted_before_it_is_expanded() -> None:
    assert hostlist_size("r[1-2]n[01-10,12],login,x[0-4]-ib") == 2 * 11 + 1 + 5
    assert hostlist_size("n[0-99999999999999999]" * 1) == 10**17
    assert hostlist_size("") == hostlist_size("None assigned") == 0
    # 40 brackets of 65536 numbers (host names of 201 characters): 65536**40 hosts, refused before one host name,
    # or one bracket's numbers, is built.
    text = "n" + "[0-65535]" * 40
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="more than 65536 hosts"):
            expand_hostlist(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("n[" + "9" * 19 + "]", "has a number of more than 18 digits"),
        ("n" * 250 + "[000001-2]", "a host name longer than 255 characters"),
        ("x" * 100 + "[", "'" + "x" * 80 + "'…: '[' without ']'"),
    ],
)
def test_hostlists_of_absurd_numbers_or_names_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="hostlist") as refused:
        expand_hostlist(text)
    assert message in str(refused.value)


def test_node_lists_are_stored_as_hostlists_and_read_back() -> None:
    hosts = expand_hostlist("gpu-[0001-0300]")
    assert compress_hostlist(hosts) == "gpu-[0001-0300]" and expand_hostlist(",".join(hosts)) == hosts
