// document.js — the long-document view: a text file (picked, dropped or pasted) is read once into a session
// ("max_tokens": 0), its prefill progress drawn from the stream's progress chunks ("include_progress"); questions
// then continue that session, so the document is never sent again. The gauge shows what the session's memory
// holds, from /v1/sessions/{id} and /props.
import {del, get, post, stream} from "./api.js";
import {$, el, formatBytes, formatNumber, numberOrUndefined, showError} from "./dom.js";

let picked = null; // the File chosen or dropped
let controller = null;

function sessionId() { return $("doc-session").value.trim() || "document"; }

function pick(file) {
  picked = file;
  $("doc-drop").textContent = file ? `${file.name} (${formatBytes(file.size)}) — drop or choose another` :
    "Drop a text file here, or choose one";
}

async function freshSession(id) {
  try {
    await post("v1/sessions", {id});
  } catch (err) {
    if (err.status !== 409 && !/exist/i.test(err.message)) throw err;
    await del("v1/sessions/" + encodeURIComponent(id)); // reading a new document starts the session over
    await post("v1/sessions", {id});
  }
}

function setBusy(busy) {
  $("doc-read").disabled = busy;
  $("doc-ask").disabled = busy;
  $("doc-stop").disabled = !busy;
}

async function read() {
  showError($("doc-error"), null);
  const text = picked ? await picked.text() : $("doc-text").value;
  if (!text) { $("doc-error").textContent = "Choose, drop or paste a document first."; return; }
  const id = sessionId(), bar = $("doc-progress"), status = $("doc-progress-text");
  controller = new AbortController();
  setBusy(true);
  bar.value = 0;
  status.textContent = "Sending the document…";
  const t0 = performance.now();
  try {
    await freshSession(id);
    let usage = null;
    await stream("POST", "v1/completions", {
      prompt: text, max_tokens: 0, session: id, stream: true,
      stream_options: {include_progress: true, include_usage: true},
    }, (chunk) => {
      if (chunk.progress) {
        const p = chunk.progress;
        bar.max = p.total;
        bar.value = p.processed;
        status.textContent = `Prefill: ${formatNumber(p.processed)} / ${formatNumber(p.total)} tokens, ` +
          `${formatNumber(p.elapsed_ms / 1000, 1)} s`;
      }
      if (chunk.usage) usage = chunk.usage;
    }, controller.signal);
    const s = (performance.now() - t0) / 1000;
    bar.max = 1, bar.value = 1;
    status.textContent = `Read ${formatNumber(usage ? usage.prompt_tokens : 0)} tokens into session "${id}" in ` +
      `${formatNumber(s, 1)} s. Ask about it below.`;
  } catch (err) {
    showError($("doc-error"), err);
    status.textContent = err.name === "AbortError" ? "Stopped; the session keeps what was read." : "";
  }
  controller = null;
  setBusy(false);
  refreshMemory();
}

async function ask(question) {
  showError($("doc-error"), null);
  const out = $("doc-answer");
  out.textContent = "";
  controller = new AbortController();
  setBusy(true);
  try {
    await stream("POST", "v1/completions", {
      prompt: `\nQuestion: ${question}\nAnswer:`, session: sessionId(), stream: true,
      max_tokens: numberOrUndefined($("doc-max-tokens")), temperature: 0, stop: ["\nQuestion:"],
    }, (chunk) => {
      const c = chunk.choices && chunk.choices[0];
      if (c && c.text) out.textContent += c.text;
    }, controller.signal);
  } catch (err) {
    showError($("doc-error"), err);
  }
  controller = null;
  setBusy(false);
  refreshMemory();
}

function stat(list, name, value) { list.push(el("dt", {text: name}), el("dd", {text: value})); }

export async function refreshMemory() {
  const dl = $("mem-stats");
  try {
    const [props, s] = await Promise.all([get("props"), get("v1/sessions/" + encodeURIComponent(sessionId()))]);
    const m = s.memory;
    const held = m.memory_key_bytes + m.memory_value_bytes + m.index_bytes;
    const total = held + m.local_kv_bytes;
    const limit = props.sessions.max_bytes_each;
    const meter = $("mem-meter");
    meter.max = limit > 0 ? limit : Math.max(total, 1);
    meter.value = total;
    $("mem-meter-text").textContent = limit > 0 ? `${formatBytes(total)} of ${formatBytes(limit)}` : formatBytes(total);
    const items = [];
    stat(items, "Memory kind", props.memory_kind === "none" ? "none (context only)" : props.memory_kind);
    stat(items, "Tokens in the session", formatNumber(s.tokens));
    if (props.memory_kind === "longllama") stat(items, "Rows in each memory layer", formatNumber(m.memory_tokens));
    if (props.memory_attention) {
      const a = props.memory_attention;
      stat(items, "Attention", a.mode === "dense" ? "dense (every row)" :
        `${a.mode === "knn" ? "kNN" : "dense, then kNN"} top-${a.knn_k}${a.index ? " via " + a.index : ""}`);
    }
    if (props.uio) {
      stat(items, "<mem> entries (all slots)", formatNumber(props.uio.memory_entries));
      stat(items, "Compression", `${props.uio.ratio}:1 (${props.uio.chunk_size} tokens → ${props.uio.num_memory} <mem>)`);
    }
    stat(items, "Local KV", formatBytes(m.local_kv_bytes));
    stat(items, "Memory keys", formatBytes(m.memory_key_bytes));
    stat(items, "Memory values", formatBytes(m.memory_value_bytes));
    stat(items, "Index", formatBytes(m.index_bytes));
    stat(items, "Requests", formatNumber(s.requests));
    dl.replaceChildren(...items);
  } catch (err) {
    dl.replaceChildren(el("dt", {text: "Session"}), el("dd", {text: err.status === 404 ? "not created yet" : err.message}));
  }
}

export function initDocument() {
  const drop = $("doc-drop");
  $("doc-file").addEventListener("change", (e) => pick(e.target.files[0] || null));
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer.files.length) pick(e.dataTransfer.files[0]);
  });
  $("doc-text").addEventListener("input", () => { if ($("doc-text").value) pick(null), $("doc-file").value = ""; });
  $("doc-form").addEventListener("submit", (e) => { e.preventDefault(); if (!controller) read(); });
  $("doc-ask-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const q = $("doc-question").value.trim();
    if (q && !controller) ask(q);
  });
  $("doc-stop").addEventListener("click", () => controller && controller.abort());
  $("doc-session").addEventListener("change", refreshMemory);
}
