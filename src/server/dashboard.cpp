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
svg{width:100%;height:auto;background:#fcfcfc;font:10px system-ui,sans-serif}
svg .tick{fill:#777} svg .unit{fill:#555} svg .legend{fill:#333} #err{color:#b00}
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
  <svg id="kv_chart" viewBox="0 0 360 130"></svg>
 </div>
 <div class="card"><h2>Prefix cache</h2><div class="row">
  <div class="stat"><div class="big" id="pc_rate">-</div><div class="lbl">hit rate (hits / queries, all time)</div></div>
  <div class="stat"><div class="big" id="pc_hits">-</div><div class="lbl">prompt tokens hit / looked up</div></div>
  <div class="stat"><div class="big" id="pc_blocks">-</div><div class="lbl">cached blocks (device / host)</div></div>
 </div>
  <svg id="pc_chart" viewBox="0 0 360 130"></svg><div class="lbl" id="pc_txt"></div>
 </div>
 <div class="card"><h2>Policy decisions per second</h2><svg id="dec_chart" viewBox="0 0 360 130"></svg><div class="lbl" id="dec_txt"></div></div>
 <div class="card"><h2>KV memory waste per second, by cause</h2><svg id="waste_chart" viewBox="0 0 360 130"></svg><div class="lbl" id="waste_txt"></div></div>
 <div class="card"><h2>Tool waits</h2><table id="tools"><tr><th>tool</th><th>n</th><th>p50</th><th>p95</th><th>distribution (<span id="tool_edges"></span>)</th></tr></table></div>
 <div class="card"><h2>Paused now</h2><table id="paused"><tr><th>tool</th><th>tier</th><th>device tokens</th><th>host tokens</th><th>waited</th></tr></table></div>
 <div class="card"><h2>Latency</h2><div class="row">
  <div class="stat"><div class="big" id="ttft">-</div><div class="lbl">time to first token, p50</div></div>
  <div class="stat"><div class="big" id="itl">-</div><div class="lbl">inter-token latency, p50</div></div>
  <div class="stat"><div class="big" id="tok">-</div><div class="lbl">tokens generated</div></div>
  <div class="stat"><div class="big" id="cached">-</div><div class="lbl">prompt tokens reused</div></div>
  <div class="stat"><div class="big" id="recomp">-</div><div class="lbl">tokens recomputed</div></div>
 </div></div>
</div>
<script>
const key = new URLSearchParams(location.search).get('api_key');
const hist = [];  // {t, dev, host, dec:[p,s,d], waste:[r,p,s], pc:[hits,queries], pcRate}
const colors = ['#4a7', '#47c', '#c54'];
function $(id){ return document.getElementById(id); }
// A number for people: 3 significant digits, no exponent for ordinary values.
function fmt(v){
  if (!isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a === 0) return '0';
  if (a >= 1000) return String(Math.round(v));
  return String(Number(v.toPrecision(3)));
}
// Seconds as people read them: "850 ms", "2.5 s".
function secs(v){ const a = Math.abs(v); return a > 0 && a < 1 ? fmt(v * 1000) + ' ms' : fmt(v) + ' s'; }
// A chart of the last polls: one line per series, a y axis in `unit` (0, half, top), the
// time axis in seconds before now, and a legend naming the series.
function chart(svg, series, names, unit, maxv){
  const W = 360, H = 130, L = 46, R = 8, T = 22, B = 18, pw = W - L - R, ph = H - T - B;
  const n = series[0].length;
  let m = maxv || 0; if (!maxv) for (const s of series) for (const v of s) m = Math.max(m, v);
  if (m <= 0) m = 1;
  if (!maxv) {  // the top of the axis a round number: 1, 2 or 5 times a power of ten
    const p = Math.pow(10, Math.floor(Math.log10(m)));
    m = [1, 2, 5, 10].map(f => f * p).find(t => t >= m * (1 - 1e-9));
  }
  const y = v => (T + ph - Math.min(1, v / m) * ph).toFixed(1);
  let g = '<text class="unit" x="2" y="10">' + esc(unit) + '</text>';
  for (const f of [0, 0.5, 1]) {
    const yy = (T + ph - f * ph).toFixed(1);
    g += '<line x1="' + L + '" x2="' + (L + pw) + '" y1="' + yy + '" y2="' + yy + '" stroke="#eee"/>';
    g += '<text class="tick" x="' + (L - 3) + '" y="' + (+yy + 3) + '" text-anchor="end">' + fmt(m * f) + '</text>';
  }
  g += '<line x1="' + L + '" x2="' + L + '" y1="' + T + '" y2="' + (T + ph) + '" stroke="#999"/>';
  g += '<line x1="' + L + '" x2="' + (L + pw) + '" y1="' + (T + ph) + '" y2="' + (T + ph) + '" stroke="#999"/>';
  const span = n > 1 ? hist[hist.length - 1].t - hist[hist.length - n].t : 0;
  g += '<text class="tick" x="' + L + '" y="' + (H - 4) + '">' + (n > 1 ? '-' + fmt(span) + ' s' : '') + '</text>';
  g += '<text class="tick" x="' + (L + pw) + '" y="' + (H - 4) + '" text-anchor="end">now</text>';
  let lx = W - R - names.reduce((w, name) => w + 20 + 6 * name.length, 0);  // right-aligned
  names.forEach((name, k) => {
    g += '<rect x="' + lx + '" y="6" width="10" height="3" fill="' + colors[k] + '"/>';
    g += '<text class="legend" x="' + (lx + 13) + '" y="11">' + esc(name) + '</text>';
    lx += 20 + 6 * name.length;
  });
  if (n >= 2)
    g += series.map((s, k) => '<polyline fill="none" stroke-width="1.5" stroke="' + colors[k] + '" points="' +
      s.map((v, i) => (L + i * pw / (n - 1)).toFixed(1) + ',' + y(v)).join(' ') + '"/>').join('');
  svg.innerHTML = g;
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
                 waste: [d.waste.recompute, d.waste.preserve, d.waste.swap_stall],
                 pc: [d.prefix_cache.hits, d.prefix_cache.queries]};
    const prev = hist.length ? hist[hist.length - 1] : null;
    cur.decRate = prev ? cur.dec.map((v, i) => (v - prev.dec[i]) / Math.max(1e-3, now - prev.t)) : [0, 0, 0];
    cur.wasteRate = prev ? cur.waste.map((v, i) => (v - prev.waste[i]) / 1e6 / Math.max(1e-3, now - prev.t)) : [0, 0, 0];
    // The hit rate of the prompts looked up since the last poll (the previous value while
    // none was), and of all of them.
    const dq = prev ? cur.pc[1] - prev.pc[1] : cur.pc[1];
    cur.pcRate = dq > 0 ? 100 * (cur.pc[0] - (prev ? prev.pc[0] : 0)) / dq : (prev ? prev.pcRate : 0);
    hist.push(cur); if (hist.length > 120) hist.shift();
    const pc = d.prefix_cache;
    $('pc_rate').textContent = pc.queries ? fmt(100 * pc.hit_rate) + '%' : '-';
    $('pc_hits').textContent = pc.hits + ' / ' + pc.queries;
    $('pc_blocks').textContent = pc.cached_blocks.device + ' / ' + pc.cached_blocks.host;
    chart($('pc_chart'), [hist.map(h => h.pcRate)], ['hit rate'], '% of prompt tokens looked up', 100);
    $('pc_txt').textContent = 'blocks evicted ' + pc.evicted_blocks + ', demoted to host ' + pc.demoted_blocks +
      ', promoted back ' + pc.promoted_blocks;
    chart($('kv_chart'), [hist.map(h => h.dev * 100), hist.map(h => h.host * 100)], ['device', 'host'],
          '% of blocks in use', 100);
    chart($('dec_chart'), [0, 1, 2].map(i => hist.map(h => h.decRate[i])), ['preserve', 'swap', 'discard'],
          'decisions/s');
    chart($('waste_chart'), [0, 1, 2].map(i => hist.map(h => h.wasteRate[i])), ['recompute', 'preserve', 'swap stall'],
          'MB·s of KV per s');
    $('dec_txt').textContent = 'total: preserve ' + cur.dec[0] + ', swap ' + cur.dec[1] + ', discard ' + cur.dec[2];
    $('waste_txt').textContent = 'total MB·s: recompute ' + fmt(cur.waste[0] / 1e6) + ', preserve ' +
      fmt(cur.waste[1] / 1e6) + ', swap stall ' + fmt(cur.waste[2] / 1e6);
    let rows = '<tr><th>tool</th><th>n</th><th>p50</th><th>p95</th><th>distribution (<span id="tool_edges"></span>)</th></tr>';
    let edges = '';
    for (const [name, h] of Object.entries(d.tools)) {
      const m = Math.max(1, ...h.buckets.map(b => b.count));
      const bars = h.buckets.map((b, i) => '<span title="' + (i ? 'over ' + secs(h.buckets[i - 1].le) : 'from 0') +
        (b.le === '+Inf' ? '' : ' up to ' + secs(b.le)) + ': ' + b.count + '" style="display:inline-block;width:6px;background:#47c;height:' +
        Math.round(2 + 14 * b.count / m) + 'px;margin-right:1px;vertical-align:bottom"></span>').join('');
      const fin = h.buckets.filter(b => b.le !== '+Inf');
      if (fin.length) edges = 'buckets from 0 to ' + secs(fin[0].le) + ', ..., over ' + secs(fin[fin.length - 1].le);
      rows += '<tr><td>' + esc(name) + '</td><td>' + h.count + '</td><td>' + secs(h.p50) + '</td><td>' + secs(h.p95) +
        '</td><td>' + bars + '</td></tr>';
    }
    $('tools').innerHTML = rows; $('tool_edges').textContent = edges || 'no waits yet';
    rows = '<tr><th>tool</th><th>tier</th><th>device tokens</th><th>host tokens</th><th>waited</th></tr>';
    for (const p of d.paused)
      rows += '<tr class="paused-row"><td>' + esc(p.tool) + '</td><td>' + p.tier + '</td><td>' + p.device_tokens + '</td><td>' +
        p.host_tokens + '</td><td>' + secs(p.waited_s) + '</td></tr>';
    $('paused').innerHTML = rows;
    $('ttft').textContent = d.latency.ttft.count ? secs(d.latency.ttft.p50) : '-';
    $('itl').textContent = d.latency.itl.count ? secs(d.latency.itl.p50) : '-';
    $('tok').textContent = d.tokens.generation; $('cached').textContent = d.tokens.cached; $('recomp').textContent = d.tokens.recomputed;
  } catch (e) { $('err').textContent = 'cannot reach the server: ' + e.message; }
}
tick(); setInterval(tick, 1000);
</script></body></html>
)HTML";

const char* const kKeyPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>infercept dashboard: API key needed</title>
<style>
body{font:14px system-ui,sans-serif;margin:32px auto;max-width:640px;color:#222}
code{background:#f2f2f2;padding:1px 4px;border-radius:3px} #why{color:#b00}
input{font:inherit;padding:4px;width:60%} button{font:inherit;padding:4px 10px}
</style></head><body>
<h1>infercept dashboard</h1>
<p id="why">@WHY@</p>
<p>This server has API keys. Open the dashboard with your key in the address:</p>
<p><code>/dashboard?api_key=YOUR_KEY</code></p>
<p>or send it in the header <code>Authorization: Bearer YOUR_KEY</code> (curl, a proxy or a
browser extension that sets headers). The page then shows your own paused requests and tool
waits (an admin key: everyone's).</p>
<form method="get" action="/dashboard"><input name="api_key" type="password"
 placeholder="API key" autocomplete="off"> <button type="submit">Open the dashboard</button></form>
</body></html>
)HTML";

}  // namespace

const std::string& dashboard_html() {
  static const std::string page(kPage);
  return page;
}

std::string dashboard_key_page(bool key_given) {
  std::string page(kKeyPage);
  const std::string mark = "@WHY@";
  page.replace(page.find(mark), mark.size(),
               key_given ? "The API key given was not accepted." : "No API key was given.");
  return page;
}

}  // namespace infercept::server
