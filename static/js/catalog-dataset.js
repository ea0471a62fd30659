/* Dataset page: the prompt token-length histogram (plotly) from the json_script data. */
(function () {
  "use strict";
  var el = document.getElementById("histogram-data");
  var target = document.getElementById("length-histogram");
  if (!el || !target || typeof Plotly === "undefined") return;
  var h = JSON.parse(el.textContent);
  if (!h || !h.counts) return;
  var centers = h.counts.map(function (_, i) { return (h.edges[i] + h.edges[i + 1]) / 2; });
  var widths = h.counts.map(function (_, i) { return h.edges[i + 1] - h.edges[i]; });
  Plotly.newPlot(target, [{ type: "bar", x: centers, y: h.counts, width: widths }], {
    margin: { t: 10, r: 10, b: 40, l: 50 }, height: 260,
    template: window.rlstudioChartTemplate ? window.rlstudioChartTemplate() : undefined,  // the colour scheme's (chart_theme.js)
    xaxis: { title: { text: "prompt tokens" } }, yaxis: { title: { text: "rows" } }
  }, { displayModeBar: false, responsive: true });
})();
