// The run page's "Exports" card kept current: its checkpoints (a stop with a checkpoint, or a save of a
// live run, adds one) and its exports' states. The card is fetched again as the server renders it
// (GET /runs/<id>/exports/card/, escaped there) every 10 s while the run is live (the controls card's
// data-live) or an export is queued or running (the card's data-active), and at once on a status
// event from the live page (run_live.js dispatches "rlstudio:status"); polling stops when neither
// holds. The card is replaced only when its text changed, so a button does not move under a click for
// nothing. Delete buttons' confirmations are delegated (base.html), so they survive the swap.
// The fetching loop is fragment_poller.js's (shared with run_evaluations.js).
(function () {
  "use strict";
  var EVERY_MS = 10000;
  function card() { return document.getElementById("exports-card"); }
  function wanted() {
    var controls = document.getElementById("run-controls"), c = card();
    return !!c && ((controls && controls.getAttribute("data-live") === "1") || c.getAttribute("data-active") === "1");
  }
  var poller = window.rlstudioFragmentPoller({  // fragment_poller.js, loaded before this file
    url: function () { var c = card(); return c ? c.getAttribute("data-url") : null; },
    every: function () { return wanted() ? EVERY_MS : 0; },
    apply: function (holder) {
      var fresh = holder.querySelector("#exports-card"), current = card();
      if (!fresh || !current) { return; }
      // the card's own script tags (the poller's and this file's): these run once; the copies are inert anyway
      fresh.querySelectorAll("script").forEach(function (s) { s.remove(); });
      if (fresh.textContent.trim() !== current.textContent.trim()) { current.replaceWith(fresh); }
      else { current.setAttribute("data-active", fresh.getAttribute("data-active") || "0"); }
    },
  });
  // A status event comes before the controls card is refreshed: the run's end is then seen here
  // (one more fetch) and the next tick finds it finished and stops.
  document.addEventListener("rlstudio:status", function () { poller.refresh(); });
  poller.schedule();
})();
