"""MkDocs hooks (mkdocs.yml `hooks:`): the pages docs/generate.py makes from the code, the notebooks as tutorials,
the benchmark figures, and the repository's address from pyproject.toml, its one home."""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

_spec = importlib.util.spec_from_file_location("rloo_kit_docs_generate", Path(__file__).with_name("generate.py"))
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)

log = logging.getLogger("mkdocs.hooks.rloo_kit")
MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.M)


def on_config(config):
    """The repository link, read from `[project.urls] Repository` rather than written a second time."""
    pyproject = (generate.REPO / "pyproject.toml").read_text(encoding="utf-8")
    config["repo_url"] = re.search(r'^\[project\.urls\]\n(?:.*\n)*?Repository = "([^"]+)"', pyproject, re.M)[1]
    config["repo_name"] = config["repo_url"].removeprefix("https://github.com/")
    return config


@event_priority(100)  # before mkdocs-jupyter's on_files, which takes the .ipynb files it finds there
def on_files(files, config):
    """The notebooks at notebooks/NAME.ipynb (their executed copies where the tests left matching ones) and the
    benchmark figures beside the results page."""
    for uri, source in generate.tutorials().items():  # a File of its own folder (mkdocs-jupyter reads it from there)
        root = source.parents[len(Path(uri).parts) - 1]
        files.append(File(uri, str(root), config.site_dir, config.use_directory_urls))
        log.info("%s from %s", uri, source.relative_to(generate.REPO))
    for image in sorted(generate.RESULTS.glob("*.png")):
        files.append(File.generated(config, f"results/{image.name}", abs_src_path=str(image)))
    return files


def on_page_markdown(markdown, page, config, files):
    """`<!-- generated: NAME -->` -> the page docs/generate.py makes for NAME."""

    def fill(match: re.Match) -> str:
        make = generate.PAGES.get(match[1])
        if make is None:
            raise PluginError(f"{page.file.src_uri}: no generated page '{match[1]}' (docs/generate.py PAGES: "
                              f"{', '.join(generate.PAGES)}).")
        return make()

    return MARKER.sub(fill, markdown)
