"""A function from a Python file of the user's own, as the command line names it (`PATH.py:NAME`): a reward
(`--reward`) or a tool (`--tools`). Only a file on this machine is read, never a URL or a hub id, since the file
runs as code; every mistake is one line naming the option, the file and what it holds.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from .errors import RlooKitError


def function_from_file(spec: str, path: str, name: str, error: type[RlooKitError], option: str) -> Callable:
    """The function `name` of the local file `path` (`spec` as the user wrote it, for messages); raises `error`."""
    file = Path(path).expanduser()
    if "://" in path or not file.is_file():
        raise error(f"{option} '{spec}': '{path}' is not a file on this machine. Functions are read from local .py "
                    "files only.")
    module_spec = importlib.util.spec_from_file_location(f"rloo_kit_user.{file.stem}", file)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        raise error(f"{option} '{spec}': importing {file} raised {type(e).__name__}: {e}") from e
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise error(f"{option} '{spec}': {file} has no function '{name}'. It has: {', '.join(found) or 'none'}.")
    return fn
