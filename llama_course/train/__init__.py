"""Training a tiny LLaMA (Chapter 11), one module per concern:

    data        the corpus as token ids (cached on disk), the train /
                validation split, random windows (B, T + 1) of the corpus
    loop        TrainConfig, the learning-rate schedule, AdamW, train_step
                and ``train``, the loop
    world       what the loop is handed about the processes running it
                (one, here; Chapter 13's llama_course.parallel has N)
    checkpoint  the run's crash-safe checkpoint: staging folder, fsync,
                manifest of SHA-256, rename
    cli         the command line: python -m llama_course.train

Nothing here imports Chapter 13: ``llama_course.parallel`` builds on this
package (it wraps the model, answers the World's questions across
processes and supplies the sharded checkpointer), never the reverse.
"""

from .checkpoint import (
    check_same_config,
    checkpoint_problem,
    commit_checkpoint,
    find_checkpoint,
    load_checkpoint,
    recover_checkpoint,
    resume_checkpoint,
    save_checkpoint,
)
from .cli import MODEL_CONFIGS, main, run_lock
from .data import (
    get_batch,
    shuffle_documents,
    split,
    tokenize_to_file,
)
from .loop import (
    TrainConfig,
    autocast_dtype,
    describe_schedule,
    evaluate,
    lr_at,
    make_optimizer,
    train,
    train_step,
)
from .world import World

__all__ = [
    "MODEL_CONFIGS",
    "TrainConfig",
    "World",
    "autocast_dtype",
    "check_same_config",
    "checkpoint_problem",
    "commit_checkpoint",
    "describe_schedule",
    "evaluate",
    "find_checkpoint",
    "get_batch",
    "load_checkpoint",
    "lr_at",
    "main",
    "make_optimizer",
    "recover_checkpoint",
    "resume_checkpoint",
    "run_lock",
    "save_checkpoint",
    "shuffle_documents",
    "split",
    "tokenize_to_file",
    "train",
    "train_step",
]
