"""python -m llama_course.train: the lab's command line (cli.py), with the
processes torchrun starts joined by Chapter 13's llama_course.parallel.

This file is the program that puts Chapters 11 and 13 together, not part
of Chapter 11's loop: tests/unit/test_import_dag.py places it in the
layer above both, the only module of this package that may import
llama_course.parallel.
"""

import sys

from torch.distributed.elastic.multiprocessing.errors import record

from ..parallel.launch import main

if __name__ == "__main__":
    sys.exit(record(main)())    # a failing rank's traceback, summarised
