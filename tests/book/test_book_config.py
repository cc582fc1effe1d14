"""The book's Sphinx extension (book/_ext/course_version.py) is registered and takes the course
version from llama_course, the single source of truth (no browser, no build: a few ms)."""

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import yaml

import llama_course

REPO = Path(__file__).resolve().parents[2]
EXT = REPO / "book" / "_ext" / "course_version.py"


def load_extension():
    spec = importlib.util.spec_from_file_location("course_version", EXT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_registers_the_extension():
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    local = config["sphinx"]["local_extensions"]
    assert local["course_version"] == "book/_ext"
    assert (REPO / local["course_version"] / "course_version.py") == EXT and EXT.is_file()
    # the numbers the extension makes per chapter exist only with numfig
    assert config["sphinx"]["config"]["numfig"] is True


def test_no_second_copy_of_the_version():
    source = EXT.read_text(encoding="utf-8")
    literals = re.findall(r"""["'](\d+\.\d+(?:\.\d+)?[\w.+-]*)["']""", source)
    assert not literals, f"hard-coded version-like strings in {EXT.name}: {literals}"


def test_config_hook_sets_the_package_version():
    ext = load_extension()
    version = llama_course.__version__
    config = SimpleNamespace(version="", release="", myst_substitutions={"other": "kept"},
                             html_theme_options={"extra_footer": "<p>earlier</p>", "x": 1})
    ext.set_version(app=None, config=config)
    assert config.version == config.release == version
    assert config.myst_substitutions == {"other": "kept", "version": version}
    footer = config.html_theme_options["extra_footer"]
    assert footer.startswith("<p>earlier</p>") and f"version {version} " in footer
    assert "llama_course" in footer and config.html_theme_options["x"] == 1


def test_numbers_per_chapter():
    ext = load_extension()
    env = SimpleNamespace(toc_fignumbers={
        "book/ch04_attention": {"figure": {"fig-a": (7,), "fig-b": (8,)},
                                "displaymath": {"eq-a": (14,), "eq-b": (15,), "eq-c": (16,)}},
        "book/ch10_moe": {"figure": {"fig-c": (20,)}},
        "book/labs": {"figure": {"fig-d": (21,), "fig-e": (22,)}},
    })
    raw = {doc: {kind: dict(ids) for kind, ids in by.items()}
           for doc, by in env.toc_fignumbers.items()}
    assert ext.number_per_chapter(app=None, env=env) == []
    assert env.toc_fignumbers == {
        "book/ch04_attention": {"figure": {"fig-a": (4, 1), "fig-b": (4, 2)},
                                "displaymath": {"eq-a": (4, 1), "eq-b": (4, 2), "eq-c": (4, 3)}},
        "book/ch10_moe": {"figure": {"fig-c": (10, 1)}},
        "book/labs": {"figure": {"fig-d": (1,), "fig-e": (2,)}},
    }
    # the next build's collector compares its numbers with Sphinx's own, not with ours
    assert env.course_raw_fignumbers == raw
    ext.restore_raw_numbers(app=None, env=env)
    assert env.toc_fignumbers == raw


def load_site_extension():
    path = REPO / "book" / "_ext" / "course_site.py"
    spec = importlib.util.spec_from_file_location("course_site", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_registers_the_site_extension_and_a_favicon():
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    assert config["sphinx"]["local_extensions"]["course_site"] == "book/_ext"
    assert (REPO / config["html"]["favicon"]).is_file()
    for name in ("course.css", "course.js"):
        assert (REPO / "book" / "_static" / name).is_file()


def test_inline_scripts_are_emitted_once():
    """Sphinx 7.4 lists an extension's inline script twice (file name None and ''): the
    second copy of sphinx-thebe's `const THEBE_JS_URL` threw on every page."""
    from sphinx.builders.html._assets import _JavaScript

    ext = load_site_extension()
    thebe = "const THEBE_JS_URL = 'x'"
    scripts = [_JavaScript("a.js"), _JavaScript(None, body=thebe), _JavaScript("b.js"),
               _JavaScript("", body=thebe), _JavaScript("", body="other()")]
    context = {"script_files": list(scripts)}
    ext.dedupe_scripts(None, "page", "page.html", context, None)
    kept = context["script_files"]
    assert [js.attributes.get("body") for js in kept].count(thebe) == 1
    assert len(kept) == 4 and kept[0].filename == "a.js" and kept[-1].attributes["body"] == "other()"


def test_static_folder_is_served():
    ext = load_site_extension()
    config = SimpleNamespace(html_static_path=["elsewhere"])
    ext.add_static(None, config)
    assert config.html_static_path[0] == "elsewhere"
    assert Path(config.html_static_path[-1]) == REPO / "book" / "_static"


def test_stylesheet_keeps_images_in_proportion():
    css = (REPO / "book" / "_static" / "course.css").read_text(encoding="utf-8")
    assert re.search(r"\.bd-content img[^{]*\{[^}]*height:\s*auto !important", css)
