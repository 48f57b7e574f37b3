"""The partner pages, rendered from the committed notebooks: ``python -m analytics.pages``.

``make notebooks`` runs this after re-running the notebooks; the pages are written into the
service package (``service/partner_docs/pages/``), which serves them under ``/docs/webhooks/``. A test
renders them afresh and compares, so a notebook and its page cannot drift apart.

What the rendering does to a notebook:

- cells tagged ``remove-cell`` (setup that only prepares the notebook: imports of the service,
  fixtures) are left out; input and output prompts too;
- the service's own address as the notebooks write it (``https://launchrooms.example`` followed by
  ``/api/`` or ``/docs/``) becomes ``BASE_URL_TOKEN``, which the server fills with its base URL;
  example payloads keep their room URLs, since those are signed bytes;
- nothing that needs a script, an inline style or another origin survives: ``<script>`` and
  ``<style>`` elements and ``style`` attributes are dropped (the pages' stylesheet is served beside
  them), and an image must be inline (``data:``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

import nbformat
from bs4 import BeautifulSoup
from nbconvert import HTMLExporter, MarkdownExporter
from nbconvert.preprocessors import TagRemovePreprocessor
from pygments.formatters import HtmlFormatter

from service.partner_docs import (
    BASE_URL_TOKEN,
    EVENT_CATALOG,
    INDEX,
    PAGES,
    STYLESHEET,
    VERIFYING_SIGNATURES,
    PartnerPage,
    page_url,
)

REMOVE_TAG = "remove-cell"  # the tag of setup cells; the name Jupyter Book and nbconvert docs use
REMOVE_INPUT_TAG = "remove-input"  # a cell whose result the page shows, but not its setup code
NOTEBOOK_BASE_URL = "https://launchrooms.example"  # the notebooks' service address (analytics.event_docs)
_SERVICE_LINK = re.compile(re.escape(NOTEBOOK_BASE_URL) + r"(?=/(?:api|docs)/)")
PAGES_DIR = Path(__file__).resolve().parents[1] / "service" / "partner_docs" / "pages"
NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
CODE_STYLE = "default"  # pygments' default style meets WCAG AA contrast on white
_STYLE_BLOCK = re.compile(r"<style[^>]*>.*?</style>\s*", re.DOTALL)
_STYLE_ATTRIBUTE = re.compile(r'\sstyle="[^"]*"')

PAGE_CSS = """\
:root { color-scheme: light; }
body { margin: 0; font: 16px/1.5 system-ui, sans-serif; color: #1b1b1b; background: #fff; }
header, main, footer { max-width: 60rem; margin: 0 auto; padding: 0 1rem; }
header { border-bottom: 1px solid #ccc; }
nav ul { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 1rem; }
a { color: #0b57d0; text-decoration: underline; }
h1, h2, h3 { line-height: 1.25; }
.anchor-link { margin-left: 0.3em; color: #555; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 0.9em; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f8fa; padding: 0.75rem;
  border: 1px solid #ddd; border-radius: 4px; }
table { border-collapse: collapse; margin: 1rem 0; display: block; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top;
  overflow-wrap: anywhere; }
th { background: #f0f0f0; }
details { margin: 0.5rem 0; }
img { max-width: 100%; }
.output_area pre { background: #fff; }
.jp-RenderedHTMLCommon, .rendered_html { overflow-wrap: anywhere; }
"""


@dataclass(frozen=True, slots=True)
class RenderedPage:
    page: PartnerPage
    html: str
    markdown: str


def _tokenize(text: str) -> str:
    """The service's address as the notebooks write it, made the token the server fills."""
    return _SERVICE_LINK.sub(BASE_URL_TOKEN, text)


def _without_setup(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    remover = TagRemovePreprocessor(  # type: ignore[no-untyped-call]
        remove_cell_tags={REMOVE_TAG}, remove_input_tags={REMOVE_INPUT_TAG}, enabled=True
    )
    cleaned: nbformat.NotebookNode = remover.preprocess(notebook, {})[0]  # type: ignore[no-untyped-call]
    return cleaned


def _clean_html(fragment: str) -> str:
    soup = BeautifulSoup(fragment, "html.parser")
    for element in soup.find_all(["script", "style", "link", "iframe", "object", "embed"]):
        element.decompose()
    for element in soup.find_all(True):
        element.attrs.pop("style", None)
        for name in [name for name in element.attrs if name.lower().startswith("on")]:
            del element.attrs[name]
    for image in soup.find_all("img"):
        if not str(image.get("src", "")).startswith("data:"):
            raise ValueError("a partner page image must be inline (data:), never a file or another origin")
    return str(soup)


def _clean_markdown(text: str) -> str:
    return _STYLE_ATTRIBUTE.sub("", _STYLE_BLOCK.sub("", text)).strip() + "\n"


def _nav(current: PartnerPage) -> str:
    items = []
    for page in PAGES:
        href = escape(page_url(BASE_URL_TOKEN, page))
        here = ' aria-current="page"' if page is current else ""
        items.append(f'<li><a href="{href}"{here}>{escape(page.title)}</a></li>')
    markdown = escape(page_url(BASE_URL_TOKEN, current, markdown=True))
    items.append(f'<li><a href="{markdown}">This page as Markdown</a></li>')
    return '<nav aria-label="Partner pages"><ul>' + "".join(items) + "</ul></nav>"


def _html_page(page: PartnerPage, body: str) -> str:
    stylesheet = escape(BASE_URL_TOKEN + STYLESHEET)
    alternate = escape(page_url(BASE_URL_TOKEN, page, markdown=True))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(page.title)}</title>\n"
        '<link rel="icon" href="data:,">\n'  # no icon: the browser asks for /favicon.ico otherwise
        f'<link rel="stylesheet" href="{stylesheet}">\n'
        f'<link rel="alternate" type="text/markdown" href="{alternate}">\n'
        f"</head>\n<body>\n<header>{_nav(page)}</header>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def _exporters() -> tuple[HTMLExporter, MarkdownExporter]:
    html = HTMLExporter(  # type: ignore[no-untyped-call]
        template_name="basic", exclude_input_prompt=True, exclude_output_prompt=True
    )
    markdown = MarkdownExporter(exclude_input_prompt=True, exclude_output_prompt=True)  # type: ignore[no-untyped-call]
    return html, markdown


def render_notebook(page: PartnerPage, notebook: nbformat.NotebookNode) -> RenderedPage:
    """``page`` from ``notebook`` (already executed): setup cells out, the service's address tokenized."""
    html_exporter, markdown_exporter = _exporters()
    cleaned = _without_setup(notebook)
    body, _ = html_exporter.from_notebook_node(cleaned)
    markdown, resources = markdown_exporter.from_notebook_node(cleaned)
    if resources.get("outputs"):
        raise ValueError(f"{page.notebook}: an output is a file; partner pages carry images inline")
    return RenderedPage(
        page=page,
        html=_tokenize(_html_page(page, _clean_html(body))),
        markdown=_tokenize(_clean_markdown(markdown)),
    )


def _index_markdown() -> str:
    lines = [
        f"# {INDEX.title}",
        "",
        "The platform sends your endpoint a signed HTTPS `POST` for each event you subscribe to. These "
        "pages are the reference; each is also served as Markdown at the same address plus `.md`.",
        "",
    ]
    for page in PAGES:
        if page is not INDEX:
            url = page_url(BASE_URL_TOKEN, page)
            markdown = page_url(BASE_URL_TOKEN, page, markdown=True)
            lines.append(f"- [{page.title}]({url}) ([Markdown]({markdown})): {page.notes}")
    lines += [
        "",
        "The same content for programs:",
        "",
        f"- [Webhook event catalog]({BASE_URL_TOKEN}/api/v1/webhooks/events): every event kind as JSON, "
        "with its JSON Schema.",
        f"- [Signature test vectors]({BASE_URL_TOKEN}/api/v1/webhooks/test-vectors): signed deliveries, "
        "genuine and tampered, with the verdict a correct verifier reaches.",
        f"- [Public API index]({BASE_URL_TOKEN}/api/v1).",
    ]
    return "\n".join(lines) + "\n"


def render_index() -> RenderedPage:
    notebook = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    cell = nbformat.v4.new_markdown_cell(_index_markdown(), id="index")  # type: ignore[no-untyped-call]
    notebook.cells.append(cell)  # a fixed id: a fresh render is byte for byte the stored one
    html_exporter, _ = _exporters()
    body, _ = html_exporter.from_notebook_node(notebook)
    return RenderedPage(page=INDEX, html=_html_page(INDEX, _clean_html(body)), markdown=_index_markdown())


def stylesheet() -> str:
    """The pages' one stylesheet: the layout, then pygments' classes for the code."""
    code = str(HtmlFormatter(style=CODE_STYLE).get_style_defs(".highlight"))
    return PAGE_CSS + code + "\n"


def render_pages(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[RenderedPage]:
    """Every partner page from the committed notebooks (their outputs as committed)."""
    rendered = [render_index()]
    for page in (EVENT_CATALOG, VERIFYING_SIGNATURES):
        assert page.notebook is not None
        notebook = nbformat.read(notebooks_dir / page.notebook, as_version=4)  # type: ignore[no-untyped-call]
        rendered.append(render_notebook(page, notebook))
    return rendered


def stored_files(notebooks_dir: Path = NOTEBOOKS_DIR) -> dict[str, str]:
    """File name -> text, exactly as the package stores them."""
    files = {"pages.css": stylesheet()}
    for rendered in render_pages(notebooks_dir):
        files[f"{rendered.page.stem}.html"] = rendered.html
        files[f"{rendered.page.stem}.md"] = rendered.markdown
    return files


def write_pages(notebooks_dir: Path = NOTEBOOKS_DIR, target: Path = PAGES_DIR) -> list[Path]:
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in stored_files(notebooks_dir).items():
        path = target / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analytics.pages", description=__doc__.split("\n")[0])
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS_DIR, help="the notebooks folder")
    args = parser.parse_args(argv)
    for path in write_pages(args.notebooks):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
