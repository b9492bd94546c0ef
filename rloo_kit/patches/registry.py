"""Every change rloo-kit makes to another library's behaviour, in the order the door applies them.

Each entry names what it touches, the versions its equivalence tests passed on and those tests. Ranges are
the minor series tested (`make test` on the pins in pyproject.toml); widen one only after its tests pass.
"""

from __future__ import annotations

import torch

from .patch import Patch

TRL, TRANSFORMERS = {"trl": "==1.15.*"}, {"transformers": "==5.17.*"}
PEFT, TORCH = {"peft": "==0.21.*"}, {"torch": "==2.13.*"}
RLOO = "trl.trainer.rloo_trainer.RLOOTrainer"
LORA_FORWARD = "peft.tuners.lora.layer.Linear.forward"
LORA_CASTS = "peft.tuners.lora.layer.LoraLayer().cast_input_dtype_enabled"
CPU_STEP, CPU_SPEED = "tests/test_cpu_step.py::", "tests/test_cpu_speed.py::"

PATCHES: tuple[Patch, ...] = (
    Patch("contiguous_lm_head", "the LM head gets a contiguous copy of generation's last-token slice (a torch "
          "matmul path copies the head's weight per row otherwise)",
          targets=("transformers.PreTrainedModel.get_output_embeddings",), tested=TRANSFORMERS | TORCH,
          tests=(CPU_STEP + "test_lm_head_gets_a_contiguous_input_once_hooked",),
          apply="rloo_kit.patches.compat:contiguous_lm_head_input", phase="model", devices=None),
    Patch("grouped_attention", "grouped-query attention in two matmuls on a CPU, in place of SDPA (registered "
          "with transformers' attention registry; bf16 short sequences and decoding, fp32 decoding; the rest "
          "handed back to SDPA)",
          targets=("transformers.AttentionInterface.register", "transformers.masking_utils.AttentionMaskInterface",
                   "transformers.masking_utils.eager_mask", "transformers.integrations.sdpa_attention."
                   "sdpa_attention_forward", "transformers.PreTrainedModel.set_attn_implementation"),
          tested=TRANSFORMERS | TORCH,
          tests=(CPU_STEP + "test_grouped_attention_is_as_precise_as_sdpa",
                 CPU_STEP + "test_grouped_attention_trains_like_sdpa"),
          apply="rloo_kit.patches.attention:use_cpu_attention", phase="model",
          when="models on SDPA, in bf16 or fp32"),
    Patch("fused_rms_norm", "each Llama-style RMSNorm's forward (an instance attribute) runs torch's fused "
          "kernel for bf16 on a CPU",
          targets=("transformers.models.llama.modeling_llama.LlamaRMSNorm.forward", "torch.nn.functional.rms_norm"),
          tested=TRANSFORMERS | TORCH,
          tests=("tests/test_norms.py::test_fused_norm_computes_what_transformers_does",),
          apply="rloo_kit.patches.norms:use_fused_rms_norm", phase="model", dtype=torch.bfloat16),
    Patch("plain_cpu_device", "a CPU process under `accelerate launch` names its device `cpu`, not `cpu:<rank>` "
          "(written into TrainingArguments' cached `_setup_devices`)",
          targets=("transformers.TrainingArguments._setup_devices",), tested=TRANSFORMERS,
          tests=("tests/test_distributed.py::test_two_processes_train_to_the_planned_step_and_write_one_adapter",),
          apply="rloo_kit.patches.private:plain_cpu_device", phase="config",
          when="CPU processes under `accelerate launch`"),
    Patch("trl_cpu_logprob", "TRL's Triton-only log-prob kernel gets a plain-PyTorch path off CUDA (replaced "
          "process-wide; CUDA and XPU still call TRL's kernel)",
          targets=("trl.trainer.utils._ChunkedLogProbFunction",), tested=TRL | TORCH,
          tests=(CPU_SPEED + "test_fp32_values_and_gradients_match_plain_pytorch",
                 CPU_SPEED + "test_bf16_path_projects_in_bf16_and_reduces_in_fp32"),
          apply="rloo_kit.patches.compat:patch_trl_for_cpu", phase="process", devices=("cpu", "mps"), required=True),
    Patch("reuse_scoring_forward", "TRL's no-grad scoring pass keeps its graph and the loss reuses it (one policy "
          "forward fewer a step; the trainer's method rebound)",
          targets=(f"{RLOO}._get_per_token_logps_and_entropies",), tested=TRL | PEFT,
          tests=(CPU_SPEED + "test_reused_forward_trains_exactly_like_trl",
                 CPU_SPEED + "test_reuse_is_refused_where_it_would_change_training"),
          apply="rloo_kit.patches.compat:reuse_policy_forward",
          when="num_iterations=1, one micro-batch a generation, no gradient checkpointing, no vLLM"),
    Patch("cpu_sampler", "sampling with a lean LoRA forward, each distinct prompt read once and torch.multinomial "
          "swapped for a CDF draw while it runs; on a bf16 base with packed base weights (private mkldnn ops) too",
          targets=(f"{RLOO}._generate_single_turn", "torch.multinomial", "torch.ops.mkldnn._reorder_linear_weight",
                   "torch.ops.mkldnn._linear_pointwise", LORA_FORWARD, LORA_CASTS,
                   "transformers.cache_utils.DynamicCache.batch_select_indices"),
          tested=TRL | TRANSFORMERS | PEFT | TORCH,
          tests=(CPU_STEP + "test_categorical_draw_follows_the_probabilities",
                 CPU_STEP + "test_packed_weights_compute_what_the_plain_weights_do",
                 CPU_STEP + "test_lean_lora_computes_what_peft_does",
                 CPU_STEP + "test_repeated_prompts_are_read_once_and_generate_the_same"),
          apply="rloo_kit.patches.cpu_step:lean_sampler", when="LoRA on a bf16 or fp32 base, transformers generation"),
    Patch("cpu_bf16_step", "the training step under bf16 autocast: PEFT's input casts off, LoRA's product in one "
          "addmm, the reference pass flipping PEFT's `_disable_adapters` (training_step rebound)",
          targets=(f"{RLOO}.training_step", LORA_FORWARD, LORA_CASTS,
                   "peft.tuners.tuners_utils.BaseTunerLayer._disable_adapters", "peft.PeftModel.disable_adapter",
                   "peft.PeftModel()._adapters_disabled"),
          tested=TRL | PEFT | TORCH,
          tests=(CPU_STEP + "test_lean_lora_training_computes_and_trains_what_peft_does",
                 CPU_STEP + "test_reference_switch_computes_the_base_model_and_restores_the_adapters",
                 CPU_STEP + "test_bf16_step_trains_fp32_adapters_and_leaves_the_base_alone"),
          apply="rloo_kit.patches.cpu_step:bf16_step", dtype=torch.bfloat16, when="LoRA, transformers generation"),
    Patch("task_reward_spread", "TRL's `_calculate_rewards` wrapped to log frac_task_reward_zero_std into its "
          "`_metrics` (reward collapse before the KL penalty hides it), and frac_answer_reward_zero_std, the first "
          "reward function's alone, where there are several",
          targets=(f"{RLOO}._calculate_rewards", f"{RLOO}()._metrics", "trl.trainer.utils.nanstd"),
          tested=TRL, tests=("tests/test_diagnostics.py::test_the_spread_is_taken_as_trl_takes_its_rewards",),
          apply="rloo_kit.patches.compat:log_task_reward_spread", devices=None),
    Patch("cpu_generation", "the kit's own generation on a CPU (pre-flight, evaluation, gold monitor), for the length "
          "of each call: inference mode, each distinct prompt read once (`model.generate` rebound on the instance), "
          "torch.multinomial swapped for a CDF draw and plain LoRA layers' forward rebound to one added product; "
          "fp32 and bf16 models alike",
          targets=("torch.multinomial", "transformers.GenerationMixin.generate",
                   "transformers.cache_utils.DynamicCache.batch_select_indices", LORA_FORWARD),
          tested=TRANSFORMERS | PEFT | TORCH,
          tests=(CPU_STEP + "test_categorical_draw_follows_the_probabilities",
                 CPU_STEP + "test_repeated_prompts_are_read_once_and_generate_the_same",
                 CPU_STEP + "test_lean_lora_computes_what_peft_does",
                 "tests/test_evaluation.py::test_lean_generation_is_the_doors_and_gives_the_same_greedy_answers"),
          apply=None, phase="call"),
    Patch("bitsandbytes_notice", "bitsandbytes' notice that an optional hub kernel ('kernels') is missing, printed "
          "when PEFT imports it, silenced in the `rloo-kit` command's own process (its logger "
          "'bitsandbytes.backends.cpu.ops' set to ERROR by `patches.private.silence_kernel_notice`): bitsandbytes "
          "uses its own CPU kernel either way. In a notebook it shows once, at the first model load",
          targets=(), tested={"bitsandbytes": "==0.50.*"},
          tests=("tests/test_patches.py::test_the_command_silences_the_kernel_notice_and_import_leaves_loggers_alone",),
          apply=None, phase="cli", devices=None),
    Patch("trl_metrics", "the gold monitor's gold/mean and proxy/mean appended to TRL's private per-step metrics "
          "(`_metrics`), which TRL averages into the step's log beside reward and KL; untrusted, each measurement "
          "is a log entry of its own (`patches.private.trl_metrics`)",
          targets=(f"{RLOO}()._metrics",), tested=TRL,
          tests=("tests/test_reward_models.py::test_gold_monitor_logs_gold_beside_the_proxy_on_a_real_run",
                 "tests/test_patches.py::test_the_accessors_fall_back_where_the_door_says_no"),
          apply=None, phase="private", devices=None),
    Patch("trl_logs", "the live view's latest completions, rewards and advantages read from what RLOOTrainer keeps "
          "for logging (its private `_logs`); untrusted, the view shows no completions (`patches.private.trl_logs`)",
          targets=(f"{RLOO}()._logs",), tested=TRL,
          tests=("tests/test_live.py::test_widget_state_after_real_steps",
                 "tests/test_patches.py::test_the_accessors_fall_back_where_the_door_says_no"),
          apply=None, phase="private", devices=None),
    Patch("load_checkpoint", "resuming a run that already finished loads its last checkpoint through transformers' "
          "private `Trainer._load_from_checkpoint` (what `train(resume_from_checkpoint=...)` loads) and trains "
          "nothing; untrusted, `train` resumes, one step past max_steps (`patches.private.load_checkpoint`)",
          targets=("transformers.Trainer._load_from_checkpoint",), tested=TRANSFORMERS,
          tests=("tests/test_resume.py::test_resuming_a_finished_run_trains_nothing_and_keeps_its_adapter",),
          apply=None, phase="private", devices=None),
    Patch("ipykernel_subshell", "the live view's Stop button answered on a kernel subshell (ipykernel's private "
          "`_create_subshell`, and the comm's `_reply_subshell_for`) while the training cell runs",
          targets=("ipykernel.subshell_manager.SubshellManager._create_subshell",
                   "ipykernel.kernelbase.Kernel.shell_channel_thread"), tested={"ipykernel": "==7.4.*"},
          tests=("tests/test_browser.py::test_stop_button_stops_a_run_and_keeps_the_adapter",),
          apply=None, phase="live", devices=None, when="the live view's widget in a Jupyter kernel"),
    Patch("group_sampler", "the training prompts drawn by the kit's prompt pool (`rloo_kit.pool`), which rests "
          "prompts whose groups were flat, and each choice question's group sampled half as written and half with "
          "its choices one place on (`rloo_kit.choice_order`), in place of TRL's uniform RepeatSampler (the "
          "trainer's `_get_train_sampler` rebound on the instance); only where the run asks for either",
          targets=(f"{RLOO}._get_train_sampler", f"{RLOO}().num_generations", f"{RLOO}().num_iterations",
                   f"{RLOO}().train_dataset"),
          tested=TRL, tests=("tests/test_pool.py::test_the_group_sampler_keeps_trls_sampler_contract",
                             "tests/test_pool.py::test_a_pooled_run_trains_and_its_pool_resumes",
                             "tests/test_choice_order.py::test_a_run_in_two_orders_samples_each_group_half_and_half"),
          apply="rloo_kit.patches.group_sampler:use_group_sampler", devices=None,
          when="prompt_pool=True (one process) or mix_choice_order=True", asked_by=("prompt_pool", "choice_twins")),
    Patch("spread_filter", "a step's log-prob passes, KL and loss on its groups with spread in the task reward only, "
          "their advantages scaled by the share kept (the trainer's `_generate_and_score_completions` rebound on "
          "the instance: sampling and scoring first, then TRL's own on those groups, its `_generate` and "
          "`_calculate_rewards` answered with what was sampled and scored); only where the run asks for it",
          targets=(f"{RLOO}._generate_and_score_completions", f"{RLOO}._generate", f"{RLOO}._calculate_rewards",
                   f"{RLOO}()._metrics", f"{RLOO}()._logs", f"{RLOO}()._pending_extra_logs",
                   f"{RLOO}().reward_func_names", "trl.trainer.utils.nanstd"),
          tested=TRL, tests=("tests/test_spread_filter.py::test_flat_groups_stay_out_of_the_step_and_the_logs_see_them",
                             "tests/test_spread_filter.py::test_a_filtered_step_is_trls_step_on_the_groups_with_spread"),
          apply="rloo_kit.patches.spread_filter:use_spread_filter", devices=None,
          when="spread_filter=True, one process, one micro-batch a generation, no tools", asked_by=("spread_filter",)),
    Patch("tool_rollouts", "rollouts that call tools (`rloo_kit.tools`): after TRL's first turn each call is run and "
          "sampling goes on; a tool's tokens weigh 0 in the old log-probs, the KL and the loss (four of RLOOTrainer's "
          "private methods rebound on the instance, the log-prob pass outermost); the step's length figures are "
          "the whole rollouts'",
          targets=(f"{RLOO}._generate", f"{RLOO}._generate_single_turn", f"{RLOO}._generate_and_score_completions",
                   f"{RLOO}._compute_loss", f"{RLOO}._get_per_token_logps_and_entropies", f"{RLOO}()._metrics",
                   f"{RLOO}()._tokenizer"),
          tested=TRL, tests=("tests/test_tools.py::test_without_calls_a_step_is_trls_step",
                             "tests/test_tools.py::test_a_tools_tokens_weigh_nothing_and_errors_come_back_as_results"),
          apply="rloo_kit.patches.tool_rollouts:use_tool_rollouts", devices=None, when="tools given",
          asked_by=("kit_tools",)),
)
