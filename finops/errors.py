"""The one base class of the errors a user of gpu-finops can act on.

A :class:`FinopsError` says what is wrong with the input, the settings or a file in one line (``str(exc)``),
naming the file, field or option at fault. The command line shows it as ``error: <message>`` on stderr and
exits with code 2 (:mod:`finops.cli`); the REST API turns the ``ValueError`` ones into 4xx answers.

This module imports nothing, so every part of the project (but the node collector, which depends on no
``finops`` module) can raise these errors.
"""

from __future__ import annotations


class FinopsError(Exception):
    """An error the user can act on: bad input, a refused file, a missing migration.

    ``str(exc)`` is the one line shown to the user. Subclasses keep a second, standard base (``ValueError``,
    ``RuntimeError``) so that code catching that base keeps working.
    """
