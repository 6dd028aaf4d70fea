"""The live dashboard served at `/`: one self-contained HTML page (vanilla JS, canvas charts).

Nothing is fetched from outside: the page polls `/v1/status` every two seconds, keeps the
last ten minutes in the browser, and charts throughput, hit ratio and traffic by link
(rates are differences of the cumulative counters between polls), and per job how its
storage-tier rows were read (mode and look-ahead window, bytes read, window hits, queue
depth, bandwidth) and a partitioned job's network tier (rows and bytes fetched from each peer
node, and the time gathers waited for them). Its curves section charts one job's history per epoch
(training loss; training accuracy and every evaluation figure), fetched from
`/v1/jobs/{id}/history`: the newest job with one, or the job chosen in its list; the jobs table
says which jobs keep an exported model. Where NVML measures PCIe,
the host-to-device bytes it counted are drawn beside the accounted pcie bytes ("pcie
measured"), and the machine report (`graphtier doctor`) is shown below the jobs.
"""

DASHBOARD_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>graphtier</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body{font:14px system-ui,sans-serif;margin:1.2em;color:#222;background:#fafafa}
 h1{font-size:1.3em;margin:0 0 .3em} h2{font-size:1.05em;margin:1.2em 0 .4em}
 .tiles{display:flex;gap:.8em;flex-wrap:wrap} .tile{background:#fff;border:1px solid #ddd;border-radius:6px;
 padding:.5em .8em;min-width:9em} .tile b{display:block;font-size:1.3em}
 .charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(360px,1fr));gap:.8em}
 .chart{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.5em}
 canvas{width:100%;height:180px} table{border-collapse:collapse;background:#fff;width:100%}
 th,td{border:1px solid #ddd;padding:.25em .5em;text-align:right} th:first-child,td:first-child{text-align:left}
 .legend span{margin-right:1em} .muted{color:#777} #error{color:#b00}
</style></head><body>
<h1>graphtier daemon <span id="where" class="muted"></span></h1><div id="error"></div>
<div class="tiles" id="tiles"></div>
<h2>Over time</h2>
<div class="charts">
 <div class="chart"><div>Throughput (batches/s)</div><canvas id="c_tp"></canvas>
  <div class="legend" id="l_tp"></div></div>
 <div class="chart"><div>Device-tier hit ratio</div><canvas id="c_hit"></canvas>
  <div class="legend" id="l_hit"></div></div>
 <div class="chart"><div>Feature traffic by link (bytes/s)</div><canvas id="c_link"></canvas>
  <div class="legend" id="l_link"></div></div>
</div>
<h2>Curves <select id="curve_job"></select> <span id="curve_note" class="muted"></span></h2>
<div class="charts">
 <div class="chart"><div>Training loss by epoch</div><canvas id="c_loss"></canvas>
  <div class="legend" id="l_loss"></div></div>
 <div class="chart"><div>Accuracy and evaluation by epoch</div><canvas id="c_eval"></canvas>
  <div class="legend" id="l_eval"></div></div>
</div>
<h2>Datasets</h2><table id="datasets"></table>
<h2>Jobs</h2><div id="artifacts_policy" class="muted"></div><table id="jobs"></table>
<h2>PCIe and NVLink measured by NVML</h2><div id="measured_note" class="muted"></div><table id="measured"></table>
<h2>Machine</h2><div id="machine_summary"></div><table id="machine"></table>
<script>
"use strict";
const COLORS = {trained:"#1f77b4", produced:"#ff7f0e", hit:"#2ca02c", local:"#2ca02c", nvlink:"#9467bd",
                pcie:"#d62728", pcie_measured:"#ff9896", storage:"#8c564b",network:"#17becf"};
const KEEP_S = 600, history = [];
const CURVE_COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#17becf","#e377c2","#7f7f7f"];
let curveJob = null, curveChosen = false;
let previous = null;
function human(n){const u=["B","KiB","MiB","GiB","TiB"];let i=0;while(Math.abs(n)>=1024&&i<u.length-1){n/=1024;i++}
  return (i?n.toFixed(1):n.toFixed(0))+" "+u[i]}
function esc(s){return String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]))}
function pct(x){return (100*x).toFixed(1)+"%"}
function draw(id, names, fmt){
  const canvas=document.getElementById(id), ctx=canvas.getContext("2d");
  const w=canvas.width=canvas.clientWidth*devicePixelRatio, h=canvas.height=canvas.clientHeight*devicePixelRatio;
  ctx.clearRect(0,0,w,h); ctx.font=(11*devicePixelRatio)+"px sans-serif"; ctx.fillStyle="#777";
  if(history.length<2){ctx.fillText("waiting for data",10,20);return}
  const t0=history[0].t, t1=history[history.length-1].t, pad=40*devicePixelRatio;
  let ymax=0; for(const p of history) for(const n of names) ymax=Math.max(ymax,p[n]||0);
  if(ymax<=0) ymax=1;
  ctx.strokeStyle="#eee"; ctx.beginPath();
  for(let k=0;k<=4;k++){const y=h-10-(h-20)*k/4; ctx.moveTo(pad,y); ctx.lineTo(w,y); ctx.fillText(fmt(ymax*k/4),2,y)}
  ctx.stroke();
  for(const n of names){
    ctx.strokeStyle=COLORS[n]; ctx.lineWidth=2*devicePixelRatio; ctx.beginPath(); let first=true;
    for(const p of history){ if(p[n]===undefined) continue;
      const x=pad+(w-pad)*(t1>t0?(p.t-t0)/(t1-t0):1), y=h-10-(h-20)*p[n]/ymax;
      if(first){ctx.moveTo(x,y);first=false}else ctx.lineTo(x,y)}
    ctx.stroke();
  }
  if(canvas.dataset){canvas.dataset.points=String(history.length); canvas.dataset.lines=names.join(",")}  // for tests
}
function figure(e, n){return e[n]!==undefined?e[n]:e.metrics[n]}
function drawEpochs(id, epochs, names){
  const canvas=document.getElementById(id), ctx=canvas.getContext("2d");
  const w=canvas.width=canvas.clientWidth*devicePixelRatio, h=canvas.height=canvas.clientHeight*devicePixelRatio;
  ctx.clearRect(0,0,w,h); ctx.font=(11*devicePixelRatio)+"px sans-serif"; ctx.fillStyle="#777";
  canvas.dataset.points=String(epochs.length); canvas.dataset.lines=names.join(",");  // for tests
  if(!epochs.length){ctx.fillText("no epoch recorded yet",10,20);return}
  const pad=40*devicePixelRatio, e0=epochs[0].epoch, e1=epochs[epochs.length-1].epoch;
  let ymax=0;
  for(const e of epochs) for(const n of names){const v=figure(e,n); if(v!==null&&v!==undefined) ymax=Math.max(ymax,v)}
  if(ymax<=0) ymax=1;
  ctx.strokeStyle="#eee"; ctx.beginPath();
  for(let k=0;k<=4;k++){
    const y=h-10-(h-20)*k/4; ctx.moveTo(pad,y); ctx.lineTo(w,y); ctx.fillText((ymax*k/4).toFixed(3),2,y)}
  ctx.stroke();
  names.forEach((n,i)=>{
    ctx.strokeStyle=CURVE_COLORS[i%CURVE_COLORS.length]; ctx.lineWidth=2*devicePixelRatio; ctx.beginPath();
    let first=true;
    for(const e of epochs){ const v=figure(e,n); if(v===null||v===undefined) continue;
      const x=pad+(w-pad)*(e1>e0?(e.epoch-e0)/(e1-e0):1), y=h-10-(h-20)*v/ymax;
      if(first){ctx.moveTo(x,y);first=false}else ctx.lineTo(x,y)}
    ctx.stroke();
  });
}
function curveLegend(id, epochs, names){
  const last=epochs.length?epochs[epochs.length-1]:null;
  document.getElementById(id).innerHTML=names.map((n,i)=>`<span style="color:${CURVE_COLORS[i%CURVE_COLORS.length]}">`+
    `&#9632; ${esc(n)}`+(last&&figure(last,n)!==null&&figure(last,n)!==undefined?` ${figure(last,n).toFixed(4)}`:"")+
    "</span>").join("");
}
async function curves(s){
  const select=document.getElementById("curve_job"), withHistory=s.jobs.filter(j=>j.epochs_recorded>0);
  const ids=withHistory.map(j=>j.job_id);
  if(select.dataset.ids!==ids.join(",")){
    select.innerHTML=withHistory.map(j=>`<option value="${esc(j.job_id)}">job ${esc(j.job_id)} ${esc(j.name)} `+
      `(${esc(j.state)})</option>`).join("");
    select.dataset.ids=ids.join(",");
  }
  if(!curveChosen||!ids.includes(curveJob)) curveJob=ids.length?ids[0]:null;  // the newest job with a history
  let epochs=[];
  if(curveJob!==null){
    select.value=curveJob;
    const r=await fetch(`/v1/jobs/${encodeURIComponent(curveJob)}/history`,{cache:"no-store"});
    if(!r.ok) throw new Error("HTTP "+r.status+" for job "+curveJob+"'s history");
    epochs=(await r.json()).epochs;
  }
  document.getElementById("curve_note").textContent=curveJob===null?"no job has finished an epoch yet":
    `job ${curveJob}: ${epochs.length} epoch(s); tensorboard --logdir <its job directory>/tensorboard`;
  const metrics=[...new Set(epochs.flatMap(e=>Object.keys(e.metrics)))].sort();
  drawEpochs("c_loss",epochs,["train_loss"]); curveLegend("l_loss",epochs,["train_loss"]);
  drawEpochs("c_eval",epochs,["train_accuracy",...metrics]); curveLegend("l_eval",epochs,["train_accuracy",...metrics]);
}
document.getElementById("curve_job").addEventListener("change",e=>{curveJob=e.target.value; curveChosen=true});
function legend(id, names, last, fmt){
  document.getElementById(id).innerHTML=names.map(n=>`<span style="color:${COLORS[n]}">&#9632; ${n}`+
    (last&&last[n]!==undefined?` ${fmt(last[n])}`:"")+"</span>").join("");
}
function render(s){
  const now=Date.parse(s.time)/1000;
  const point={t:now, trained:s.batches_per_second, produced:s.produced_batches_per_second};
  const tr=s.traffic, ms=s.measured, measuredGpus=ms.gpus.filter(g=>g.pcie_rx_bytes!==null);
  const mrx=measuredGpus.reduce((a,g)=>a+g.pcie_rx_bytes,0);
  if(previous){
    const dt=now-previous.t, db=tr.total_bytes-previous.total, dd=tr.device_bytes-previous.device;
    point.hit = db>0 ? dd/db : tr.hit_ratio;
    for(const l of ["local","nvlink","pcie","storage","network"])
      point[l]=dt>0?Math.max(0,(tr.links[l]-previous.links[l])/dt):0;
    if(measuredGpus.length) point.pcie_measured=dt>0?Math.max(0,(mrx-previous.mrx)/dt):0;
  } else point.hit=tr.hit_ratio;
  previous={t:now,total:tr.total_bytes,device:tr.device_bytes,links:tr.links,mrx:mrx};
  history.push(point); while(history.length&&now-history[0].t>KEEP_S) history.shift();
  document.getElementById("where").textContent=`pid ${s.pid} · ${s.endpoints.grpc_unix} · v${s.version}`;
  const tiles=[["uptime",Math.round(s.uptime_seconds)+" s"],["batches/s",s.batches_per_second.toFixed(2)],
    ["batches trained",s.batches_total],["hit ratio",pct(tr.hit_ratio)],["bytes gathered",human(tr.total_bytes)],
    ["producer lag",s.producer_lag_batches+" batches"],["device tiers",s.simulated_devices?"simulated":"real"],
    ["PCIe accounted",human(tr.links.pcie)],["PCIe measured (H2D)",measuredGpus.length?human(mrx):"not measured"],
    ["storage read",human(s.storage.read_bytes)],["window hit ratio",pct(s.storage.window_hit_ratio)],
    ["network fetched",human(s.network.bytes)],
    ["models kept",`${s.artifacts.kept_jobs} (${human(s.artifacts.kept_bytes)})`]];
  document.getElementById("tiles").innerHTML=
    tiles.map(([k,v])=>`<div class="tile">${k}<b>${esc(v)}</b></div>`).join("");
  draw("c_tp",["trained","produced"],x=>x.toFixed(1)); legend("l_tp",["trained","produced"],point,x=>x.toFixed(2));
  draw("c_hit",["hit"],pct); legend("l_hit",["hit"],point,pct);
  const links=["local","nvlink","pcie","storage","network"].concat(measuredGpus.length?["pcie_measured"]:[]);
  draw("c_link",links,x=>human(x)+"/s"); legend("l_link",links,point,x=>human(x)+"/s");
  const tierNames=["device_replicated","device_interleaved","host","storage","structure_device","structure_host"];
  document.getElementById("datasets").innerHTML="<tr><th>dataset</th><th>nodes</th><th>edges</th><th>resident</th>"+
    tierNames.map(t=>`<th>${t}</th>`).join("")+"<th>jobs</th></tr>"+
    s.datasets.map(d=>{const by=Object.fromEntries(d.tiers.map(t=>[t.tier,t]));
      return `<tr><td>${esc(d.name)}</td><td>${d.num_nodes}</td><td>${d.num_edges}</td>`+
      `<td>${human(d.resident_bytes)}</td>`+tierNames.map(t=>`<td>${by[t]?human(by[t].bytes):"-"}</td>`).join("")+
      `<td>${esc(d.job_ids.join(", "))}</td></tr>`}).join("");
  document.getElementById("jobs").innerHTML="<tr><th>job</th><th>state</th><th>dataset</th><th>ranks</th>"+
    "<th>batches</th><th>batches/s</th><th>lag</th><th>hit ratio</th><th>gathered</th><th>storage reads</th>"+
    "<th>storage read</th><th>window hits</th><th>queue depth</th><th>storage bandwidth</th>"+
    "<th>network (per peer: rows, bytes)</th><th>network wait</th><th>epochs</th><th>model</th>"+
    "<th>message</th></tr>"+
    s.jobs.map(j=>`<tr><td>${esc(j.job_id)} ${esc(j.name)}${j.owner?" ("+esc(j.owner)+")":""}</td><td>${j.state}</td>`+
      `<td>${esc(j.dataset)}</td>`+
      `<td>${j.world_size}</td><td>${j.batches_total}</td><td>${j.batches_per_second.toFixed(2)}</td>`+
      `<td>${j.producer_lag_batches}</td><td>${pct(j.traffic.hit_ratio)}</td><td>${human(j.traffic.total_bytes)}</td>`+
      `<td>${esc(j.storage.mode||"-")}${j.storage.window?", window "+j.storage.window:""}</td>`+
      `<td>${human(j.storage.read_bytes)}</td><td>${pct(j.storage.window_hit_ratio)}</td>`+
      `<td>${j.storage.queue_depth.toFixed(1)}</td><td>${j.storage.bandwidth?human(j.storage.bandwidth)+"/s":"-"}</td>`+
      `<td>${j.network.peers.length?
        j.network.peers.map(p=>esc(p.peer)+": "+p.rows+", "+human(p.bytes)).join("<br>"):"-"}</td>`+
      `<td>${j.network.peers.length?j.network.wait_seconds.toFixed(2)+" s":"-"}</td>`+
      `<td>${j.epochs_recorded}</td>`+
      `<td>${j.artifact==="kept"?"kept, "+human(j.artifact_bytes):esc(j.artifact||"-")}</td>`+
      `<td>${esc(j.message)}</td></tr>`).join("");
  document.getElementById("artifacts_policy").textContent=`exported models: ${s.artifacts.policy}; `+
    `${s.artifacts.kept_jobs} kept (${human(s.artifacts.kept_bytes)}), ${s.artifacts.expired_jobs} removed by it`;
  document.getElementById("measured_note").textContent=ms.reason?`not measured: ${ms.reason}`:
    `NVML sampled every ${ms.interval_s} s (${ms.samples} samples); `+
    "it counts all of a GPU's traffic, not only graphtier's";
  const sum=(g,k)=>g.nvlink.reduce((a,l)=>a+l[k],0);
  document.getElementById("measured").innerHTML=ms.gpus.length?"<tr><th>gpu</th><th>method</th><th>PCIe rx (H2D)</th>"+
    "<th>PCIe tx</th><th>NVLink links</th><th>NVLink tx</th><th>NVLink rx</th><th>unavailable</th></tr>"+
    ms.gpus.map(g=>`<tr><td>${g.gpu} ${esc(g.name)}</td><td>${g.method||"-"}</td>`+
      `<td>${g.pcie_rx_bytes===null?"-":human(g.pcie_rx_bytes)}</td><td>${g.pcie_tx_bytes===null?"-":human(g.pcie_tx_bytes)}</td>`+
      `<td>${g.nvlink.length}</td><td>${human(sum(g,"tx_bytes"))}</td><td>${human(sum(g,"rx_bytes"))}</td>`+
      `<td>${esc([g.unavailable_reason,g.nvlink_unavailable_reason].filter(x=>x).join("; "))}</td></tr>`).join(""):"";
  document.getElementById("machine_summary").textContent=s.machine.summary;
  document.getElementById("machine").innerHTML=
    "<tr><th>check</th><th>status</th><th style='text-align:left'>reason</th></tr>"+
    s.machine.checks.map(c=>`<tr><td>${c.name}</td><td>${c.status}</td>`+
      `<td style="text-align:left">${esc(c.reason)}</td></tr>`).join("");
}
async function poll(){
  try{const r=await fetch("/v1/status",{cache:"no-store"}); if(!r.ok) throw new Error("HTTP "+r.status);
    const s=await r.json(); render(s); await curves(s); document.getElementById("error").textContent="";}
  catch(e){document.getElementById("error").textContent="cannot reach the daemon: "+e.message}
  setTimeout(poll,2000);
}
poll();
</script></body></html>
"""
