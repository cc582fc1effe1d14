"""Shared test configuration. The graded-test machinery (--impl, --isolate, the `impl` and
`device` fixtures, the `graded` marker) lives in llama_course.pytest_plugin so the grader can
load it for any folder of tests."""

pytest_plugins = ["llama_course.pytest_plugin"]

# Test suites made for the grader's own tests; they grade deliberately misbehaving code.
collect_ignore = ["grader_cases"]
