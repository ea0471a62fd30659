// The run page's "Summary" card: its held-out metrics' first / best / last values and the training
// reward's first and last, as the server renders them (GET /runs/<id>/summary/card/, escaped there).
// The page holds only the card's placeholder, so it never waits for these figures: the card is fetched
// once the page has loaded, again every 10 s while the run is live (the controls card's data-live), and
// at once on a status event from the live page (run_live.js dispatches "rlstudio:status"). The card is
// replaced only when its text changed. The fetching loop is fragment_poller.js's (shared with
// run_exports.js and run_evaluations.js).
(function () {
  "use strict";
  var EVERY_MS = 10000;
  function card() { return document.getElementById("summary-card"); }
  function live() {
    var controls = document.getElementById("run-controls");
    return !!controls && controls.getAttribute("data-live") === "1";
  }
  var poller = window.rlstudioFragmentPoller({  // fragment_poller.js, loaded before this file
    url: function () { var c = card(); return c ? c.getAttribute("data-url") : null; },
    every: function () { return live() ? EVERY_MS : 0; },
    apply: function (holder) {
      var fresh = holder.querySelector("#summary-card"), current = card();
      if (!fresh || !current) { return; }
      if (!current.getAttribute("data-loaded") || fresh.textContent.trim() !== current.textContent.trim()) {
        current.replaceWith(fresh);
      }
    },
    failed: function (status) {  // the placeholder says so instead of "Loading…" for good
      var current = card();
      if (!current || current.getAttribute("data-loaded")) { return; }
      var note = current.querySelector("p") || current.appendChild(document.createElement("p"));
      note.textContent = "The summary could not be loaded (" + (status ? "HTTP " + status : "no answer") + ")" +
        (live() ? "; trying again shortly." : "; reload the page to try again.");
    },
  });
  document.addEventListener("rlstudio:status", function () { poller.refresh(); });
  poller.refresh();  // the first fetch; the next ticks are scheduled after it while the run is live
})();
