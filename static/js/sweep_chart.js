// The sweep page's charts (SWEEPS): for each axis, every run's axis value against the metric the best
// run is chosen by, from the json_script "sweep-chart-data" (sweeps/chart.py). The best run is a star;
// clicking a point opens its run. Run names are the users' text: they reach Plotly escaped, never as
// markup. window.rlstudioSweepChart.points(key) gives a chart's points (for the tests).
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("sweep-chart-data").textContent);
  const holder = document.getElementById("sweep-chart-panels");
  const note = document.getElementById("sweep-charts-note");

  // Plotly reads a few tags (<b>, <a href>, <br>) in hover text: a run called "<b>x" must show as typed.
  function plotlyText(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  const valued = data.runs.filter((r) => r.value !== null && r.value !== undefined);
  const waiting = data.runs.length - valued.length;
  if (waiting) note.textContent += ` ${waiting} run(s) have no value yet and are not drawn.`;
  const plots = new Map();

  for (const axis of data.axes) {
    const panel = document.createElement("div");
    panel.className = "compare-panel";
    const title = document.createElement("h3");
    title.textContent = axis.key;  // text, never markup
    const plot = document.createElement("div");
    plot.className = "plot";
    plot.dataset.axis = axis.key;
    panel.append(title, plot);
    holder.append(panel);
    plots.set(axis.key, plot);
    const category = axis.scale === "category";
    const x = valued.map((r) => (category ? JSON.stringify(r.params[axis.key] ?? null) : r.params[axis.key]));
    const trace = {
      type: "scatter", mode: "markers", x: x, y: valued.map((r) => r.value),
      customdata: valued.map((r) => r.id),
      hovertext: valued.map((r) => plotlyText(`${r.name} (${r.status})`)), hoverinfo: "text+x+y",
      marker: { size: valued.map((r) => (r.best ? 16 : 9)), symbol: valued.map((r) => (r.best ? "star" : "circle")),
                color: valued.map((r) => (r.best ? "#e15759" : "#4e79a7")) },
    };
    const layout = {
      template: window.rlstudioChartTemplate(), margin: { l: 50, r: 10, t: 10, b: 40 }, showlegend: false,
      xaxis: { title: { text: plotlyText(axis.key) }, type: axis.scale === "category" ? "category" : axis.scale },
      yaxis: { title: { text: plotlyText(data.metric_label) } },
    };
    Plotly.newPlot(plot, [trace], layout, { displaylogo: false, responsive: true });
    plot.on("plotly_click", (ev) => {
      const id = ev.points && ev.points[0] && ev.points[0].customdata;
      if (Number.isInteger(id)) window.location.assign(`/runs/${id}/`);
    });
  }

  window.rlstudioSweepChart = {
    points: (key) => {
      const plot = plots.get(key);
      return plot ? { x: plot.data[0].x, y: plot.data[0].y, type: plot._fullLayout.xaxis.type } : null;
    },
  };
})();
