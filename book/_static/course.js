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
