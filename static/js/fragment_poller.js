// One loop that keeps a card current from its server-rendered fragment (escaped there by Django's
// templates: the page never builds markup from JSON). Used by run_exports.js and run_evaluations.js,
// each loading this file first (a static file, as the Content-Security-Policy wants; loaded by two
// cards on one page, it defines the function once).
//
//   const poller = window.rlstudioFragmentPoller({
//     url: () => "...",      // the fragment's URL now, or "" / null: not followed (no fetch, no tick)
//     every: () => ms,       // the wait before the next fetch now; 0: stop polling
//     apply: (holder) => {}, // a detached <div> holding the fetched fragment: take what changed from it
//     failed: (status) => {}, // optional: a fetch that failed (its HTTP status, or 0 when none came)
//   });
//   poller.refresh();   // fetch now (a fetch under way: once more after it, as it may predate the ask)
//   poller.schedule();  // the next tick, if none is set and every() asks for one
//
// After each fetch (answered or not) the next tick is set from every(), so polling stops by itself
// when nothing is under way and a refresh() starts it again. A failed fetch is tried at the next tick.
(function () {
  "use strict";
  if (window.rlstudioFragmentPoller) { return; }
  window.rlstudioFragmentPoller = function (opts) {
    var timer = null, busy = false, again = false;  // again: asked for during a fetch that may predate it
    function schedule() {
      if (timer !== null || !opts.url()) { return; }
      var ms = opts.every();
      if (ms) { timer = window.setTimeout(function () { timer = null; refresh(); }, ms); }
    }
    function refresh() {
      var url = opts.url();
      if (!url) { return; }
      if (busy) { again = true; return; }
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
        .then(function (r) {
          if (!r.ok && opts.failed) { opts.failed(r.status); }
          return r.ok ? r.text() : null;
        })
        .then(function (html) {
          if (!html) { return; }
          var holder = document.createElement("div");
          holder.innerHTML = html.trim();
          opts.apply(holder);
        })
        .catch(function () { if (opts.failed) { opts.failed(0); } })  // the next tick tries again
        .finally(function () {
          busy = false;
          if (again) { again = false; refresh(); } else { schedule(); }
        });
    }
    return { refresh: refresh, schedule: schedule };
  };
})();
