// Loopgate console charts: a thin layer over uPlot (vendor/uplot.min.js, MIT), which draws on a canvas.
// A chart is made once per element and given new data on each refresh; it follows its box's width.
"use strict";

window.LoopgateCharts = (() => {
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                   "#7f7f7f", "#bcbd22"];
  const charts = new Map(); // element id -> {plot, names}

  function widthOf(el) {
    return Math.max(260, Math.floor(el.getBoundingClientRect().width) || 600);
  }

  function axisColor() {
    return getComputedStyle(document.body).color;
  }

  function options(el, names, unit, timeAxis) {
    const stroke = axisColor();
    const grid = { stroke: "rgba(128,128,128,0.2)", width: 1 };
    return {
      width: widthOf(el), height: 220,
      // A share is 0..100 %; the other scales fit their data (from zero).
      scales: { x: { time: timeAxis }, y: unit === "%" ? { range: [0, 1] } : { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      legend: { live: true },
      cursor: { focus: { prox: 16 } },
      axes: [
        { stroke, grid, ticks: grid },
        { stroke, grid, ticks: grid, size: 68, values: (u, splits) => splits.map(v => format(v, unit)) },
      ],
      series: [
        { label: timeAxis ? "Time" : "Day" },
        ...names.map((name, i) => ({
          label: name, stroke: PALETTE[i % PALETTE.length], width: 2, spanGaps: false,
          value: (u, v) => v == null ? "–" : format(v, unit),
        })),
      ],
    };
  }

  function format(value, unit) {
    if (value == null) return "–";
    if (unit === "%") return (value * 100).toFixed(value < 0.1 ? 1 : 0) + " %";
    if (unit === "ms") return (value === 0 ? "0" : value.toFixed(value < 1 ? 2 : value < 10 ? 1 : 0)) + " ms";
    if (Math.abs(value) >= 1000) return (value / 1000).toFixed(1) + "k";
    return Number.isInteger(value) ? String(value) : value.toFixed(2);
  }

  // id: the element's id; x: the x values (epoch s); lines: [[name, values], ...]
  function draw(id, x, lines, unit, timeAxis = true) {
    const el = document.getElementById(id);
    const names = lines.map(([name]) => name);
    const data = [x, ...lines.map(([, values]) => values)];
    const known = charts.get(id);
    if (known && known.names.join("\u0000") === names.join("\u0000")) {
      known.plot.setData(data);
      return known.plot;
    }
    if (known) known.plot.destroy();
    el.textContent = "";
    const plot = new window.uPlot(options(el, names, unit, timeAxis), data, el);
    charts.set(id, { plot, names });
    return plot;
  }

  let resizing = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      for (const [id, { plot }] of charts) {
        const el = document.getElementById(id);
        if (el && el.offsetParent !== null) plot.setSize({ width: widthOf(el), height: 220 });
      }
    }, 100);
  });

  function resizeVisible() {
    for (const [id, { plot }] of charts) {
      const el = document.getElementById(id);
      if (el && el.offsetParent !== null) plot.setSize({ width: widthOf(el), height: 220 });
    }
  }

  return { draw, format, resizeVisible };
})();
