"""The Gradescope zip: its layout, and run_autograder grading a submission end to end."""

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

from llama_course.grade.autograder import build

REPO = Path(__file__).resolve().parents[1]


def test_zip_layout_and_scripts(tmp_path):
    archive = build(tmp_path / "autograder.zip")
    with zipfile.ZipFile(archive) as z:
        names = set(z.namelist())
        for script in ("setup.sh", "run_autograder"):
            assert stat.S_IMODE(z.getinfo(script).external_attr >> 16) & 0o111
        assert {"pyproject.toml", "requirements.lock", "llama_course/grade/grader.py", "llama_course/grade/sandbox.py",
                "tests/conftest.py", "tests/graded/test_ch01_anatomy.py"} <= names
        assert not any("solutions" in n or "__pycache__" in n for n in names)  # no answers inside
        z.extractall(tmp_path / "autograder" / "source")
    for script in ("setup.sh", "run_autograder"):
        subprocess.run(["bash", "-n", str(tmp_path / "autograder" / "source" / script)], check=True)


def test_run_autograder_grades_a_submission(tmp_path):
    root = tmp_path / "autograder"
    with zipfile.ZipFile(build(tmp_path / "autograder.zip")) as z:
        z.extractall(root / "source")
    (root / "submission").mkdir()
    shutil.copy(REPO / "solutions" / "ch01_anatomy.py", root / "submission")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
    run = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    ch01 = [t for t in results["tests"] if t["name"].startswith("Exercise 1.")]
    assert ch01 and all(t["score"] == t["max_score"] for t in ch01)
