// The sweep form (templates/sweeps/sweep_form.html): says how many runs the sweep makes as its axes are
// filled in (a grid: the product of each chosen axis's comma-separated values; a random search: the Runs
// box's number) and whether the user's queue
// has room for them (#sweep-size's data-room: every run of a sweep is queued at once, and a sweep of
// more runs than that is refused whole) and is within the most runs a sweep may make (data-max). The
// server's count is the one that counts; this only warns.
(function () {
  "use strict";
  const form = document.getElementById("sweep-form");
  const out = document.getElementById("sweep-size");
  if (!form || !out) return;
  const room = Number(out.dataset.room);
  const max = Number(out.dataset.max);
  const intro = out.textContent;

  function sizes() {
    const counts = [];
    for (let i = 1; form.elements["axis_key_" + i]; i++) {
      const key = form.elements["axis_key_" + i].value;
      const values = form.elements["axis_values_" + i];
      const text = values ? values.value.trim() : "";
      if (!key || !text) continue;
      counts.push(text.split(",").filter((part) => part.trim() !== "").length);
    }
    return counts;
  }

  function randomRuns() {
    // Random search (templates/sweeps/sweep_form.html's mode radio): the runs are the "Runs" box's
    // number, not the grid's product; null while the mode is grid.
    const mode = form.querySelector('input[name="mode"]:checked');
    if (!mode || mode.value !== "random") return null;
    const runs = form.elements["runs"] ? Number(form.elements["runs"].value) : NaN;
    return Number.isInteger(runs) && runs > 0 ? runs : 0;
  }

  function update() {
    const drawn = randomRuns();
    const counts = drawn === null ? sizes() : (drawn ? [drawn] : []);
    if (!counts.length) {
      out.textContent = intro;
      out.classList.remove("field-error");
      out.classList.add("muted");
      return;
    }
    const runs = counts.reduce((a, b) => a * b, 1);
    const grid = drawn === null && counts.length > 1 ? " (" + counts.join(" × ") + ")" : "";
    let text = "This sweep launches " + runs + " run" + (runs === 1 ? "" : "s") + grid + ".";
    const tooMany = Number.isFinite(max) && runs > max;
    const over = tooMany || (Number.isFinite(room) && runs > room);
    if (tooMany) {
      text += " A sweep makes at most " + max + ": it would be refused; use fewer values.";
    } else if (over) {
      text += " Your queue has room for " + room + " more: it would be refused; use fewer values or wait for queued runs to start.";
    }
    out.textContent = text;
    out.classList.toggle("field-error", over);
    out.classList.toggle("muted", !over);
  }

  form.addEventListener("input", update);
  form.addEventListener("change", update);
  update();
})();
