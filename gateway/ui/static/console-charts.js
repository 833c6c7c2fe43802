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

  // One date format on every console page (and the inbox): ISO-like, in UTC, the zone said.
  // when(): "2026-12-07 13:10 UTC"; day(): "2026-12-07"; clock(): "13:10".
  function iso(epoch) {
    return new Date(epoch * 1000).toISOString();
  }
  function when(epoch) {
    if (epoch === null || epoch === undefined) return "–";
    return `${iso(epoch).slice(0, 16).replace("T", " ")} UTC`;
  }
  function day(epoch) {
    return iso(epoch).slice(0, 10);
  }
  function clock(epoch) {
    return iso(epoch).slice(11, 16);
  }

  // Ticks: the clock (UTC) within a day, the date past it; daily data (usage) by date.
  function ticks(u, splits) {
    const x = u.data[0];
    const daily = x.length > 1 && x[1] - x[0] >= 86400;
    const span = x.length ? x[x.length - 1] - x[0] : 0;
    return splits.map((v) => daily ? day(v) : span > 86400 ? `${day(v).slice(5)} ${clock(v)}` : clock(v));
  }

  function options(el, names, unit, daily) {
    const stroke = axisColor();
    const grid = { stroke: "rgba(128,128,128,0.2)", width: 1 };
    return {
      width: widthOf(el), height: 220,
      // Ticks fall on UTC boundaries, as the labels are UTC.
      tzDate: (ts) => window.uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
      // A share is 0..100 %; the other scales fit their data (from zero).
      scales: { x: { time: true }, y: unit === "%" ? { range: [0, 1] } : { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      legend: { live: true },
      cursor: { focus: { prox: 16 } },
      axes: [
        { stroke, grid, ticks: grid, values: ticks },
        { stroke, grid, ticks: grid, size: 68, values: (u, splits) => splits.map(v => format(v, unit)) },
      ],
      series: [
        { label: daily ? "Day (UTC)" : "Time (UTC)", value: (u, v) => v == null ? "–" : daily ? day(v) : when(v) },
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

  // id: the element's id; x: the x values (epoch s); lines: [[name, values], ...]; daily: one point a day
  function draw(id, x, lines, unit, daily = false) {
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
    const plot = new window.uPlot(options(el, names, unit, daily), data, el);
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

  return { draw, format, resizeVisible, when, day };
})();
