"""One run, step by step: pre-flight -> fit -> evaluate before -> train -> evaluate after -> report.

`rloo-kit train`, notebook 01 (and so `make demo`, which executes it) take these same steps on a `Run`
and report through the same `RunReport`, whose `to_dict()` is the run's metrics.json: what a test, a
benchmark or a later `--resume` reads, under one set of names.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from .budget import BEST_DIR, LAST_DIR, habit_note, read_json
from .diagnostics import NOT_FAILURES, SamplingMeasured
from .distributed import is_main_process
from .errors import RunRefused
from .evaluation import EvalReport, PairedChange, ordinal, paired_change
from .models import attach_lora
from .pool import PromptPool
from .preflight_check import SPREAD_EPS, PreflightReport, Problem, fit_task, preflight, refit
from .recipes import RECIPE_FILE
from .tasks import RunPlan, Task
from .tools import demonstrating_tool, in_model_format, warm_start, worked_examples
from .tools.warmup import WARM_EPOCHS
from .training import ADAPTER_DIR, build_trainer, train

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger("rloo_kit")
METRICS = "metrics.json"
BEFORE = "evaluation_before.json"  # the base model's held-out answers, which --resume reuses
AFTER = "evaluation_after.json"  # the adapter's held-out answers, to read beside them
PREFLIGHT = "preflight.json"  # what the pre-flight measured, per prompt (the report's to_dict())
FIT = "fit.json"  # the length (and brevity) and temperature the pre-flight chose, which --resume trains again
WARM_DIR = "warmup"  # inside output_dir: the tool warm-start's SFT run
WARMED = "adapter"  # inside WARM_DIR: the warmed adapter, a resumed run's reference
SAMPLED = 2  # completions per held-out prompt sampled at the training temperature, beside the greedy answer
CARD = "README.md"  # the output folder's own account of the run, in place of the model card TRL writes there
# what a run leaves in its output folder, in the order the card lists them
FILES = {ADAPTER_DIR: "the trained LoRA adapter (with its tokenizer); the base model is not copied",
         BEST_DIR: "a run that keeps its best step (--minutes, --keep best): that step's adapter, kept as it trains "
                   "(best.json: which step; replies.json: its validation replies)",
         LAST_DIR: "... and, where that is not the last step, the last step's adapter, to measure beside it: "
                   "`rloo-kit eval --adapter OUTPUT_DIR/last` (last.json: which step; replies.json: its validation "
                   "replies)",
         METRICS: "every figure above, and the settings that ran",
         PREFLIGHT: "the pre-flight: per prompt, what the samples scored, as asked and as trained",
         BEFORE: "each held-out prompt's answer before training", AFTER: "... and after",
         FIT: "the completion length and temperature the pre-flight chose, which --resume trains again",
         RECIPE_FILE: "the options of `rloo-kit train`: `rloo-kit train --config recipe.yaml` runs it again",
         "checkpoint-*": "checkpoints, which `rloo-kit train --resume` continues from"}


@dataclass
class RunReport:
    """What one run did, in the names metrics.json uses."""

    model: str
    task: str
    preset: str
    device: str
    config: dict = field(default_factory=dict)  # the RLOO settings that ran: beta, learning rate, K, length...
    preflight: dict | None = None  # the verdict on the trained setup, the as-asked figures beside it
    own_task_defaults: list[str] = field(default_factory=list)
    system_prompt: str | None = None  # the system prompt the pre-flight put before every prompt, trained and evaluated
    max_completion_length: int | None = None
    accuracy_before: float | None = None  # greedy: the model's best answer
    accuracy_after: float | None = None
    sampled_before: dict | None = None  # {"temperature", "samples", "accuracy"}: what training samples, before
    sampled_after: dict | None = None
    before: dict | None = None
    after: dict | None = None
    paired: dict | None = None
    steps: int = 0
    minutes: float | None = None
    budget_minutes: float | None = None  # --minutes: trained for this long, the best validation step kept
    warm_up: dict | None = None  # --tool-warm-start: the worked examples the model was warmed up on first
    validation: dict | None = None  # {"rows", "curve": [{"step", "minutes", "accuracy", (marks)}], "kept_step"}
    trained: bool = False
    adapter: str | None = None
    diagnoses: list[str] = field(default_factory=list)
    one_answer: dict | None = None  # after training, one answer given to most held-out prompts (EvalReport.one_answer)
    one_place: dict | None = None  # after training, the choice at one place of each list picked (EvalReport.one_place)
    right_while_cut: dict | None = None  # after training, most right replies cut at the limit (EvalReport)
    smoke: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    def blocking(self) -> list[str]:
        """The pre-flight's problems that stop the run (a metrics.json of 0.2 has no "blocking": all of them)."""
        return self.preflight.get("blocking", self.preflight["problems"]) if self.preflight else []

    def refusal(self) -> str | None:
        """Why nothing was trained when the pre-flight stopped the run, with what to do; None otherwise."""
        if self.trained or not self.preflight or self.preflight["ok"]:
            return None
        return (f"Not trained: {_cannot_learn(self.blocking(), 'force=True (--force on the command line)')}"
                f" The model is unchanged: held-out accuracy {_fmt(self.accuracy_before)}.")

    def lines(self) -> list[str]:
        """The run's outcome in a few lines, as the command line prints it (for a refused run, why)."""
        if refused := self.refusal():
            return [refused]
        delta = (f" ({self.accuracy_after - self.accuracy_before:+.2f})"
                 if None not in (self.accuracy_before, self.accuracy_after) else "")
        out = [f"held-out accuracy: before {_fmt(self.accuracy_before)} -> after {_fmt(self.accuracy_after)}{delta} · "
               f"{self.steps} steps in {self.minutes or 0:.1f} min"]
        if self.validation and self.validation["curve"]:
            curve = " -> ".join(f"{_fmt(p['accuracy'])} (step {p['step']}{habit_note(p)})"
                                for p in self.validation["curve"])
            kept, last = self.validation["kept_step"], self.steps or self.validation["curve"][-1]["step"]
            out.append(f"  validation ({self.validation['rows']} training rows set apart): {curve}; the adapter is "
                       f"step {kept}'s" + (f"; step {last}'s is in {LAST_DIR}/" if kept not in (None, last) else ""))
            if (solved := self.validation.get("solved_at")) is not None:
                out.append(f"  stopped at step {solved}, solved: every validation row right twice running and its "
                           "training prompts answered one way, so the rest of the budget was not spent")
        if self.paired:
            out.append(f"  {PairedChange(**self.paired)}")
        if self.sampled_before and self.sampled_before.get("accuracy") is not None:
            b, a = self.sampled_before, self.sampled_after or {}
            out.append(f"  sampled at temperature {b['temperature']:g} ({b['samples']} a prompt, as training samples): "
                       f"before {_fmt(b['accuracy'])} -> after {_fmt(a.get('accuracy'))}")
        if one := self.one_answer:
            out.append(f"  one answer to every prompt: {one['given']} of {one['replies']} held-out replies answer "
                       f"'{one['answer']}', the right answer for {one['right']} of the {one['replies']} prompts: a "
                       "favourite answer, not (yet) the task. Read its replies (evaluation_after.json); where the "
                       "training reward was still rising, train longer (--minutes keeps the best validation step).")
        if place := self.one_place:
            out.append(f"  one place in every list: {place['given']} of {place['replies']} held-out replies pick the "
                       f"choice offered {ordinal(place['place'])}, {place['kept']} of them on the {place['against']} "
                       "prompts whose answer is offered elsewhere: the order of the choices, not the question, "
                       "chooses, so the gain is not the task's. Read its replies (evaluation_after.json) before "
                       "trusting it.")
        if cut := self.right_while_cut:
            out.append(f"  right but cut: {cut['cut']} of the {cut['right']} right held-out replies ran to the "
                       f"{cut['tokens']}-token limit without ending. A reply cut there has not ended on its answer, "
                       "and one that lists many answers is right for one of them: read the replies "
                       "(evaluation_after.json) before trusting the gain; where they pad or list, the reward is being "
                       "gamed: an exact-answer reward (rewards.exact_answer) or a shorter completion length cures it.")
        return out

    def card(self, out: Path) -> str:
        """The output folder's README.md: what the run did, and how to use what it left in `out`. TRL writes a
        model card there at each checkpoint, naming no base model where it was loaded from a folder and loading
        model="None" in its example; the kit's replaces it at the end."""
        adapter = out / ADAPTER_DIR
        failures = [kind for kind in self.diagnoses if kind not in NOT_FAILURES]
        notes = [kind for kind in self.diagnoses if kind in NOT_FAILURES]
        use = ([] if not self.trained else
               ["", "## Use the adapter", "", "```bash",
                f"rloo-kit eval --adapter {adapter}  # held-out accuracy, base beside adapter",
                f"rloo-kit export --adapter {adapter} --output model.gguf  # llama.cpp, Ollama, LM Studio",
                "```", "", "```python", "from rloo_kit import load_adapter, load_model",
                "", f'model, tokenizer = load_model("{self.model}")', f'model = load_adapter(model, "{adapter}")',
                "```", *([f'Trained with the system prompt "{self.system_prompt}" before every prompt (the '
                          "pre-flight's choice): give it the same way; `rloo-kit eval` and `export --verify` do, and "
                          "the exported Modelfile sets it for Ollama."]
                         if self.system_prompt else [])])
        setup = [f"- preset {self.preset} on {self.device}",
                 *(f"- own-task default: {note}" for note in self.own_task_defaults),
                 *([f"- the health monitor named: {', '.join(failures)} (the warnings in the run's output say "
                    "why, and what to change)"] if failures else []),
                 *([f"- the health monitor noted: {', '.join(notes)} (not a failure: the run's output says what "
                    "it means)"] if notes else [])]
        files = [f"| `{name}` | {what} |" for name, what in FILES.items() if any(out.glob(name))]
        return "\n".join([f"# rloo-kit run: task {self.task}, model {self.model}", "", "```", *self.lines(), "```", "",
                          *setup, *use, "", "## Files", "", "| file | what |", "|---|---|", *files, ""])


def fitting_prompts(plan: RunPlan, task: Task, tokenizer) -> Task:
    """The task less its prompts too long for the preset's sequences once the completion is added (TRL would
    cut them from the left in silence), saying how many went: what every run, and the pre-flight that judges
    it, trains and samples."""
    room = plan.preset.max_seq_length - (task.max_completion_length or plan.preset.max_completion_length)
    task, dropped = task.without_long_prompts(tokenizer, room)
    if dropped and is_main_process():
        print(f"{dropped} prompt(s) longer than {room} tokens (preset {plan.preset.name}: {plan.preset.max_seq_length}"
              f"-token sequences, less the completion) were left out; {len(task.train)} train, {len(task.test)} "
              "held out.", flush=True)
    return task


def judge_run(plan: RunPlan, task: Task, model, tokenizer, *, n_prompts: int = 32, seed: int = 0) -> PreflightReport:
    """The pre-flight of a run, printed by one process; a reward that scores nothing raises RewardError there (a
    bug to fix, not a run to force). `task` is the one the run trains (`fitting_prompts` applied): what
    `Run.preflight` and `rloo-kit preflight` both judge."""
    report = preflight(model, tokenizer, task, preset=plan.preset, n_prompts=n_prompts, seed=seed,
                       progress=is_main_process())
    if is_main_process():
        print(report, flush=True)
    report.raise_if_unscored()
    return report


class Run:
    """A run's steps, each a method, in order; the notebook calls them cell by cell, `run()` in one go, with
    the same rules: prompts that do not fit are left out (`fitting_prompts`), a reward that scores nothing is
    refused by the pre-flight, the trainer is built (so settings that cannot work fail) before the first
    evaluation, and a run the pre-flight says cannot learn is refused unless forced. `report` gathers what the
    steps measured."""

    def __init__(self, plan: RunPlan, task: Task, model, tokenizer, *, output_dir: str | Path, seed: int = 0,
                 smoke: bool = False, **overrides):
        task = fitting_prompts(plan, in_model_format(task, tokenizer), tokenizer)  # tools in the model's format
        self.plan, self.task, self.model, self.tokenizer = plan, task, model, tokenizer
        self.out, self.seed, self.overrides = Path(output_dir), seed, overrides
        self.out.mkdir(parents=True, exist_ok=True)
        if overrides.get("minutes") is not None or overrides.get("keep_best"):  # before anything samples the task
            self.task = task = task.carve_validation(seed)
        self.report = RunReport(model=plan.model, task=task.name, preset=plan.preset.name, device=plan.hardware.device,
                                smoke=smoke, budget_minutes=overrides.get("minutes"))
        self.preflight_report: PreflightReport | None = None
        self.sampling: SamplingMeasured | None = None  # the pre-flight's greedy answers against samples
        self.refused_before = False  # resumed: the first attempt's pre-flight refused the run, and nothing trained
        self.preflight_prompts: list = []
        self.before: EvalReport | None = None
        self.after: EvalReport | None = None
        self.trainer = None

    def preflight(self, n_prompts: int = 32) -> PreflightReport:
        """Judge the run before training, and fit an open completion length (and brevity) and temperature to
        what it saw. A reward that scores nothing raises RewardError: a bug to fix, not a run to force."""
        report = judge_run(self.plan, self.task, self.model, self.tokenizer, n_prompts=n_prompts, seed=self.seed)
        self.task, notes = fit_task(self.task, report)
        self.preflight_prompts = self.task.train["prompt"]  # the rows its per-prompt figures index, as trained
        self.preflight_report, self.report.own_task_defaults = report, notes
        # a pre-flight run again judges prompts that carry the kit's system prompt already: it is kept
        self.report.system_prompt = report.system_prompt or self.report.system_prompt
        self.sampling = report.sampling_measured()
        self.report.preflight = report.summary()
        if is_main_process():
            (self.out / PREFLIGHT).write_text(json.dumps(report.to_dict(), indent=2))
            chosen = report.chosen
            (self.out / FIT).write_text(json.dumps({"max_completion_length": self.task.max_completion_length,
                                                    "brevity_max_chars": chosen.brevity_max_chars if chosen.applies
                                                    else None, "temperature": self.task.temperature,
                                                    "system_prompt": self.report.system_prompt}))
        return report

    def cannot_learn(self, force: bool = False) -> bool:
        """Whether the pre-flight says the run that would be trained cannot learn, and force does not override it:
        this attempt's pre-flight, or a resumed run's first one that refused it (a resume is no way round it)."""
        if force:
            return False
        return not self.preflight_report.ok if self.preflight_report is not None else self.refused_before

    def refuse_if_cannot_learn(self, force: bool = False) -> None:
        """RunRefused naming the pre-flight's causes when `cannot_learn(force)`: the notebook's stop."""
        if self.cannot_learn(force):
            report = self.preflight_report
            kinds = report.blocking_kinds() if report is not None else self.report.blocking()  # resumed
            raise RunRefused("Not training: " + _cannot_learn(kinds, "FORCE = True in the notebook (--force on the "
                                                                     "command line)"))

    def warm_up(self, examples: int, epochs: int = WARM_EPOCHS) -> None:
        """Teach the call syntax to a model that never calls its tools (the pre-flight's `tool_unused`): `examples`
        worked examples of the first tool that can demonstrate one, from the training rows, trained with TRL's
        SFTTrainer into the run's adapter (`tools.warm_start`). RLOO's reference is then the warmed model."""
        tool = demonstrating_tool(list(self.task.tools))
        shown = worked_examples(self.task, tool, n=examples, tokenizer=self.tokenizer)
        self.model = warm_start(self.model, self.tokenizer, shown, output_dir=str(self.out / WARM_DIR),
                                preset=self.plan.preset, epochs=epochs, seed=self.seed)
        self.report.warm_up = {"examples": len(shown), "epochs": epochs, "tool": tool.name}
        if is_main_process():  # what a resumed run's reference is (`refit`)
            self.model.save_pretrained(str(self.out / WARM_DIR / WARMED))
            (self.out / WARM_DIR / WARMED / "warm_up.json").write_text(json.dumps(self.report.warm_up))

    def refit(self) -> None:
        """A resumed run trains the setup its first attempt chose: the pre-flight's (recorded in fit.json), and
        a warm-up's adapter as the model RLOO keeps near (TRL copies the adapter it finds into its reference; the
        checkpoint then restores the trained one over it). A first attempt its pre-flight refused stays refused
        unless forced: its problems are printed again, for the fixes the refusal points to."""
        saved = self.out / FIT
        if saved.is_file():
            chosen = json.loads(saved.read_text())
            self.task, self.report.system_prompt = refit(self.task, **chosen), chosen.get("system_prompt")
        judged = read_json(self.out / PREFLIGHT) or {}
        measured = judged.get("sampling_measured")
        self.sampling = SamplingMeasured.from_dict(measured) if measured else None
        earlier = recorded_report(self.out)  # a finished run's report: its pre-flight is not run again
        if earlier is not None:
            self.report.preflight, self.report.own_task_defaults = earlier.preflight, earlier.own_task_defaults
            self.refused_before = earlier.refusal() is not None
        if self.refused_before and is_main_process():  # the fixes the resumed run's own refusal points to
            print_first_refusal(self.out, judged)
        warmed = self.out / WARM_DIR / WARMED
        if (warmed / "adapter_config.json").is_file():
            from peft import load_peft_weights, set_peft_model_state_dict

            if not hasattr(self.model, "peft_config"):
                self.model = attach_lora(self.model, preset=self.plan.preset, seed=self.seed)
            set_peft_model_state_dict(self.model, load_peft_weights(str(warmed)))
            self.report.warm_up = json.loads((warmed / "warm_up.json").read_text())

    def build_trainer(self, **kwargs):
        """The trainer, with the task's length fixed (its own, the pre-flight's, or the preset's)."""
        self.task = self.task.for_preset(self.plan.preset)
        settings = {**self.overrides, **kwargs}
        if settings.get("prompt_pool") is True:
            settings["prompt_pool"] = self.prompt_pool()
        self.trainer = build_trainer(self.model, self.tokenizer, self.task, preset=self.plan.preset,
                                     output_dir=str(self.out), seed=self.seed, **settings)
        monitor = self.trainer.health_monitor
        if monitor is not None and monitor.sampling is None:
            monitor.sampling = self.sampling  # flat groups: noise, or answers not known
        args = self.trainer.args
        self.report.max_completion_length = self.task.max_completion_length
        self.report.config = {k: getattr(args, k) for k in (
            "beta", "learning_rate", "temperature", "num_generations", "per_device_train_batch_size",
            "gradient_accumulation_steps", "max_completion_length", "max_steps", "seed")}
        self.report.config.update(lora_r=self.plan.preset.lora_r, lora_alpha=self.plan.preset.lora_alpha,
                                  patches=list(getattr(self.trainer, "rloo_kit_patches", [])))
        if self.trainer.choice_twins:  # training rows whose groups were sampled in two orders (mix_choice_order)
            self.report.config.update(rows_in_two_orders=len(self.trainer.choice_twins))
        if self.task.tools:  # how the tools were told and called: the kit's syntax or the model's own
            self.report.config.update(tool_format=self.task.tool_format, max_tool_calls=self.trainer.max_tool_calls)
        return self.trainer

    def prompt_pool(self) -> PromptPool:
        """A prompt pool over the training prompts, told which of them the pre-flight found flat in the setup it
        trains (if one ran), so that the first steps already draw the prompts that teach."""
        pool = PromptPool(self.task.train["prompt"], seed=self.seed)
        report = self.preflight_report
        if report is not None:
            judged = report.trained.prompts
            pool.seed([self.preflight_prompts[p.index] for p in judged],
                      [p.spread <= SPREAD_EPS or p.pass_rate in (0.0, 1.0) for p in judged])
        return pool

    def evaluate_before(self, *, reuse: bool = False) -> EvalReport:
        """Held-out answers of the model as it is (the adapter starts at zero: the base model): greedy, and
        sampled as training samples. With reuse=True, the answers a first attempt of this run recorded are
        read back instead of measured."""
        saved = self.out / BEFORE
        if reuse and saved.is_file():
            recorded = json.loads(saved.read_text())
            self.report.sampled_before = recorded.pop("sampled", None)
            self.before = EvalReport(**recorded)
            log.info(f"held-out accuracy before: {self.before.accuracy} as recorded in {saved} (not measured again)")
        else:
            self.before = self.task.for_preset(self.plan.preset).evaluate(self.model, self.tokenizer,
                                                                          progress="held-out accuracy before")
            self.report.sampled_before = self._sampled(self.model, "before")
            if is_main_process():
                saved.write_text(json.dumps({**self.before.to_dict(), "sampled": self.report.sampled_before}))
        self.report.accuracy_before, self.report.before = self.before.accuracy, self.before.summary()
        return self.before

    def before_line(self) -> str:
        """'held-out accuracy before: 0.42 (50 prompts, greedy, 16 tokens); sampled at temperature 1: 0.20'."""
        sampled = self.report.sampled_before
        also = f"; sampled at temperature {sampled['temperature']:g}: {_fmt(sampled['accuracy'])}" if sampled else ""
        earlier = self.before.answered_earlier() if self.before else 0
        also += (f"; {earlier} more name the right answer in an earlier sentence, then go on (a reply is scored on its "
                 "last sentence)" if earlier else "")
        return (f"held-out accuracy before: {_fmt(self.report.accuracy_before)} ({len(self.task.test)} prompts, "
                f"greedy, {self.task.max_completion_length} tokens){also}")

    def temperature(self) -> float:
        """The temperature training samples at: the trainer's, else the task's (fitted) or the preset's."""
        if self.trainer is not None:
            return self.trainer.args.temperature
        return self.task.temperature if self.task.temperature is not None else self.plan.preset.temperature

    def _sampled(self, model, when: str) -> dict | None:
        """Held-out accuracy of SAMPLED completions a prompt at the training temperature: beside the greedy
        figure, it shows whether training's samples are as good as the model's best answer."""
        if self.task.test.num_rows == 0 or "answer" not in self.task.test.column_names:
            return None
        t = self.temperature()
        report = self.task.for_preset(self.plan.preset).evaluate(
            model, self.tokenizer, samples=SAMPLED, greedy=False, temperature=t,
            progress=f"held-out accuracy {when}, sampled at temperature {t:g}")
        return {"temperature": t, "samples": SAMPLED, "accuracy": report.accuracy}

    def train(self, *, resume: bool = False) -> None:
        """Train (from the latest checkpoint with resume=True) and record the run: minutes (a budget's include
        its earlier attempts), steps, the adapter, the health monitor's diagnoses (a resumed run's over the logs
        of all its steps, which its checkpoint carries) and the validation curve."""
        start = time.time()
        train(self.trainer, resume=resume)
        budget = self.trainer.time_budget
        spent = budget.spent() if budget is not None and budget.minutes is not None else time.time() - start
        self.report.minutes = round(spent / 60, 2)
        self.report.steps, self.report.trained = self.trainer.state.global_step, True
        self.report.adapter = str(self.out / ADAPTER_DIR)
        monitor = self.trainer.health_monitor
        diagnoses = ([] if monitor is None else monitor.diagnoses if not resume
                     else monitor.diagnose(self.trainer.state.log_history, self.trainer.args))
        self.report.diagnoses = [d.kind for d in diagnoses]
        if budget is not None:
            self.report.validation = {"rows": len(self.task.validation), "curve": budget.curve,
                                      "kept_step": budget.best["step"] if budget.best else None,
                                      "solved_at": budget.solved_at}

    def evaluate_after(self) -> EvalReport:
        model = self.trainer.model if self.trainer else self.model
        self.after = self.task.evaluate(model, self.tokenizer, progress="held-out accuracy after")
        self.report.sampled_after = self._sampled(model, "after")
        if is_main_process():
            (self.out / AFTER).write_text(json.dumps({**self.after.to_dict(), "sampled": self.report.sampled_after}))
        change = paired_change(self.before, self.after) if self.before else None
        self.report.accuracy_after, self.report.after = self.after.accuracy, self.after.summary()
        self.report.one_answer, self.report.right_while_cut = self.after.one_answer(), self.after.right_while_cut()
        self.report.one_place = self.after.one_place()
        self.report.paired = None if change is None else change.to_dict()
        return self.after

    def skip_training(self) -> None:
        """Record a run the pre-flight stopped: nothing trained, the model unchanged."""
        self.report.max_completion_length = self.task.for_preset(self.plan.preset).max_completion_length
        self.report.accuracy_after, self.report.after = self.report.accuracy_before, self.report.before
        self.report.sampled_after = self.report.sampled_before

    def write(self) -> Path:
        """metrics.json (the report's to_dict()) and README.md (its card), written by one process."""
        path = self.out / METRICS
        if is_main_process():
            path.write_text(json.dumps(self.report.to_dict(), indent=2))
            (self.out / CARD).write_text(self.report.card(self.out))
        return path


def run(plan: RunPlan, task: Task, model: PreTrainedModel | PeftModel, tokenizer: PreTrainedTokenizerBase, *,
        output_dir: str | Path, preflight_prompts: int = 32, resume: bool = False, force: bool = False, seed: int = 0,
        warm_up: int = 0, **overrides: object) -> RunReport:
    """The whole run in one call, as `rloo-kit train` makes it: the pre-flight (skipped on resume and
    with preflight_prompts=0), accuracy before (reused on resume), training unless the pre-flight says the
    trained setup cannot learn (force=True trains anyway), accuracy after, metrics.json. warm_up=N: where the
    pre-flight finds the model never calls the task's tools, N worked examples warm it up first (`Run.warm_up`)
    and the pre-flight runs again.

    Args:
        plan: the model, task, preset and hardware the run uses (`plan_run`).
        task: the task to train and evaluate on; prompts too long for the preset are left out.
        model: the model to train (`load_model`); it gets the preset's LoRA adapter unless it has one.
        tokenizer: the model's tokenizer.
        output_dir: where the adapter, checkpoints, metrics.json and the pre-flight's files go (created if missing).
        preflight_prompts: prompts the pre-flight samples; 0 skips it.
        resume: continue from the latest checkpoint in output_dir, reusing the recorded accuracy before and the
            setup the first attempt's pre-flight chose.
        force: train even when the pre-flight says the run cannot learn.
        seed: the seed of the pre-flight's prompt draw, the training config and the validation rows.
        warm_up: worked examples for a tool warm-up when the pre-flight finds the tools unused; 0 for none.
        **overrides: `build_trainer` settings (minutes, prompt_pool, ...) and RLOOConfig fields.

    Returns:
        The RunReport, also written as metrics.json: accuracy before and after, steps, minutes, diagnoses.
    """
    r = Run(plan, task, model, tokenizer, output_dir=output_dir, seed=seed, **overrides)
    if preflight_prompts > 0 and not resume:
        r.preflight(preflight_prompts)
        if warm_up and "tool_unused" in r.preflight_report.kinds():
            r.warm_up(warm_up)
            r.preflight(preflight_prompts)
        for note in r.report.own_task_defaults:
            print(f"own-task default: {note}", flush=True)
    if resume:
        r.refit()
    r.build_trainer(disable_tqdm=True)  # settings that cannot work fail here, before any generation
    r.evaluate_before(reuse=resume)
    print(r.before_line(), flush=True)
    if r.cannot_learn(force):
        r.skip_training()
        r.write()
        return r.report
    r.train(resume=resume)
    r.evaluate_after()
    r.write()
    return r.report


def recorded_report(output_dir: str | Path) -> RunReport | None:
    """The RunReport an earlier attempt wrote to output_dir's metrics.json (fields this version does not know left
    out), None where there is none."""
    recorded = read_json(Path(output_dir) / METRICS)
    if not recorded:
        return None
    known = {f.name for f in fields(RunReport)}
    return RunReport(**{k: v for k, v in recorded.items() if k in known})


def print_first_refusal(output_dir: str | Path, judged: dict | None = None) -> None:
    """What a resumed run's first attempt was refused for: the problems, with their fixes, that its pre-flight
    (`judged`, else read from output_dir's preflight.json) found."""
    path = Path(output_dir) / PREFLIGHT
    judged = judged if judged is not None else read_json(path) or {}
    print(f"The first attempt's pre-flight ({path}) refused this run (a changed setup is judged again with "
          "--overwrite):", flush=True)
    for problem in judged.get("problems") or []:
        print(Problem(**problem), flush=True)


def run_metrics(adapter: str | Path) -> dict:
    """The metrics.json of the run that wrote `adapter` (beside it); {} where there is none."""
    metrics = Path(adapter).parent / METRICS
    return json.loads(metrics.read_text()) if metrics.is_file() else {}


def asked_as_trained(task: Task, adapter: str | Path) -> Task:
    """`task` with the system prompt the run that wrote `adapter` put before every prompt (its pre-flight's choice,
    recorded in metrics.json), so that the adapter is asked as it was trained; `task` where there was none, or where
    the run trained another task."""
    recorded = run_metrics(adapter)
    told = recorded.get("system_prompt") if recorded.get("task") == task.name else None
    return refit(task, None, system_prompt=told) if told else task


def trained_settings(adapter: str | Path) -> dict:
    """What the run that wrote `adapter` trained with, from the metrics.json beside it: its completion length
    and sampling temperature, to evaluate as it trained ({} when there is none)."""
    recorded = run_metrics(adapter)
    out = {"max_completion_length": recorded.get("max_completion_length")}
    if (recorded.get("config") or {}).get("temperature") is not None:
        out["temperature"] = recorded["config"]["temperature"]
    return {k: v for k, v in out.items() if v is not None}


def _cannot_learn(problems: list[str], force: str) -> str:
    """The pre-flight's refusal, one sentence for every place that refuses a run; `problems`: the blocking ones (a
    warning printed beside them does not stop a run, so it is not named as a cause)."""
    return (f"the pre-flight says the run that would be trained cannot learn ({', '.join(problems)}); its fixes are "
            f"above, and {force} trains anyway.")


def _fmt(accuracy: float | None) -> str:
    return "n/a (no answer column)" if accuracy is None else f"{accuracy:.2f}"
