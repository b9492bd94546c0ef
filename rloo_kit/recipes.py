"""A run as one YAML file, as the alignment-handbook keeps its recipes and TRL's CLI reads them
(`TrlParser`'s conventions): the keys are the command line's options with underscores (`model`,
`path`, `prompt_column`, `reward`, `max_steps`, `beta`...), any other key is an `RLOOConfig` field, and
options given on the command line win over the file.

    rloo-kit train --config configs/recipes/my_task.yaml --max-steps 60
    rloo-kit train --config configs/recipes/my_task.yaml --print-config   # what would run, then stop

Every `train` writes the options it ran with to OUTPUT_DIR/recipe.yaml, so that
`rloo-kit train --config OUTPUT_DIR/recipe.yaml` runs it again.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .errors import ConfigError

RECIPE_FILE = "recipe.yaml"  # what `train` writes into its output folder
TASK_KEYS = ("task", "path", "prompt_column", "answer_column", "system_prompt", "encoding", "n_test", "seed", "tools")
PATH_KEYS = ("path",)  # recipe values that name files, read relative to the recipe's own folder
FUNCTION_KEYS = ("reward", "tools")  # recipe values that name functions in files (a list, or one)
NOT_RECORDED = {"fn", "config", "print_config", "command", "resume", "overwrite", "force", "recipe_parser"}


def read_recipe(path: str | Path) -> dict:
    """The recipe's keys and values, with its relative file paths made relative to where it lies."""
    import yaml

    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"--config '{path}': no such file. A recipe is a YAML file of options, e.g. "
                          "configs/recipes/demo.yaml.")
    try:
        recipe = yaml.safe_load(path.read_text(encoding="utf-8-sig")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"--config '{path}' is not valid YAML: {str(e).splitlines()[0]}") from e
    if not isinstance(recipe, dict):
        raise ConfigError(f"--config '{path}' must hold `option: value` lines, e.g. `max_steps: 30`.")
    here = path.resolve().parent
    for key in PATH_KEYS:
        if isinstance(recipe.get(key), str):
            recipe[key] = _beside(recipe[key], here)
    for key in FUNCTION_KEYS:  # PATH.py:NAME[:WEIGHT], the file read beside the recipe too
        if isinstance(recipe.get(key), str):
            recipe[key] = [recipe[key]]
        if recipe.get(key):
            recipe[key] = [_beside(spec.split(":", 1)[0], here) + ":" + spec.split(":", 1)[1] if ":" in spec
                           else spec for spec in map(str, recipe[key])]
    return recipe


def trained_task(adapter: str | Path) -> dict:
    """The task options of the `train` run that wrote `adapter`, from the recipe in its output folder: the task, its
    file and columns, and the size and seed of its held-out split, so that an evaluation of the adapter measures the
    rows its training set aside, and only those. {} where no recipe lies beside the adapter."""
    recipe = Path(adapter).parent / RECIPE_FILE
    if not recipe.is_file():
        return {}
    return {k: v for k, v in read_recipe(recipe).items() if k in TASK_KEYS and v is not None}


def eval_task_options(adapter: str | Path, *, task: str | None = None, n_test: int | None = None,
                      **given: object) -> dict:
    """`tasks.load_task`'s arguments to evaluate `adapter`: a task given is evaluated as given; with none, the task
    it trained on (`trained_task`), its file, columns and held-out split, `n_test` and the options in `given`
    (path, prompt_column, ...) winning where they are not None. Also the recorded `tools`, under that key."""
    recorded = {} if task else trained_task(adapter)
    options = {k: v for k, v in recorded.items() if k not in ("task", "n_test", "seed")}
    options.update({k: v for k, v in given.items() if v is not None})
    return {"name": task or recorded.get("task") or "arithmetic", "seed": recorded.get("seed", 0),
            "n_test": n_test if n_test is not None else recorded.get("n_test"), **options}


def _beside(value: str, folder: Path) -> str:
    """A relative path as the recipe means it: beside the recipe, unless it exists from here."""
    p = Path(value).expanduser()
    return value if p.is_absolute() or p.exists() or not (folder / p).exists() else str(folder / p)


def apply_recipe(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse `argv` with the recipe named by --config as defaults: the command line wins. Keys that are
    no option of the command go to `args.rloo` as RLOOConfig fields, checked when the config is made."""
    args = parser.parse_args(argv)
    sub = getattr(args, "recipe_parser", None)
    args.rloo = {}
    if not getattr(args, "config", None) or sub is None:
        return args
    recipe = read_recipe(args.config)
    options = {a.dest for a in sub._actions}
    sub.set_defaults(**{k: v for k, v in recipe.items() if k in options})
    args = parser.parse_args(argv)
    args.rloo = {k: v for k, v in recipe.items() if k not in options}  # make_config refuses a misspelt one
    return args


def recipe_of(args: argparse.Namespace, **resolved) -> dict:
    """The options a run used, as a recipe that runs it again: every option with a value (the recipe's,
    the command line's), what "auto" resolved to (`resolved`), and the extra RLOOConfig fields."""
    out = {k: v for k, v in vars(args).items() if k not in NOT_RECORDED and k != "rloo" and v is not None}
    out.update({k: v for k, v in resolved.items() if v is not None})
    out.update(getattr(args, "rloo", {}))
    return out


def dump(recipe: dict) -> str:
    import yaml

    return yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True)
