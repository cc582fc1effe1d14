"""Training and running on several processes (Chapter 13), built on
Chapter 11's package (llama_course.train) and never imported by it:

    memory      what each strategy costs per device: ZeRO's memory
                arithmetic and ring collectives' traffic
    processes   setup (torchrun's process group), Parallel (the World
                of N processes the loop is handed), DDP and FSDP2
    checkpoint  the sharded checkpointer, by Chapter 11's crash-safe
                protocol
    tensor      tensor parallel: a plan of column- and row-parallel
                layers applied to every block; Meta's shards loaded
                into it
    demo        a six-step run to check that a machine's processes train
                together: python -m llama_course.parallel
    launch      what python -m llama_course.train runs
"""

from .demo import demo, demo_data  # noqa: I001  (demo needs processes)
from .memory import (
    STRATEGIES,
    communication_bytes,
    memory_per_gpu,
    training_bytes_per_parameter,
)
from .processes import (
    Parallel,
    apply_ddp,
    apply_fsdp,
    barrier,
    check_agreement,
    mean_across,
    parallelize,
    setup,
    state_bytes,
    teardown,
)
from .tensor import (
    apply_tp,
    block_plan,
    load_meta_tensor_parallel,
    split_for_meta,
    write_meta,
)

__all__ = [
    "STRATEGIES",
    "Parallel",
    "apply_ddp",
    "apply_fsdp",
    "apply_tp",
    "barrier",
    "block_plan",
    "check_agreement",
    "communication_bytes",
    "demo",
    "demo_data",
    "load_meta_tensor_parallel",
    "mean_across",
    "memory_per_gpu",
    "parallelize",
    "setup",
    "split_for_meta",
    "state_bytes",
    "teardown",
    "training_bytes_per_parameter",
    "write_meta",
]
