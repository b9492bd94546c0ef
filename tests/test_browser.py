"""Every notebook in a real browser, as a person runs it: JupyterLab on 127.0.0.1 (random port and token),
headless Chromium driven by Playwright, SMOKE=True, Run All Cells.

Checked: every code cell executed, no error output, figures rendered; in 01_train the live view rendered
as a widget (not its text fallback) and redrawn at least twice while training ran; the Stop button ends a
longer run and leaves the adapter. 03_evaluation runs after 01_train in the same folder and evaluates the
adapter 01 wrote there, as a person who runs them in order does (tests/test_training.py covers 03 finding
none and training a quick one). Screenshots go to runs/browser/ (RLOO_KIT_ARTIFACTS).

Under `make test`'s two pytest-xdist workers each worker runs its lane of notebooks (tests/notebook_runs.py)
with a JupyterLab and a Chromium of its own.

Needs Chromium (Debian's `chromium`, /usr/lib/chromium/chromium, or RLOO_KIT_CHROMIUM) and the `browser`
extra (jupyterlab, playwright); `make test` installs both and sets RLOO_KIT_REQUIRE_BROWSER=1, so that CI
fails rather than skips when either is missing.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.util import find_spec
from pathlib import Path

import nbformat
import pytest

from . import notebook_runs
from .conftest import REPO
from .helpers import TOKEN

REQUIRED = os.environ.get("RLOO_KIT_REQUIRE_BROWSER") == "1"  # set by `make test`: CI must not skip this
CHROMIUM = Path(os.environ.get("RLOO_KIT_CHROMIUM", "/usr/lib/chromium/chromium"))
ARTIFACTS = Path(os.environ.get("RLOO_KIT_ARTIFACTS", REPO / "runs" / "browser"))
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MISSING = [what for what, ok in (("playwright", find_spec("playwright") is not None),
                                 ("jupyterlab", find_spec("jupyterlab") is not None),
                                 (str(CHROMIUM), CHROMIUM.is_file())) if not ok]
POLL_SECONDS = 1.0  # how often a running notebook is looked at: each look costs Chromium and the driver CPU
LIVE_LINE = re.compile(r"^step \d+/\d+ \|", re.M)  # the live view's text fallback

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(bool(MISSING) and not REQUIRED, reason=f"not installed: {', '.join(MISSING)}")]

# Settings a person's JupyterLab may differ in, fixed so that every cell is in the page (no windowing)
# and no news or update prompt covers the notebook; widget state is saved with the notebook, so that the docs
# site, which renders these runs (tests/notebook_runs.py), shows the live view as it ended; each cell's timing is
# recorded (metadata.execution in the saved copy), to see where a run's minutes went.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none", "recordTiming": True},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
    "@jupyter-widgets/jupyterlab-manager/plugin.jupyterlab-settings": {"saveState": True},
}


def test_browser_prerequisites():
    assert not MISSING, (f"missing {', '.join(MISSING)}: `make setup` installs the browser extra and Debian's "
                         "chromium (apt-get install -y --no-install-recommends chromium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parameterised(name: str, dest: Path, **params) -> str:
    """Copy notebook `name` to dest/ with papermill's injected-parameters cell, as a user's edit would."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(REPO / "notebooks" / f"{name}.ipynb"))
    nb = parameterize_notebook(nb, {"SMOKE": True, **params})
    target = dest / f"{name}.ipynb"
    nbformat.write(nb, target)
    return target.name


class Lab:
    """A JupyterLab server over a fresh folder, with its own settings, on a random port and token."""

    def __init__(self, root: Path):
        self.root, self.port, self.token = root, free_port(), secrets.token_hex(16)
        home = root.parent / (root.name + "-jupyter")
        settings = home / "settings"
        for rel, value in LAB_SETTINGS.items():
            (settings / rel).parent.mkdir(parents=True, exist_ok=True)
            (settings / rel).write_text(json.dumps(value))
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
               "TQDM_DISABLE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
               "HF_TOKEN": TOKEN}  # the kernels inherit it, as a user's would: it must not reach a saved notebook
        env.pop("RLOO_KIT_LIVE", None)
        self.log = open(home / "server.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={settings}",
             f"--LabApp.workspaces_dir={home / 'workspaces'}", "--LabApp.expose_app_in_browser=True",
             # a kernel's ports are chosen, freed, then bound by the kernel: another process can take one between
             # (a CI run: 'Address already in use' on the control port). Cached ports are reused by every restart,
             # so the restarter failed 5 times on the same one; uncached, each restart draws new ports
             "--KernelManager.cache_ports=False"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=root)
        self.server_log = home / "server.log"
        deadline = time.time() + 120
        while True:
            assert self.proc.poll() is None, self.server_log.read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2)
                break
            except OSError:
                assert time.time() < deadline, "JupyterLab did not answer within 2 minutes"
                time.sleep(0.5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def shutdown_kernels(self) -> int:
        """Shut down every kernel of the server (each holds its notebook's model: GiBs); how many there were."""
        def call(method: str, path: str):
            req = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read() or b"null")

        kernels = call("GET", "/api/kernels")
        for k in kernels:
            call("DELETE", f"/api/kernels/{k['id']}")
        return len(kernels)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory, default_model_dir):
    root = tmp_path_factory.mktemp("lab")
    server = Lab(root)
    yield server
    server.stop()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # one server per worker under `make test`
    log = ARTIFACTS / f"jupyterlab-server{'-' * bool(worker)}{worker}.log"
    shutil.copy(server.server_log, log) if ARTIFACTS.is_dir() else None


@pytest.fixture(autouse=True)
def kernels_shut_down_after_each_test(request):
    """A notebook's kernel outlives its page: without this, five notebooks' kernels filled 20 GiB of 24."""
    yield
    if "lab" in request.fixturenames:
        request.getfixturevalue("lab").shutdown_kernels()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_FLAGS, viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(60_000)
        yield context
        context.close()


def status_text(page) -> str:
    return page.locator("#jp-main-statusbar").inner_text(timeout=10_000)


def busy(page) -> bool:
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").all_inner_texts()
    return "Idle" not in status_text(page) or any("*" in t for t in prompts)


def all_run(page) -> bool:
    """Every code cell shows an execution count, [n]:, and the kernel is idle."""
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").all_inner_texts()
    return bool(prompts) and all(re.search(r"\[\d+\]", t) for t in prompts) and not busy(page)


def run_all(lab: Lab, browser, name: str, *, timeout: float, watch=None):
    """Open `name`, wait for its kernel, Run All, call watch(page) while it runs; return the page once
    the kernel is idle with every cell run, after saving the notebook."""
    page = browser.new_page()
    # a workspace of its own, reset: only this notebook open, and it is the current widget
    page.goto(f"{lab.url}/lab/workspaces/{Path(name).stem}/tree/{name}?token={lab.token}&reset")
    page.locator(".jp-NotebookPanel .jp-Notebook").first.wait_for()
    deadline = time.time() + 180
    while not (re.search(r"\|\s*Idle", status_text(page)) and page.evaluate(
            "() => window.jupyterapp.shell.currentWidget?.context?.path") == name):  # kernel started and connected
        assert time.time() < deadline, f"kernel not idle: {status_text(page)!r}"
        time.sleep(0.5)
    # not awaited: the command's promise settles only when the last cell has run
    page.evaluate("() => { window.jupyterapp.commands.execute('runmenu:run-all'); }")
    deadline, done_polls = time.time() + timeout, 0
    while done_polls < 3:  # stays done for three polls in a row (a cell can briefly look idle between cells)
        assert time.time() < deadline, f"{name} still running after {timeout:.0f} s"
        if watch:
            watch(page)
        done_polls = done_polls + 1 if all_run(page) else 0
        time.sleep(POLL_SECONDS)
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    return page


def saved_notebook(lab: Lab, name: str, timeout: float = 60) -> nbformat.NotebookNode:
    """The notebook as JupyterLab saved it, once every code cell has an execution count; the hub token its kernel
    had is not in it."""
    deadline = time.time() + timeout
    while True:
        nb = nbformat.read(lab.root / name, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        if all(c.execution_count is not None for c in code) or time.time() > deadline:
            notebook_runs.assert_no_token(lab.root / name)
            return nb
        time.sleep(0.5)


def check_ran_clean(page, nb, name: str, figures: bool = True) -> None:
    code = [c for c in nb.cells if c.cell_type == "code"]
    not_run = [i for i, c in enumerate(code) if c.execution_count is None]
    assert not not_run, f"{name}: code cells {not_run} did not run"
    errors = [f"cell {i}: {o.get('ename')}: {o.get('evalue')}" for i, c in enumerate(code) for o in c.outputs
              if o.output_type == "error"]
    assert not errors, f"{name}: error output\n" + "\n".join(errors)
    if figures:
        assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), f"{name}: no figure output"
        assert rendered_images(page, ".jp-OutputArea-output.jp-RenderedImage img") > 0, f"{name}: no figure rendered"


def rendered_images(page, selector: str) -> int:
    """How many images matching `selector` the browser has decoded and laid out (not merely in the DOM)."""
    return page.evaluate("(sel) => [...document.querySelectorAll(sel)].filter(i => i.complete && "
                         "i.naturalWidth > 0).length", selector)


def screenshot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


@pytest.mark.parametrize("notebook,timeout", [
    pytest.param(name, timeout, id=name, marks=notebook_runs.lane(name))
    for name, timeout in (("00_rloo_in_one_page", 300), ("02_troubleshooting", 1200), ("04_reward_model", 1200),
                          ("05_tools", 900))])
def test_notebook_runs_clean(lab, browser, notebook, timeout):
    """Run All in JupyterLab: every cell executed, no error output, the figures rendered. The run is kept for
    test_notebooks.py's checks of what it measured (tests/notebook_runs.py), so that it runs once."""
    name = parameterised(notebook, lab.root, OUTPUT_DIR=f"runs/{notebook}")  # the kernel's folder is lab.root
    page = run_all(lab, browser, name, timeout=timeout)
    screenshot(page, notebook)
    check_ran_clean(page, saved_notebook(lab, name), name)
    page.close()
    notebook_runs.record(notebook, lab.root / name, lab.root / "runs" / notebook, with_defaults=True)


class LiveWatch:
    """Records what the live view shows while the kernel runs."""

    def __init__(self, shot: str):
        self.progress: list[str] = []
        self.shot, self.shot_taken = shot, False

    def __call__(self, page) -> None:
        view = page.locator(".jp-OutputArea-output .rloo-live-view .rloo-live-progress")
        if view.count() and busy(page):
            text = view.first.inner_text()
            if text not in self.progress:
                self.progress.append(text)
            if not self.shot_taken and re.search(r"step [1-9]\d* /", text):
                page.locator(".rloo-live-view").first.scroll_into_view_if_needed()
                page.locator(".rloo-live-view").first.screenshot(path=str(ARTIFACTS / self.shot))
                self.shot_taken = True

    def steps_shown(self) -> list[int]:
        return sorted({int(m.group(1)) for t in self.progress if (m := re.search(r"step (\d+) /", t))})


@notebook_runs.lane("01_train")
def test_01_train_live_view(lab, browser):
    name = parameterised("01_train", lab.root)
    watch = LiveWatch("01_train-live-view-during.png")
    page = run_all(lab, browser, name, timeout=900, watch=watch)
    nb = saved_notebook(lab, name)
    screenshot(page, "01_train")
    check_ran_clean(page, nb, name)
    assert page.locator(".jp-OutputArea-output > .jupyter-widgets").count() >= 1
    view = page.locator(".jp-OutputArea-output .rloo-live-view")
    assert view.count() == 1, "the live view did not render as a widget"
    assert "step 2 / 2" in view.locator(".rloo-live-progress").inner_text()
    assert rendered_images(page, ".rloo-live-view img.rloo-live-curves") == 1, "the curves did not render"
    view.scroll_into_view_if_needed()
    view.screenshot(path=str(ARTIFACTS / "01_train-live-view-after.png"))
    # redrawn at least twice while training ran: steps 1 and 2 were each shown before the kernel went idle
    assert [s for s in watch.steps_shown() if s >= 1][:2] == [1, 2], watch.progress
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    assert "application/vnd.jupyter.widget-state+json" in nb.metadata.get("widgets", {}), "widget state not saved"
    assert not any(LIVE_LINE.search(o.get("text", "")) for o in outputs), "the text fallback was printed"
    assert not any("<table" in str(o.get("data", {}).get("text/html", "")) and "Training Loss" in
                   str(o.get("data", {}).get("text/html", "")) for o in outputs), "transformers' table is shown"
    page.close()
    # the run, with the notebook's defaults, serves test_notebooks.py's checks of 01 and its adapter for 03
    notebook_runs.record("01_train", lab.root / name, lab.root / "runs" / "train", with_defaults=True)


@notebook_runs.lane("03_evaluation")
def test_03_evaluation_on_01s_adapter(lab, browser):
    """Opened where 01_train ran (its adapter in runs/train): it finds that adapter, evaluates it and runs top to
    bottom; the browse widget renders. The run serves test_notebooks.py's checks of 03 against 01's figures."""
    adapter = lab.root / "runs" / "train" / "adapter"
    if not (adapter / "adapter_config.json").is_file():  # run without test_01_train_live_view: 01 first, as a person
        run_all(lab, browser, parameterised("01_train", lab.root), timeout=900).close()
    assert (adapter / "adapter_config.json").is_file(), "01_train ran in the browser and wrote no adapter"
    name = parameterised("03_evaluation", lab.root)
    page = run_all(lab, browser, name, timeout=900)
    nb = saved_notebook(lab, name)
    screenshot(page, "03_evaluation")
    check_ran_clean(page, nb, name)
    metrics = json.loads((lab.root / "runs" / "evaluation" / "metrics.json").read_text())
    assert Path(metrics["adapter"]) == adapter.resolve() and not metrics["trained_here"]
    browsers = page.locator(".jp-OutputArea-output .rloo-compare-browser")
    assert browsers.count() == 2, "the base-vs-adapter browsers (greedy, sampled) did not render as widgets"
    browse = browsers.first
    before = browse.locator(".rloo-compare-pair").inner_text()
    browse.locator("button", has_text="Next").click()
    page.wait_for_function("([el, old]) => el.innerText !== old",
                           arg=[browse.locator(".rloo-compare-pair").element_handle(), before], timeout=30_000)
    browse.scroll_into_view_if_needed()
    browse.screenshot(path=str(ARTIFACTS / "03_evaluation-browser.png"))
    page.close()
    notebook_runs.record("03_evaluation", lab.root / name, lab.root / "runs" / "evaluation", with_defaults=True)


@notebook_runs.lane("stop")
def test_stop_button_stops_a_run_and_keeps_the_adapter(lab, browser):
    """01_train set for 200 steps: press Stop once the first step is shown; the run ends after the step it
    is in, the rest of the notebook runs, and the adapter is saved."""
    out = "runs/stop"
    name = "01_train_stop.ipynb"
    # two pre-flight prompts and FORCE: the verdict is not what this test checks, a quick start is
    src = parameterised("01_train", lab.root, SMOKE=False, MAX_STEPS=200, N_TEST=2, PREFLIGHT_PROMPTS=2, FORCE=True,
                        MODEL="smollm2-135m", PRESET="cpu", TASK="arithmetic", OUTPUT_DIR=out)
    (lab.root / src).rename(lab.root / name)
    clicked = {}

    def press_stop(page):
        view = page.locator(".jp-OutputArea-output .rloo-live-view")
        if not clicked and view.count() and re.search(r"step [1-9]\d* /", view.locator(".rloo-live-progress")
                                                      .inner_text()):
            view.locator(".rloo-live-stop").click()
            clicked["at"] = time.time()

    page = run_all(lab, browser, name, timeout=900, watch=press_stop)
    nb = saved_notebook(lab, name)
    screenshot(page, "01_train-stopped")
    assert clicked, "the live view never showed a finished step"
    check_ran_clean(page, nb, name, figures=False)
    view = page.locator(".jp-OutputArea-output .rloo-live-view")
    view.scroll_into_view_if_needed()
    view.screenshot(path=str(ARTIFACTS / "01_train-live-view-stopped.png"))
    progress = view.locator(".rloo-live-progress").inner_text()
    assert "Stopped at step" in progress, progress
    stopped_at = int(re.search(r"Stopped at step (\d+)", progress).group(1))
    assert 1 <= stopped_at < 10, progress
    assert (lab.root / out / "adapter" / "adapter_model.safetensors").is_file()
    assert not (lab.root / out / "interrupted").exists()
    page.close()
