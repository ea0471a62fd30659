// The run page's "Exports" card kept current: its checkpoints (a stop with a checkpoint, or a save of a
// live run, adds one) and its exports' states. The card is fetched again as the server renders it
// (GET /runs/<id>/exports/card/, escaped there) every 10 s while the run is live (the controls card's
// data-live) or an export is queued or running (the card's data-active), and at once on a status
// event from the live page (run_live.js dispatches "rlstudio:status"); polling stops when neither
// holds. The card is replaced only when its text changed, so a button does not move under a click for
// nothing. Delete buttons' confirmations are delegated (run_controls.js), so they survive the swap.
(function () {
  "use strict";
  var EVERY_MS = 10000;
  var timer = null, busy = false, again = false;  // again: asked for during a fetch that may predate it
  function card() { return document.getElementById("exports-card"); }
  function wanted() {
    var controls = document.getElementById("run-controls"), c = card();
    return !!c && ((controls && controls.getAttribute("data-live") === "1") || c.getAttribute("data-active") === "1");
  }
  function schedule() {
    if (timer === null && wanted()) { timer = window.setTimeout(function () { timer = null; refresh(); }, EVERY_MS); }
  }
  function refresh() {
    var now = card();
    if (!now || !now.getAttribute("data-url")) { return; }
    if (busy) { again = true; return; }
    busy = true;
    fetch(now.getAttribute("data-url"), { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var holder = document.createElement("div");
        holder.innerHTML = html.trim();
        var fresh = holder.querySelector("#exports-card"), current = card();
        if (!fresh || !current) { return; }
        var script = fresh.querySelector("script");
        if (script) { script.remove(); }  // this file runs once; the copy from the fragment is inert anyway
        if (fresh.textContent.trim() !== current.textContent.trim()) { current.replaceWith(fresh); }
        else { current.setAttribute("data-active", fresh.getAttribute("data-active") || "0"); }
      })
      .catch(function () { /* the next tick tries again */ })
      .finally(function () {
        busy = false;
        if (again) { again = false; refresh(); } else { schedule(); }
      });
  }
  // A status event comes before the controls card is refreshed: the run's end is then seen here
  // (one more fetch) and the next tick finds it finished and stops.
  document.addEventListener("rlstudio:status", function () { refresh(); });
  schedule();
})();
