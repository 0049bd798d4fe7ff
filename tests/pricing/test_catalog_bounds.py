"""A price catalogue is read within bounds (finops/pricing/catalog_yaml.py): its size, nesting, nodes with aliases
expanded and models; past one it is refused with ``CatalogError`` naming the bound, before it is built, and
``prices import`` of 100,000 models is refused so, nothing stored. At most 20 field problems are named."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from finops.cli import app
from finops.db.models import PriceCatalogVersion
from finops.pricing.catalog import MAX_PROBLEMS, CatalogError, parse_catalog
from finops.pricing.catalog_yaml import MAX_CHARACTERS, MAX_DEPTH, MAX_MODELS, MAX_NODES
from tests.support.catalogues import SOURCE, catalogue


def _refusal(text: str) -> str:
    with pytest.raises(CatalogError) as refused:
        parse_catalog(text, "c.yaml")
    return str(refused.value)


def test_the_most_models_pass_and_one_more_is_refused() -> None:
    assert len(parse_catalog(catalogue(MAX_MODELS), "c.yaml").models) == MAX_MODELS
    assert _refusal(catalogue(MAX_MODELS + 1)) == (
        f"price catalog c.yaml: models: {MAX_MODELS + 1} models, more than the {MAX_MODELS} a catalog may have"
    )


def test_deep_nesting_is_refused_before_it_is_built_not_a_recursion_error() -> None:
    assert _refusal("models: " + "[" * 999 + "]" * 999) == (
        f"price catalog c.yaml: nested deeper than {MAX_DEPTH} levels at line 1"
    )
    block = "models:\n" + "".join("  " * depth + f"k{depth}:\n" for depth in range(1, 60)) + "  " * 60 + "v\n"
    assert _refusal(block) == f"price catalog c.yaml: nested deeper than {MAX_DEPTH} levels at line 33"
    # Past libyaml's own bound (1,000 levels) its scanner refuses first.
    assert _refusal("models: " + "[" * 100_000 + "]" * 100_000) == (
        "price catalog c.yaml: invalid YAML at line 1: exceeded maximum nesting depth"
    )


def test_aliases_are_counted_as_what_they_stand_for() -> None:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 9)]  # 10⁹ scalars
    assert _refusal("\n".join(lines)).startswith(f"price catalog c.yaml: more than {MAX_NODES} nodes")
    # An anchor used a few times is fine.
    shared = catalogue(2).replace(f"tariff_source: {SOURCE}", f"tariff_source: &source {SOURCE}")
    shared = shared.replace(f"        sources: [{SOURCE}]", "        sources: [*source]")
    assert len(parse_catalog(shared, "c.yaml").models) == 2


def test_a_text_over_the_size_is_refused_unread() -> None:
    text = catalogue(1) + "#" * MAX_CHARACTERS
    assert _refusal(text) == (
        f"price catalog c.yaml: {len(text)} characters, more than the {MAX_CHARACTERS} a catalog may have"
    )


def test_at_most_twenty_problems_are_named() -> None:
    message = _refusal(catalogue(100, described=False))
    assert message.count("description: Field required") == MAX_PROBLEMS
    assert message.endswith(f"; and {100 - MAX_PROBLEMS} more problems")


def test_import_of_100000_models_is_refused_naming_the_bound(engine, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FINOPS_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    path = tmp_path / "huge.yaml"
    path.write_text(catalogue(100_000))
    result = CliRunner().invoke(app, ["prices", "import", str(path), "--no-rollup"])
    assert result.exit_code == 2, result.output
    assert f"more than the {MAX_CHARACTERS} a catalog may have" in result.output
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(PriceCatalogVersion)) == 0
