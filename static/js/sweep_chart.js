// The sweep page's charts and live table (SWEEPS): for each axis, every run's axis value against the
// metric the best run is chosen by, from the json_script "sweep-chart-data" inside #sweep-live (the
// server's fragment, sweeps/_sweep_live.html; data from sweeps/chart.py). The best run is a star;
// clicking a point opens its run. While a run of the sweep has not ended (#sweep-live's data-live), the
// fragment is fetched again every few seconds (fragment_poller.js): the table is swapped for the new
// one and the charts redrawn in place; when the last run ends the page reloads once (its head then
// offers Delete sweep), and polling stops for good on a 404 / 403 or an answer that is not the
// fragment (a lost session). Run names are the users' text: they reach Plotly escaped, never as markup. window.rlstudioSweepChart.points(key) gives a chart's points (for the tests).
(function () {
  "use strict";
  const EVERY_MS = 5000;
  const holder = document.getElementById("sweep-chart-panels");
  const note = document.getElementById("sweep-charts-note");
  const noteText = note.textContent;
  const plots = new Map();

  const plotlyText = window.rlstudioPlotlyText;  // static/js/chart_theme.js

  function plotFor(key) {
    if (plots.has(key)) return plots.get(key);
    const panel = document.createElement("div");
    panel.className = "compare-panel";
    const title = document.createElement("h3");
    title.textContent = key;  // text, never markup
    const plot = document.createElement("div");
    plot.className = "plot";
    plot.dataset.axis = key;
    panel.append(title, plot);
    holder.append(panel);
    plots.set(key, plot);
    return plot;
  }

  function draw(data) {
    const valued = data.runs.filter((r) => r.value !== null && r.value !== undefined);
    const waiting = data.runs.length - valued.length;
    note.textContent = noteText + (waiting ? ` ${waiting} run(s) have no value yet and are not drawn.` : "");
    for (const axis of data.axes) {
      const plot = plotFor(axis.key);
      const category = axis.scale === "category";
      const trace = {
        type: "scatter", mode: "markers", customdata: valued.map((r) => r.id), y: valued.map((r) => r.value),
        x: valued.map((r) => (category ? JSON.stringify(r.params[axis.key] ?? null) : r.params[axis.key])),
        hovertext: valued.map((r) => plotlyText(`${r.name} (${r.status})`)), hoverinfo: "text+x+y",
        marker: { size: valued.map((r) => (r.best ? 16 : 9)), symbol: valued.map((r) => (r.best ? "star" : "circle")),
                  color: valued.map((r) => (r.best ? "#e15759" : "#4e79a7")) },
      };
      const layout = {
        template: window.rlstudioChartTemplate(), margin: { l: 50, r: 10, t: 30, b: 40 }, showlegend: false,  // t: the modebar above the points
        uirevision: axis.key,  // a redraw keeps the user's zoom
        xaxis: { title: { text: plotlyText(axis.key) }, type: axis.scale },
        yaxis: { title: { text: plotlyText(data.metric_label) } },
      };
      const first = !plot.data;
      Plotly.react(plot, [trace], layout, { displaylogo: false, responsive: true });
      if (first) {
        plot.on("plotly_click", (ev) => {
          const id = ev.points && ev.points[0] && ev.points[0].customdata;
          if (Number.isInteger(id)) window.location.assign(`/runs/${id}/`);
        });
      }
    }
  }

  function live() { return document.getElementById("sweep-live"); }
  function dataOf(element) {
    return JSON.parse(element.querySelector("#sweep-chart-data").textContent);
  }

  draw(dataOf(live()));
  const poller = window.rlstudioFragmentPoller({
    url: () => (live().dataset.live ? live().dataset.url : null),
    every: () => (live().dataset.live ? EVERY_MS : 0),
    apply: (fetched) => {
      const fresh = fetched.querySelector("#sweep-live");
      if (!fresh) {  // not the fragment (the session ended: the login page): stop, a reload says why
        live().dataset.live = "";
        return;
      }
      const wasLive = Boolean(live().dataset.live);
      live().replaceWith(fresh);
      draw(dataOf(fresh));
      // every run ended while watching: the page's head offers Delete sweep instead of Stop all
      if (wasLive && !fresh.dataset.live) window.location.reload();
    },
    failed: (status) => {  // the sweep deleted meanwhile (404) or no longer the user's (403): stop polling
      if (status === 404 || status === 403) live().dataset.live = "";
    },
  });
  poller.schedule();

  window.rlstudioSweepChart = {
    points: (key) => {
      const plot = plots.get(key);
      return plot ? { x: plot.data[0].x, y: plot.data[0].y, type: plot._fullLayout.xaxis.type } : null;
    },
    refresh: () => poller.refresh(),
  };
})();
