// OLP dashboard helpers: DOM building, number formatting, inline SVG charts.
// Loaded before app.js; exports window.OLPDashboard. Text goes in as textContent only.
"use strict";

(() => {
  const PALETTE = ["#4f7cff", "#20b486", "#f0a020", "#e0506a", "#9b6bff", "#1fb5c9",
    "#c77d3a", "#7a8ca8", "#d35fb7", "#6bbf3b"];
  const SVG_NS = "http://www.w3.org/2000/svg";

  // -- small DOM helpers --------------------------------------------------------------

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else node.setAttribute(name, value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    for (const child of children) if (child) node.append(child);
    return node;
  }

  function svgTitle(text) {
    const t = document.createElementNS(SVG_NS, "title");
    t.textContent = text;
    return t;
  }

  // -- formatting -----------------------------------------------------------------------

  const nf = new Intl.NumberFormat(undefined);
  const num = (n) => (n === null || n === undefined ? "–" : nf.format(n));
  function usd(n) {
    if (n === null || n === undefined) return "–";
    if (n === 0) return "$0";
    // A cost too small for four decimals is still a cost, not an unpriced "$0.0000".
    if (n > 0 && n < 0.00005) return "<$0.0001";
    if (Math.abs(n) < 0.01) return "$" + n.toFixed(4);
    return "$" + n.toFixed(2);
  }
  const pct = (x) => (x === null || x === undefined ? "–" : (x * 100).toFixed(x < 0.1 ? 1 : 0) + "%");
  function ms(n) {
    if (n === null || n === undefined) return "–";
    return n >= 1000 ? (n / 1000).toFixed(n >= 10000 ? 0 : 1) + " s" : Math.round(n) + " ms";
  }
  function bytes(n) {
    if (!n) return "0 B";
    const units = ["B", "KB", "MB", "GB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  function duration(s) {
    s = Math.max(0, Math.floor(s));
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60), sec = s % 60;
    if (d) return `${d}d ${h}h ${m}m`;
    if (h) return `${h}h ${m}m ${sec}s`;
    if (m) return `${m}m ${sec}s`;
    return `${sec}s`;
  }
  function clock(ts) {
    return new Date(ts * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }
  function hhmm(ts) {
    return new Date(ts * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }

  function colorMap(names) {
    const map = new Map();
    [...names].sort().forEach((n, i) => map.set(n, PALETTE[i % PALETTE.length]));
    return map;
  }

  // -- charts (inline SVG) --------------------------------------------------------------

  function stackedBars(container, labels, series, opts) {
    // The drawing is as wide as its box, so labels keep their size on a phone.
    const W = Math.max(300, Math.min(1200, container.clientWidth || 720));
    const H = W < 500 ? 150 : 180, left = 44, bottom = 20, top = 8;
    const n = labels.length;
    const totals = labels.map((_, i) => series.reduce((a, s) => a + (s.values[i] || 0), 0));
    const max = niceMax(Math.max(0, ...totals));
    const plotW = W - left - 4, plotH = H - top - bottom;
    const slot = plotW / Math.max(1, n), barW = Math.max(1, slot * 0.78);
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", class: "bars" });
    for (const f of [0, 0.5, 1]) {
      const y = top + plotH * (1 - f);
      root.append(svg("line", { x1: left, x2: W - 4, y1: y, y2: y, class: "grid" }));
      const t = svg("text", { x: left - 6, y: y + 4, class: "axis", "text-anchor": "end" });
      t.textContent = max ? opts.format(max * f) : f ? "" : "0";
      root.append(t);
    }
    for (let i = 0; i < n; i++) {
      let y = top + plotH;
      const x = left + i * slot + (slot - barW) / 2;
      for (const s of series) {
        const v = s.values[i] || 0;
        if (!v || !max) continue;
        const h = (v / max) * plotH;
        y -= h;
        root.append(svg("rect", { x: x.toFixed(2), y: y.toFixed(2), width: barW.toFixed(2), height: Math.max(0.5, h).toFixed(2), fill: s.color, rx: 1 },
          svgTitle(`${s.name}: ${opts.format(v)} (${opts.label(labels[i])})`)));
      }
      if (i === 0 || i === n - 1 || i === Math.floor(n / 2)) {
        const t = svg("text", { x: (x + barW / 2).toFixed(2), y: H - 4, class: "axis",
          "text-anchor": i === 0 ? "start" : i === n - 1 ? "end" : "middle" });
        t.textContent = opts.label(labels[i]);
        root.append(t);
      }
    }
    if (!max) {
      const t = svg("text", { x: left + plotW / 2, y: top + plotH / 2, class: "empty", "text-anchor": "middle" });
      t.textContent = opts.empty || "nothing yet";
      root.append(t);
    }
    container.replaceChildren(root);
  }

  function niceMax(v) {
    if (v <= 0) return 0;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function legend(box, names, colors, values) {
    box.replaceChildren();
    for (const n of names) {
      const sw = el("i", { class: "swatch" });
      sw.style.background = colors.get(n);
      box.append(el("span", { class: "legend-item" }, sw, n, values ? el("b", { text: " " + values.get(n) }) : null));
    }
  }

  // -- pure helpers for the panels ------------------------------------------------

  // "none" (memory) and "(none)" (ledger): requests no provider answered.
  const providerName = (n) => (n === "none" || n === "(none)" ? "no provider" : n);

  // Consecutive events with the same chain, result and failed hops are shown once, counted.
  function groupEvents(events) {
    const groups = [];
    const shape = (e) => JSON.stringify([e.chain, e.served_by, e.status, e.hops.map((h) => [h.provider, h.model, h.code, h.trigger])]);
    for (const e of events) {
      const last = groups[groups.length - 1];
      if (last && last.shape === shape(e)) {
        last.count += 1;
        last.oldest = e.time;
      } else {
        groups.push({ event: e, count: 1, oldest: e.time, shape: shape(e) });
      }
    }
    return groups;
  }

  window.OLPDashboard = {
    el, num, usd, pct, ms, bytes, duration, clock, hhmm, colorMap, stackedBars, legend,
    providerName, groupEvents,
  };
})();
