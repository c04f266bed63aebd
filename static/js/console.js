// The Research Console's comparison: at most two candidates ticked, and the comparison
// shown where the operator is looking; an empty trigger type named next to its field.
// Without this script the page still works: the compare form reloads the page at
// #comparison, and the server refuses a third id (400).
(() => {
  const MESSAGE_ID = "compare-limit";

  const ticked = (form) => form.querySelectorAll('input[name="compare"]:checked');
  const limitOf = (form) => Number(form.dataset.compareMax || 2);

  const showLimit = (form, box) => {
    const message = document.getElementById(MESSAGE_ID);
    if (!message) return;
    // Next to the box the operator just tried to tick, so it is seen.
    const card = box.closest(".candidate");
    const body = card && card.querySelector(".candidate-body");
    if (body) body.prepend(message);
    message.hidden = false;
  };

  const hideLimit = () => {
    const message = document.getElementById(MESSAGE_ID);
    if (message) message.hidden = true;
  };

  // A third tick is refused before it happens: cancelling the click keeps the box unticked
  // and fires no change, so htmx never asks for a comparison of three.
  document.addEventListener("click", (event) => {
    const box = event.target.closest('#compare-form input[name="compare"]');
    if (!box) return;
    const form = box.form;
    if (box.checked && ticked(form).length > limitOf(form)) {
      event.preventDefault();
      showLimit(form, box);
    } else if (!box.checked) {
      hideLimit();
    }
  });

  // A required field left empty: the browser will not send the form, but its bubble names no field
  // and fades (headless, it shows nothing at all). The field's own message (the element
  // "<id>-required", next to it) says which field instead, until it holds something.
  const requiredMessage = (field) => field.id && document.getElementById(`${field.id}-required`);

  document.addEventListener(
    "invalid",
    (event) => {
      const field = event.target;
      const message = requiredMessage(field);
      if (!message || !field.validity.valueMissing) return;
      event.preventDefault();
      message.hidden = false;
      field.setAttribute("aria-invalid", "true");
      field.setAttribute("aria-describedby", message.id);
      field.focus();
    },
    true, // "invalid" does not bubble
  );

  document.addEventListener("input", (event) => {
    const field = event.target;
    const message = requiredMessage(field);
    if (!message || message.hidden || field.validity.valueMissing) return;
    message.hidden = true;
    field.removeAttribute("aria-invalid");
    field.removeAttribute("aria-describedby");
  });

  // A comparison (or a refusal) just swapped in: bring it into view, unless it already is.
  document.addEventListener("htmx:afterSwap", (event) => {
    const target = event.detail.target;
    if (!target || target.id !== "comparison" || !target.querySelector("section, [role=alert]")) return;
    const box = target.getBoundingClientRect();
    if (box.top < 0 || box.bottom > window.innerHeight) {
      target.scrollIntoView({ block: "start" });
    }
  });
})();
