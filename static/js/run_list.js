// The runs list: the checkboxes pick runs. "Compare selected" opens /runs/compare/?ids=1,2,3
// (without this script the form still works: ids=1&ids=2&ids=3). "Delete selected" opens the
// confirm page /runs/delete/?ids=…, offered while every picked run is one the user may delete
// (its checkbox has data-can-delete: their own runs, every run for staff); the server checks again.
(function () {
  "use strict";
  const form = document.getElementById("compare-form");
  if (!form) return;
  const button = document.getElementById("compare-button");
  const del = document.getElementById("delete-button");
  const count = document.getElementById("compare-count");

  function boxes() {
    return [...form.querySelectorAll("input[name=ids]:checked")];
  }

  function update() {
    const picked = boxes();
    const n = picked.length;
    const readOnly = picked.filter((el) => !el.hasAttribute("data-can-delete")).length;
    button.disabled = n < 2;
    let text = n < 2 ? "pick two or more runs to compare" : n + " runs picked";
    if (del) {
      del.disabled = n === 0 || readOnly > 0;
      if (readOnly > 0) text += " (" + readOnly + " shared with you read-only: not deletable)";
    }
    count.textContent = text;
  }

  form.addEventListener("change", update);
  form.addEventListener("submit", (ev) => {
    const ids = boxes().map((el) => el.value);
    ev.preventDefault();
    if (del && ev.submitter === del) {
      if (ids.length) window.location.href = del.formAction + "?ids=" + ids.join(",");
      return;
    }
    if (ids.length < 2) return;
    window.location.href = form.action + "?ids=" + ids.join(",");
  });
  update();
})();
