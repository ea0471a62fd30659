// The run page's "find" box over its metric panels (templates/runs/run_detail.html, #chart-search):
// shows only the panels whose metric name holds every word typed (case-insensitive, in any order), hides
// a group left with none, says how many are shown, and keeps doing so as run_live.js adds panels for
// metrics reported later; ?chart_find= in the address opens the page so narrowed. A panel shown again is resized: Plotly gives a hidden panel no width.
(function () {
  "use strict";
  const input = document.getElementById("chart-search");
  const charts = document.getElementById("charts");
  if (!input || !charts) return;
  const count = document.getElementById("chart-search-count");

  function resize(panel) {
    const plot = panel.querySelector(".plot");
    if (plot && plot.data && window.Plotly) window.Plotly.Plots.resize(plot);
  }

  function apply() {
    const words = input.value.toLowerCase().split(/[\s,]+/).filter(Boolean);
    let shown = 0;
    let total = 0;
    for (const group of charts.querySelectorAll(".chart-group")) {
      let any = false;
      for (const panel of group.querySelectorAll(".chart")) {
        const title = panel.querySelector("h4");
        const name = (title ? title.textContent : "").toLowerCase();
        const match = words.every((w) => name.includes(w));
        total += 1;
        if (match) shown += 1;
        any = any || match;
        if (panel.hidden === match) {
          panel.hidden = !match;
          if (match) resize(panel);
        }
      }
      if (group.hidden === any) group.hidden = !any;
    }
    if (count) count.textContent = words.length ? shown + " of " + total + " panels" : "";
  }

  // The words typed are kept in the address (?chart_find=, beside the page's other view keys), so a
  // link opens the run page with the same panels.
  function showInAddress() {
    const url = new URL(window.location);
    if (input.value.trim()) url.searchParams.set("chart_find", input.value); else url.searchParams.delete("chart_find");
    if (url.href !== window.location.href) history.replaceState(null, "", url);
  }

  input.addEventListener("input", () => { apply(); showInAddress(); });
  const asked = new URLSearchParams(window.location.search).get("chart_find");
  if (asked) { input.value = asked; apply(); }
  // A panel or a group added while a search is typed: only the grids' own children count (Plotly's
  // redraws inside a panel change nothing here).
  new MutationObserver((records) => {
    if (!input.value.trim()) return;
    if (records.some((r) => r.target === charts || (r.target.classList && r.target.classList.contains("panel-grid")))) apply();
  }).observe(charts, { childList: true, subtree: true });
})();
