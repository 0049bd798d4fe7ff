"""Tests for finops.jobs.slurm: sacct --parsable2 parsing, Slurm hostlists, and the format/parse round trip."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from finops.jobs.slurm import SacctJob, SacctLineError, format_sacct_line, parse_elapsed, parse_gpu_tres, parse_sacct
from finops.jobs.slurm_hostlist import compress_hostlist, expand_hostlist
from tests.support.sacct_lines import make_line

FIXTURES = Path(__file__).parents[1] / "fixtures" / "sacct"
BERLIN = ZoneInfo("Europe/Berlin")  # the fixtures' cluster time zone, see fixtures/sacct/SOURCE.md
QUERY_TIME = datetime(2024, 4, 2, 12, 0, 0, tzinfo=BERLIN)  # when the fixture's sacct ran


# A valid job line, field by field; tests override single fields.
def parse_one(**fields: str) -> SacctJob:
    """The job parsed from ``make_line(**fields)`` (UTC); fails on an error."""
    result = parse_sacct([make_line(**fields)])
    assert result.errors == []
    [job] = result.jobs
    return job


def error_of(**fields: str) -> str:
    """The error message for ``make_line(**fields)`` read as ``t.txt``; fails if it parses."""
    result = parse_sacct([make_line(**fields)], source="t.txt")
    assert result.jobs == []
    [error] = result.errors
    return error.message


@pytest.fixture(scope="module")
def orion() -> dict[str, SacctJob]:
    """The jobs of fixtures/sacct/sacct_orion.txt by JobID, read in Europe/Berlin time."""
    with (FIXTURES / "sacct_orion.txt").open() as lines:
        result = parse_sacct(lines, tz=BERLIN, source="sacct_orion.txt")
    assert result.errors == []
    return {job.job_id: job for job in result.jobs}


# --- the fixture -------------------------------------------------------------------------------------------


def test_fixture_keeps_jobs_array_tasks_and_het_components_and_skips_steps(orion: dict[str, SacctJob]) -> None:
    assert list(orion) == [
        "812102",
        "812210",
        "812301",
        "812344",
        "812360",
        "812377",
        "812390",
        "812400_1",
        "812400_2",
        "812400_3",
        "812400_[4-10%2]",
        "812455",
        "812470",
        "812500+0",
        "812500+1",
    ]


def test_fixture_completed_job_all_fields(orion: dict[str, SacctJob]) -> None:
    assert orion["812301"] == SacctJob(
        job_id="812301",
        job_id_raw="812301",
        cluster="orion",
        partition="gpu-h100",
        account="ml-research",
        user="alice",
        submit=datetime(2024, 3, 28, 8, 14, 2, tzinfo=UTC),  # CET = UTC+1
        start=datetime(2024, 3, 28, 8, 15, 10, tzinfo=UTC),
        end=datetime(2024, 3, 28, 16, 42, 55, tzinfo=UTC),
        elapsed=timedelta(hours=8, minutes=27, seconds=45),
        state="COMPLETED",
        cancelled_by=None,
        gpus=4,
        gpu_type="h100",
        nodes=("gpu-h-04",),
        name="llama-ft-7b",
    )


def test_fixture_times_are_utc_and_agree_with_elapsed_across_dst(orion: dict[str, SacctJob]) -> None:
    for job in orion.values():
        assert job.submit.tzinfo is UTC
        if job.start is not None:
            assert (job.end or QUERY_TIME) - job.start == job.elapsed, job.job_id
    # 812344 ran over the CET -> CEST switch: an hour less than the local clocks differ.
    job = orion["812344"]
    assert job.elapsed == timedelta(days=2, hours=9, minutes=27, seconds=29)
    assert job.start == datetime(2024, 3, 29, 19, 3, 11, tzinfo=UTC)
    assert job.end == datetime(2024, 4, 1, 4, 30, 40, tzinfo=UTC)


def test_fixture_multi_node_job(orion: dict[str, SacctJob]) -> None:
    job = orion["812344"]
    assert job.nodes == ("gpu-h-01", "gpu-h-02", "gpu-h-03", "gpu-h-07")
    assert (job.gpus, job.gpu_type) == (32, "h100")


def test_fixture_day_long_untyped_and_cpu_only_jobs(orion: dict[str, SacctJob]) -> None:
    long_job = orion["812102"]
    assert long_job.elapsed == timedelta(days=10, hours=13, minutes=27, seconds=6)
    assert (long_job.state, long_job.gpus, long_job.gpu_type) == ("TIMEOUT", 16, None)
    assert long_job.nodes == ("gpu-v-01", "gpu-v-02")
    assert (orion["812210"].state, orion["812210"].gpus, orion["812210"].gpu_type) == ("NODE_FAIL", 8, None)
    assert (orion["812390"].gpus, orion["812390"].gpu_type) == (0, None)


def test_fixture_running_jobs_have_no_end(orion: dict[str, SacctJob]) -> None:
    for job_id in ("812400_3", "812470"):
        assert orion[job_id].state == "RUNNING"
        assert orion[job_id].end is None
        assert orion[job_id].start is not None
    assert orion["812470"].gpu_type == "3g.40gb"


def test_fixture_pending_jobs(orion: dict[str, SacctJob]) -> None:
    for job_id in ("812455", "812400_[4-10%2]"):
        job = orion[job_id]
        assert (job.state, job.start, job.end, job.elapsed) == ("PENDING", None, None, timedelta(0))
        assert (job.gpus, job.gpu_type, job.nodes) == (0, None, ())


def test_fixture_cancelled_by_keeps_uid(orion: dict[str, SacctJob]) -> None:
    assert (orion["812377"].state, orion["812377"].cancelled_by) == ("CANCELLED", 380693)
    assert all(job.cancelled_by is None for job_id, job in orion.items() if job_id != "812377")


def test_fixture_array_and_het_ids(orion: dict[str, SacctJob]) -> None:
    ids = {job_id: job.job_id_raw for job_id, job in orion.items() if not job_id.isdigit()}
    assert ids == {
        "812400_1": "812401",
        "812400_2": "812402",
        "812400_3": "812403",
        "812400_[4-10%2]": "812400",
        "812500+0": "812500",
        "812500+1": "812501",
    }
    assert orion["812400_2"].state == "OUT_OF_MEMORY"
    assert orion["812500+1"].nodes == ("cpu-011", "cpu-012")


def test_bad_lines_fixture_reports_each_line_and_keeps_the_rest() -> None:
    path = FIXTURES / "sacct_bad_lines.txt"
    with path.open() as lines:
        result = parse_sacct(lines, source="sacct_bad_lines.txt")
    assert [job.job_id for job in result.jobs] == ["812301", "812455"]
    assert [(error.line_number, error.message) for error in result.errors] == [
        (
            1,
            "sacct_bad_lines.txt:1: field JobID: 'JobID' is not a job ID "
            "(123, 123_4, 123_[5-9], 123+0, each optionally .<step>)",
        ),
        (4, "sacct_bad_lines.txt:4: field NodeList: hostlist 'gpu-h-[01-03,07': '[' without ']'"),
        (6, "sacct_bad_lines.txt:6: expected 14 '|'-separated fields, found 12"),
        (
            7,
            "sacct_bad_lines.txt:7: field AllocTRES: 'gres/gpu:h100=one': GPU count is not a non-negative integer",
        ),
        (8, "sacct_bad_lines.txt:8: field End: '2024-04-01T24:31:59' is not a valid time (hour must be in 0..23)"),
    ]
    file_lines = path.read_text().split("\n")
    assert all(error.line == file_lines[error.line_number - 1] for error in result.errors)


# --- lines and fields --------------------------------------------------------------------------------------


def test_whole_text_crlf_and_blank_lines() -> None:
    text = "\r\n" + make_line() + "\r\n   \n" + make_line(JobID="7", JobIDRaw="7") + "\n"
    result = parse_sacct(text)
    assert result.errors == []
    assert [job.job_id for job in result.jobs] == ["812301", "7"]
    assert result.jobs[0] == parse_one()


def test_default_source_name_in_message() -> None:
    result = parse_sacct(["", "1|2|3"])
    assert result.errors == [SacctLineError(2, "<stdin>:2: expected 14 '|'-separated fields, found 3", "1|2|3")]


def test_job_name_may_hold_the_separator() -> None:
    assert parse_one(JobName="a|b c|").name == "a|b c|"


@pytest.mark.parametrize(
    "job_id", ["123.batch", "123.extern", "123.0", "123.interactive", "123_4.batch", "123+0.batch", "123+0.0"]
)
def test_steps_are_skipped(job_id: str) -> None:
    line = make_line(JobID=job_id, JobIDRaw="123.batch", Partition="", User="")
    assert parse_sacct([line]) == parse_sacct([])


@pytest.mark.parametrize(
    ("job_id", "job_id_raw"),
    [("123", "123"), ("123_4", "127"), ("123_[5-10%2]", "123"), ("123_[1,3,5,...]", "123"), ("123+1", "124")],
)
def test_job_ids_kept_as_written(job_id: str, job_id_raw: str) -> None:
    job = parse_one(JobID=job_id, JobIDRaw=job_id_raw)
    assert (job.job_id, job.job_id_raw) == (job_id, job_id_raw)


@pytest.mark.parametrize(
    ("text", "state", "uid"),
    [
        ("COMPLETED", "COMPLETED", None),
        ("RUNNING", "RUNNING", None),
        ("FAILED", "FAILED", None),
        ("TIMEOUT", "TIMEOUT", None),
        ("OUT_OF_MEMORY", "OUT_OF_MEMORY", None),
        ("NODE_FAIL", "NODE_FAIL", None),
        ("PENDING", "PENDING", None),
        ("CANCELLED", "CANCELLED", None),
        ("CANCELLED by 380693", "CANCELLED", 380693),
        ("CANCELLED by 0", "CANCELLED", 0),
    ],
)
def test_states(text: str, state: str, uid: int | None) -> None:
    job = parse_one(State=text)
    assert (job.state, job.cancelled_by) == (state, uid)


def test_times_default_utc_and_unset() -> None:
    job = parse_one(Start="Unknown", End="None")
    assert job.submit == datetime(2024, 3, 28, 9, 14, 2, tzinfo=UTC)
    assert job.submit.tzinfo is UTC
    assert (job.start, job.end) == (None, None)


@pytest.mark.parametrize(
    ("local", "tz", "utc"),
    [
        ("2024-07-01T12:00:00", BERLIN, datetime(2024, 7, 1, 10, 0, tzinfo=UTC)),
        ("2024-01-15T12:00:00", BERLIN, datetime(2024, 1, 15, 11, 0, tzinfo=UTC)),
        # 02:30 happens twice on 2024-10-27 in Berlin: the first (CEST) is taken.
        ("2024-10-27T02:30:00", BERLIN, datetime(2024, 10, 27, 0, 30, tzinfo=UTC)),
        ("2024-07-01T12:00:00", timezone(timedelta(hours=-7)), datetime(2024, 7, 1, 19, 0, tzinfo=UTC)),
    ],
)
def test_local_times_to_utc(local: str, tz: tzinfo, utc: datetime) -> None:
    result = parse_sacct([make_line(Submit=local)], tz=tz)
    assert result.jobs[0].submit == utc
    assert result.jobs[0].submit.tzinfo is UTC


@pytest.mark.parametrize(
    ("fields", "start"),
    [
        ({"JobID": "abc"}, "field JobID: 'abc' is not a job ID"),
        ({"JobID": "123_"}, "field JobID: '123_' is not a job ID"),
        ({"JobID": "123."}, "field JobID: '123.' is not a job ID"),
        ({"JobIDRaw": "812400_1"}, "field JobIDRaw: '812400_1' is not a numeric job ID"),
        ({"Submit": "Unknown"}, "field Submit: 'Unknown': a job always has a submit time"),
        ({"Submit": "2024-03-28 09:14:02"}, "field Submit: '2024-03-28 09:14:02' is not YYYY-MM-DDTHH:MM:SS"),
        ({"Start": "2024-02-30T00:00:00"}, "field Start: '2024-02-30T00:00:00' is not a valid time"),
        ({"End": "Ystday 10:00"}, "field End: 'Ystday 10:00' is not YYYY-MM-DDTHH:MM:SS"),
        ({"Elapsed": "1:00:00"}, "field Elapsed: '1:00:00' is not [D-]HH:MM:SS"),
        ({"Elapsed": "00:60:00"}, "field Elapsed: '00:60:00' has hours above 23"),
        ({"Elapsed": "INVALID"}, "field Elapsed: 'INVALID' is not [D-]HH:MM:SS"),
        ({"State": "running"}, "field State: 'running' is not a job state"),
        ({"State": "COMPLETED by 5"}, "field State: 'COMPLETED by 5': only CANCELLED"),
        ({"AllocTRES": "gres/gpu"}, "field AllocTRES: 'gres/gpu' is not name=value"),
        ({"AllocTRES": "cpu=4,,mem=1G"}, "field AllocTRES: '' is not name=value"),
        ({"AllocTRES": "gres/gpu=4,gres/gpu=4"}, "field AllocTRES: 'gres/gpu' appears twice"),
        ({"AllocTRES": "gres/gpu=-1"}, "field AllocTRES: 'gres/gpu=-1': GPU count is not"),
        ({"AllocTRES": "gres/gpu:=4"}, "field AllocTRES: 'gres/gpu:=4' has no valid GPU type"),
        ({"NodeList": "gpu-h-[04"}, "field NodeList: hostlist 'gpu-h-[04': '[' without ']'"),
    ],
)
def test_bad_field_is_named(fields: dict[str, str], start: str) -> None:
    assert error_of(**fields).startswith(f"t.txt:1: {start}")


def test_first_bad_field_reported_and_other_lines_parsed() -> None:
    lines = [make_line(), make_line(Elapsed="x", NodeList="["), make_line(JobID="9", JobIDRaw="9")]
    result = parse_sacct(lines, source="s")
    assert [job.job_id for job in result.jobs] == ["812301", "9"]
    assert [(error.line_number, error.message) for error in result.errors] == [
        (2, "s:2: field Elapsed: 'x' is not [D-]HH:MM:SS")
    ]


# --- AllocTRES, Elapsed ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("billing=64,cpu=64,gres/gpu:h100=4,gres/gpu=4,mem=500G,node=1", (4, "h100")),
        ("gres/gpu=8", (8, None)),
        ("", (0, None)),
        ("billing=4,cpu=4,mem=16G,node=1", (0, None)),
        ("cpu=8,gres/gpu:a100=2,mem=64G", (2, "a100")),  # typed only: their sum
        ("gres/gpu:a100=2,gres/gpu:v100=2,gres/gpu=4", (4, None)),  # mixed types
        ("gres/gpu:a100=2,gres/gpu:v100=3", (5, None)),
        ("gres/gpu:h100=4,gres/gpu=8", (8, None)),  # the type covers only part of the GPUs
        ("gres/gpu:3g.40gb=1,gres/gpu=1", (1, "3g.40gb")),
        ("gres/gpu=0", (0, None)),  # a no_consume GRES is allocated as zero
        ("cpu=4,gres/gpumem=40G,gres/gpuutil=80,gres/gpu=1", (1, None)),
        ("energy=NONE,fs/disk=1T,license/matlab=1", (0, None)),
    ],
)
def test_parse_gpu_tres(text: str, expected: tuple[int, str | None]) -> None:
    assert parse_gpu_tres(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00:05:00", timedelta(minutes=5)),
        ("00:00:00", timedelta(0)),
        ("23:59:59", timedelta(hours=23, minutes=59, seconds=59)),
        ("10-13:27:06", timedelta(days=10, hours=13, minutes=27, seconds=6)),
        ("1-00:00:00", timedelta(days=1)),
        ("365-01:02:03", timedelta(days=365, hours=1, minutes=2, seconds=3)),
        ("05:07", timedelta(minutes=5, seconds=7)),  # MM:SS, allowed by the man page
    ],
)
def test_parse_elapsed(text: str, expected: timedelta) -> None:
    assert parse_elapsed(text) == expected


@pytest.mark.parametrize(
    "text", ["", "5", "24:00:00", "00:00:60", "1-5:00:00", "1-05:00", "-00:00:01", "UNLIMITED", "99999999999-00:00:00"]
)
def test_parse_elapsed_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"^'.*'"):
        parse_elapsed(text)


# --- hostlists ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu-a-[01-03,07]", ["gpu-a-01", "gpu-a-02", "gpu-a-03", "gpu-a-07"]),
        ("a[1-2],b-7", ["a1", "a2", "b-7"]),
        ("gpu-h-04", ["gpu-h-04"]),
        ("None assigned", []),
        ("", []),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[9-10]", ["n9", "n10"]),
        ("n[1-010]", [f"n{i}" for i in range(1, 11)]),  # width of the low end, as Slurm
        ("n[1,01,001]", ["n1", "n01", "n001"]),
        ("n[07,01-02]", ["n07", "n01", "n02"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("n[1-2]-ib,login", ["n1-ib", "n2-ib", "login"]),
        ("[1-2]", ["1", "2"]),
        ("n[1-1],n1", ["n1", "n1"]),
        ("None", ["None"]),  # only "None assigned" is special
    ],
)
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("n[1-3", "'[' without ']'"),
        ("n1-3]", "']' without '[' at offset 4"),
        ("n[[1]]", "nested '[' at offset 2"),
        ("n[]", "'' is not a number or lo-hi range"),
        ("n[a-b]", "'a-b' is not a number or lo-hi range"),
        ("n[-1]", "'-1' is not a number or lo-hi range"),
        ("n[1-2,]", "'' is not a number or lo-hi range"),
        ("n[1-2-3]", "'1-2-3' is not a number or lo-hi range"),
        ("n[5-3]", "range '5-3' is descending"),
        ("a,,b", "empty host name"),
        (",a", "empty host name"),
        ("a,", "empty host name"),
        ("a b", "whitespace at offset 1"),
        ("n[1-99999999]", "more than 65536 hosts"),
        ("n[1-300]m[1-300]", "more than 65536 hosts"),
    ],
)
def test_expand_hostlist_rejects(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as raised:
        expand_hostlist(text)
    assert str(raised.value) == f"hostlist {text!r}: {problem}"


@pytest.mark.parametrize(
    ("hosts", "text"),
    [
        (["n01", "n02", "n03", "n07"], "n[01-03,07]"),
        (["gpu-a-01", "gpu-a-02", "gpu-a-03", "gpu-a-07"], "gpu-a-[01-03,07]"),
        (["a1", "a2", "b-7"], "a[1-2],b-7"),
        (["n9", "n10"], "n[9-10]"),
        (["n08", "n09", "n10", "n11"], "n[08-11]"),
        (["n1", "n01"], "n[1,01]"),
        (["n1", "n02", "n03"], "n[1,02-03]"),
        (["n1", "n3"], "n[1,3]"),
        (["n3", "n1", "n2"], "n[3,1-2]"),
        (["n1", "n1"], "n[1,1]"),
        (["login", "n1", "login2"], "login,n1,login2"),
        (["cpu-011", "cpu-012", "gpu-h-01"], "cpu-[011-012],gpu-h-01"),
        (["a1", "b1", "a2"], "a1,b1,a2"),
        (["1", "2"], "[1-2]"),
        ([], ""),
    ],
)
def test_compress_hostlist(hosts: list[str], text: str) -> None:
    assert compress_hostlist(hosts) == text
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("host", ["", "a,b", "n[1]", "a]", "a b", "a\tb"])
def test_compress_hostlist_rejects(host: str) -> None:
    with pytest.raises(ValueError, match="cannot be written in a hostlist"):
        compress_hostlist(["n1", host])


# Runs of consecutive host numbers, each number printed at its own width, so ranges and width changes are common.
HOST_RUNS = st.builds(
    lambda prefix, first, widths: [f"{prefix}{first + i:0{width}d}" for i, width in enumerate(widths)],
    st.sampled_from(["n", "gpu-a-", ""]),
    st.integers(0, 12) | st.integers(97, 101),
    st.lists(st.integers(1, 3), min_size=1, max_size=5),
)
OTHER_HOSTS = st.text(
    st.characters(codec="utf-8", exclude_characters="[],|", exclude_categories=("Z", "C")), min_size=1, max_size=8
)
HOST_LISTS = st.lists(HOST_RUNS | OTHER_HOSTS.map(lambda host: [host]), max_size=8).map(
    lambda runs: [host for run in runs for host in run]
)


@given(HOST_LISTS)
def test_compress_then_expand_gives_the_hosts_back(hosts: list[str]) -> None:
    assert expand_hostlist(compress_hostlist(hosts)) == hosts


# --- writing lines -----------------------------------------------------------------------------------------


def test_format_writes_sacct_lines(orion: dict[str, SacctJob]) -> None:
    lines = (FIXTURES / "sacct_orion.txt").read_text().splitlines()
    pending = next(line for line in lines if line.startswith("812455|"))
    assert format_sacct_line(orion["812455"], tz=BERLIN) == pending
    assert format_sacct_line(orion["812344"], tz=BERLIN) == (
        "812344|812344|orion|gpu-h100|nlp|bob|2024-03-29T19:58:40|2024-03-29T20:03:11|2024-04-01T06:30:40|"
        "2-09:27:29|COMPLETED|gres/gpu:h100=32,gres/gpu=32|gpu-h-[01-03,07]|pretrain-1b"
    )
    assert format_sacct_line(orion["812377"]) == (
        "812377|812377|orion|gpu-h100|vision|erin|2024-03-31T11:02:44|2024-03-31T11:05:00|2024-03-31T13:40:12|"
        "02:35:12|CANCELLED by 380693|gres/gpu:h100=1,gres/gpu=1|gpu-h-06|diffusion-eval"
    )
    assert format_sacct_line(orion["812102"]).split("|")[9:12] == ["10-13:27:06", "TIMEOUT", "gres/gpu=16"]
    assert format_sacct_line(orion["812400_3"]).split("|")[8] == "Unknown"
    assert format_sacct_line(orion["812390"]).split("|")[11] == ""


def test_format_then_parse_every_fixture_job(orion: dict[str, SacctJob]) -> None:
    lines = [format_sacct_line(job, tz=BERLIN) for job in orion.values()]
    assert parse_sacct(lines, tz=BERLIN).jobs == list(orion.values())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"account": "a|b"}, "field Account: 'a|b' cannot be written in one '|'-separated line"),
        ({"name": "x\ny"}, "field JobName: 'x\\ny' cannot be written in one '|'-separated line"),
        ({"submit": datetime(2024, 1, 1, tzinfo=UTC).replace(tzinfo=None)}, "naive datetime 2024-01-01T00:00:00"),
        ({"elapsed": timedelta(seconds=-1)}, "negative elapsed time"),
        ({"gpus": -1}, "negative GPU count -1"),
        ({"gpu_type": "a,b"}, "GPU type 'a,b' cannot be written in AllocTRES"),
        ({"nodes": ("n1", "n2,n3")}, "host name 'n2,n3' cannot be written in a hostlist"),
    ],
)
def test_format_rejects_what_would_not_read_back(changes: dict[str, object], message: str) -> None:
    job = dataclasses.replace(parse_one(), **changes)  # type: ignore[arg-type]
    with pytest.raises(ValueError) as raised:
        format_sacct_line(job)
    assert str(raised.value).startswith(message)


FIELD_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="|\r\n"), max_size=12)
INSTANTS = st.integers(1, 253_402_000_000).map(lambda seconds: datetime.fromtimestamp(seconds, UTC))
JOB_NUMBERS = st.integers(1, 2**32 - 1)
JOB_IDS = st.one_of(
    JOB_NUMBERS.map(str),
    st.builds("{}_{}".format, JOB_NUMBERS, st.integers(0, 4_000_000)),
    st.builds("{}+{}".format, JOB_NUMBERS, st.integers(0, 127)),
    st.builds("{}_[{}]".format, JOB_NUMBERS, st.sampled_from(["4-10%2", "1-99:2", "1,3,5,..."])),
)
STATES = ["BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY"]
STATES += ["PENDING", "PREEMPTED", "RUNNING", "REQUEUED", "RESIZING", "REVOKED", "SUSPENDED", "TIMEOUT"]
TIME_ZONES = st.just(UTC) | st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))


@st.composite
def sacct_jobs(draw: st.DrawFn) -> SacctJob:
    """Any job parse_sacct can produce."""
    state = draw(st.sampled_from(STATES))
    return SacctJob(
        job_id=draw(JOB_IDS),
        job_id_raw=str(draw(JOB_NUMBERS)),
        cluster=draw(FIELD_TEXT),
        partition=draw(FIELD_TEXT),
        account=draw(FIELD_TEXT),
        user=draw(FIELD_TEXT),
        submit=draw(INSTANTS),
        start=draw(st.none() | INSTANTS),
        end=draw(st.none() | INSTANTS),
        elapsed=timedelta(seconds=draw(st.integers(0, 10**9))),
        state=state,
        cancelled_by=draw(st.none() | st.integers(0, 2**32 - 1)) if state == "CANCELLED" else None,
        gpus=draw(st.integers(0, 4096)),
        gpu_type=draw(st.none() | st.from_regex(r"[a-z0-9][a-z0-9_.\-]{0,10}", fullmatch=True)),
        nodes=tuple(draw(HOST_LISTS)),
        name=draw(st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=20)),
    )


@given(sacct_jobs(), TIME_ZONES)
def test_format_then_parse_gives_the_job_back(job: SacctJob, tz: tzinfo) -> None:
    result = parse_sacct([format_sacct_line(job, tz=tz)], tz=tz)
    assert result.errors == []
    assert result.jobs == [job]
