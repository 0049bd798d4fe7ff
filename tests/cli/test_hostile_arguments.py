"""Months and times no command can use (year 0, an offset pushing a time past year 9999, full-width digits) and
numbers out of range: one ``error:`` line naming the option or argument and exit code 2, never a traceback."""

from __future__ import annotations

import pytest

from finops.cli import app


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["audit", "list", "--since", "9999-12-31T23:59:59-23:59"], "--since"),
        (["audit", "list", "--until", "9999-12-31"], "--until"),
        (["budget", "set", "alpha", "10", "--month", "0000-01", "--yes"], "month"),
        (["budget", "delete", "alpha", "0000-01"], "month"),
        (["showback", "--month", "0000-01", "--team", "alpha"], "month"),
    ],
)
def test_the_command_line_answers_one_error_line(cli_env, args, field) -> None:  # type: ignore[no-untyped-def]
    result = cli_env.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert field in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["budget", "set", "alpha", "10", "--month", "２０２６-１１", "--yes"], "month"),
        (["budget", "set", "alpha", "１００", "--yes"], "amount"),
        (["audit", "list", "--since", "２０２６-１１"], "--since"),
        (["rightsizing", "--memory-headroom", "1e999999"], "--memory-headroom"),
        (["rightsizing", "--memory-headroom", "101"], "--memory-headroom"),
        (["rightsizing", "--memory-headroom", "１.５"], "--memory-headroom"),
        (["alerts", "silence", "--matcher", 'team="alpha"', "--until", "9999-12-31", "--comment", "x"], "a year"),
        (["alerts", "silence", "--matcher", r"job=~(a)\1", "--until", "2099-01-01", "--comment", "x"], "RE2"),
    ],
)
def test_nonsense_is_refused(cli_env, args, field) -> None:  # type: ignore[no-untyped-def]
    """Full-width digits (Python's int() and Decimal() take them), a headroom of 10⁹⁹⁹⁹⁹⁹, a silence until year
    9999 and a regex RE2 refuses."""
    result = cli_env.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert field in result.stderr, result.stderr
