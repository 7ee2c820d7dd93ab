"""The browser side of the LLM tab: the self-contained ``/llm`` page and the small script that
embeds it under the tab's table in Locust's UI.

Both are static text (inline CSS, inline JS, inline SVG charts; no CDN, no network beyond the
page's own ``llm/stats``). The page polls ``llm/stats`` every 2 s and draws: the endpoint table,
the run line (state, users, stage, workers), the GPU/server panel and four charts (TTFT and TPOT
percentiles, tokens/s, GPU utilization / bandwidth / KV-cache usage). ``?embed=1`` drops the
table and header, for use inside the tab, where Locust's own table already shows it.
"""

from __future__ import annotations

#: Served at ``/llm/tab.js`` and loaded by Locust's index page (see :mod:`locust_llm.webtab`).
#: While the URL says ``tab=llm`` it appends, inside the table container of the tab (so React
#: removes it together with the table), a link to ``/llm`` and an iframe of ``/llm?embed=1``.
TAB_JS = r"""
(function () {
  var MARK = "TTFT p50 (ms)";
  function onLlmTab() {
    return new URLSearchParams(window.location.search).get("tab") === "llm";
  }
  function attach() {
    if (!onLlmTab() || document.getElementById("llm-embed")) return;
    var heads = document.querySelectorAll("th");
    var th = null;
    for (var i = 0; i < heads.length; i++) {
      if (heads[i].textContent.trim() === MARK) { th = heads[i]; break; }
    }
    if (!th) return;
    var table = th.closest("table");
    var box = th.closest(".MuiTableContainer-root") || (table && table.parentElement);
    if (!box) return;
    var div = document.createElement("div");
    div.id = "llm-embed";
    div.style.padding = "8px 0";
    var link = document.createElement("a");
    link.href = "./llm";
    link.target = "_blank";
    link.textContent = "Open the LLM charts in their own page";
    link.style.cssText = "display:inline-block;margin:4px 16px;color:inherit";
    var frame = document.createElement("iframe");
    frame.src = "./llm?embed=1";
    frame.title = "LLM charts";
    frame.id = "llm-frame";
    frame.style.cssText = "width:100%;height:760px;border:0;display:block";
    div.appendChild(link);
    div.appendChild(frame);
    box.appendChild(div);
  }
  function fit() {  // the iframe as tall as its page (same origin), so nothing is cut off
    var frame = document.getElementById("llm-frame");
    var doc = frame && frame.contentDocument;
    if (doc && doc.documentElement && doc.body && doc.body.getAttribute("data-updated")) {
      var h = doc.documentElement.scrollHeight + 4;
      if (Math.abs(frame.offsetHeight - h) > 4) frame.style.height = h + "px";
    }
  }
  window.setInterval(function () { attach(); fit(); }, 500);
})();
"""

PAGE_HTML = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>LLM live stats - locust-llm</title>
<style>
:root { --fg: #1d2430; --muted: #6b7280; --bg: #ffffff; --card: #f4f6f8; --grid: #d9dee4;
        --c1: #2563eb; --c2: #16a34a; --c3: #dc2626; --c4: #9333ea; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e5e7eb; --muted: #9ca3af; --bg: #16191d; --card: #22262b; --grid: #3a4048; }
}
body { font: 14px/1.4 system-ui, sans-serif; color: var(--fg); background: var(--bg);
       margin: 12px 16px; }
h1 { font-size: 18px; margin: 0 0 8px; }
.run { color: var(--muted); margin-bottom: 10px; }
.run b { color: var(--fg); }
table { border-collapse: collapse; margin-bottom: 14px; }
th, td { padding: 4px 10px; text-align: right; border-bottom: 1px solid var(--grid); }
th:first-child, td:first-child { text-align: left; }
.panel { display: flex; flex-wrap: wrap; gap: 10px; margin-bottom: 14px; }
.card { background: var(--card); border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.card .v { font-size: 20px; font-weight: 600; }
.card .k { color: var(--muted); font-size: 12px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(440px, 1fr));
          gap: 14px; }
.chart { background: var(--card); border-radius: 6px; padding: 8px; }
.chart h2 { font-size: 13px; margin: 0 0 4px; }
.legend span { margin-right: 12px; font-size: 12px; }
svg text { fill: var(--muted); font-size: 10px; }
.embed .full { display: none; }
a { color: var(--c1); }
</style>
</head>
<body>
<h1 class="full">LLM live stats</h1>
<div class="run" id="run">waiting for data...</div>
<table class="full" id="endpoints"><thead><tr>
<th>Name</th><th>Requests</th><th>Failures</th><th>Cancelled</th><th>TTFT p50 (ms)</th>
<th>TTFT p90 (ms)</th>
<th>TTFT p99 (ms)</th><th>TPOT p50 (ms)</th><th>TPOT p99 (ms)</th><th>ITL p99 (ms)</th>
<th>E2E p50 (ms)</th><th>E2E p99 (ms)</th><th>Output tokens/s</th><th>Input tokens/s</th>
</tr></thead><tbody></tbody></table>
<div class="panel" id="gpu"></div>
<div class="charts">
  <div class="chart"><h2>TTFT (ms)</h2><div class="legend" id="l-ttft"></div>
    <svg id="c-ttft" viewBox="0 0 440 180" width="100%"></svg></div>
  <div class="chart"><h2>TPOT (ms)</h2><div class="legend" id="l-tpot"></div>
    <svg id="c-tpot" viewBox="0 0 440 180" width="100%"></svg></div>
  <div class="chart"><h2>Tokens/s</h2><div class="legend" id="l-tps"></div>
    <svg id="c-tps" viewBox="0 0 440 180" width="100%"></svg></div>
  <div class="chart"><h2>GPU / KV cache (%)</h2><div class="legend" id="l-gpu"></div>
    <svg id="c-gpu" viewBox="0 0 440 180" width="100%"></svg></div>
</div>
<script>
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
  function chart(id, times, series) {
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
    var top = niceMax(max), t0 = times[0], span = Math.max(times[times.length - 1] - t0, 1);
    function x(t) { return L + (t - t0) / span * (W - L - R); }
    function y(v) { return T + (1 - v / top) * (H - T - B); }
    for (var g = 0; g <= 5; g++) {
      var gv = top * g / 5;
      el("line", {x1: L, x2: W - R, y1: y(gv), y2: y(gv), stroke: "var(--grid)"}, svg);
      el("text", {x: L - 4, y: y(gv) + 3, "text-anchor": "end"}, svg).textContent =
        String(Number(gv.toPrecision(3)));
    }
    [0, 0.5, 1].forEach(function (f) {
      var s = Math.round(span * f);
      el("text", {x: L + f * (W - L - R), y: H - 6, "text-anchor": f === 0 ? "start" :
        f === 1 ? "end" : "middle"}, svg).textContent =
        Math.floor(s / 60) + ":" + ("0" + (s % 60)).slice(-2);
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
    var s = d.signals;
    document.getElementById("gpu").innerHTML = !d.telemetry && s.time_s === null ?
      card("GPU / server telemetry", "no data") :
      card("GPU utilization %", num(s.gpu_util, 100, 0)) +
      card("GPU memory GiB", gib(s.mem_used_bytes) + " / " + gib(s.mem_total_bytes)) +
      card("DRAM bandwidth %", num(s.dram_bw_util, 100, 0)) +
      card("KV cache %", num(s.kv_cache_usage, 100, 0)) +
      card("running", num(s.running, 1, 0)) + card("waiting", num(s.waiting, 1, 0));
    var h = d.history;
    chart("ttft", h.time_s, [
      {label: "p50", color: "var(--c1)", values: scaled(h.ttft_p50_s, 1e3)},
      {label: "p90", color: "var(--c2)", values: scaled(h.ttft_p90_s, 1e3)},
      {label: "p99", color: "var(--c3)", values: scaled(h.ttft_p99_s, 1e3)}]);
    chart("tpot", h.time_s, [
      {label: "p50", color: "var(--c1)", values: scaled(h.tpot_p50_s, 1e3)},
      {label: "p99", color: "var(--c3)", values: scaled(h.tpot_p99_s, 1e3)}]);
    chart("tps", h.time_s, [
      {label: "output", color: "var(--c1)", values: h.output_tokens_per_s},
      {label: "input", color: "var(--c4)", values: h.input_tokens_per_s}]);
    var g = d.signal_history;
    chart("gpu", g.time_s, [
      {label: "GPU util", color: "var(--c1)", values: scaled(g.gpu_util, 100)},
      {label: "DRAM bw", color: "var(--c2)", values: scaled(g.dram_bw_util, 100)},
      {label: "KV cache", color: "var(--c3)", values: scaled(g.kv_cache_usage, 100)}]);
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
</script>
</body>
</html>
"""
