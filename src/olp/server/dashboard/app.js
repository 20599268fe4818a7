// OLP dashboard: plain JavaScript, no build step, no library, no request outside this origin.
// lib.js (loaded first) holds the DOM, formatting and chart helpers.
// Data comes from GET /v0/management/dashboard (owner key) every 5 s while the tab is visible.
// Everything from the server is inserted with textContent / SVG attributes, never as HTML.
"use strict";

(() => {
  const POLL_MS = 5000;
  const STORE_KEY = "olp.dashboard.key";

  const ui = {
    trafficRange: "1h",
    spendBy: "key",
    spendMetric: "api_cost_usd",
    data: null,
    skew: null, // server clock minus browser clock, in seconds
    timer: null,
    key: null,
  };

  const {
    el, num, usd, pct, ms, bytes, duration, clock, hhmm, colorMap, stackedBars, legend,
    providerName, groupEvents,
  } = window.OLPDashboard;
  const $ = (id) => document.getElementById(id);
  // Where a quota figure comes from (GET /v0/management/quota `source`).
  const SOURCES = { signal: "reported", counter: "counted", "counter/capacity": "est.", none: "no data" };

  const serverNow = () => Date.now() / 1000 + (ui.skew || 0);
  function ago(ts) {
    if (!ts) return "never";
    const s = serverNow() - ts;
    return s < 5 ? "just now" : duration(s) + " ago";
  }

  // -- key handling ---------------------------------------------------------------------

  function loadKey() {
    // /dashboard#key=olp_... : a fragment never reaches a server or a log. Take it, then
    // remove it from the address bar and history.
    const match = /(?:^#|&)key=([^&]+)/.exec(location.hash);
    if (match) {
      sessionStorage.setItem(STORE_KEY, decodeURIComponent(match[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
    return sessionStorage.getItem(STORE_KEY) || localStorage.getItem(STORE_KEY);
  }

  function forgetKey() {
    sessionStorage.removeItem(STORE_KEY);
    localStorage.removeItem(STORE_KEY);
    ui.key = null;
  }

  function showLogin(message) {
    stopPolling();
    $("main").hidden = true;
    $("login").hidden = false;
    $("sign-out").hidden = true;
    setLive("off", "not signed in");
    if (message) banner(message, "error");
    $("key-input").focus();
  }

  function banner(message, kind) {
    const b = $("banner");
    b.textContent = message || "";
    b.className = "banner " + (kind || "");
    b.hidden = !message;
  }

  // A config.json edit the server could not load (it keeps running on the last good one),
  // or one that waits for a restart.
  function configBanner(config) {
    if (config.reload_error) {
      return banner(`config.json was not reloaded (${ago(config.reload_error_at)}): ` +
        `${config.reload_error}. OLP keeps running with the last good file.`, "error");
    }
    if (config.restart_needed.length) {
      return banner(`config.json changes to ${config.restart_needed.join(", ")} take effect ` +
        "when OLP restarts.", "warn");
    }
    banner("");
  }

  function setLive(kind, text) {
    $("live-dot").className = "dot " + kind;
    $("live-text").textContent = text;
  }

  // -- polling --------------------------------------------------------------------------

  async function poll() {
    if (!ui.key) return showLogin();
    let resp;
    try {
      resp = await fetch("/v0/management/dashboard", {
        headers: { Authorization: "Bearer " + ui.key },
        cache: "no-store",
      });
    } catch (err) {
      setLive("stale", "OLP unreachable, retrying");
      return schedule();
    }
    if (resp.status === 401 || resp.status === 403) {
      const body = await resp.json().catch(() => ({}));
      const msg = (body.error && body.error.message) || `HTTP ${resp.status}`;
      const code = body.error && body.error.code;
      forgetKey();
      return showLogin(`${resp.status} ${code || ""}: ${msg}`);
    }
    if (!resp.ok) {
      setLive("stale", `HTTP ${resp.status}, retrying`);
      return schedule();
    }
    const data = await resp.json();
    ui.data = data;
    // The response's travel time makes each estimate a little low: keep the best one, so
    // countdowns never step back between polls (unless the server's clock really moved).
    const skew = data.generated_at - Date.now() / 1000;
    ui.skew = ui.skew === null || Math.abs(skew - ui.skew) > 30 ? skew : Math.max(ui.skew, skew);
    configBanner(data.status.config);
    $("login").hidden = true;
    $("main").hidden = false;
    $("sign-out").hidden = false;
    render(data);
    setLive("on", "live · " + clock(data.generated_at));
    schedule();
  }

  function schedule() {
    stopPolling();
    if (document.visibilityState !== "hidden") ui.timer = setTimeout(poll, POLL_MS);
  }

  function stopPolling() {
    if (ui.timer) clearTimeout(ui.timer);
    ui.timer = null;
  }

  // -- rendering ------------------------------------------------------------------------

  function render(d) {
    const s = d.status;
    $("version").textContent = `v${s.version} · up ${s.uptime_human}`;
    renderTiles(d);
    renderProviders(d);
    renderPools(s.pools);
    renderTraffic(d);
    renderCache(d.cache);
    renderFallbacks(s.recent_fallbacks);
    renderSpend(d.spend);
    renderKeys(d.keys);
    renderErrors(s.recent_errors);
    tick();
  }

  function renderTiles(d) {
    const c = d.status.counters;
    $("total-requests").textContent = num(c.total_requests);
    $("total-sub").textContent = `${num(d.traffic.last_24h.requests)} in 24 h · ${num(d.traffic.requests_last_minute)}/min`;
    $("active-requests").textContent = num(c.active_requests);
    $("active-sub").textContent = `${num(c.active_streams)} streams · ${num(c.active_spawns)} CLI spawns`;
    $("total-errors").textContent = num(c.errors);
    $("errors-sub").textContent = c.total_requests ? pct(c.errors / c.total_requests) + " of requests" : "";
    $("fallback-saves").textContent = num(c.fallback_saves);
    $("fallback-sub").textContent = `${num(c.fallbacks)} requests with a failed hop`;
    $("cache-rate").textContent = d.cache.enabled ? pct(d.cache.hit_rate) : "off";
    $("cache-sub").textContent = `${num(c.cache_hits)} hits · ${usd(d.cache.saved_api_cost_usd)} saved`;
    let billed = 0, api = 0;
    for (const p of d.spend.by_provider) { billed += p.total_cost_usd; api += p.total_api_cost_usd; }
    $("spend-total").textContent = usd(billed);
    $("spend-sub").textContent = `${usd(api)} at API prices`;
  }

  function renderProviders(d) {
    const quota = new Map(d.quota.map((q) => [q.provider, q]));
    const box = $("providers");
    box.replaceChildren();
    if (!d.status.providers.length) box.append(el("p", { class: "muted", text: "No providers configured." }));
    for (const p of d.status.providers) box.append(providerCard(p, quota.get(p.name)));
  }

  function providerCard(p, q) {
    const card = el("article", { class: "card state-" + p.state, "data-provider": p.name });
    card.append(el("header", {},
      el("div", {}, el("h3", { text: p.name }), el("span", { class: "muted", text: p.type })),
      el("span", { class: "badge state", "data-state": p.state, text: p.state.replace("_", " ") })));
    const health = p.health;
    const healthText = !p.enabled ? "disabled in config" : health === null ? "checking…"
      : (health.ok ? "healthy" : "failing") + " · checked " + ago(health.checked_at);
    const healthRow = el("p", { class: "health " + (health && !health.ok ? "bad" : ""), text: healthText });
    if (health && health.checks.length) healthRow.title = health.checks.join("\n") + (health.fix ? "\nfix: " + health.fix : "");
    card.append(healthRow);
    for (const c of p.cooldowns) {
      card.append(el("p", { class: "cooldown" },
        el("span", { text: "cooling down" + (c.model ? ` (${c.model})` : "") + " · " }),
        el("strong", { class: "countdown", "data-until": String(c.until), text: duration(c.until - serverNow()) }),
        el("span", { class: "muted", text: " · " + c.reason })));
    }
    if (q && q.fired.length) card.append(softLimit(q));
    if (q) {
      card.append(bar("5-hour window", q.five_hour_utilisation));
      card.append(bar("credit pool", q.credit_pool_utilisation));
    }
    const spawns = p.active_spawns === null ? "–" : `${p.active_spawns}/${p.max_concurrent ?? "∞"}`;
    card.append(el("dl", { class: "facts small" },
      fact("p50 latency", ms(p.latency_p50_ms), "latency"),
      fact("p50 TTFT", ms(p.ttft_p50_ms), "ttft"),
      fact("requests", num(p.requests), "requests"),
      fact("errors", num(p.errors), "errors"),
      fact("today", q ? num(q.requests_today) : "–", "today"),
      fact("spawns", spawns, "spawns")));
    if (p.warm) card.append(warmFacts(p.warm));
    return card;
  }

  // CLI processes started ahead: how many wait, how often a request found one, and what
  // that saves (from a cold start, or from the prompt, to the answer's first content).
  function warmFacts(w) {
    return el("dl", { class: "facts small warm" },
      fact("warm", `${num(w.waiting)}/${num(w.size)} waiting`, "warm-waiting"),
      fact("warm hits", `${num(w.hits)} of ${num(w.hits + w.misses)}`, "warm-hits"),
      fact("cold start", ms(w.cold_start_ms_p50), "warm-cold"),
      fact("warm start", ms(w.warm_start_ms_p50), "warm-start"));
  }

  // Each pool: which member its next request takes, and every member's window.
  function renderPools(pools) {
    $("panel-pools").hidden = !pools.length;
    const box = $("pools");
    box.replaceChildren();
    for (const pool of pools) {
      const card = el("article", { class: "card pool", "data-pool": pool.pool });
      card.append(el("header", {},
        el("div", {}, el("h3", { text: pool.pool }), el("span", { class: "muted", text: pool.pick })),
        el("span", { class: "badge next", text: "next: " + (pool.next || "none") })));
      for (const m of pool.members) card.append(poolMember(m, m.provider === pool.next));
      box.append(card);
    }
  }

  function poolMember(m, next) {
    const w = m.window;
    const figure = w ? { value: w.utilisation, source: w.source } : { value: null, source: "none" };
    const row = el("div", { class: "pool-member" + (next ? " next" : ""), "data-member": m.provider });
    const state = !m.enabled ? " · disabled" : m.blocked ? " · cooling down or soft-limited"
      : w ? "" : m.heard_from ? " · window unknown" : " · not tried yet";
    row.append(el("p", {}, el("strong", { text: m.provider }), el("span", { class: "muted", text: state })));
    row.append(bar("window", figure));
    if (w) {
      row.append(el("p", { class: "muted small" }, el("span", { text: "resets in " }),
        el("strong", { class: "countdown", "data-until": String(w.reset_at), text: duration(w.reset_at - serverNow()) })));
    }
    return row;
  }

  // A soft trigger fires: OLP skips the provider until it clears by itself (reset_at).
  function softLimit(q) {
    const row = el("p", { class: "cooldown soft-limit", title: q.fired.join("\n") },
      el("span", { text: "soft limit" + (q.reset_at ? " · clears in " : "") }));
    if (q.reset_at) {
      row.append(el("strong", { class: "countdown", "data-until": String(q.reset_at),
        text: duration(q.reset_at - serverNow()) }));
    }
    row.append(el("span", { class: "muted", text: " · " + q.fired[0] }));
    return row;
  }

  function bar(label, figure) {
    const value = figure ? figure.value : null;
    const row = el("div", { class: "bar-row" });
    const text = value === null ? "–" : pct(value);
    row.append(el("span", { class: "bar-label", text: label }));
    const track = el("div", { class: "bar" });
    const fill = el("div", { class: "fill" + (value >= 0.9 ? " hot" : value >= 0.7 ? " warm" : "") });
    fill.style.width = value === null ? "0" : Math.min(100, value * 100).toFixed(1) + "%";
    track.append(fill);
    const source = figure ? figure.source : "none";
    row.append(track, el("span", { class: "bar-value", text }),
      el("span", { class: "source muted", text: SOURCES[source] || source, title: "where the figure comes from: " + source }));
    return row;
  }

  function fact(label, value, cls) {
    const wrap = el("div", { class: cls || "" });
    wrap.append(el("dt", { text: label }), el("dd", { text: value }));
    return wrap;
  }

  function renderTraffic(d) {
    const series = ui.trafficRange === "1h" ? d.traffic.last_hour : d.traffic.last_24h;
    const keys = Object.keys(series.by_provider);
    const names = keys.map(providerName);
    const colors = colorMap(names);
    const labels = series.total.map((_, i) => series.start + i * series.step_s);
    const unit = ui.trafficRange === "1h" ? "minute" : "hour";
    $("traffic-summary").textContent =
      `${num(series.requests)} requests, ${num(series.errors)} errors in the last ${ui.trafficRange === "1h" ? "hour" : "24 hours"} · per ${unit}`;
    stackedBars($("traffic-chart"), labels, keys.map((k, i) => ({ name: names[i], values: series.by_provider[k], color: colors.get(names[i]) })),
      { format: num, label: ui.trafficRange === "1h" ? hhmm : hourLabel, unit });
    legend($("traffic-legend"), names, colors);
    const chips = $("traffic-status");
    chips.replaceChildren();
    for (const [status, values] of Object.entries(series.by_status)) {
      const total = values.reduce((a, b) => a + b, 0);
      chips.append(el("span", { class: "chip " + (Number(status) >= 500 ? "bad" : Number(status) >= 400 ? "warn" : "ok"), "data-status": status },
        el("b", { text: status }), " " + num(total)));
    }
  }

  function hourLabel(ts) {
    return hhmm(ts) + "–" + hhmm(ts + 3600);
  }


  function renderCache(c) {
    const box = $("cache");
    box.replaceChildren(
      fact("state", !c.enabled ? "off" : c.store === "redis" ? "on, shared in Redis" : "on"),
      fact("hit rate", pct(c.hit_rate)),
      fact("hits / misses", `${num(c.hits)} / ${num(c.misses)}`),
      fact("joined in flight", num(c.shared)),
      fact("entries", `${num(c.entries)} (${bytes(c.bytes)})`),
      fact("saved requests", num(c.saved_requests), "saved-requests"),
      fact("saved at API prices", usd(c.saved_api_cost_usd) + (c.saved_unpriced_requests ? ` (+${c.saved_unpriced_requests} unpriced)` : "")));
  }

  function renderFallbacks(events) {
    const box = $("fallbacks");
    box.replaceChildren();
    if (!events.length) return box.append(el("p", { class: "muted", text: "No fallback since start." }));
    for (const { event: e, count, oldest } of groupEvents(events).slice(0, 20)) {
      const item = el("div", { class: "event" });
      const result = e.served_by ? `→ served by ${e.served_by}` : `→ failed (${e.status})`;
      const when = count > 1 ? `${clock(oldest)} – ${clock(e.time)}` : clock(e.time);
      item.append(el("div", { class: "event-head" },
        el("strong", { text: e.chain }), el("span", { class: e.served_by ? "ok-text" : "bad-text", text: " " + result }),
        count > 1 ? el("span", { class: "chip warn", text: "×" + count }) : null,
        el("span", { class: "muted time", text: when })));
      const hops = el("ol", { class: "hops" });
      for (const h of e.hops) {
        hops.append(el("li", {}, el("span", { class: "hop-name", text: `hop ${h.hop}: ${h.provider}/${h.model}` }),
          el("code", { text: h.code }), el("span", { class: "muted", text: ` ${h.trigger} · ${h.message || ""}` })));
      }
      item.append(hops);
      box.append(item);
    }
  }

  function renderSpend(spend) {
    const rows = ui.spendBy === "key" ? spend.by_key : spend.by_provider;
    const metric = ui.spendMetric;
    const name = (r) => (ui.spendBy === "key" ? r.key_name || r.key : providerName(r.provider));
    const colors = colorMap(rows.map(name));
    const labels = spend.days.map((_, i) => spend.start + i * 86400);
    const format = metric === "requests" ? num : usd;
    stackedBars($("spend-chart"), labels, rows.map((r) => ({ name: name(r), values: r[metric], color: colors.get(name(r)) })),
      { format, label: (t) => new Date(t * 1000).toISOString().slice(5, 10), unit: "day",
        empty: metric === "requests" ? "no requests yet" : "no cost recorded" });
    const totals = new Map(rows.map((r) => [name(r), metric === "requests" ? num(r.total_requests) : usd(r["total_" + metric])]));
    legend($("spend-legend"), rows.map(name), colors, totals);
  }

  function renderKeys(keys) {
    const body = $("keys").tBodies[0];
    body.replaceChildren();
    for (const k of keys) {
      const tr = el("tr", { "data-key-id": k.id });
      const cell = el("td", {}, el("strong", { text: k.name }), el("span", { class: "muted tier", text: " " + k.tier }));
      if (k.expires_at !== null) {
        const expired = k.expires_at * 1000 <= Date.now();
        cell.append(el("span", { class: "muted expires", text: (expired ? " · expired " : " · expires ")
          + new Date(k.expires_at * 1000).toISOString().slice(0, 16).replace("T", " ") + " UTC" }));
      }
      for (const share of k.shares) {
        cell.append(el("div", { class: "share muted" + (share.spent ? " spent" : ""), text: share.text }));
      }
      tr.append(cell);
      for (const [limit, format] of [["rpm", num], ["rpd", num], ["rp7d", num], ["rp30d", num], ["tpd", num], ["usd_month", usd], ["concurrent", num]]) {
        tr.append(limitCell(limit, k.usage[limit], k.limits[limit], k.utilisation[limit], format));
      }
      tr.append(el("td", { class: "muted", text: ago(k.last_used) }));
      body.append(tr);
    }
  }

  function limitCell(name, used, limit, share, format) {
    const td = el("td", { class: "limit " + name, "data-used": String(used) });
    td.append(el("span", { class: "used", text: format(used) }),
      el("span", { class: "muted", text: limit === null ? " · no limit" : " / " + format(limit) }));
    if (share !== null) {
      const track = el("div", { class: "bar thin" });
      const fill = el("div", { class: "fill" + (share >= 0.9 ? " hot" : share >= 0.7 ? " warm" : "") });
      fill.style.width = Math.min(100, share * 100).toFixed(1) + "%";
      track.append(fill);
      td.append(track);
    }
    return td;
  }

  function renderErrors(errors) {
    $("errors-count").textContent = errors.length ? `(${errors.length})` : "";
    const body = $("errors").tBodies[0];
    body.replaceChildren();
    if (!errors.length) {
      body.append(el("tr", {}, el("td", { colspan: "6", class: "muted", text: "No errors since start." })));
      return;
    }
    for (const e of errors) {
      body.append(el("tr", { "data-request-id": e.request_id },
        el("td", { class: "nowrap", text: clock(e.time) }),
        el("td", {}, el("span", { class: "chip " + (e.status >= 500 ? "bad" : "warn"), text: String(e.status) })),
        el("td", {}, el("code", { text: e.code || "" })),
        el("td", { text: e.provider || "–" }),
        el("td", { text: e.model || "" }),
        el("td", { class: "message", text: e.message || "" })));
    }
  }

  // -- live countdowns ------------------------------------------------------------------

  function tick() {
    for (const node of document.querySelectorAll(".countdown[data-until]")) {
      const left = Number(node.dataset.until) - serverNow();
      node.textContent = left > 0 ? duration(left) : "ending…";
    }
  }

  // -- wiring ---------------------------------------------------------------------------

  function toggle(attr, key) {
    for (const b of document.querySelectorAll(`[${attr}]`)) {
      b.addEventListener("click", () => {
        ui[key] = b.getAttribute(attr);
        for (const other of document.querySelectorAll(`[${attr}]`)) other.classList.toggle("on", other === b);
        if (ui.data) render(ui.data);
      });
    }
  }

  function start() {
    toggle("data-traffic", "trafficRange");
    toggle("data-spend-by", "spendBy");
    toggle("data-spend-metric", "spendMetric");
    $("refresh").addEventListener("click", () => poll());
    $("sign-out").addEventListener("click", () => { forgetKey(); showLogin(); });
    $("login-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const key = $("key-input").value.trim();
      if (!key) return;
      sessionStorage.setItem(STORE_KEY, key);
      if ($("remember").checked) localStorage.setItem(STORE_KEY, key);
      $("key-input").value = "";
      ui.key = key;
      banner("");
      poll();
    });
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "hidden") stopPolling();
      else if (ui.key) poll();
    });
    setInterval(tick, 1000);
    let resizing = null;
    window.addEventListener("resize", () => {
      clearTimeout(resizing);
      resizing = setTimeout(() => ui.data && render(ui.data), 150);
    });
    ui.key = loadKey();
    if (ui.key) poll();
    else showLogin();
  }

  start();
})();
