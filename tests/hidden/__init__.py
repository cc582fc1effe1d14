"""Hidden tests: the real oracles of the homework problems, and the practice tests whose oracle is a
full reference implementation. Instructor edition and Gradescope zip only; never in the student
release. A package so that its file names can match those of tests/graded.
"""
