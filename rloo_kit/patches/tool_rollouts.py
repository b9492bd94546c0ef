"""Patch `tool_rollouts`: TRL's RLOOTrainer (1.15) samples one turn and has no tools, so the kit rebinds four of
its private methods on the one trainer that was given tools (`trainer.kit_tools`):

- `_generate`: after TRL's first turn, `tools.rollout.roll_out` runs the calls and samples on through
  `_generate_single_turn` (the kit's CPU sampler where it applies); the rewards read the last message; the
  lengths and tokens seen that TRL logged for the first turn are replaced by the whole rollouts';
- `_generate_and_score_completions`: the batch carries `tool_weights` (0 on a tool's tokens, 1 elsewhere), which
  TRL's shuffling and splitting carry with every other tensor;
- `_get_per_token_logps_and_entropies` (outermost, after the kit's own rebinding of it): each token's log-prob and
  entropy times its weight, so a tool's tokens weigh nothing in the old log-probs, the KL term and the loss,
  while the model still attends to them;
- `_compute_loss`: hands the step's slice of `tool_weights` to the log-prob pass.

RLOO's objective is untouched: rewards, the leave-one-out advantage and the KL-in-reward are TRL's. Where no
tool is called every weight is 1 and the step is TRL's, sample for sample (tests/test_tools.py).
"""

from __future__ import annotations

import types

import torch

from ..errors import ConfigError
from ..tools.rollout import answer_text, roll_out, summary, text_codec
from ..tools.syntax import KIT, syntax_for


def use_tool_rollouts(trainer) -> bool:
    """Install the rollout with tools on `trainer` when it has `kit_tools`; False (declined) when it has none."""
    tools = getattr(trainer, "kit_tools", None)
    if not tools:
        return False
    if getattr(trainer, "use_vllm", False):
        raise ConfigError("Tools run with transformers' generation only: drop --vllm (use_vllm) for a run with tools.")
    decode, encode = text_codec(trainer.processing_class)
    syntax = syntax_for(getattr(trainer, "kit_tool_format", KIT.name), trainer.processing_class)
    first_turn = trainer._generate
    score, loss, per_token = (trainer._generate_and_score_completions, trainer._compute_loss,
                              trainer._get_per_token_logps_and_entropies)
    weights: dict[str, object] = {"batch": None, "step": None}

    def generate(self, prompts: list):
        prompt_ids, completion_ids, completions = first_turn(prompts)
        def more(rows: list[int], begun: list[list[int]]) -> list[list[int]]:
            # the sampler bound now (the kit's CPU sampler where it applies), as TRL's own first turn uses it
            return self._generate_single_turn([list(prompt_ids[i]) + b for i, b in zip(rows, begun, strict=True)],
                                              None, {})

        rollouts = roll_out(more, completion_ids, decode, encode, tools, max_calls=self.max_tool_calls,
                            max_length=self.args.max_completion_length, syntax=syntax)
        weights["batch"] = [r.weights for r in rollouts]
        texts = [answer_text(r, decode) for r in rollouts]
        conversational = not isinstance(completions[0], str)
        metrics = self._metrics["train" if self.model.training else "eval"]
        for key, value in summary(rollouts).items():
            if value is not None:  # no call to judge: left out of the step's mean
                metrics[key].append(value)
        _log_whole_lengths(self, [r.ids for r in rollouts], metrics)
        return prompt_ids, [r.ids for r in rollouts], (
            [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts)

    def generate_and_score(self, inputs):
        out = score(inputs)
        out["tool_weights"] = _padded(weights["batch"], out["completion_ids"].shape[1], out["completion_ids"].device)
        weights["batch"] = None
        return out

    def compute_loss(self, model, inputs):
        weights["step"] = inputs.get("tool_weights")
        try:
            return loss(model, inputs)
        finally:
            weights["step"] = None

    def per_token_logps(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        out = per_token(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        w = weights["step"]
        if w is None and weights["batch"] is not None and len(weights["batch"]) == input_ids.shape[0]:
            w = _padded(weights["batch"], logits_to_keep, input_ids.device)
        if w is None or w.shape != out[0].shape:
            return out
        w = w.to(out[0].dtype)
        return (out[0] * w, None if out[1] is None else out[1] * w, *out[2:])

    for name, fn in (("_generate", generate), ("_generate_and_score_completions", generate_and_score),
                     ("_compute_loss", compute_loss), ("_get_per_token_logps_and_entropies", per_token_logps)):
        setattr(trainer, name, types.MethodType(fn, trainer))
    return True


def _log_whole_lengths(trainer, completions: list[list[int]], metrics: dict[str, list[float]]) -> None:
    """TRL's `_generate` logged the first turn's lengths; the step's length figures (the step line's length and
    clipped, the health monitor's truncation) and the tokens seen (`num_tokens`, `state.num_input_tokens_seen`) are
    made the whole rollouts' instead, by TRL's rules: gathered over processes, cut where the last token is neither
    an end-of-sequence nor padding."""
    device, gather = trainer.accelerator.device, trainer.accelerator.gather
    ends = {*trainer.eos_token_ids, trainer._tokenizer.pad_token_id}
    lengths = gather(torch.tensor([len(ids) for ids in completions], device=device)).float()
    if trainer.model.training:  # TRL counted the first turn's tokens: add what the tool calls and answers added
        first_turn = round(metrics["completions/mean_length"][-1] * lengths.numel())
        trainer.state.num_input_tokens_seen += int(lengths.sum().item()) - first_turn
        metrics["num_tokens"] = [trainer.state.num_input_tokens_seen]
    cut = gather(torch.tensor([not ids or ids[-1] not in ends for ids in completions], device=device))
    ended = lengths[~cut] if bool((~cut).any()) else torch.zeros(1, device=device)
    for key, value in (("mean_length", lengths.mean()), ("min_length", lengths.min()),
                       ("max_length", lengths.max()), ("clipped_ratio", cut.float().mean()),
                       ("mean_terminated_length", ended.mean()), ("min_terminated_length", ended.min()),
                       ("max_terminated_length", ended.max())):
        metrics[f"completions/{key}"][-1] = value.item()


def _padded(rows: list[list[int]] | None, width: int, device) -> torch.Tensor | None:
    """The per-token weights as a (rows, width) tensor, padded with 1 on the right (padding is masked by TRL's
    completion mask anyway) and cut to `width`."""
    if rows is None:
        return None
    out = torch.ones(len(rows), width, device=device)
    for i, row in enumerate(rows):
        out[i, :min(width, len(row))] = torch.tensor(row[:width], dtype=out.dtype)
    return out
