#include "server/dashboard.h"

namespace infercept::server {

namespace {
const char* const kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>infercept dashboard</title>
<style>
body{font:14px system-ui,sans-serif;margin:16px;background:#fafafa;color:#222}
h1{font-size:18px;margin:0 0 8px} h2{font-size:14px;margin:0 0 6px;color:#555}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:12px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px}
.big{font-size:22px;font-weight:600} .row{display:flex;gap:16px;flex-wrap:wrap}
.stat{min-width:80px} .lbl{color:#777;font-size:12px}
.bar{height:14px;background:#eee;border-radius:3px;overflow:hidden} .bar>div{height:100%;background:#4a7}
table{border-collapse:collapse;width:100%;font-size:12px} td,th{border-bottom:1px solid #eee;padding:2px 4px;text-align:left}
svg{width:100%;height:120px;background:#fcfcfc} #err{color:#b00}
</style></head><body>
<h1>infercept <span id="model"></span> <span class="lbl" id="policy"></span></h1>
<div id="err"></div>
<div class="grid">
 <div class="card"><h2>Requests</h2><div class="row">
  <div class="stat"><div class="big" id="running">-</div><div class="lbl">running</div></div>
  <div class="stat"><div class="big" id="waiting">-</div><div class="lbl">waiting</div></div>
  <div class="stat"><div class="big" id="int_device">-</div><div class="lbl">intercepted (device)</div></div>
  <div class="stat"><div class="big" id="int_host">-</div><div class="lbl">intercepted (host)</div></div>
  <div class="stat"><div class="big" id="int_released">-</div><div class="lbl">intercepted (released)</div></div>
  <div class="stat"><div class="big" id="finished">-</div><div class="lbl">finished</div></div>
 </div></div>
 <div class="card"><h2>KV cache</h2>
  <div class="lbl">device <span id="kv_dev_txt"></span></div><div class="bar"><div id="kv_dev" style="width:0"></div></div>
  <div class="lbl" style="margin-top:6px">host <span id="kv_host_txt"></span></div><div class="bar"><div id="kv_host" style="width:0"></div></div>
  <svg id="kv_chart" viewBox="0 0 300 100" preserveAspectRatio="none"></svg>
 </div>
 <div class="card"><h2>Decisions per second (preserve / swap / discard)</h2><svg id="dec_chart" viewBox="0 0 300 100" preserveAspectRatio="none"></svg><div class="lbl" id="dec_txt"></div></div>
 <div class="card"><h2>Waste per second, MB&middot;s/s (recompute / preserve / swap stall)</h2><svg id="waste_chart" viewBox="0 0 300 100" preserveAspectRatio="none"></svg><div class="lbl" id="waste_txt"></div></div>
 <div class="card"><h2>Tool waits</h2><table id="tools"><tr><th>tool</th><th>n</th><th>p50 s</th><th>p95 s</th><th>distribution</th></tr></table></div>
 <div class="card"><h2>Paused now</h2><table id="paused"><tr><th>tool</th><th>tier</th><th>device</th><th>host</th><th>waited s</th></tr></table></div>
 <div class="card"><h2>Latency</h2><div class="row">
  <div class="stat"><div class="big" id="ttft">-</div><div class="lbl">TTFT p50 s</div></div>
  <div class="stat"><div class="big" id="itl">-</div><div class="lbl">inter-token p50 s</div></div>
  <div class="stat"><div class="big" id="tok">-</div><div class="lbl">tokens generated</div></div>
  <div class="stat"><div class="big" id="cached">-</div><div class="lbl">prompt tokens reused</div></div>
  <div class="stat"><div class="big" id="recomp">-</div><div class="lbl">tokens recomputed</div></div>
 </div></div>
</div>
<script>
const key = new URLSearchParams(location.search).get('api_key');
const hist = [];  // {t, dev, host, dec:[p,s,d], waste:[r,p,s]}
const colors = ['#4a7', '#47c', '#c54'];
function $(id){ return document.getElementById(id); }
function line(svg, series, maxv){
  const n = series[0].length; if (n < 2) { svg.innerHTML=''; return; }
  let m = maxv || 0; if (!maxv) for (const s of series) for (const v of s) m = Math.max(m, v);
  if (m <= 0) m = 1;
  svg.innerHTML = series.map((s, k) => '<polyline fill="none" stroke-width="1.5" stroke="' + colors[k] + '" points="' +
    s.map((v, i) => (i * 300 / (n - 1)).toFixed(1) + ',' + (100 - v / m * 95).toFixed(1)).join(' ') + '"/>').join('');
}
function esc(s){ return String(s).replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c])); }
async function tick(){
  try {
    const r = await fetch('/dashboard/data' + (key ? '?api_key=' + encodeURIComponent(key) : ''),
                          {headers: key ? {'Authorization': 'Bearer ' + key} : {}});
    if (!r.ok) throw new Error('HTTP ' + r.status);
    const d = await r.json();
    $('err').textContent = '';
    $('model').textContent = d.model; $('policy').textContent = 'policy ' + d.policy + ', estimator ' + d.estimator;
    $('running').textContent = d.requests.running; $('waiting').textContent = d.requests.waiting;
    $('int_device').textContent = d.requests.intercepted.device; $('int_host').textContent = d.requests.intercepted.host;
    $('int_released').textContent = d.requests.intercepted.released; $('finished').textContent = d.requests.finished;
    const dev = d.kv.device.total ? d.kv.device.used / d.kv.device.total : 0;
    const host = d.kv.host.total ? d.kv.host.used / d.kv.host.total : 0;
    $('kv_dev').style.width = (dev * 100).toFixed(1) + '%'; $('kv_host').style.width = (host * 100).toFixed(1) + '%';
    $('kv_dev_txt').textContent = d.kv.device.used + ' / ' + d.kv.device.total + ' blocks';
    $('kv_host_txt').textContent = d.kv.host.used + ' / ' + d.kv.host.total + ' blocks';
    const now = Date.now() / 1000;
    const cur = {t: now, dev, host, dec: [d.decisions.preserve, d.decisions.swap, d.decisions.discard],
                 waste: [d.waste.recompute, d.waste.preserve, d.waste.swap_stall]};
    const prev = hist.length ? hist[hist.length - 1] : null;
    cur.decRate = prev ? cur.dec.map((v, i) => (v - prev.dec[i]) / Math.max(1e-3, now - prev.t)) : [0, 0, 0];
    cur.wasteRate = prev ? cur.waste.map((v, i) => (v - prev.waste[i]) / 1e6 / Math.max(1e-3, now - prev.t)) : [0, 0, 0];
    hist.push(cur); if (hist.length > 120) hist.shift();
    line($('kv_chart'), [hist.map(h => h.dev), hist.map(h => h.host)], 1);
    line($('dec_chart'), [0, 1, 2].map(i => hist.map(h => h.decRate[i])));
    line($('waste_chart'), [0, 1, 2].map(i => hist.map(h => h.wasteRate[i])));
    $('dec_txt').textContent = 'total: preserve ' + cur.dec[0] + ', swap ' + cur.dec[1] + ', discard ' + cur.dec[2];
    $('waste_txt').textContent = 'total MB·s: recompute ' + (cur.waste[0] / 1e6).toFixed(2) + ', preserve ' +
      (cur.waste[1] / 1e6).toFixed(2) + ', swap stall ' + (cur.waste[2] / 1e6).toFixed(2);
    let rows = '<tr><th>tool</th><th>n</th><th>p50 s</th><th>p95 s</th><th>distribution</th></tr>';
    for (const [name, h] of Object.entries(d.tools)) {
      const m = Math.max(1, ...h.buckets.map(b => b.count));
      const bars = h.buckets.map(b => '<span title="le ' + b.le + ': ' + b.count + '" style="display:inline-block;width:6px;background:#47c;height:' +
        Math.round(2 + 14 * b.count / m) + 'px;margin-right:1px;vertical-align:bottom"></span>').join('');
      rows += '<tr><td>' + esc(name) + '</td><td>' + h.count + '</td><td>' + h.p50 + '</td><td>' + h.p95 + '</td><td>' + bars + '</td></tr>';
    }
    $('tools').innerHTML = rows;
    rows = '<tr><th>tool</th><th>tier</th><th>device</th><th>host</th><th>waited s</th></tr>';
    for (const p of d.paused)
      rows += '<tr class="paused-row"><td>' + esc(p.tool) + '</td><td>' + p.tier + '</td><td>' + p.device_tokens + '</td><td>' +
        p.host_tokens + '</td><td>' + p.waited_s.toFixed(1) + '</td></tr>';
    $('paused').innerHTML = rows;
    $('ttft').textContent = d.latency.ttft.p50; $('itl').textContent = d.latency.itl.p50;
    $('tok').textContent = d.tokens.generation; $('cached').textContent = d.tokens.cached; $('recomp').textContent = d.tokens.recomputed;
  } catch (e) { $('err').textContent = 'cannot reach the server: ' + e.message; }
}
tick(); setInterval(tick, 1000);
</script></body></html>
)HTML";
}  // namespace

const std::string& dashboard_html() {
  static const std::string page(kPage);
  return page;
}

}  // namespace infercept::server
