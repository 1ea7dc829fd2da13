// metrics.js — the metrics view: /metrics (Prometheus text) read every 2 s while the view is open; the cards
// sum each family over its labels, and tokens/s is the generated-token counter's rate between two reads.
import {get} from "./api.js";
import {$, el, formatBytes, formatNumber, showError} from "./dom.js";

let timer = null;
let previous = null; // {t, generated}

// "name{labels} value" lines -> [{name, labels, value}]
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (m) out.push({name: m[1], labels: m[2] || "", value: Number(m[3])});
  }
  return out;
}

const sum = (rows, name, labels = "") =>
  rows.filter((r) => r.name === name && r.labels.includes(labels)).reduce((a, r) => a + r.value, 0);
const has = (rows, name) => rows.some((r) => r.name === name);

async function refresh() {
  try {
    const rows = parseMetrics(await get("metrics"));
    const now = performance.now(), generated = sum(rows, "mnemo_generated_tokens_total");
    const rate = previous && now > previous.t ? (generated - previous.generated) / ((now - previous.t) / 1000) : 0;
    previous = {t: now, generated};
    const cards = [
      ["Requests", formatNumber(sum(rows, "mnemo_requests_total"))],
      ["Queue (waiting)", formatNumber(sum(rows, "mnemo_requests_waiting"))],
      ["Slots busy / total", `${formatNumber(sum(rows, "mnemo_requests_running"))} / ${formatNumber(sum(rows, "mnemo_slots_total"))}`],
      ["Generated tokens/s", formatNumber(rate, 1)],
      ["Generated tokens", formatNumber(generated)],
      ["Prompt tokens", formatNumber(sum(rows, "mnemo_prompt_tokens_total"))],
      ["KV cache", formatBytes(sum(rows, "mnemo_kv_cache_bytes"))],
      ["Memory (slots)", formatBytes(sum(rows, "mnemo_memory_bytes"))],
      ["Sessions", formatNumber(sum(rows, "mnemo_sessions"))],
      ["Session memory", formatBytes(sum(rows, "mnemo_session_memory_bytes"))],
      ["Resident memory", formatBytes(sum(rows, "mnemo_process_resident_memory_bytes"))],
    ];
    if (has(rows, "mnemo_finetune_jobs")) {
      for (const status of ["queued", "running", "succeeded", "failed", "cancelled"])
        cards.push([`Jobs ${status}`, formatNumber(sum(rows, "mnemo_finetune_jobs", `status="${status}"`))]);
      cards.push(["Training tokens/s", formatNumber(sum(rows, "mnemo_finetune_tokens_per_second"), 1)]);
      cards.push(["Adapters loaded", formatNumber(sum(rows, "mnemo_adapters_loaded"))]);
    }
    $("metrics-cards").replaceChildren(...cards.map(([k, v]) =>
      el("div", {"data-metric": k}, el("dt", {text: k}), el("dd", {text: v}))));
    $("metrics-table").tBodies[0].replaceChildren(...rows.map((r) =>
      el("tr", {}, el("td", {text: r.name + r.labels}), el("td", {className: "num", text: String(r.value)}))));
    showError($("metrics-error"), null);
  } catch (err) {
    showError($("metrics-error"), err);
  }
}

export function startMetrics() {
  if (timer) return;
  refresh();
  timer = setInterval(refresh, 2000);
}

export function stopMetrics() {
  clearInterval(timer);
  timer = null;
  previous = null;
}
