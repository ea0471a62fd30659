// Smoothing of a chart's line, shared by the run page and the compare page (window.rlstudioEma).
(function () {
  "use strict";
  // Exponential moving average with weight w in [0, 1): s_k = w s_{k-1} + (1 - w) v_k from s_0 = 0,
  // divided by 1 - w^k (the weight the k values received), so the curve starts at the first value
  // (TensorBoard's and W&B's kind, debiased). Missing values stay missing and do not move the average.
  window.rlstudioEma = function ema(values, w) {
    if (!(w > 0)) return values.slice();
    let acc = 0;
    let k = 0;
    return values.map((v) => {
      if (v === null || !Number.isFinite(v)) return null;
      acc = w * acc + (1 - w) * v;
      k += 1;
      return acc / (1 - Math.pow(w, k));
    });
  };

  // A page's smoothing slider and the value shown beside it: the returned set(value) clamps value to
  // [0, 0.99], puts it on both and returns it (the weight the page smooths with).
  window.rlstudioSmoothingSlider = function (slider, shown) {
    return function set(value) {
      const w = Math.min(Math.max(Number(value) || 0, 0), 0.99);
      slider.value = String(w);
      shown.textContent = w.toFixed(2);
      return w;
    };
  };
})();
