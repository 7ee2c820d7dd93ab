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
