"""python -m llama_course.grade [PATH] ...: see llama_course.grade.grader."""

import sys

from .grader import main

if __name__ == "__main__":
    sys.exit(main())
