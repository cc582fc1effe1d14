// LLaMA from the Inside: repairs to the theme's behaviour (added by book/_ext/course_site.py).
//
// Phone navigation. pydata-sphinx-theme binds its sidebar dialogs to the FIRST element that
// matches ".primary-toggle" / ".secondary-toggle" (document.querySelector). sphinx-book-theme's
// pages carry two of each: the first sits in a header that is hidden on narrow screens, the
// second is the one a phone shows, and it had no handler, so tapping it did nothing. Every
// other toggle now forwards its click to the bound one, which opens the dialog on a narrow
// screen (and collapses the sidebar on a wide one, as the book theme arranges).
document.addEventListener("DOMContentLoaded", () => {
  for (const selector of [".primary-toggle", ".secondary-toggle"]) {
    const [bound, ...others] = document.querySelectorAll(selector);
    for (const button of others) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    }
  }
});

// Scroll cue of the figures. book/_ext/course_site.py puts each figure in a .figure-frame whose
// .figure-scroll scrolls sideways where the column is narrower than the width at which the
// figure's text is readable (a phone). The frame is marked .more-right / .more-left while
// there is more of the figure that way; course.css shades that edge. Images are opaque, so the
// background shadow that wide tables use would be hidden under them: the shade is an overlay.
document.addEventListener("DOMContentLoaded", () => {
  const frames = [...document.querySelectorAll(".figure-frame")];
  const update = (frame) => {
    const scroller = frame.querySelector(".figure-scroll");
    if (!scroller) return;
    const more = scroller.scrollWidth - scroller.clientWidth;
    frame.classList.toggle("more-left", more > 1 && scroller.scrollLeft > 1);
    frame.classList.toggle("more-right", more > 1 && scroller.scrollLeft < more - 1);
  };
  const observer = "ResizeObserver" in window
    ? new ResizeObserver((entries) => entries.forEach((e) => update(e.target.closest(".figure-frame"))))
    : null;
  for (const frame of frames) {
    const scroller = frame.querySelector(".figure-scroll");
    if (!scroller) continue;
    scroller.addEventListener("scroll", () => update(frame), { passive: true });
    for (const img of scroller.querySelectorAll("img")) {
      img.addEventListener("load", () => update(frame));
      if (observer) observer.observe(img);
    }
    if (observer) observer.observe(scroller);
    update(frame);
  }
});

// The figure viewer (issue 34). In the column every figure is fitted, all of it in view; where
// it is shown narrower than its readable width (--readable-width, the width at which its
// smallest text is 11 px: a phone), a tap opens it in a modal <dialog> at the largest size at
// which all of it is seen at once, turned a quarter on a portrait screen when that is larger
// (the phone held sideways), never below its readable width: a figure too wide even so scrolls
// in the viewer. Escape, the close button or a tap on the figure closes it. A tap on a figure
// shown at its readable size or more follows its link as before (a notebook figure's full-size
// PNG).
(() => {
  const PAD = 8;        // px kept free around the figure
  const TURN = 1.15;    // turn only when that shows the figure at least this much larger
  let dialog = null;
  let figure = null;
  const readable = (img) => parseFloat(img.style.getPropertyValue("--readable-width")) || 0;
  const build = () => {
    dialog = document.createElement("dialog");
    dialog.className = "figure-viewer";
    dialog.setAttribute("aria-label", "Figure, full size");
    const close = document.createElement("button");
    close.type = "button";
    close.className = "figure-viewer-close";
    close.setAttribute("aria-label", "Close the figure");
    close.textContent = "\u00d7";
    const stage = document.createElement("div");
    stage.className = "figure-viewer-stage";
    figure = document.createElement("img");
    stage.append(figure);
    dialog.append(close, stage);
    document.body.append(dialog);
    close.addEventListener("click", () => dialog.close());
    figure.addEventListener("click", () => dialog.close());
    window.addEventListener("resize", () => dialog.open && lay());
  };
  const lay = () => {
    const ratio = parseFloat(figure.dataset.ratio);   // height / width of the figure
    const min = parseFloat(figure.dataset.readable) || 0;
    const w = window.innerWidth - 2 * PAD;
    const h = window.innerHeight - 2 * PAD;
    const upright = Math.min(w, h / ratio);    // the widest it can be, all of it seen
    const turned = Math.min(h, w / ratio);     // the same, turned a quarter
    // turned when that is much larger, or when only turned is it readable whole
    const turn = turned > upright * TURN || (upright < min && turned >= min);
    const best = turn ? turned : upright;
    // all of it at once when that is readable; else upright at its readable width, scrolling
    const width = best >= min ? best : min;
    dialog.classList.toggle("turned", best >= min && turn);
    figure.style.width = `${width}px`;
    figure.style.height = `${width * ratio}px`;
  };
  const open = (img) => {
    if (!dialog) build();
    const r = img.getBoundingClientRect();
    figure.src = img.currentSrc || img.src;
    figure.alt = img.alt || "";
    figure.dataset.ratio = r.height / r.width;
    figure.dataset.readable = readable(img);
    dialog.showModal();
    lay();
    dialog.scrollTo(0, 0);
  };
  document.addEventListener("DOMContentLoaded", () => {
    for (const frame of document.querySelectorAll(".figure-frame")) {
      const img = frame.querySelector("img");
      if (!img) continue;
      const mark = () => frame.classList.toggle(
        "opens-viewer", img.getBoundingClientRect().width < readable(img) - 1);
      mark();
      img.addEventListener("load", mark);
      window.addEventListener("resize", mark);
      frame.addEventListener("click", (event) => {
        if (!frame.classList.contains("opens-viewer")) return;
        event.preventDefault();      // not the link to the full-size file: the viewer
        open(img);
      });
    }
  });
})();

// Equation numbers (issue 34). Sphinx floats an equation's number, "(5.7)", to the right of it.
// Where the equation does not fit beside its number, the number goes on a line of its own below
// it (as LaTeX does), so that the equation has the whole column, and where it is wider still (on
// a phone) it scrolls inside the column with the shade as its cue (course.css): the number never
// sits at the clipped edge, where it made a cut equation look complete. Laid out again when the
// column changes width (a phone turned, a sidebar opened).
(() => {
  const GAP = 16;   // px kept between an equation and its number
  const place = () => {
    for (const div of document.querySelectorAll("div.math")) {
      const number = div.querySelector(":scope > .eqno");
      const box = div.querySelector(":scope > mjx-container[display='true']");
      const math = box && box.querySelector("mjx-math");
      if (!number || !math) continue;
      const width = math.getBoundingClientRect().width;
      div.classList.remove("eqno-below");
      const room = div.clientWidth - number.getBoundingClientRect().width - GAP;
      div.classList.toggle("eqno-below", width > room);
    }
  };
  let pending = false;
  const later = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; place(); });
  };
  window.addEventListener("load", () => {
    const typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
    (typeset || Promise.resolve()).then(place);
    window.addEventListener("resize", later);
  });
})();

// The phone drawers (issue 34). The theme opens the book menu and the "On this page" list as
// modal dialogs but closes them only on Escape or a tap outside: tapping an entry of the page's
// contents scrolled the text behind a drawer that stayed open over it. A tap on a link in a
// drawer now closes it (after the browser has followed the link). On closing, the theme gives the
// focus back to the header button that opened it, and that focus showed the button's tooltip
// ("Toggle secondary sidebar"), which then stuck over the header icons and swallowed the next
// tap: the button is blurred and its tooltip hidden.
document.addEventListener("DOMContentLoaded", () => {
  for (const dialog of document.querySelectorAll("#pst-primary-sidebar-modal, #pst-secondary-sidebar-modal")) {
    dialog.addEventListener("click", (event) => {
      if (event.target.closest("a[href]") && dialog.open) setTimeout(() => dialog.close(), 0);
    });
    dialog.addEventListener("close", () => setTimeout(() => {
      const focused = document.activeElement;
      if (focused && focused.closest(".primary-toggle, .secondary-toggle")) focused.blur();
      if (window.bootstrap && bootstrap.Tooltip) {
        for (const button of document.querySelectorAll(".primary-toggle, .secondary-toggle")) {
          const tip = bootstrap.Tooltip.getInstance(button);
          if (tip) tip.hide();
        }
      }
    }, 0));
  }
});

// Search results: a summary from the page's text, not from its chrome (issue 34). Sphinx's
// searchtools.js fetches each result page and quotes the text around the first match in its
// [role="main"], which in this theme also holds the article's toolbar (launch and download
// menus: "...Binder"), its in-page contents lists ("...Contents 12.1...", on screen and for
// print) and the title (so a
// match in the title, already shown as the link, made the summary). Those are taken out first.
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || typeof Search.htmlToText !== "function") return;
  const chrome = [".bd-header-article", ".bd-sidebar-secondary", "#pst-secondary-sidebar-modal",
                  ".prev-next-area", ".bd-footer-article", "footer", "article h1",
                  "#jb-print-docs-body"].join(", ");   // the print-only title and contents
  const plain = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll(chrome).forEach((el) => el.remove());
    // An index entry's anchor is an empty <span id>: its text is "", for which Sphinx's
    // summary is null and appendChild(null) threw. Quote the page around the match instead.
    const target = anchor ? doc.querySelector(`[role="main"] ${anchor}`) : null;
    const empty = target && !target.textContent.trim();
    return plain(doc.documentElement.outerHTML, empty ? undefined : anchor);
  };
});
