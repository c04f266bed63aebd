// Copy buttons: <button type="button" data-copy="text">. One listener for the page, so rows
// htmx swaps in later work too. Without a clipboard (plain http on another host) the text is
// selected instead, for Ctrl+C.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const text = button.dataset.copy;
  const done = () => {
    button.dataset.copied = "true";
    button.setAttribute("aria-label", "Copied");
    setTimeout(() => { delete button.dataset.copied; button.setAttribute("aria-label", button.title); }, 1500);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, () => {});
  } else {
    const range = document.createRange();
    const target = button.previousElementSibling || button;
    range.selectNodeContents(target);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
});
