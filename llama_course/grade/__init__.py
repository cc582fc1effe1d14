"""The course's tools, kept apart from the teaching modules: nothing here is course content.

    grader      python -m llama_course.grade [PATH]: grade exercises in confined worker processes;
                --list prints every exercise (id, name, kind, section, points); --class grades a class
    sandbox     the worker process that runs student code (an unprivileged user when run as root)
    plugin      the pytest plugin behind graded tests (--impl, the `graded` marker, fixtures, the
                check that an exercise does not hand in the package's own answer)
    stubs       python -m llama_course.grade.stubs: write exercises/ from solutions/
    autograder  python -m llama_course.grade.autograder: the Gradescope autograder zip
    testing     helpers for tests: weights at a realistic scale
"""
