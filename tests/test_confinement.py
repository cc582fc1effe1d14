"""The grader fails closed: it hides by file modes, checks as the worker's user that the hidden
paths are unreadable, refuses where it cannot confine, and writes any student text safely."""
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from llama_course.grade import grader, sandbox

REPO = Path(__file__).resolve().parents[1]
as_root = pytest.mark.skipif(not (sys.platform.startswith("linux") and os.geteuid() == 0),
                             reason="switching to another uid needs root on Linux")
UID = sandbox.UID_BASE + 4242  # a uid no file and no process uses


@as_root
def test_hidden_paths_are_closed_by_mode_and_checked_as_the_worker():
    with tempfile.TemporaryDirectory() as folder:  # under /tmp: a folder every user can enter
        os.chmod(folder, 0o755)
        check_closing(Path(folder))


def check_closing(tmp_path):
    hidden, secret, public = tmp_path / "hidden", tmp_path / "key.py", tmp_path / "public.py"
    hidden.mkdir(mode=0o755)
    (hidden / "test_x.py").write_text("expected = 42\n")
    secret.write_text("answer = 42\n")
    public.write_text("x = 1\n")
    for f in (hidden / "test_x.py", secret, public):
        f.chmod(0o644)
    paths = [str(hidden), str(secret), str(public)]
    assert sandbox.readable_by(UID, UID, paths) == paths            # world-readable: the worker reads all
    assert sandbox.close_to_others([str(hidden), str(secret)]) == [str(hidden), str(secret)]
    assert sandbox.readable_by(UID, UID, paths) == [str(public)]    # closed ones are not
    assert hidden.stat().st_mode & 0o777 == 0o750 and secret.stat().st_mode & 0o777 == 0o640
    assert sandbox.close_to_others([str(hidden)]) == []             # already closed: nothing to change


@as_root
def test_a_closed_folder_above_the_course_refuses_instead_of_running_as_root(tmp_path, monkeypatch):
    closed = tmp_path / "home"
    monkeypatch.setattr(sandbox, "closed_folder", lambda path: closed)
    closed.mkdir(mode=0o700)
    with pytest.raises(sandbox.ConfinementError, match=r"closed to other users.*chmod o\+x"):
        sandbox.confine([])
    out = tmp_path / "results.json"
    assert grader.main([str(REPO / "exercises"), "--out", str(out), "--chapter", "1"]) == 2
    results = json.loads(out.read_text())
    assert results["tests"] == [] and results["score"] == 0
    assert results["output"].startswith("grading refused:") and str(closed) in results["output"]


@as_root
def test_a_hidden_path_the_worker_can_still_read_refuses(tmp_path, monkeypatch):
    leaky = tmp_path / "hidden"
    leaky.mkdir()
    monkeypatch.setattr(sandbox, "readable_by", lambda uid, gid, paths: [str(leaky)])
    with pytest.raises(sandbox.ConfinementError, match="can still read"):
        sandbox.confine([leaky])


def test_class_grading_as_an_ordinary_user_is_refused(tmp_path, monkeypatch, capsys):
    (tmp_path / "alice").mkdir()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert grader.main(["--class", str(tmp_path), "--out-dir", str(tmp_path / "grades")]) == 2
    assert "grading refused" in capsys.readouterr().err and not (tmp_path / "grades").exists()


def test_student_text_is_written_safely():
    text = grader.safe_text("bad \ud800 surrogate, \x1b[2J escape, \x07 bell, 中文\nnext\tline")
    text.encode("utf-8")                                      # no lone surrogate left
    assert "\\ud800" in text and "\\x1b" in text and "\\x07" in text
    assert "中文\nnext\tline" in text
    json.loads(json.dumps({"output": grader._cut(text)}, ensure_ascii=False))
