// The run page's controls and log tail (RUNS): confirmations on stop buttons, and a log tail
// polled from /api/v1/runs/<id>/job-log/ that auto-scrolls unless the user scrolled up.
// Log text is untrusted: it only ever goes in through textContent.
(function () {
  "use strict";
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { ev.preventDefault(); }
    });
  });
  var box = document.getElementById("run-logs");
  if (!box) { return; }
  var pre = box.querySelector(".log-tail");
  var url = box.getAttribute("data-url");
  var live = box.getAttribute("data-live") === "1";
  function atBottom() { return pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24; }
  function load() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (!body) { return; }
        var follow = atBottom();
        pre.textContent = body.lines.length ? body.lines.join("\n") : (body.message || "");
        if (follow) { pre.scrollTop = pre.scrollHeight; }
      })
      .catch(function () { /* the next poll tries again */ })
      .finally(function () { if (live) { window.setTimeout(load, 3000); } });
  }
  load();
})();
