"""Which process this is, and how many there are, when a run is started by `accelerate launch`.

TRL's RLOOTrainer already runs under Hugging Face accelerate (DDP, DeepSpeed, FSDP): it splits the
batch across processes, gathers the logged metrics and saves checkpoints from the main process.
The kit's own steps around it — writing the final and the interrupted adapter, printing diagnoses
and results, placing the model on a GPU — ask these helpers, so that each happens once, or on the
right device, whatever the number of processes. Everything is read from accelerate's `PartialState`;
in a plain `python` or notebook process there is one process and the answers say so.

One gap in the pinned libraries is closed by the door's patch `plain_cpu_device` (`patches.private`): on a
machine without a GPU, accelerate names each process's device `cpu:<rank>`, and transformers 5.17 resumes the
optimizer with `torch.load(map_location=args.device)`, which torch 2.13 refuses for `cpu:0` ("don't know how
to restore data location"), so a multi-process CPU run could not resume; the patch names the device `cpu`.
"""

from __future__ import annotations

import torch
from accelerate import PartialState


def state() -> PartialState:
    """accelerate's view of this process. Under a launcher the first call joins the process group
    (gloo on a CPU-only machine, NCCL on GPUs), as the Trainer would; later calls reuse it."""
    return PartialState(cpu=not torch.cuda.is_available())


def world_size() -> int:
    """The number of processes training together (1 outside a launcher)."""
    return state().num_processes


def process_index() -> int:
    """This process's rank among all processes, from 0."""
    return state().process_index


def local_process_index() -> int:
    """This process's rank on this machine: the GPU it should use."""
    return state().local_process_index


def is_main_process() -> bool:
    """True in exactly one process: the one that writes files and prints results."""
    return state().is_main_process


def barrier() -> None:
    """Wait until every process gets here (returns at once with one process)."""
    state().wait_for_everyone()


def agreed(value):
    """The main process's `value`, on every process (`value` itself with one process). A decision each process
    would take from its own clock (a time budget's: stop, measure) must be the same everywhere, or one process
    waits at the next collective step for the others forever."""
    if world_size() == 1:
        return value
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]


def shards_parameters(trainer) -> bool:
    """True when the model's weights are split across processes (DeepSpeed ZeRO-3 or FSDP): saving it
    is then a collective step that every process must reach together."""
    if getattr(trainer, "is_fsdp_enabled", False):
        return True
    plugin = getattr(getattr(trainer, "accelerator", None), "state", None)
    plugin = getattr(plugin, "deepspeed_plugin", None) if getattr(trainer, "is_deepspeed_enabled", False) else None
    return plugin is not None and plugin.zero_stage == 3

