/* Metrics page charts (uPlot, served locally): utilisation and queue length
 * over time, and the CDF of job completion times. Data comes inline from the
 * server as JSON (#metrics-data). */
(function () {
  "use strict";

  function duration(s) {
    if (s == null) return "";
    if (s < 10) return (Math.round(s * 10) / 10) + " s";
    s = Math.round(s);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min" + (s % 60 ? " " + (s % 60) + " s" : "");
    if (s < 172800) return Math.floor(s / 3600) + " h" + (Math.floor(s / 60) % 60 ? " " + (Math.floor(s / 60) % 60) + " min" : "");
    return Math.floor(s / 86400) + " d";
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // 24-hour clock like the rest of the dashboard; the date too over long windows.
  function clockTicks(u, splits) {
    var span = u.scales.x.max - u.scales.x.min;
    return splits.map(function (ts) {
      var d = new Date(ts * 1000);
      var hm = pad(d.getHours()) + ":" + pad(d.getMinutes());
      return span > 36 * 3600 ? (d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + hm : hm;
    });
  }

  function clockValue(u, ts) {
    if (ts == null) return "—";
    var d = new Date(ts * 1000);
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  var INK = "#5f6b7d";
  var GRID = { stroke: "#eceef2", width: 1 };
  function axis(extra) {
    return Object.assign({ stroke: INK, grid: GRID, ticks: { stroke: "#e2e5ea" }, font: "12px system-ui, sans-serif" }, extra || {});
  }

  function make(el, opts, data) {
    var width = Math.max(300, el.clientWidth);
    opts.width = width;
    opts.height = 240;
    var plot = new uPlot(opts, data, el);
    return plot;
  }

  document.addEventListener("DOMContentLoaded", function () {
    var node = document.getElementById("metrics-data");
    if (!node || !window.uPlot) return;
    var d = JSON.parse(node.textContent);
    var plots = [];
    var stepped = uPlot.paths && uPlot.paths.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined;

    var util = document.getElementById("chart-util");
    if (util) {
      plots.push([util, make(util, {
        legend: { show: true },
        cursor: { drag: { x: false, y: false } },
        scales: { y: { range: [0, 100] } },
        axes: [axis({ values: clockTicks }), axis({ values: function (u, v) { return v.map(function (x) { return x + "%"; }); } })],
        series: [{ value: clockValue }, { label: "GPUs held", stroke: "#4f46e5", width: 2, fill: "rgba(79,70,229,.12)",
          value: function (u, v) { return v == null ? "—" : v.toFixed(1) + "%"; } }],
      }, [d.times, d.util])]);
    }

    var queue = document.getElementById("chart-queue");
    if (queue) {
      plots.push([queue, make(queue, {
        cursor: { drag: { x: false, y: false } },
        scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max)]; } } },
        axes: [axis({ values: clockTicks }), axis({ values: function (u, v) { return v.map(function (x) { return Number.isInteger(x) ? x : ""; }); } })],
        series: [{ value: clockValue }, { label: "Waiting jobs", stroke: "#d97706", width: 2, fill: "rgba(217,119,6,.12)", paths: stepped }],
      }, [d.times, d.queue])]);
    }

    var jct = document.getElementById("chart-jct");
    if (jct && d.jct.length) {
      var n = d.jct.length;
      var ys = d.jct.map(function (_, i) { return (i + 1) / n; });
      plots.push([jct, make(jct, {
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: false }, y: { range: [0, 1] } },
        axes: [
          axis({ values: function (u, v) { return v.map(duration); } }),
          axis({ values: function (u, v) { return v.map(function (x) { return Math.round(x * 100) + "%"; }); } }),
        ],
        series: [
          { label: "JCT", value: function (u, v) { return duration(v); } },
          { label: "Jobs done by then", stroke: "#16a34a", width: 2, paths: stepped, points: { show: false },
            value: function (u, v) { return v == null ? "—" : Math.round(v * 100) + "%"; } },
        ],
      }, [d.jct, ys])]);
    }

    var timer = null;
    window.addEventListener("resize", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        plots.forEach(function (p) { p[1].setSize({ width: Math.max(300, p[0].clientWidth), height: 240 }); });
      }, 100);
    });
  });
})();
