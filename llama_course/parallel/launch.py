"""The lab's command line (llama_course.train.cli) with its processes
joined by ``setup``: what ``python -m llama_course.train`` runs, alone or
under torchrun (DDP; FSDP2 with --shard)."""

from __future__ import annotations

from ..train.cli import main as cli_main
from .processes import setup


def main(argv: list[str] | None = None) -> int:
    """python -m llama_course.train [options]; see --help."""
    return cli_main(argv, join=setup)
