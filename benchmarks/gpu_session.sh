#!/usr/bin/env bash
# The GPU path on a lent GPU machine, as one prepared command (see benchmarks/gpu_pack.sh for what travels):
#   bash benchmarks/gpu_session.sh            # after the packed site and model parts are in place
#   GPU_CHECKS="default-model backends-qwen2.5-0.5b" bash benchmarks/gpu_session.sh  # only the checks named
# (default-model first: every other check, the random-weights shapes too, uses the default model's tokenizer)
# Each check runs in its own process under its own time limit, so one failure does not hide the others, and its
# results are copied to $OUT as soon as it ends (the command may be stopped at its limit). The limits are from the
# first session (H200): three backends on the 0.5B shape took over 200 s (each loads, and Unsloth compiles for
# ~45 s); the 30-step demo 155 s.
set -u
OUT=${OUT:-runs/gpu-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/.site:$PWD" PYTHONUNBUFFERED=1 RLOO_KIT_CACHE=/tmp/rloo-cache HF_HUB_OFFLINE=1
LOG="$OUT/session.log"
STEPS=${GPU_DEMO_STEPS:-30}
DEADLINE=$((SECONDS + ${GPU_BUDGET:-540}))  # the whole session, so the last check ends before the command's limit

check() {  # check NAME SECONDS COMMAND...: run it, log its output and exit status, keep what it wrote
  local name=$1 limit=$2; shift 2
  case " ${GPU_CHECKS:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 30 ]; then echo "== $name skipped: ${left}s left" >>"$LOG"; return 0; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s) $(date +%T)" >>"$LOG"
  local start=$SECONDS
  timeout -s INT -k 20 "$limit" "$@" >>"$LOG" 2>&1  # SIGINT, as Ctrl-C: a run stopped keeps its adapter
  echo "== $name rc=$? in $((SECONDS - start))s" >>"$LOG"
  tar czf "$OUT/results.tgz" benchmarks/results/backends-cuda* benchmarks/results/cuda-oom.json \
    benchmarks/results/gpu-generate.json 2>/dev/null
  for run in gpu-demo gpu-demo-lr gpu-tools gpu-budget gpu-user-demo gpu-user-units; do  # files come back at 16 MiB at most: an adapter travels in parts
    [ -d "runs/$run" ] || continue
    rm -f "$OUT/$run".tgz.*
    tar czf - --exclude='checkpoint-*' "runs/$run" | split -b 15M -d -a 1 - "$OUT/$run.tgz."
  done
  return 0
}

check environment 60 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python3 -c "import sys, torch, transformers, trl, peft, bitsandbytes, datasets, accelerate;
print(sys.version.split()[0], {m.__name__: m.__version__ for m in (torch, transformers, trl, peft, bitsandbytes, datasets, accelerate)}, torch.cuda.get_device_name(0))";
  python3 -c "import unsloth; print(\"unsloth\", unsloth.__version__)"'
check default-model 120 python3 -c "
from rloo_kit.sources import ALIASES, default_model_path, gguf_to_safetensors
spec = ALIASES['smollm2-135m']
gguf_to_safetensors('/tmp/smollm2.gguf', default_model_path(), eos_token=spec.eos_token, pad_token=spec.pad_token)
print('built', default_model_path())"
check backends-qwen2.5-0.5b 330 python3 benchmarks/backends.py --model random:qwen2.5-0.5b --name backends-cuda-qwen2.5-0.5b
check learning-run 200 python3 -m rloo_kit.cli train --task arithmetic --model smollm2-135m --preset 8gb \
  --max-steps "$STEPS" --output-dir runs/gpu-demo
# the first session's run learned little (0.52 -> 0.58) at the 8gb preset's 5e-5, meant for 0.5B-8B models:
# the same run at the rate measured for this model on a CPU (benchmarks/results/learning-rate.md)
check learning-run-lr 200 python3 -m rloo_kit.cli train --task arithmetic --model smollm2-135m --preset 8gb \
  --learning-rate 4e-4 --max-steps "$STEPS" --output-dir runs/gpu-demo-lr
check out-of-memory 60 python3 benchmarks/cuda_oom.py --backend transformers
check backends-smollm2 150 python3 benchmarks/backends.py --model smollm2-135m --name backends-cuda-smollm2-135m
check backends-qwen2.5-1.5b 300 python3 benchmarks/backends.py --model random:qwen2.5-1.5b --name backends-cuda-qwen2.5-1.5b
# the round's features on CUDA (third session): tools with a warm-start, the time budget with the prompt pool,
# and the pre-flight's sampling fit on a file task where temperature 1 leaves a small model's samples noisy
check tools-run 300 python3 -m rloo_kit.cli train --task products --tools calculator --tool-warm-start 16 \
  --model smollm2-135m --preset 8gb --minutes 2.5 --output-dir runs/gpu-tools
check budget-run 200 python3 -m rloo_kit.cli train --task arithmetic --model smollm2-135m --preset 8gb \
  --minutes 1.5 --prompt-pool --output-dir runs/gpu-budget
check preflight-file 90 python3 -m rloo_kit.cli preflight --task file --path benchmarks/tasks/word_sums.jsonl --prompt-column question \
  --answer-column result --model smollm2-135m --preset 8gb
# fifth session: the kit's own generation (pre-flight, validation, evaluation) as it runs today against
# torch.inference_mode and Unsloth's for_inference, both backends
check generate 360 python3 benchmarks/gpu_generate.py --name gpu-generate
# sixth session: #36's goal where a user with a big card runs it, no preset named (the kit picks one for the card),
# the demo under the 3-minute budget and a held-back numeric file (units.csv, fitted to temperature 0.3 on a CPU)
check user-demo 330 python3 -m rloo_kit.cli train --task arithmetic --minutes 3 --output-dir runs/gpu-user-demo
check user-units 300 python3 -m rloo_kit.cli train --task file --path benchmarks/tasks/units.csv --prompt-column question \
  --answer-column amount --minutes 2 --output-dir runs/gpu-user-units
echo "== done $(date +%T)" >>"$LOG"
