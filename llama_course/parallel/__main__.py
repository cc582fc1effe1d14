"""python -m llama_course.parallel [--shard]: the demo run (demo.py)."""

import sys

from torch.distributed.elastic.multiprocessing.errors import record

from .demo import main

if __name__ == "__main__":
    sys.exit(record(main)())
