// The compare page (/runs/compare/?ids=1,2,3): one panel per metric with a line per run (the run's
// colour in the summary table), x by step or by time since the run started, smoothing by an
// exponential moving average (TensorBoard's and W&B's kind, debiased so the first points are not
// pulled towards 0), the held-out metric of the summary picked from a list. The page holds the
// default metrics' series; others come from GET /api/v1/runs/compare/?ids=…&metrics=… when added.
// Run names are the users' text: they reach Plotly escaped (plotlyText), never as markup.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("compare-data").textContent);
  const runs = data.runs;
  const byId = new Map(runs.map((r) => [r.id, r]));
  const series = Object.assign({}, data.series);  // metric -> [{run, step, t, value, points, downsampled}]
  const panels = new Map();  // metric -> its plot div
  const container = document.getElementById("compare-panels");
  let xMode = "step";
  let smoothing = 0;

  const plotlyText = window.rlstudioPlotlyText;  // static/js/chart_theme.js

  const ema = window.rlstudioEma;  // static/js/smoothing.js

  function xValues(s) {
    if (xMode === "step") return s.step;
    const run = byId.get(s.run);
    const t0 = run && run.start_t != null ? run.start_t : (s.t.length ? s.t[0] : 0);
    return s.t.map((t) => (t - t0) / 60);
  }

  // A zoomed panel's series of its step range (fetched when a run's series there was downsampled):
  // metric -> {after, until, series}; drawn instead of the whole runs' until autoscale.
  const zoomed = new Map();

  function traces(metric) {
    const out = [];
    const z = zoomed.get(metric);
    for (const s of (z ? z.series : series[metric]) || []) {
      const run = byId.get(s.run);
      if (!run) continue;
      const x = xValues(s);
      const name = plotlyText(run.name);
      const colour = run.colour || "#4e79a7";
      if (smoothing > 0) {
        // the raw values faint behind the smoothed line, as TensorBoard draws them
        out.push({ x, y: s.value, type: "scatter", mode: "lines", name, legendgroup: String(s.run), showlegend: false,
          hoverinfo: "skip", opacity: 0.25, line: { color: colour, width: 1 }, meta: "raw" });
        out.push({ x, y: ema(s.value, smoothing), type: "scatter", mode: "lines", name, legendgroup: String(s.run),
          line: { color: colour, width: 2 }, meta: "smoothed" });
      } else {
        out.push({ x, y: s.value, type: "scatter", mode: s.step.length > 60 ? "lines" : "lines+markers", name,
          legendgroup: String(s.run), marker: { size: 4 }, line: { color: colour, width: 2 }, meta: "raw" });
      }
    }
    return out;
  }

  function layout() {
    const dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    return {
      margin: { t: 8, r: 10, b: 40, l: 52 }, height: 300, hovermode: "x unified",
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: dark ? "#ddd" : "#222", size: 11 }, showlegend: true,
      template: window.rlstudioChartTemplate ? window.rlstudioChartTemplate() : undefined,  // grid lines for the colour scheme (chart_theme.js)
      legend: { orientation: "h", y: -0.22 },
      xaxis: { title: { text: xMode === "step" ? "step" : "minutes since the run started" } },
    };
  }

  function draw(metric) {
    const div = panels.get(metric);
    if (!div || !window.Plotly) return;
    const z = zoomed.get(metric);
    const list = (z ? z.series : series[metric]) || [];
    const note = div.parentNode.querySelector(".panel-note");
    const sampled = list.filter((s) => s.downsampled);
    note.textContent = !list.length ? "no run reported this metric"
      : z ? `steps ${z.after + 1}–${z.until}: ` + (sampled.length ? "downsampled to " + data.max_points + " points per run; zoom further for every step"
        : "every step; double-click for the whole runs")
      : sampled.length ? "downsampled to " + data.max_points + " points per run (mean of consecutive steps); zoom in for every step" : "";
    // uirevision: a redraw with the zoomed range's series keeps the zoom; a new x axis resets it
    Plotly.react(div, traces(metric), Object.assign(layout(), { uirevision: xMode }), { responsive: true, displaylogo: false });
    bindZoom(metric, div);
  }

  // Zooming a panel (x by step) whose series were downsampled fetches that step range's series from
  // the compare API (every step once a run has at most max_points there); autoscale goes back.
  const zoomSeq = new Map();  // metric -> the number of its latest zoom (a later one wins; an axis change resets)
  function bindZoom(metric, div) {
    if (div.dataset.zoomBound || !div.on) return;
    div.dataset.zoomBound = "1";
    div.on("plotly_relayout", async (ev) => {
      if (ev["xaxis.autorange"]) {
        zoomSeq.set(metric, (zoomSeq.get(metric) || 0) + 1);
        if (zoomed.delete(metric)) draw(metric);
        return;
      }
      const range = ev["xaxis.range"] || [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
      if (xMode !== "step" || range[0] === undefined || range[1] === undefined) return;
      const whole = series[metric] || [];
      if (!whole.some((s) => s.downsampled)) return;  // every step is drawn already
      const after = Math.max(-1, Math.floor(Number(range[0])) - 1), until = Math.max(after + 1, Math.ceil(Number(range[1])));
      const seq = (zoomSeq.get(metric) || 0) + 1;
      zoomSeq.set(metric, seq);
      const url = data.api + "?ids=" + data.ids.join(",") + "&metrics=" + encodeURIComponent(metric) +
        "&max_points=" + data.max_points + "&after_step=" + after + "&until_step=" + until;
      try {
        const resp = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (!resp.ok || seq !== zoomSeq.get(metric)) return;
        const body = await resp.json();
        if (seq !== zoomSeq.get(metric)) return;
        zoomed.set(metric, { after, until, series: body.series[metric] || [] });
        draw(metric);
      } catch (err) { console.error(err); }
    });
  }

  function drawAll() {
    for (const metric of panels.keys()) draw(metric);
  }

  function addPanel(metric) {
    if (panels.has(metric)) return;
    const wrap = document.createElement("div");
    wrap.className = "compare-panel";
    const title = document.createElement("h3");
    const name = document.createElement("span");
    name.textContent = metric;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "×";
    remove.title = "remove this chart";
    remove.addEventListener("click", () => {
      if (window.Plotly) Plotly.purge(div);
      wrap.remove();
      panels.delete(metric);
      zoomed.delete(metric);
      showViewInAddress();
    });
    title.append(name, remove);
    const note = document.createElement("p");
    note.className = "muted small panel-note";
    const div = document.createElement("div");
    div.className = "plot";
    div.dataset.metric = metric;
    wrap.append(title, div, note);
    container.append(wrap);
    panels.set(metric, div);
    document.getElementById("charts-empty").hidden = true;
    draw(metric);
  }

  async function fetchSeries(metric) {
    const url = data.api + "?ids=" + data.ids.join(",") + "&metrics=" + encodeURIComponent(metric) +
      "&max_points=" + data.max_points;
    const resp = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!resp.ok) throw new Error("the compare API answered " + resp.status);
    const body = await resp.json();
    series[metric] = body.series[metric] || [];
  }

  // ------------------------------------------------------------------------------ the controls
  const picker = document.getElementById("metric-add");
  picker.addEventListener("change", async () => {
    const metric = picker.value;
    picker.value = "";
    if (!metric || panels.has(metric)) return;
    if (panels.size >= data.max_metrics) {  // the page and its API take at most that many at once
      document.getElementById("charts-empty").hidden = false;
      document.getElementById("charts-empty").textContent = `At most ${data.max_metrics} charts at once: remove one first.`;
      return;
    }
    try {
      if (!(metric in series)) await fetchSeries(metric);
      addPanel(metric);
      showViewInAddress();
    } catch (err) {
      document.getElementById("charts-empty").hidden = false;
      document.getElementById("charts-empty").textContent = String(err.message || err);
    }
  });

  // The view in the address (?metrics=a&metrics=b&x=time&smoothing=0.60 beside ?ids=), so that a link
  // opens the comparison as it was seen: the page's server reads metrics= (one name each, so a name with
  // a comma comes back whole), this script x= and smoothing=.
  function showViewInAddress() {
    const url = new URL(window.location);
    url.searchParams.delete("metrics");
    for (const metric of panels.keys()) url.searchParams.append("metrics", metric);
    if (xMode === "step") url.searchParams.delete("x"); else url.searchParams.set("x", xMode);
    if (smoothing > 0) url.searchParams.set("smoothing", smoothing.toFixed(2)); else url.searchParams.delete("smoothing");
    if (url.href !== window.location.href) history.replaceState(null, "", url);
  }

  const xSelect = document.getElementById("x-axis");
  xSelect.addEventListener("change", (ev) => {
    xMode = ev.target.value;
    for (const metric of zoomSeq.keys()) zoomSeq.set(metric, zoomSeq.get(metric) + 1);
    zoomed.clear();  // the new axis starts unzoomed
    showViewInAddress();
    drawAll();
  });

  const slider = document.getElementById("smoothing");
  const showSmoothing = window.rlstudioSmoothingSlider(slider, document.getElementById("smoothing-value"));
  function setSmoothing(value) { smoothing = showSmoothing(value); }
  slider.addEventListener("input", () => {
    setSmoothing(slider.value);
    showViewInAddress();
    drawAll();
  });
  const asked = new URLSearchParams(window.location.search);
  if (asked.get("x") === "time") { xMode = "time"; xSelect.value = "time"; }
  if (asked.has("smoothing")) setSmoothing(asked.get("smoothing"));

  // The summary's held-out columns follow the metric picked above the table.
  const heldPicker = document.getElementById("held-out-metric");
  function fmt(stats, key) {
    return stats ? Number(stats[key]).toFixed(4) + " (" + stats[key + "_step"] + ")" : "—";
  }
  if (heldPicker) {
    heldPicker.addEventListener("change", () => {
      for (const run of runs) {
        const row = document.querySelector('#summary-table tr[data-run-id="' + run.id + '"]');
        if (!row) continue;
        const stats = run.held_out[heldPicker.value];
        row.querySelector('[data-held="best"]').textContent = fmt(stats, "best");
        row.querySelector('[data-held="last"]').textContent = fmt(stats, "last");
      }
    });
  }

  for (const metric of Object.keys(data.series)) addPanel(metric);
  window.rlstudioCompare = { ema, panels: () => [...panels.keys()],
    zoomed: (metric) => { const z = zoomed.get(metric); return z ? { after: z.after, until: z.until } : null; } };
})();
