// The runs list: the checkboxes pick runs to compare. "Compare selected" opens
// /runs/compare/?ids=1,2,3 (without this script the form still works: ids=1&ids=2&ids=3).
(function () {
  "use strict";
  const form = document.getElementById("compare-form");
  if (!form) return;
  const button = document.getElementById("compare-button");
  const count = document.getElementById("compare-count");

  function picked() {
    return [...form.querySelectorAll("input[name=ids]:checked")].map((el) => el.value);
  }

  function update() {
    const ids = picked();
    button.disabled = ids.length < 2;
    count.textContent = ids.length < 2 ? "pick two or more runs" : ids.length + " runs picked";
  }

  form.addEventListener("change", update);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const ids = picked();
    if (ids.length < 2) return;
    window.location.href = form.action + "?ids=" + ids.join(",");
  });
  update();
})();
