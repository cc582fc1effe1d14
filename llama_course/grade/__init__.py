"""The course's tools, kept apart from the teaching modules: nothing here is course content.

    grader      python -m llama_course.grade [PATH]: grade exercises in isolated worker processes
    sandbox     the worker process that runs student code (llama_course.grade.sandbox)
    plugin      the pytest plugin behind graded tests (--impl, the `graded` marker, fixtures)
    stubs       python -m llama_course.grade.stubs: write exercises/ from solutions/
    autograder  python -m llama_course.grade.autograder: the Gradescope autograder zip
    testing     helpers for tests: weights at a realistic scale
"""
