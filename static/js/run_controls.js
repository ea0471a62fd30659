// The run page's controls and log tail (RUNS): the controls card kept
// current, and a log tail polled from /api/v1/runs/<id>/job-log/ that auto-scrolls unless the user
// scrolled up. Log text is untrusted: it only ever goes in through textContent.
(function () {
  "use strict";
  // The stop and delete buttons' confirmations are base.html's (form[data-confirm], delegated: the
  // controls card is replaced while the page is open, its forms with it).

  // While the run is live, the card (badge, progress, which buttons make sense) is fetched again every
  // few seconds and at once on a status event from the live page (run_live.js dispatches
  // "rlstudio:status"): a stop, a reconcile or a force stop changes it without a reload. The fragment
  // is the server's own template, escaped there. The card is replaced only when the run's state
  // changed (its forms carry fresh CSRF tokens on every fetch, and a button must not move under a
  // click); otherwise only the step and progress are copied over. The checkpoint box keeps its tick.
  // Either way the run's times (started, finished, duration, last heartbeat) and, for its owner and
  // staff, its checkpoint (a stop saves one as the run ends; elements marked
  // data-run-field, in the card and in the page's details) and the status named by the launch's flash
  // message are copied from the fresh card, and the duration and the heartbeat's age tick every second
  // from the card's clock (server seconds; the skew to this browser's clock is taken at each refresh).
  var skew = 0;  // server seconds minus browser seconds
  function readClock(card) {
    var times = card && card.querySelector(".run-times");
    if (times && times.getAttribute("data-now")) { skew = Number(times.getAttribute("data-now")) - Date.now() / 1000; }
  }
  function setField(name, text, except) {
    document.querySelectorAll("[data-run-field='" + name + "']").forEach(function (el) {
      if ((!except || !except.contains(el)) && el.textContent !== text) { el.textContent = text; }
    });
  }
  function copyFields(fresh, now) {
    fresh.querySelectorAll("[data-run-field]").forEach(function (el) {
      setField(el.getAttribute("data-run-field"), el.textContent, now);
    });
    setField("status", fresh.getAttribute("data-status"), now);
    var bar = fresh.querySelector(".run-progress progress"), details = document.getElementById("live-progress");
    if (bar && details) { details.value = bar.value; }
  }
  function hms(seconds) {
    var s = Math.max(0, Math.floor(seconds));
    var two = function (n) { return (n < 10 ? "0" : "") + n; };
    return Math.floor(s / 3600) + ":" + two(Math.floor(s % 3600 / 60)) + ":" + two(s % 60);
  }
  function tickClock() {
    var times = document.querySelector("#run-controls .run-times");
    if (!times) { return; }
    var started = Number(times.getAttribute("data-started")), finished = Number(times.getAttribute("data-finished"));
    var beat = Number(times.getAttribute("data-heartbeat"));
    var now = Date.now() / 1000 + skew;
    if (started) { setField("duration", hms((finished || now) - started)); }
    if (beat && !finished) { setField("heartbeat_ago", "(" + Math.max(0, Math.round(now - beat)) + " s ago)"); }
  }
  var refreshing = false;
  function refreshControls() {
    var card = document.getElementById("run-controls");
    if (!card || refreshing || !card.getAttribute("data-url")) { return; }
    refreshing = true;
    fetch(card.getAttribute("data-url"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var holder = document.createElement("div");
        holder.innerHTML = html.trim();
        var fresh = holder.querySelector("#run-controls");
        var now = document.getElementById("run-controls");
        if (!fresh || !now) { return; }
        copyFields(fresh, now);
        readClock(fresh);
        if (fresh.getAttribute("data-status") !== now.getAttribute("data-status")) {
          var box = now.querySelector("input[name=checkpoint]");
          var freshBox = fresh.querySelector("input[name=checkpoint]");
          if (box && freshBox) { freshBox.checked = box.checked; }
          now.replaceWith(fresh);
          tickClock();
          return;
        }
        var times = now.querySelector(".run-times"), freshTimes = fresh.querySelector(".run-times");
        if (times && freshTimes) { times.replaceWith(freshTimes); }
        tickClock();
        // The step only moves on: a card fetched before the websocket brought a newer step (run_live.js
        // writes it here too) must not put an older one back, nor its progress bar.
        var stepA = now.querySelector(".run-progress [data-field=step]"), stepB = fresh.querySelector(".run-progress [data-field=step]");
        if (stepA && stepB && Number(stepB.textContent.replace(/,/g, "")) < Number(stepA.textContent.replace(/,/g, ""))) { return; }  // "1,234": thousands separators
        var progress = [".run-progress [data-field=step]", ".run-progress [data-field=total_steps]", ".run-progress progress"];
        progress.forEach(function (sel) {
          var a = now.querySelector(sel), b = fresh.querySelector(sel);
          if (!a || !b) { return; }
          if (a.tagName === "PROGRESS") { a.value = b.value; } else if (a.textContent !== b.textContent) { a.textContent = b.textContent; }
        });
      })
      .catch(function () { /* the next tick tries again */ })
      .finally(function () { refreshing = false; });
  }
  document.addEventListener("rlstudio:status", refreshControls);
  (function tick() {
    var card = document.getElementById("run-controls");
    if (!card || card.getAttribute("data-live") !== "1") { return; }  // a finished run stays as it is
    window.setTimeout(function () { refreshControls(); tick(); }, 5000);
  })();
  var first = document.getElementById("run-controls");
  if (first && first.getAttribute("data-live") === "1") {
    readClock(first);
    tickClock();
    (function clock() {
      var card = document.getElementById("run-controls");
      if (!card || card.getAttribute("data-live") !== "1") { return; }
      tickClock();
      window.setTimeout(clock, 1000);
    })();
  }
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
