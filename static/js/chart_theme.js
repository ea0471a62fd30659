/* The charts' colours for the page's colour scheme. Plotly's default template draws a white plot with
   light grey grid lines, which glare on the dark theme (a white histogram, white grid lines over the
   run's charts). window.rlstudioChartTemplate() is a plotly layout template for the scheme the browser
   asks for: transparent backgrounds, the page's ink, and grid and zero lines that suit it. A chart sets
   it as layout.template; its own layout settings still win over the template's.
   window.rlstudioPlotlyText(text) is users' text (run names, metric names) as Plotly must get it:
   Plotly reads a few tags (<b>, <a href>, <br>) in names, titles and hover text, so a run called "<b>x"
   must show as typed. */
(function () {
  "use strict";
  window.rlstudioPlotlyText = function (text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  };
  window.rlstudioChartTemplate = function () {
    var dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    var axis = dark ? { gridcolor: "#343a42", zerolinecolor: "#8b929b", linecolor: "#8b929b" }
                    : { gridcolor: "#eeeeee", zerolinecolor: "#444444", linecolor: "#444444" };
    return { layout: {
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: dark ? "#dddddd" : "#222222" }, xaxis: axis, yaxis: axis
    } };
  };
})();
