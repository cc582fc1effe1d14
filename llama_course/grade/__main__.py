"""python -m llama_course.grade [PATH] ...: see llama_course.grade.grader."""

import sys

from .grader import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["capstone"]:  # python -m llama_course.grade capstone [exercises/]: Chapter 14
        from .capstone import main as capstone_main

        sys.exit(capstone_main(sys.argv[2:]))
    sys.exit(main())
