// The KaaS dashboard: reads /v1/dashboard (signed in by the session cookie), draws the
// tables and one SVG chart per panel, and refreshes itself every REFRESH_MS.
"use strict";

const REFRESH_MS = 10000;
const COLORS = ["#3b6fd4", "#d4763b", "#2f9e5b", "#9c3bd4", "#d43b6f", "#6f6f6f"];
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function figure(value) {
  if (value === null || value === undefined) return "–";
  if (Math.abs(value) >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (Math.abs(value) >= 1e3) return (value / 1e3).toFixed(1) + "k";
  return Number.isInteger(value) ? String(value) : value.toFixed(2);
}

async function getJson(path) {
  const answer = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (answer.status === 401) {
    window.location.assign("/dashboard/login");
    throw new Error("signed out");
  }
  const body = await answer.json();
  if (!answer.ok) throw new Error(body.message || answer.statusText);
  return body;
}

function tile(label, value, bad) {
  const node = el("div", { class: "tile" });
  node.append(el("b", { class: bad ? "bad" : "good" }, value), el("span", {}, label));
  return node;
}

function showSummary(doc) {
  const box = document.getElementById("summary");
  const hb = doc.brokers.map((b) => b.heartbeat_success).filter((v) => v !== null);
  const hbText = hb.length ? (100 * hb.reduce((a, b) => a + b, 0) / hb.length).toFixed(1) + "%" : "–";
  box.replaceChildren(
    tile("status", doc.status, doc.status !== "running"),
    tile("brokers", doc.brokers.length, false),
    tile("under-replicated", figure(doc.totals.under_replicated), doc.totals.under_replicated > 0),
    tile("offline partitions", figure(doc.totals.offline), doc.totals.offline > 0),
    tile("firing alerts", doc.firing, doc.firing > 0),
    tile("heartbeat success", hbText, hb.length > 0 && hb.some((v) => v < 1)),
  );
}

function showBrokers(doc) {
  const table = document.getElementById("brokers");
  const head = el("tr");
  for (const title of ["broker", "VM", "state"]) head.append(el("th", {}, title));
  for (const column of doc.columns) head.append(el("th", {}, column.label));
  table.tHead.replaceChildren(head);
  const rows = doc.brokers.map((broker) => {
    const row = el("tr", { class: "broker", "data-broker-id": broker.broker_id ?? "" });
    row.append(el("td", {}, broker.broker_id ?? "–"), el("td", {}, broker.vm_id));
    row.append(el("td", { class: broker.state === "healthy" ? "good" : "bad", title: broker.sentence }, broker.state));
    for (const column of doc.columns) row.append(el("td", {}, figure(broker[column.key])));
    return row;
  });
  table.tBodies[0].replaceChildren(...rows);
}

function showLists(doc) {
  const alerts = doc.alerts.map((a) => el("li", { class: a.state === "firing" ? "bad" : "" },
    `${a.state}: ${a.rule} ${a.subject} (${a.severity}) ${a.summary}`));
  document.getElementById("alerts").replaceChildren(...(alerts.length ? alerts : [el("li", { class: "good" }, "none")]));
  const ops = doc.operations.map((o) => el("li", {},
    `#${o.op_id} ${o.kind}: step ${o.steps_done}/${o.steps_total} ${o.step ?? ""} ${o.message}`));
  document.getElementById("operations").replaceChildren(...(ops.length ? ops : [el("li", {}, "none")]));
  const plan = doc.plan;
  let text = "unknown";
  if (plan) {
    text = `${plan.state}: batch ${plan.completed_batches}/${plan.batch_count}, ${plan.partitions} partitions`;
    if (plan.movement) text += `, ${figure(plan.movement.bytes_to_move)} bytes to move`;
  }
  document.getElementById("plan").textContent = text;
  const problems = doc.problems.map((p) => el("p", { class: "problem" }, p));
  document.getElementById("problems").replaceChildren(...problems);
}

function drawChart(box, chart) {
  const width = 420, height = 160, pad = 30;
  const points = chart.series.flatMap((s) => s.points);
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none" });
  const legend = el("div", { class: "legend" });
  if (points.length === 0) {
    box.replaceChildren(el("h3", {}, chart.title), el("p", {}, "no data in this range"));
    return;
  }
  const t0 = Math.min(...points.map((p) => p[0])), t1 = Math.max(...points.map((p) => p[0]));
  const v0 = Math.min(0, ...points.map((p) => p[1])), v1 = Math.max(1, ...points.map((p) => p[1]));
  const x = (t) => pad + ((t - t0) / Math.max(1, t1 - t0)) * (width - pad - 5);
  const y = (v) => height - 15 - ((v - v0) / (v1 - v0)) * (height - 25);
  svg.append(svgEl("line", { x1: pad, y1: y(v0), x2: width - 5, y2: y(v0), stroke: "#999" }));
  const top = svgEl("text", { x: 2, y: 12, "font-size": 10 });
  top.textContent = figure(v1);
  svg.append(top);
  chart.series.forEach((series, n) => {
    const color = COLORS[n % COLORS.length];
    svg.append(svgEl("polyline", {
      class: "series", "data-name": series.name, "data-points": series.points.length,
      fill: "none", stroke: color, "stroke-width": 1.5,
      points: series.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" "),
    }));
    const name = el("span", {}, series.name);
    name.style.color = color; // CSSOM, not a style attribute: the page's CSP allows no inline style
    legend.append(name);
  });
  box.replaceChildren(el("h3", {}, `${chart.title} (${chart.unit})`), svg, legend);
}

let charts = [];

async function refreshCharts(cluster) {
  const range = document.getElementById("range").value;
  const holder = document.getElementById("charts");
  if (holder.children.length !== charts.length) {
    holder.replaceChildren(...charts.map((c) => el("div", { class: "chart", id: `chart-${c.index}` })));
  }
  await Promise.all(charts.map(async (c) => {
    const box = document.getElementById(`chart-${c.index}`);
    try {
      const path = `/v1/dashboard/clusters/${encodeURIComponent(cluster)}/charts/${c.index}?range=${encodeURIComponent(range)}`;
      drawChart(box, await getJson(path));
    } catch (error) {
      box.replaceChildren(el("h3", {}, c.title), el("p", { class: "problem" }, error.message));
    }
  }));
}

async function refresh() {
  const select = document.getElementById("cluster");
  const cluster = select.value;
  if (!cluster) return;
  try {
    const doc = await getJson(`/v1/dashboard/clusters/${encodeURIComponent(cluster)}`);
    charts = doc.charts;
    showSummary(doc);
    showBrokers(doc);
    showLists(doc);
    await refreshCharts(cluster);
    document.getElementById("updated").textContent = "updated " + new Date(doc.at * 1000).toLocaleTimeString();
  } catch (error) {
    document.getElementById("problems").replaceChildren(el("p", { class: "problem" }, error.message));
  }
}

async function start() {
  const select = document.getElementById("cluster");
  const wanted = new URLSearchParams(window.location.search).get("cluster");
  try {
    const names = await getJson("/v1/dashboard/clusters");
    select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    if (wanted && names.includes(wanted)) select.value = wanted;
  } catch (error) {
    document.getElementById("problems").replaceChildren(el("p", { class: "problem" }, error.message));
    return;
  }
  select.addEventListener("change", refresh);
  document.getElementById("range").addEventListener("change", () => refreshCharts(select.value));
  await refresh();
  window.setInterval(refresh, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", start);
