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
