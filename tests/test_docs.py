"""The documentation site stays true to the code: every config key is documented, and the README's
first-run snippets are the getting-started page's. (``mkdocs build --strict`` in ``.ci/run`` checks
the links, anchors and navigation.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.config.checks import SECTIONS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)
_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def code_words(text: str) -> set[str]:
    """Every identifier-like word inside an inline code span of ``text``."""
    return {word for span in _CODE_SPAN.findall(text) for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}


@pytest.mark.parametrize(("section", "keys"), SECTIONS, ids=[template or "top" for template, _ in SECTIONS])
def test_every_config_key_the_loader_accepts_is_in_the_configuration_reference(section: str, keys: set[str]) -> None:
    documented = code_words((DOCS / "configuration.md").read_text())
    missing = sorted(keys - documented)
    assert not missing, f"docs/configuration.md does not name {section or 'top-level'} keys {missing}"


def test_the_check_sees_a_missing_key() -> None:
    assert "no_such_key" not in code_words((DOCS / "configuration.md").read_text())
    assert "max_runs_per_key" in code_words("| `background.*` | `max_concurrent`, `max_runs_per_key` |")


def blocks(path: Path) -> list[tuple[str, str]]:
    return [(language, body.strip()) for language, body in _BLOCK.findall(path.read_text())]


def test_the_getting_started_page_shows_the_readmes_first_run() -> None:
    """tests/test_first_run.py runs the README's snippets; the docs page must show the same ones."""
    readme = blocks(ROOT / "README.md")
    page = blocks(DOCS / "getting-started.md")
    first_run = [block for block in readme
                 if "loopgate serve" in block[1] or "curl" in block[1] or 'model="demo"' in block[1]
                 or "pytest" in block[1]]
    assert len(first_run) == 4, first_run
    for block in first_run:
        assert block in page, f"docs/getting-started.md lacks the README's block:\n{block[1]}"


def test_the_readmes_links_into_docs_exist() -> None:
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 10
    missing = sorted({link for link in links if not (ROOT / link).is_file()})
    assert not missing, f"README.md links to missing docs pages: {missing}"


def test_every_docs_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    missing = [page for page in pages if re.search(rf"(?m)^\s*- (?:[^:\n]+: )?{re.escape(page)}\s*$", nav) is None]
    assert not missing, f"mkdocs.yml's nav lacks {missing}"


def test_the_docs_theme_fetches_no_web_fonts() -> None:
    """Material fetched Google Fonts at every page view (errors offline, a request to Google from air-gapped
    sites); ``theme.font: false`` uses the system fonts."""
    import yaml

    class Tolerant(yaml.SafeLoader):
        pass

    Tolerant.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Tolerant)
    assert config["theme"]["name"] == "material" and config["theme"].get("font") is False
