// The live page: one EventSource on the run's store (appliance/console/app.py live_events), which
// reconnects by itself after a drop; each message is a LiveSnapshot (appliance/console/live.py).
"use strict";
(function () {
  const root = document.getElementById("live");
  if (!root) return;
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";

  function el(name, attrs, text) {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // lines: [{name, points: [[t, v], ...]}] drawn into an svg with its own scales
  function draw(svg, lines, unit) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const [w, h] = svg.getAttribute("viewBox").split(" ").slice(2).map(Number);
    const pad = { l: 48, r: 110, t: 10, b: 24 };
    const all = lines.flatMap((l) => l.points);
    if (!all.length) { svg.appendChild(el("text", { x: pad.l, y: h / 2 }, "no stored seconds yet")); return; }
    const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
    const v1 = Math.max(...all.map((p) => p[1]), 1e-9) * 1.1;
    const x = (t) => pad.l + (t - t0) / (t1 - t0) * (w - pad.l - pad.r);
    const y = (v) => h - pad.b - v / v1 * (h - pad.t - pad.b);
    // the axes as data: what a pixel stands for (a reader of the figure, the browser test, inverts them)
    svg.setAttribute("data-domain", [t0, t1, 0, v1].join(" "));
    svg.setAttribute("data-range", [x(t0), x(t1), y(0), y(v1)].join(" "));
    svg.appendChild(el("line", { x1: pad.l, y1: h - pad.b, x2: w - pad.r, y2: h - pad.b, class: "axis" }));
    svg.appendChild(el("line", { x1: pad.l, y1: pad.t, x2: pad.l, y2: h - pad.b, class: "axis" }));
    svg.appendChild(el("text", { x: 4, y: pad.t + 10 }, v1.toPrecision(3) + " " + unit));
    svg.appendChild(el("text", { x: pad.l, y: h - 6 }, t0.toFixed(0) + " s"));
    svg.appendChild(el("text", { x: w - pad.r - 30, y: h - 6 }, t1.toFixed(0) + " s"));
    lines.forEach((line, i) => {
      const color = COLORS[i % COLORS.length];
      const d = line.points.map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
      svg.appendChild(el("polyline", { points: d, fill: "none", stroke: color, "stroke-width": 1.5,
                                       "data-flow": line.name, "data-points": line.points.length }));
      svg.appendChild(el("text", { x: w - pad.r + 8, y: pad.t + 14 + 16 * i, fill: color }, line.name));
    });
  }

  function duration(seconds) {
    const m = Math.round(seconds / 60);
    return m < 60 ? m + " min" : Math.floor(m / 60) + " h " + (m % 60) + " min";
  }

  function show(s) {
    $("state").textContent = s.live ? "running" : s.status;
    $("cell").textContent = s.current || "–";
    $("done").textContent = s.cells_done;
    $("total").textContent = s.cells_total;
    $("eta").textContent = s.eta_s == null ? "–" : duration(s.eta_s);
    const v = s.verification;
    $("verification").textContent = v ? "Verification of " + v.id + ": " + v.verdict + ", RTT " + v.rtt_meas +
      " ms (configured " + v.rtt_conf + "), rate " + v.rate_meas + " Mb/s (configured " + v.rate_conf + ")" : "–";
    $("series-of").textContent = s.series_of ? "cell " + s.series_of : "";
    draw($("throughput"), Object.entries(s.throughput).map(([name, points]) => ({ name, points })), "Mb/s");
    draw($("rtt"), s.rtt.length ? [{ name: "probe", points: s.rtt }] : [], "ms");
    root.dataset.updated = String(Date.now());
  }

  const source = new EventSource(root.dataset.events);
  source.onopen = () => { $("link").textContent = "connected"; };
  source.onerror = () => { $("link").textContent = "reconnecting…"; };
  source.onmessage = (e) => show(JSON.parse(e.data));
  source.addEventListener("end", () => { $("link").textContent = "the run has ended"; source.close(); });
})();
