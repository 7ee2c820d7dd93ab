(function () {
  "use strict";
  var EMBED = new URLSearchParams(location.search).get("embed") === "1";
  if (EMBED) document.body.classList.add("embed");
  var NS = "http://www.w3.org/2000/svg";
  var W = 440, H = 180, L = 44, R = 8, T = 8, B = 22;

  function num(v, scale, dec) {
    return (v === null || v === undefined) ? "-" : (v * scale).toFixed(dec);
  }
  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function niceMax(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v))), m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function clock(t) {
    var d = new Date(t * 1000);
    return ("0" + d.getHours()).slice(-2) + ":" + ("0" + d.getMinutes()).slice(-2) + ":" +
      ("0" + d.getSeconds()).slice(-2);
  }
  // one time axis for every chart: from the earliest to the latest sample of any of them
  function axisOf(lists) {
    var t0 = null, t1 = null;
    lists.forEach(function (t) {
      if (!t.length) return;
      if (t0 === null || t[0] < t0) t0 = t[0];
      if (t1 === null || t[t.length - 1] > t1) t1 = t[t.length - 1];
    });
    return {t0: t0, t1: t1};
  }
  function chart(id, times, series, axis) {
    var svg = document.getElementById("c-" + id), legend = document.getElementById("l-" + id);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    legend.innerHTML = "";
    var max = 0;
    series.forEach(function (s) {
      s.values.forEach(function (v) { if (v !== null && v > max) max = v; });
      var span = document.createElement("span");
      span.style.color = s.color;
      span.textContent = "\u25A0 " + s.label;
      legend.appendChild(span);
    });
    if (times.length < 2) {
      el("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, svg).textContent = "no data yet";
      return;
    }
    var top = niceMax(max), t0 = axis.t0, span = Math.max(axis.t1 - t0, 1);
    function x(t) { return L + (t - t0) / span * (W - L - R); }
    function y(v) { return T + (1 - v / top) * (H - T - B); }
    for (var g = 0; g <= 5; g++) {
      var gv = top * g / 5;
      el("line", {x1: L, x2: W - R, y1: y(gv), y2: y(gv), stroke: "var(--grid)"}, svg);
      el("text", {x: L - 4, y: y(gv) + 3, "text-anchor": "end"}, svg).textContent =
        String(Number(gv.toPrecision(3)));
    }
    [0, 0.5, 1].forEach(function (f) {
      el("text", {x: L + f * (W - L - R), y: H - 6, "class": "tick", "text-anchor": f === 0 ?
        "start" : f === 1 ? "end" : "middle"}, svg).textContent = clock(t0 + span * f);
    });
    series.forEach(function (s) {
      var d = "", pen = false;
      for (var i = 0; i < times.length; i++) {
        var v = s.values[i];
        if (v === null || v === undefined) { pen = false; continue; }
        d += (pen ? "L" : "M") + x(times[i]).toFixed(1) + " " + y(v).toFixed(1) + " ";
        pen = true;
      }
      if (d) el("path", {d: d, fill: "none", stroke: s.color, "stroke-width": 1.6}, svg);
    });
  }
  function scaled(values, k) {
    return values.map(function (v) { return v === null ? null : v * k; });
  }
  function card(label, value) {
    return '<div class="card"><div class="v">' + value + '</div><div class="k">' + label +
      "</div></div>";
  }
  function gib(v) { return v === null ? "-" : (v / 1073741824).toFixed(1); }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c];
    });
  }
  function render(d) {
    var st = d.stage, parts = ["state <b>" + esc(d.state) + "</b>",
      "users <b>" + (d.user_count === null ? "-" : d.user_count) + "</b>"];
    if (d.worker_count !== null) parts.push("workers <b>" + d.worker_count + "</b>");
    if (st) parts.push("stage <b>" + (st.index + 1) + "/" + st.count + " " + esc(st.name) +
      "</b>" + (st.concurrency !== null ? " (concurrency " + st.concurrency + ")" : "") +
      (st.rate !== null ? " (rate " + st.rate + " req/s)" : ""));
    var bo = d.backoff;
    if (bo && bo.users_waiting > 0) parts.push('<span id="backoff" class="warn">backing off <b>' +
      bo.users_waiting + "</b> users (server unreachable; " + bo.waits + " waits)</span>");
    else if (bo && bo.waits > 0) parts.push('<span id="backoff">back-off waits <b>' + bo.waits +
      "</b></span>");
    if (d.capacity) parts.push('<span id="capacity">' + esc(d.capacity.text) + "</span>");
    var rep = d.report;
    if (rep.ready) parts.push('<a id="report-link" href="llm/report">download report</a>');
    else if (rep.run_ended && rep.command) parts.push("report: run <code>" +
      esc(rep.command) + "</code>");
    document.getElementById("run").innerHTML = parts.join(" &middot; ");
    var body = document.querySelector("#endpoints tbody"), html = "";
    d.endpoints.forEach(function (r) {
      html += "<tr><td>" + esc(r.name) + "</td><td>" + (r.requests - r.cancelled) + "</td><td>" +
        (r.failures - r.cancelled) + "</td><td>" + r.cancelled + "</td><td>" +
        num(r.ttft_p50_s, 1e3, 1) + "</td><td>" + num(r.ttft_p90_s, 1e3, 1) +
        "</td><td>" + num(r.ttft_p99_s, 1e3, 1) + "</td><td>" + num(r.tpot_p50_s, 1e3, 2) +
        "</td><td>" + num(r.tpot_p99_s, 1e3, 2) + "</td><td>" + num(r.itl_p99_s, 1e3, 2) +
        "</td><td>" + num(r.e2e_p50_s, 1e3, 1) + "</td><td>" + num(r.e2e_p99_s, 1e3, 1) +
        "</td><td>" + num(r.output_tokens_per_s, 1, 1) + "</td><td>" +
        num(r.input_tokens_per_s, 1, 1) + "</td></tr>";
    });
    body.innerHTML = html;
    // each error kind with the message most of its failures carried (numbers and ids folded)
    var errors = d.errors || [], eh = "";
    if (errors.length) {
      eh = "<h2>Errors: each kind's most frequent message</h2><table id=\"errors-table\">" +
        "<thead><tr><th>Kind</th><th>Failed</th><th>Share %</th><th>With this message</th>" +
        "<th>Most frequent message</th></tr></thead><tbody>";
      errors.forEach(function (e) {
        eh += "<tr><td>" + esc(e.kind) + "</td><td>" + e.count + "</td><td>" +
          num(e.share, 100, 1) + "</td><td>" + (e.message ? e.message_count : "-") +
          '</td><td class="msg">' + esc(e.message || "(no message)") + "</td></tr>";
      });
      eh += "</tbody></table>";
    }
    var box = document.getElementById("errors");
    box.innerHTML = eh;
    var s = d.signals, panel = document.getElementById("gpu");
    // values older than a few scrapes, or kept after the test stopped, are marked as such
    var age = s.time_s === null ? null : Math.max(0, d.time_s - s.time_s);
    var running = d.state === "running" || d.state === "spawning";
    var stale = age !== null && (!running || age > Math.max(3 * (d.scrape_interval_s || 1), 5));
    panel.classList.toggle("stale", stale);
    panel.innerHTML = !d.telemetry && s.time_s === null ?
      card("GPU / server telemetry", "no data") :
      card("GPU utilization %", num(s.gpu_util, 100, 0)) +
      card("GPU memory GiB", gib(s.mem_used_bytes) + " / " + gib(s.mem_total_bytes)) +
      card("DRAM bandwidth %", num(s.dram_bw_util, 100, 0)) +
      card("KV cache %", num(s.kv_cache_usage, 100, 0)) +
      card("prefix cache hit % (30 s)", num(s.prefix_cache_hit_rate, 100, 0)) +
      card("running", num(s.running, 1, 0)) + card("waiting", num(s.waiting, 1, 0)) +
      (age === null ? "" : '<div class="asof" id="gpu-asof">' + (stale ? "last values, " : "") +
        "as of " + clock(s.time_s) + " (" + Math.round(age) + " s ago" +
        (running ? "" : "; the test is " + esc(d.state)) + ")</div>");
    var h = d.history, g = d.signal_history, axis = axisOf([h.time_s, g.time_s]);
    var win = "last " + d.recent_window_s + " s";
    chart("ttft", h.time_s, [
      {label: "p50 " + win, color: "var(--c1)", values: scaled(h.ttft_recent_p50_s, 1e3)},
      {label: "p90", color: "var(--c2)", values: scaled(h.ttft_recent_p90_s, 1e3)},
      {label: "p99", color: "var(--c3)", values: scaled(h.ttft_recent_p99_s, 1e3)}], axis);
    chart("tpot", h.time_s, [
      {label: "p50 " + win, color: "var(--c1)", values: scaled(h.tpot_recent_p50_s, 1e3)},
      {label: "p99", color: "var(--c3)", values: scaled(h.tpot_recent_p99_s, 1e3)}], axis);
    chart("tps", h.time_s, [
      {label: "output", color: "var(--c1)", values: h.output_tokens_per_s},
      {label: "input", color: "var(--c4)", values: h.input_tokens_per_s}], axis);
    chart("gpu", g.time_s, [
      {label: "GPU util", color: "var(--c1)", values: scaled(g.gpu_util, 100)},
      {label: "DRAM bw", color: "var(--c2)", values: scaled(g.dram_bw_util, 100)},
      {label: "KV cache", color: "var(--c3)", values: scaled(g.kv_cache_usage, 100)}], axis);
    document.body.setAttribute("data-updated", String(d.time_s));
  }
  function poll() {
    fetch("llm/stats", {cache: "no-store"}).then(function (r) { return r.json(); })
      .then(render).catch(function (e) {
        document.getElementById("run").textContent = "cannot read llm/stats: " + e;
      });
  }
  poll();
  setInterval(poll, 2000);
})();
