// The live run page: charts grouped as verl groups them, the memory timeline with phase bands, the
// samples table, the log; kept live over /ws/runs/<id>/ by seq (reconnects with resume_after).
// Untrusted text (model, tool, log output) only ever goes through textContent, never innerHTML, and
// into Plotly (names, hover text) only through window.rlstudioPlotlyText.
(function () {
  "use strict";
  const plotlyText = window.rlstudioPlotlyText;  // static/js/chart_theme.js
  const live = JSON.parse(document.getElementById("live-data").textContent);
  const runId = live.run_id;
  let lastSeq = live.last_seq;
  let xMode = "step";

  // ------------------------------------------------------------------ metrics, grouped as verl does
  const GROUPS = [
    ["Rewards and scores", (k) => /^(critic\/(score|rewards|advantages|returns)|val-core|val-aux|reward)/.test(k)],
    ["Policy", (k) => /^actor\//.test(k)],
    // rollout correction: the gap between the rollout engine's and the actor's log-probs (verl's names)
    ["Training–inference mismatch", (k) => /^(rollout_corr\/|training\/rollout_)/.test(k)],
    ["Lengths and turns", (k) => /^(response_length|prompt_length|num_turns|tool_calls)/.test(k)],
    ["Timing and throughput", (k) => /^(timing_s|timing_per_token_ms|perf)\//.test(k)],
    ["Other", () => true],
  ];
  // The page's rows from their compact form (telemetry/overview.py `columns`: each name once, false
  // where a row has no such metric).
  function rowsOf(c) {
    return c.step.map((step, i) => {
      const metrics = {};
      c.keys.forEach((key, j) => { if (c.values[i][j] !== false) metrics[key] = c.values[i][j]; });
      const row = { step, t: c.t[i], metrics };
      if (c.from[i] !== null) { row.from_step = c.from[i]; row.rows = c.n[i]; }
      return row;
    });
  }

  // [{step, t, metrics}] in step order: the run's rows, or, past live.chart_points of them, that many
  // buckets of consecutive steps ({from_step, step, rows, metrics}: telemetry/overview.py); the
  // websocket adds new rows after them.
  const steps = rowsOf(live.metrics);
  const byStep = new Map(steps.map((r) => [r.step, r]));
  // The last step the page's buckets cover: an event of a step up to it is already counted in them.
  const bucketedTo = live.metrics_downsampled && steps.length ? steps[steps.length - 1].step : -Infinity;
  // A zoomed step range's own rows ({lo, hi, rows}: every step, or finer buckets of a wide range),
  // drawn in place of the page's buckets there; null when no chart is zoomed (zoomTo).
  let detail = null;
  let drawRows = steps;  // what the charts draw: `steps` with `detail` in its range (chartRows)
  const groupDivs = new Map();  // group name -> its panel grid
  const panelDivs = new Map();  // panel (metric family) -> its plot div

  function groupOf(key) {
    for (const [name, test] of GROUPS) if (test(key)) return name;
    return "Other";
  }

  // One panel per metric family, as W&B shows one metric per panel: verl reports
  // `critic/score/mean|max|min`, drawn as the mean line over a min-max band, so that values of very
  // different scales (entropy ~6, a clip fraction ~0.01) never share one y axis.
  const STAT = /\/(mean|max|min)$/;
  // verl's mismatch metrics end their statistic with an underscore (rollout_corr/rollout_is_mean, _max, _min)
  const MISMATCH_STAT = /^((?:rollout_corr\/|training\/rollout_).+)_(mean|max|min)$/;
  function familyOf(key) {
    if (STAT.test(key)) return key.replace(STAT, "");
    const m = MISMATCH_STAT.exec(key);
    return m ? m[1] : key;
  }

  function groupGrid(name) {
    if (!groupDivs.has(name)) {
      const wrap = document.createElement("div");
      wrap.className = "chart-group";
      const title = document.createElement("h3");
      title.textContent = name;
      const grid = document.createElement("div");
      grid.className = "panel-grid";
      wrap.append(title, grid);
      // keep the GROUPS order on the page
      const order = GROUPS.map((g) => g[0]);
      const after = [...groupDivs.keys()].filter((n) => order.indexOf(n) > order.indexOf(name));
      const container = document.getElementById("charts");
      const next = after.length ? groupDivs.get(after.sort((a, b) => order.indexOf(a) - order.indexOf(b))[0]).parentNode : null;
      container.insertBefore(wrap, next);
      groupDivs.set(name, grid);
    }
    return groupDivs.get(name);
  }

  function panelDiv(group, family) {
    if (!panelDivs.has(family)) {
      const wrap = document.createElement("div");
      wrap.className = "chart";
      const title = document.createElement("h4");
      title.textContent = family;
      const div = document.createElement("div");
      div.className = "plot";
      div.dataset.family = family;
      wrap.append(title, div);
      const grid = groupGrid(group);
      // panels sorted by family name within their group
      const next = [...grid.children].find((el) => el.querySelector(".plot").dataset.family > family) || null;
      grid.insertBefore(wrap, next);
      panelDivs.set(family, div);
    }
    return panelDivs.get(family);
  }

  function layout(extra) {
    const dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    return Object.assign({
      margin: { t: 10, r: 10, b: 40, l: 50 }, height: 280, hovermode: "x unified",
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: dark ? "#ddd" : "#222", size: 11 }, legend: { orientation: "h", y: -0.25 },
      template: window.rlstudioChartTemplate ? window.rlstudioChartTemplate() : undefined,  // grid lines for the colour scheme (chart_theme.js)
      xaxis: { title: { text: xMode === "step" ? "step" : "time" }, type: xMode === "step" ? "linear" : "date" },
    }, extra || {});
  }

  function chartRows() {
    if (!detail) return steps;
    const outside = steps.filter((r) => r.step < detail.lo || (r.from_step ?? r.step) > detail.hi);
    return outside.concat(detail.rows).sort((a, b) => a.step - b.step);
  }

  function series(key) {
    const rows = drawRows.filter((r) => key in r.metrics);
    const out = {
      x: rows.map((r) => (xMode === "step" ? r.step : new Date(r.t * 1000))),
      y: rows.map((r) => r.metrics[key]),
      customdata: rows.map((r) => r.step),
    };
    // a bucket says which steps it stands for
    if (rows.some((r) => r.rows > 1)) out.hovertext = rows.map((r) => (r.rows > 1 ? `steps ${r.from_step}–${r.step} (${r.rows})` : ""));
    return out;
  }

  // The drawn row a step falls in: its own, or the bucket that holds it (a zoomed range's rows first).
  function rowAt(step) {
    return drawRows.find((r) => (r.from_step ?? r.step) <= step && step <= r.step);
  }

  // A metric's line: as reported, or with smoothing its moving average over the points drawn, the
  // values as reported faint behind it (as TensorBoard and the compare page draw them).
  const LINE_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
  let smoothing = 0;
  function lineTraces(key, name, colour) {
    const s = series(key);
    if (!(smoothing > 0)) {
      return [Object.assign(s, { name: plotlyText(name), meta: key, mode: "lines+markers", marker: { size: 4 }, line: { color: colour }, type: "scatter" })];
    }
    return [
      Object.assign({}, s, { name: plotlyText(name), meta: key + " (raw)", mode: "lines", line: { color: colour, width: 1 }, opacity: 0.25,
        showlegend: false, hoverinfo: "skip", type: "scatter" }),
      Object.assign(s, { y: window.rlstudioEma(s.y, smoothing), name: plotlyText(name), meta: key, mode: "lines", line: { color: colour, width: 2 },
        type: "scatter" }),
    ];
  }

  function familyTraces(family, members) {
    const sep = members.some((k) => k.startsWith(family + "/")) ? "/" : "_";
    const has = (stat) => members.includes(family + sep + stat);
    const traces = [];
    if (has("mean") && has("min") && has("max")) {
      // the min-max band first (max, then min filled up to it), the mean line on top
      traces.push(Object.assign(series(family + sep + "max"), { name: "max", meta: family + sep + "max", mode: "lines",
        line: { width: 0 }, showlegend: false, hoverinfo: "skip", type: "scatter" }));
      traces.push(Object.assign(series(family + sep + "min"), { name: "min–max", meta: family + sep + "min", mode: "lines",
        line: { width: 0 }, fill: "tonexty", fillcolor: "rgba(78,121,167,0.18)", type: "scatter", hoverinfo: "skip" }));
      return traces.concat(lineTraces(family + sep + "mean", "mean", LINE_COLOURS[0]));
    }
    members.forEach((key, k) => {
      traces.push(...lineTraces(key, key === family ? key.split("/").pop() : key.slice(family.length + 1),
        LINE_COLOURS[k % LINE_COLOURS.length]));
    });
    return traces;
  }

  // Alert firings as markers on the panels of the metric they fired on (the stored ones from the page,
  // live ones from the notification centre's `rlstudio:notification` event). A rule's metric may be a
  // pattern (val-core/*/reward/mean@*): it marks every key it matches.
  const alertMarks = JSON.parse((document.getElementById("alert-marks") || {}).textContent || "[]");
  function globRe(p) { return new RegExp("^" + p.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".") + "$"); }
  function alertTrace(members) {
    const x = [], y = [], text = [];
    for (const m of alertMarks) {
      const key = m.metric && members.find((k) => globRe(m.metric).test(k));
      const row = key && rowAt(m.step);
      if (!row || typeof row.metrics[key] !== "number") continue;
      x.push(xMode === "step" ? row.step : new Date(row.t * 1000));
      y.push(row.metrics[key]);
      text.push(plotlyText(`alert at step ${m.step}: ${m.message}`));
    }
    return x.length ? { x, y, text, hoverinfo: "text", mode: "markers", type: "scatter", name: "alert", meta: "alert",
      showlegend: false, marker: { symbol: "x", size: 12, color: "#d62728" } } : null;
  }
  document.addEventListener("rlstudio:notification", (ev) => {
    const n = ev.detail, f = n && n.firing;
    if (!f || n.run !== runId || f.step === null || f.step === undefined) return;
    alertMarks.push({ id: f.id, step: f.step, kind: f.kind, metric: f.metric, message: n.body || n.title, paused: f.paused });
    redraw("metrics");
  });

  function drawMetrics() {
    if (!window.Plotly || !steps.length) return;
    document.getElementById("charts-empty").hidden = true;
    drawRows = chartRows();
    const families = new Map();  // family -> member keys
    for (const row of drawRows) for (const k of Object.keys(row.metrics)) {
      const f = familyOf(k);
      if (!families.has(f)) families.set(f, new Set());
      families.get(f).add(k);
    }
    for (const [family, keys] of families) {
      const members = [...keys].sort();
      const group = groupOf(members[0]);
      const div = panelDiv(group, family);
      const traces = familyTraces(family, members);
      const marks = alertTrace(members);
      if (marks) traces.push(marks);
      const band = traces.some((t) => t.fill);
      // uirevision: a redraw (new steps, a zoomed range's rows) keeps the panel's zoom; a new x axis resets it
      const l = layout({ height: 200, margin: { t: 6, r: 8, b: 34, l: 48 }, showlegend: !band && members.length > 1,
        uirevision: xMode });
      const flat = flatRange(traces);
      if (flat) l.yaxis = { range: flat };
      Plotly.react(div, traces, l, { responsive: true, displaylogo: false });
      if (group === "Rewards and scores" && !div.dataset.clickBound) { div.dataset.clickBound = "1"; rewardClickable(div); }
      bindZoom(div);
    }
  }

  // Zooming a chart of a downsampled run fetches the range's own rows from the overview API (every
  // step when there are at most live.chart_points of them, else finer buckets) and every chart draws
  // them there; autoscale (double-click) goes back to the page's rows. The latest zoom wins.
  let zoomSeq = 0;
  function bindZoom(div) {
    if (!live.metrics_downsampled || div.dataset.zoomBound || !div.on) return;
    div.dataset.zoomBound = "1";
    div.on("plotly_relayout", (ev) => {
      if (ev["xaxis.autorange"]) { unzoom(); return; }
      const range = ev["xaxis.range"] || [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
      if (range[0] !== undefined && range[1] !== undefined) zoomTo(range[0], range[1]);
    });
  }

  // Back to the whole run: every zoomed chart (the others keep their zoom through redraws) autoscales.
  function unzoom() {
    zoomSeq++;
    if (!detail) return;
    detail = null;
    zoomNote();
    for (const div of panelDivs.values()) {
      const ax = div._fullLayout && div._fullLayout.xaxis;
      if (ax && !ax.autorange) Plotly.relayout(div, { "xaxis.autorange": true });
    }
    redraw("metrics");
  }

  // An x axis value as the rows' own (a step, or unix seconds: Plotly gives a date axis's range as
  // local-time strings, as it draws Date objects, and drops the time of day at midnight).
  function xValue(v) {
    if (xMode === "step") return Number(v);
    const text = String(v).replace(" ", "T");
    return new Date(text.includes("T") ? text : text + "T00:00").getTime() / 1000;
  }

  async function zoomTo(a, b) {
    const lo = xValue(a), hi = xValue(b);
    // the page's rows in view (by index: a row's time can be later than the next one's, when later
    // metrics were merged into it) and one more on each side, so that the lines reach the edges
    const inView = [];
    steps.forEach((r, k) => { const x = xMode === "step" ? r.step : r.t; if (x >= lo && x <= hi) inView.push(k); });
    if (!inView.length) return;
    const i = Math.max(0, Math.min(...inView) - 1), j = Math.min(steps.length - 1, Math.max(...inView) + 1);
    const from = steps[i].from_step ?? steps[i].step, to = steps[j].step;
    const seq = ++zoomSeq;
    if (!steps.slice(i, j + 1).some((r) => r.rows > 1)) {  // every step there is drawn already
      if (detail) { detail = null; zoomNote(); redraw("metrics"); }
      return;
    }
    let body;
    try {
      const resp = await fetch(`${live.metrics_overview_api}?after_step=${from - 1}&until_step=${to}&max_points=${live.chart_points}`,
        { credentials: "same-origin" });
      if (!resp.ok) return;
      body = await resp.json();
    } catch (e) { console.error(e); return; }
    if (seq !== zoomSeq || !body.steps.length) return;  // a later zoom (or autoscale) came meanwhile
    detail = { lo: from, hi: to, rows: body.steps, downsampled: body.downsampled, points: body.points };
    zoomNote();
    redraw("metrics");
  }

  // A step inside one of the page's buckets got metrics (a replayed event, later metrics of an old
  // step): that bucket's steps are fetched again, and drawn in its place (row for row, or finer).
  const refreshing = new Set();
  async function refreshBucket(step) {
    const k = steps.findIndex((r) => r.rows > 1 && r.from_step <= step && step <= r.step);
    if (k < 0 || refreshing.has(steps[k].step)) return;
    const bucket = steps[k];
    refreshing.add(bucket.step);
    try {
      const resp = await fetch(`${live.metrics_overview_api}?after_step=${bucket.from_step - 1}&until_step=${bucket.step}&max_points=10`,
        { credentials: "same-origin" });
      if (!resp.ok) return;
      const body = await resp.json();
      const at = steps.indexOf(bucket);
      if (at < 0 || !body.steps.length) return;
      steps.splice(at, 1, ...body.steps);
      byStep.delete(bucket.step);
      for (const r of body.steps) byStep.set(r.step, r);
      redraw("metrics");
    } catch (e) { console.error(e); } finally { refreshing.delete(bucket.step); }
  }

  function zoomNote() {
    const el = document.getElementById("charts-zoom");
    if (!el) return;
    const n = (v) => Number(v).toLocaleString("en-US");
    if (!detail) el.textContent = "Zoom in on a chart to see every step.";
    else if (detail.downsampled) el.textContent = `Steps ${n(detail.lo)}–${n(detail.hi)}: ${n(detail.points)} steps as ${n(detail.rows.length)} points; zoom further to see every step.`;
    else el.textContent = `Steps ${n(detail.lo)}–${n(detail.hi)}: every step (${n(detail.points)}). Double-click a chart to see the whole run.`;
  }

  // A panel whose values are all one number v != 0 (a constant learning rate, 3e-4): Plotly's own
  // range for a flat line is v ± 1, which draws it on the 0 gridline with ticks of ±0.5 and hides v.
  // Centred on v, half its size either way, the axis reads v.
  function flatRange(traces) {
    const ys = traces.flatMap((t) => t.y || []).filter((y) => typeof y === "number" && Number.isFinite(y));
    if (!ys.length || ys.some((y) => y !== ys[0]) || ys[0] === 0) return null;
    const half = Math.abs(ys[0]) / 2;
    return [ys[0] - half, ys[0] + half];
  }

  function rewardClickable(div) {
    // Clicking a point of the reward chart opens that step's samples.
    div.on && div.on("plotly_click", (ev) => {
      const step = ev.points && ev.points[0] && ev.points[0].customdata;
      if (step === undefined) return;
      const form = document.getElementById("sample-filters");
      form.elements.step.value = step;
      offset = 0;
      loadSamples(true);
      document.getElementById("samples-card").scrollIntoView({ behavior: "smooth" });
    });
  }

  // -------------------------------------------------------------------------- memory timeline
  // [{seq, t, step, phase, device, allocated, ...}] from the page's table (views.memory_table: each field once)
  const memory = live.memory.rows.map((row) => Object.fromEntries(live.memory.fields.map((f, i) => [f, row[i]])));
  const PHASE_COLOURS = { rollout: "#4e79a7", reward_model: "#ff9da7", old_log_prob: "#f28e2b", ref: "#59a14f", values: "#76b7b2", update_critic: "#edc948", update: "#e15759", sync: "#b07aa1", idle: "#bab0ac" };
  const BAND_OPACITY = 0.28;  // strong enough to tell the phases apart, light enough to read the lines over them
  const BAND_MIN_PX = 3;  // a phase shorter than this many pixels at the current zoom is drawn this wide
  const memoryDiv = document.getElementById("memory-chart");

  // Phase stretches of the lowest rank: [{phase, from, to}] in unix seconds, one per run of points of
  // the same phase (a stretch lasts until the next stretch starts; the last one half a second).
  function phaseStretches() {
    if (!memory.length) return [];
    const lowest = Math.min(...memory.map((p) => p.rank || 0));
    const base = memory.filter((p) => (p.rank || 0) === lowest).sort((a, b) => a.t - b.t);
    const out = [];
    let from = 0;
    for (let i = 1; i <= base.length; i++) {
      if (i < base.length && base[i].phase === base[from].phase) continue;
      out.push({ phase: base[from].phase, from: base[from].t, to: i < base.length ? base[i].t : base[i - 1].t + 0.5 });
      from = i;
    }
    return out;
  }

  // One rect per stretch behind the lines (layer "below"), the full height of the plot. `range`: the
  // x range shown, [ms, ms], for the minimum width (a phase of milliseconds in an hour-long run
  // would be narrower than a pixel: drawn BAND_MIN_PX wide, so every phase the trainer reported shows).
  function phaseShapes(range) {
    const stretches = phaseStretches();
    if (!stretches.length) return [];
    const lo = range ? range[0] : stretches[0].from * 1000;
    const hi = range ? range[1] : stretches[stretches.length - 1].to * 1000;
    const width = (memoryDiv.clientWidth || 800) - 60;  // the plot area, less the y axis's margin
    const minMs = Math.max(0, hi - lo) * BAND_MIN_PX / Math.max(width, 100);
    let end = -Infinity;  // where the previous band ends: a widened band pushes the next one's start
    return stretches.map((s) => {
      const x0 = Math.max(s.from * 1000, end);
      end = Math.max(s.to * 1000, x0 + minMs);
      return { type: "rect", xref: "x", yref: "paper", y0: 0, y1: 1, layer: "below", line: { width: 0 },
        x0: new Date(x0), x1: new Date(end), fillcolor: PHASE_COLOURS[s.phase] || "#999999", opacity: BAND_OPACITY,
        name: "phase " + s.phase };
    });
  }

  function msRange(range) {
    if (!range || range.length !== 2) return null;
    // Plotly gives a date axis's range as local wall-clock strings ("2025-11-29 18:13:20.5"), as the
    // Date objects it was drawn from: parsed back as local time.
    const ms = range.map((v) => (v instanceof Date ? v.getTime() : typeof v === "number" ? v : Date.parse(String(v).replace(" ", "T"))));
    return ms.every((v) => Number.isFinite(v)) ? ms : null;
  }

  function drawMemory() {
    if (!window.Plotly || !memory.length) return;
    document.getElementById("memory-empty").hidden = true;
    const mb = (v) => (v == null ? null : v / 1048576);
    const gpu = memory.some((p) => p.allocated || p.reserved);
    const series = gpu ? [["allocated", "allocated"], ["reserved", "reserved"], ["peak", "peak"]] : [["rss", "RSS (process)"], ["peak", "peak RSS"]];
    // NVML's view of the whole device: what torch's allocator does not see (context, NCCL, SGLang's pool).
    if (memory.some((p) => p.device_used)) series.push(["device_used", "device used (NVML)"]);
    // One line per series and worker rank: several ranks report into one timeline.
    const ranks = [...new Set(memory.map((p) => p.rank || 0))].sort((a, b) => a - b);
    const traces = [];
    for (const rank of ranks) {
      const pts = memory.filter((p) => (p.rank || 0) === rank);
      const x = pts.map((p) => new Date(p.t * 1000));
      const text = pts.map((p) => plotlyText("step " + p.step + " · " + p.phase + " · " + p.device + " · rank " + (p.rank || 0)));
      for (const [key, label] of series) {
        traces.push({ name: (ranks.length > 1 ? "rank " + rank + " · " : "") + label + " (MiB)", x, y: pts.map((p) => mb(p[key])),
          mode: "lines+markers", type: "scatter", text, hoverinfo: "x+y+text+name" });
      }
    }
    // Legend entries for the phase bands (empty traces in the band colour).
    for (const [phase, colour] of Object.entries(PHASE_COLOURS)) {
      if (memory.some((p) => p.phase === phase)) traces.push({ name: phase, x: [null], y: [null], type: "scatter", mode: "markers", hoverinfo: "skip", marker: { color: colour, symbol: "square", size: 12, opacity: BAND_OPACITY * 2 } });
    }
    // Keep a zoom the user made: the bands' minimum width follows the range shown.
    const zoomed = memoryDiv.layout && memoryDiv.layout.xaxis && !memoryDiv.layout.xaxis.autorange ? memoryDiv.layout.xaxis.range : null;
    const l = layout({ shapes: phaseShapes(msRange(zoomed)), height: 320 });
    l.xaxis = { title: { text: "time" }, type: "date" };
    if (zoomed) { l.xaxis.range = zoomed; l.xaxis.autorange = false; }
    Plotly.react(memoryDiv, traces, l, { responsive: true, displaylogo: false });
    if (!memoryDiv.dataset.zoomBound && memoryDiv.on) {
      memoryDiv.dataset.zoomBound = "1";
      // A zoom or a reset changes how many milliseconds a pixel is: redraw the bands for it (a
      // relayout of the shapes alone fires this event too, without an x range: ignored).
      memoryDiv.on("plotly_relayout", (ev) => {
        if (!ev || !(("xaxis.range[0]" in ev) || ("xaxis.range" in ev) || ("xaxis.autorange" in ev))) return;
        const range = ev["xaxis.autorange"] ? null : msRange(ev["xaxis.range"] || [ev["xaxis.range[0]"], ev["xaxis.range[1]"]]);
        Plotly.relayout(memoryDiv, { shapes: phaseShapes(range) });
      });
    }
  }

  // ------------------------------------------------------------------------------ samples table
  let offset = 0;
  let count = null;
  const body = document.getElementById("samples-body");

  function filterParams() {
    const params = new URLSearchParams();
    for (const el of document.getElementById("sample-filters").elements) {
      if (el.name && el.value !== "") params.set(el.name, el.value);
    }
    return params;
  }

  function cell(tr, text) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function link(href, text) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    return a;
  }

  function fmt(v) { return v == null ? "" : Number(v).toFixed(3); }

  // The prompt's text by its key (split:hash, or the uid where a sample has no hash), from the rows
  // the samples API gave: a sample pushed live carries no transcript, its row borrows the text when
  // the prompt was seen, and the table is fetched again shortly after (refreshSamplesSoon) to fill
  // in the others.
  const promptOf = new Map();

  // A prompt's page: by its stable key (split and content hash: every step it was drawn at), or by
  // the draw's uid for samples stored without one (that page shows the one draw, history unknown).
  function promptHref(s) {
    const q = s.prompt_hash
      ? `prompt_split=${encodeURIComponent(s.prompt_split)}&prompt_hash=${encodeURIComponent(s.prompt_hash)}`
      : `uid=${encodeURIComponent(s.uid)}`;
    return `/runs/${runId}/prompts/?${q}`;
  }

  function promptCell(tr, s) {
    // Known by its content hash where the sample has one (the same prompt at another step shares it).
    const key = s.prompt_hash ? `${s.prompt_split}:${s.prompt_hash}` : s.uid;
    if (s.prompt !== undefined) promptOf.set(key, { prompt: s.prompt, short: s.prompt_short });
    const known = promptOf.get(key);
    const td = cell(tr, "");
    td.className = "prompt";
    // title and textContent take text: a prompt that looks like HTML stays text.
    const a = link(promptHref(s), known ? known.short || "(no user message)" : "…");
    if (known) a.title = known.prompt;
    const uid = document.createElement("span");
    uid.className = "uid";
    uid.title = s.uid;
    uid.textContent = s.uid.length > 40 ? s.uid.slice(0, 39) + "…" : s.uid;
    td.append(a, uid);
  }

  function sampleRow(s) {
    const tr = document.createElement("tr");
    const num = (text) => { cell(tr, text).className = "num"; };  // right-aligned, tabular figures
    num(typeof s.step === "number" ? s.step.toLocaleString("en-US") : s.step);
    promptCell(tr, s);
    num(s.index); num(fmt(s.reward)); num(fmt(s.advantage));
    num(typeof s.response_length === "number" ? s.response_length.toLocaleString("en-US") : s.response_length);
    num(s.num_turns); cell(tr, s.finish_reason); cell(tr, s.has_tool_call ? "yes" : "");
    const actions = cell(tr, "");
    if (s.id || s.sample_id) actions.appendChild(link(`/runs/${runId}/samples/${s.id || s.sample_id}/`, "transcript"));
    actions.append(" · ");
    actions.appendChild(link(`/runs/${runId}/groups/?step=${s.step}&uid=${encodeURIComponent(s.uid)}`, "group"));
    return tr;
  }

  for (const td of body.querySelectorAll("td.prompt")) {  // the server-rendered rows
    const a = td.querySelector("a"), key = td.dataset.promptKey;
    if (a && key && a.hasAttribute("title")) promptOf.set(key, { prompt: a.title, short: a.textContent });
  }

  let refreshTimer = null;
  function refreshSamplesSoon() {
    if (refreshTimer === null) refreshTimer = setTimeout(() => { refreshTimer = null; loadSamples(); }, 1500);
  }

  // The table's view (its filters and order) is kept in the address, so it can be shared: written when
  // the user changes the view (`byUser`), never by the refetch a pushed sample asks for, and only
  // when it differs. A history.replaceState is a navigation (within the document): written on every
  // refetch, it made an open run page navigate by itself every few seconds while a run reported
  // samples, and a tool waiting for the page's next navigation (Playwright's expect_navigation()
  // around a stop form's POST) took it for the one it was waiting for.
  function showViewInAddress() {
    const url = new URL(window.location);
    // the table's keys: its form's, and those the server's first page also took (a group, a prompt),
    // which the form does not carry on
    for (const el of document.getElementById("sample-filters").elements) if (el.name) url.searchParams.delete(el.name);
    for (const key of ["uid", "prompt_split", "prompt_hash", "offset"]) url.searchParams.delete(key);
    for (const [k, v] of filterParams()) url.searchParams.set(k, v);
    if (url.href !== window.location.href) history.replaceState(null, "", url);
  }

  async function loadSamples(byUser) {
    const params = filterParams();
    params.set("limit", live.page_size);
    params.set("offset", offset);
    const resp = await fetch(live.samples_api + "?" + params.toString(), { credentials: "same-origin" });
    if (!resp.ok) return;
    const page = await resp.json();
    count = page.count;
    body.replaceChildren(...page.results.map(sampleRow));
    document.getElementById("samples-count").textContent = count  // "51–100 of 1,234": separators as the pages' intcomma
      ? `${(offset + 1).toLocaleString("en-US")}–${(offset + page.results.length).toLocaleString("en-US")} of ${count.toLocaleString("en-US")}`
      : "no samples";
    document.getElementById("samples-prev").disabled = offset === 0;
    document.getElementById("samples-next").disabled = offset + page.results.length >= count;
    if (byUser) showViewInAddress();
  }

  function sampleMatches(s) {
    const p = filterParams();
    if (p.has("step") && Number(p.get("step")) !== s.step) return false;
    if (p.has("prompt_split") && p.get("prompt_split") !== s.prompt_split) return false;
    if (p.has("min_reward") && s.reward < Number(p.get("min_reward"))) return false;
    if (p.has("max_reward") && s.reward > Number(p.get("max_reward"))) return false;
    if (p.has("finish_reason") && p.get("finish_reason") !== s.finish_reason) return false;
    if (p.has("has_tool_call") && (p.get("has_tool_call") === "true") !== !!s.has_tool_call) return false;
    return true;
  }

  document.getElementById("sample-filters").addEventListener("submit", (ev) => { ev.preventDefault(); offset = 0; loadSamples(true); });
  document.getElementById("samples-prev").addEventListener("click", () => { offset = Math.max(0, offset - live.page_size); loadSamples(true); });
  document.getElementById("samples-next").addEventListener("click", () => { offset += live.page_size; loadSamples(true); });
  for (const th of document.querySelectorAll("#samples-table th[data-order]")) {
    th.classList.add("sortable");
    th.addEventListener("click", () => {
      const order = document.getElementById("sample-filters").elements.order;
      order.value = order.value === "-" + th.dataset.order ? th.dataset.order : "-" + th.dataset.order;
      offset = 0;
      loadSamples(true);
    });
  }

  // ------------------------------------------------------------------------------ live events
  // Charts are redrawn at most once a second, and only those whose data changed: memory samples come
  // every 250 ms per worker and a metrics event re-renders dozens of panels.
  // The pause between redraws also grows with what a redraw costs (3x its last duration): on a slow
  // or busy machine dozens of panels can take most of a second to draw, and redrawing them back to back
  // left the page no time for clicks, navigation or the websocket. Drawing then takes at most a quarter
  // of the page's time.
  const REDRAW_MS = 1000;
  let pending = false, lastDraw = 0, lastCost = 0, metricsDirty = false, memoryDirty = false;
  function redraw(kind) {
    if (kind === "memory") memoryDirty = true; else metricsDirty = true;
    if (pending) return;
    pending = true;
    const gap = Math.max(REDRAW_MS, 3 * lastCost);
    setTimeout(() => requestAnimationFrame(() => {
      pending = false;
      const t0 = performance.now();
      if (metricsDirty) { metricsDirty = false; drawMetrics(); }
      if (memoryDirty) { memoryDirty = false; drawMemory(); }
      lastDraw = performance.now();
      lastCost = lastDraw - t0;
    }), Math.max(0, gap - (performance.now() - lastDraw)));
  }

  // At-most-once delivery (docs/live.md): an event published while the server's subscription to
  // Redis was down never comes live. A seq past lastSeq + 1 is such a gap: the page reconnects with
  // resume_after=lastSeq (the server replays the stored events) and applies nothing past the gap
  // meanwhile, so order holds. Once per gap position: if the replay still jumps from the same
  // lastSeq, that seq was never stored (e.g. refused at ingest) and the page goes on.
  let gapRetriedAt = null;  // the lastSeq at which a gap last made the page reconnect

  // Applies one event; false when it is past a gap and the page reconnects instead (stop the frame).
  function apply(ev) {
    if (typeof ev.seq !== "number" || ev.seq <= lastSeq) return true;  // already applied
    if (ev.seq > lastSeq + 1 && gapRetriedAt !== lastSeq && socket) {
      gapRetriedAt = lastSeq;
      resync();
      return false;
    }
    lastSeq = ev.seq;
    const d = ev.data || {};
    if (ev.type === "metrics") {
      const row = byStep.get(d.step);
      const zoomed = detail && detail.rows.find((r) => r.step === d.step && !(r.rows > 1));
      if (zoomed) Object.assign(zoomed.metrics, d.metrics);
      if (row && !(row.rows > 1)) Object.assign(row.metrics, d.metrics);
      else if (d.step <= bucketedTo) refreshBucket(d.step);  // a bucket's mean cannot take one step's value
      else if (!row) {
        const added = { step: d.step, t: ev.time, metrics: Object.assign({}, d.metrics) };
        byStep.set(d.step, added);
        steps.push(added);
        if (steps.length > 1 && steps[steps.length - 2].step > d.step) steps.sort((a, b) => a.step - b.step);
      }
      const r = d.metrics["critic/score/mean"];
      if (typeof r === "number") document.getElementById("live-reward").textContent = r.toFixed(4);
      setStep(d.step);
      redraw("metrics");
    } else if (ev.type === "memory") {
      memory.push(Object.assign({ t: ev.time }, d));
      redraw("memory");
    } else if (ev.type === "sample") {
      if (offset === 0 && sampleMatches(d)) {
        const empty = body.querySelector("tr.empty");
        if (empty) empty.remove();
        const order = document.getElementById("sample-filters").elements.order.value;
        if (order === "-step" || order === "-seq") {  // newest first (the page's default): at the top
          body.insertBefore(sampleRow(d), body.firstChild);
          while (body.children.length > live.page_size) body.lastChild.remove();
        } else if (!order.match(/reward|length|turns|advantage|index/)) {
          body.appendChild(sampleRow(d));
          while (body.children.length > live.page_size) body.lastChild.remove();
        }
        refreshSamplesSoon();  // its prompt text, the count, the order the server gives
      }
    } else if (ev.type === "status") {
      const badge = document.querySelector("#live-badge .badge, #run-controls .badge");
      if (badge) badge.textContent = d.state;
      if (typeof d.state === "string") { runState = d.state; showConn(); }
      document.dispatchEvent(new CustomEvent("rlstudio:status", { detail: { state: d.state } }));
      if (d.total_steps && document.getElementById("live-total")) document.getElementById("live-total").textContent = Number(d.total_steps).toLocaleString("en-US");
    } else if (ev.type === "heartbeat") {
      setStep(d.step);
    } else if (ev.type === "log") {
      const logEl = document.getElementById("live-log");
      if (logEl) {
        const atBottom = logEl.scrollTop + logEl.clientHeight >= logEl.scrollHeight - 4;
        logEl.append(document.createTextNode(`[${d.level}] ${d.message}\n`));
        if (atBottom) logEl.scrollTop = logEl.scrollHeight;
      }
    }
    return true;
  }

  function receive(frame) {
    // A batch holds events in seq order; apply() skips any seq already applied, one by one, and
    // stops the batch at a gap (the reconnect's replay brings the rest in order).
    if (frame.type === "batch" && Array.isArray(frame.events)) {
      for (const ev of frame.events) {
        let ok = true;
        try { ok = apply(ev); } catch (e) { console.error(e); }
        if (!ok) return;
      }
    } else {
      apply(frame);
    }
  }

  // A count as the pages show it ("1,234": thousands separators, the template's intcomma) as a number.
  function countOf(text) { return Number(String(text || "").replace(/,/g, "")); }

  // The step as the websocket brings it, in the page's details and in the controls card's header
  // (which run_controls.js otherwise refreshes only every 5 s), with both progress bars.
  function setStep(step) {
    const total = countOf((document.getElementById("live-total") || {}).textContent) || 0;
    const shown = [[document.getElementById("live-step"), document.getElementById("live-progress")],
                   [document.querySelector("#run-controls .run-progress [data-field=step]"),
                    document.querySelector("#run-controls .run-progress progress")]];
    for (const [el, bar] of shown) {
      if (!el || countOf(el.textContent) >= step) continue;
      el.textContent = step.toLocaleString("en-US");
      if (bar && total > 0) bar.value = Math.min(100, Math.round(100 * step / total));
    }
  }

  // The connection indicator: "live" only while events can still arrive (the socket is open and the
  // run has not ended); once the run is stopped, succeeded, failed or lost it says so, since no state
  // leaves those. data-socket="open" is the readiness signal (the socket joined the run's group before
  // it was accepted, so nothing published after it is missed): tests and tools wait on it, not the text.
  const ENDED = new Set(["stopped", "succeeded", "failed", "lost"]);
  let runState = live.status;
  const conn = document.getElementById("live-conn");
  function showConn(open) {
    if (open !== undefined) conn.dataset.socket = open ? "open" : "closed";
    conn.dataset.runState = runState;
    if (ENDED.has(runState)) {
      conn.textContent = `ended (${runState})`;
      conn.title = "the run has ended: no more events will arrive";
    } else if (conn.dataset.socket === "open") {
      conn.textContent = "live";
      conn.title = "new events appear as the run reports them";
    }
  }

  let retry = 500;
  let socket = null;  // the current websocket; frames and closes of a replaced one are ignored
  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    // batch=1: the server sends {"type": "batch", "events": [...]} frames (docs/live.md), one per
    // ingest chunk, so a busy run costs a frame per chunk instead of one per event.
    const ws = new WebSocket(`${scheme}://${location.host}/ws/runs/${runId}/?batch=1&resume_after=${lastSeq}`);
    socket = ws;
    ws.onopen = () => { if (ws === socket) { showConn(true); retry = 500; } };
    ws.onmessage = (msg) => {
      if (ws !== socket) return;
      try { receive(JSON.parse(msg.data)); } catch (e) { console.error(e); }
    };
    ws.onclose = (ev) => {
      if (ws !== socket) return;
      socket = null;
      showConn(false);
      if (ev.code === 4401 || ev.code === 4403) { conn.textContent = "not allowed to watch this run"; return; }
      // 4503: the server lost its channel layer (Redis restart); like any other close, reconnect
      // with resume_after and the server replays what this page has not applied.
      if (!ENDED.has(runState)) conn.textContent = "reconnecting…";
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }

  // A gap: drop this socket (its later frames are ignored) and reconnect now with resume_after.
  function resync() {
    const old = socket;
    socket = null;
    if (old) old.close(1000);
    connect();
  }

  // The charts' view in the address, beside the samples table's (each writes only its own keys):
  // ?chart_x=time&chart_smoothing=0.60 (and chart_filter.js's chart_find), so a link opens the charts
  // as they were seen. Written when the user changes them, only when the address differs.
  function showChartsInAddress() {
    const url = new URL(window.location);
    if (xMode === "step") url.searchParams.delete("chart_x"); else url.searchParams.set("chart_x", xMode);
    if (smoothing > 0) url.searchParams.set("chart_smoothing", smoothing.toFixed(2)); else url.searchParams.delete("chart_smoothing");
    if (url.href !== window.location.href) history.replaceState(null, "", url);
  }
  const asked = new URLSearchParams(window.location.search);
  if (asked.get("chart_x") === "time") { xMode = "time"; document.getElementById("x-axis").value = "time"; }

  // Smoothing: the address's, else the one last set in this browser (kept for the next run page).
  const slider = document.getElementById("smoothing");
  const showSmoothing = window.rlstudioSmoothingSlider(slider, document.getElementById("smoothing-value"));
  function setSmoothing(value) { smoothing = showSmoothing(value); }
  if (asked.has("chart_smoothing")) setSmoothing(asked.get("chart_smoothing"));
  else try { setSmoothing(window.localStorage.getItem("rlstudio.runSmoothing")); } catch (e) { setSmoothing(0); }
  slider.addEventListener("input", () => {
    setSmoothing(slider.value);
    try { window.localStorage.setItem("rlstudio.runSmoothing", String(smoothing)); } catch (e) { /* private mode */ }
    showChartsInAddress();
    drawMetrics();
  });

  document.getElementById("x-axis").addEventListener("change", (ev) => {
    xMode = ev.target.value;
    zoomSeq++;
    detail = null;  // the new axis starts unzoomed
    zoomNote();
    showChartsInAddress();
    drawMetrics();
  });
  drawMetrics();
  drawMemory();
  connect();
  // for tests and the bench
  window.rlstudioLive = { apply, receive, lastSeq: () => lastSeq, metricSteps: () => steps.map((r) => r.step),
    chartSteps: () => drawRows.map((r) => r.step), zoomed: () => (detail ? { lo: detail.lo, hi: detail.hi,
      points: detail.points, rows: detail.rows.length, downsampled: detail.downsampled } : null),
    alertMarks: () => alertMarks.slice() };
})();
