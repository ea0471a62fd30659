/* Staff quota page (/quotas/admin/): each user's usage this month as bars against their quota (a tick),
   from the json_script "quota-admin-data"; picking a user in the form fills in their limits now (a
   form with data-confirm asks first: base.html). No inline script (the CSP allows scripts from the
   site only). */
(function () {
  "use strict";
  var el = document.getElementById("quota-admin-data");
  var data = el ? JSON.parse(el.textContent) : { users: [] };
  var users = data.users || [];

  function drawChart() {
    var target = document.getElementById("usage-chart");
    if (!target || typeof Plotly === "undefined" || !users.length) return;
    var names = users.map(function (u) { return u.username; });
    var panels = [
      { used: "gpu_hours_this_month", limit: "gpu_hours_per_month", title: "GPU-hours this month" },
      { used: "runs_active", limit: "max_concurrent_runs", title: "runs active" },
      { used: "runs_queued", limit: "max_queued_runs", title: "runs queued" }
    ];
    var dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    var ink = dark ? "#ddd" : "#222";
    var traces = [];
    var layout = {
      height: 120 + 28 * users.length, margin: { t: 30, r: 20, b: 50, l: 110 }, bargap: 0.35,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: { color: ink, size: 11 },
      template: window.rlstudioChartTemplate ? window.rlstudioChartTemplate() : undefined,  // grid lines (chart_theme.js)
      legend: { orientation: "h", x: 0, y: 1, yanchor: "bottom" },
      yaxis: { autorange: "reversed", automargin: true }
    };
    panels.forEach(function (p, i) {
      var axis = i === 0 ? "x" : "x" + (i + 1);
      var used = users.map(function (u) { return u[p.used]; });
      var limit = users.map(function (u) { return u[p.limit]; });
      traces.push({
        type: "bar", orientation: "h", x: used, y: names, xaxis: axis, yaxis: "y", name: "used",
        legendgroup: "used", showlegend: i === 0,
        marker: { color: used.map(function (v, k) { return v >= limit[k] && limit[k] >= 0 && v > 0 ? "#c62828" : "#1f77b4"; }) },
        hovertemplate: "%{y}: %{x} of %{customdata} " + p.title + "<extra></extra>", customdata: limit
      });
      traces.push({
        type: "scatter", mode: "markers", x: limit, y: names, xaxis: axis, yaxis: "y", name: "quota",
        legendgroup: "quota", showlegend: i === 0,
        marker: { symbol: "line-ns-open", size: 22, color: ink, line: { width: 3, color: ink } },
        hovertemplate: "%{y}: quota %{x} " + p.title + "<extra></extra>"
      });
      var top = Math.max.apply(null, used.concat(limit));
      layout[i === 0 ? "xaxis" : "xaxis" + (i + 1)] = {
        domain: [i * 0.35, i * 0.35 + 0.3], anchor: "y", rangemode: "tozero", title: { text: p.title },
        dtick: i > 0 && top <= 10 ? 1 : undefined  // runs are counted in whole numbers
      };
    });
    Plotly.newPlot(target, traces, layout, { displayModeBar: false, responsive: true });
  }

  function prefillOnPick() {
    var select = document.getElementById("id_user");
    if (!select) return;
    select.addEventListener("change", function () {
      var u = users.filter(function (x) { return x.username === select.value; })[0];
      if (!u) return;
      ["max_gpus", "gpu_hours_per_month", "max_concurrent_runs", "max_queued_runs", "dataset_storage_gb"].forEach(function (f) {
        var input = document.getElementById("id_" + f);
        if (input) input.value = u[f];
      });
    });
  }

  drawChart();
  prefillOnPick();
})();
