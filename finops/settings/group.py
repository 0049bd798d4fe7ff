"""What every settings group shares: the ``FINOPS_`` prefix, secrets read from ``*_FILE`` paths, and
comma-separated lists."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

from pydantic import SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

FILE_SUFFIX = "_file"
"""A field ``<name>_file`` beside a field ``<name>`` is the file that secret may be read from instead."""


def secret_file_fields(group: type[BaseSettings]) -> dict[str, str]:
    """The group's ``<name>_file`` fields, each → the secret field it holds the file of."""
    fields = group.model_fields
    return {
        f"{name}{FILE_SUFFIX}": name
        for name in fields
        if not name.endswith(FILE_SUFFIX) and f"{name}{FILE_SUFFIX}" in fields
    }


class SettingsGroup(BaseSettings):
    """What every group shares: the ``FINOPS_`` prefix and secrets read from ``*_FILE`` paths."""

    model_config = SettingsConfigDict(env_prefix="FINOPS_", extra="ignore", hide_input_in_errors=True)

    @model_validator(mode="after")
    def _secrets_from_files(self) -> typing.Self:
        fields = type(self).model_fields
        for file_field, name in secret_file_fields(type(self)).items():
            path: Path | None = getattr(self, file_field)
            variable = f"FINOPS_{name.upper()}"
            if getattr(self, name) is not None and path is not None:
                raise ValueError(f"set {variable} or {variable}_FILE, not both")
            if path is not None:
                try:
                    secret = path.read_text().strip()
                except OSError as exc:
                    raise ValueError(f"{variable}_FILE {path}: {exc.strerror}") from exc
                setattr(self, name, _secret(fields[name].annotation, secret, f"{variable}_FILE {path}"))
        return self


def comma_list(value: object) -> object:
    """``"finops-admins, sre"`` → ``["finops-admins", "sre"]`` (blank items dropped); anything else as it is."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def _secret(annotation: Any, text: str, where: str) -> object:
    """A secret read from a file, as its field's type: a JSON object of name → secret, or one secret."""
    kinds = typing.get_args(annotation) or (annotation,)
    if any(typing.get_origin(kind) is dict for kind in kinds):
        return _webhooks(text, where)
    return SecretStr(text)


def _webhooks(text: str, where: str) -> dict[str, SecretStr]:
    """A JSON object of webhook name → URL, as secrets. ValueError naming ``where`` (never the content)."""
    try:
        found: Any = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where}: not a JSON object of name → URL (line {getattr(exc, 'lineno', '?')})") from None
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise ValueError(f"{where}: not a JSON object of name → URL")
    return {name: SecretStr(url) for name, url in found.items()}
