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
