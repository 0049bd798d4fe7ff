"""Who a nudge about a user's jobs goes to: the user's own e-mail address or Slack webhook, and copies.

Job records name a user by login (Slurm ``User``, a pod's ``user`` label); an address comes from, in order:

1. the recipients file (``FINOPS_NUDGE_RECIPIENTS``, YAML; every key optional, unknown keys are errors)::

       users:
         alice: {email: alice.smith@example.org}          # instead of alice@<domain>
         bob: {slack: ml-team, slack_member: U012AB3CD}   # a webhook of FINOPS_ALERT_SLACK_WEBHOOKS, @-mentioning bob
         carol: {email: carol@example.org, slack: carol}  # both
         dave: {}                                         # never sent nudges
       copy:                                              # every nudge also goes here (JDS's admin_emails)
         email: [hpc-admins@example.org]
         slack: [hpc-ops]

   A Slack incoming webhook posts to the one channel it was made for, so a user's own messages need a webhook of
   theirs (a channel or a direct-message conversation); ``slack_member`` (the member ID Slack shows in a
   profile, ``U…`` or ``W…``) @-mentions them in whatever channel their webhook posts to (Slack's ``<@U012AB3CD>``
   syntax, "Formatting text for app surfaces");
2. else ``<login>@<FINOPS_NUDGE_EMAIL_DOMAIN>`` when that domain is set (Job Defense Shield's ``email-method:
   simple`` with ``email-domain-name``), for a login of letters, digits and ``._+-`` only;
3. else the user has no address of their own.

The copies are added to every nudge, so that a site can read them (and act on an idle running job) even before
its users are addressed. A nudge with no target at all is not sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field, field_validator

from alerts.config import Strict, TextList, email_addresses, load_model
from finops.settings.alerts import email_domain

SLACK_MEMBER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
"""A Slack member ID (``U012AB3CD``; ``W…`` on Enterprise Grid)."""
_LOGIN = re.compile(r"[A-Za-z0-9._+-]+")


class UserAddress(Strict):
    """One user's own targets: e-mail addresses, Slack webhook names, and the Slack member ID to @-mention."""

    email: TextList = Field(default_factory=list)
    slack: TextList = Field(default_factory=list)
    slack_member: str | None = None

    @field_validator("email")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        return email_addresses(value)

    @field_validator("slack_member")
    @classmethod
    def _member_id(cls, value: str | None) -> str | None:
        if value is not None and not SLACK_MEMBER_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not a Slack member ID such as U012AB3CD")
        return value


class RecipientsFile(Strict):
    """The recipients file (module docstring)."""

    users: dict[str, UserAddress] = Field(default_factory=dict)
    copy_to: UserAddress = Field(default_factory=UserAddress, alias="copy")


@dataclass(frozen=True)
class Recipients:
    """The addresses of users (module docstring): the recipients file's and the e-mail domain (without ``@``)."""

    users: dict[str, UserAddress] = field(default_factory=dict)
    copy_to: UserAddress = field(default_factory=UserAddress)
    domain: str = ""

    @classmethod
    def load(cls, path: Path | None, domain: str) -> Recipients:
        """From the recipients file at ``path`` (None: none) and the domain. AlertConfigError naming the file and the
        field, ValueError for a domain that is not one."""
        found = RecipientsFile() if path is None else load_model(RecipientsFile, path)
        return cls(found.users, found.copy_to, email_domain(domain))

    def own(self, user: str) -> UserAddress:
        """``user``'s own targets (none: an empty address)."""
        if user in self.users:
            return self.users[user]
        if self.domain and _LOGIN.fullmatch(user):
            return UserAddress(email=[f"{user}@{self.domain}"])
        return UserAddress()

    def targets(self, user: str) -> list[tuple[str, str]]:
        """(channel, target) outbox pairs of a nudge to ``user``: one e-mail to their addresses, their Slack
        webhooks, one e-mail to the copy addresses, the copy webhooks (each once)."""
        own = self.own(user)
        found: list[tuple[str, str]] = []
        for address in (own, self.copy_to):
            if address.email:
                found.append(("email", ", ".join(address.email)))
            found += [("slack", name) for name in address.slack]
        return list(dict.fromkeys(found))

    def mentions(self, user: str) -> tuple[str, ...]:
        """The Slack member IDs a nudge to ``user`` @-mentions."""
        member = self.own(user).slack_member
        return (member,) if member else ()
