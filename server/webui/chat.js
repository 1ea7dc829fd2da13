// chat.js — the chat view: the model list (base names and fine-tuned "ft:" adapters from /v1/models), streamed
// answers that Stop cuts short, sampling settings, token counts and speed per answer. The conversation lives in
// this browser (localStorage); the server applies the model's chat template to the messages it is sent.
import {get, stream} from "./api.js";
import {$, el, formatNumber, numberOrUndefined, showError} from "./dom.js";

const STORE = "mnemo.chat";
let messages = []; // {role, content, meta?}
let controller = null;

export async function refreshModels() {
  const list = await get("v1/models");
  const select = $("chat-model"), keep = select.value || select.dataset.wanted;
  select.replaceChildren(...list.data.map((m) =>
    el("option", {value: m.id, text: m.id.startsWith("ft:") ? `${m.id} (fine-tuned)` : m.id})));
  if (keep && list.data.some((m) => m.id === keep)) select.value = keep;
  return list.data;
}

// Selects a model (refreshing the list first, so a just-finished fine-tune is there) and opens the chat.
export async function chatWith(model) {
  await refreshModels();
  $("chat-model").value = model;
  messages = [];
  save();
  render();
  document.dispatchEvent(new CustomEvent("mnemo:show", {detail: "chat"}));
  $("chat-input").focus();
}

function save() {
  try { localStorage.setItem(STORE, JSON.stringify({messages, model: $("chat-model").value})); } catch { /* full */ }
}

function restore() {
  try {
    const s = JSON.parse(localStorage.getItem(STORE) || "{}");
    messages = Array.isArray(s.messages) ? s.messages : [];
  } catch { messages = []; }
}

function messageItem(m) {
  const text = el("span", {className: "text", text: m.content});
  const meta = el("div", {className: "meta", text: m.meta || ""});
  return el("li", {className: m.role}, el("div", {className: "who", text: m.role === "user" ? "You" : "Assistant"}),
            text, meta);
}

function render() {
  $("chat-log").replaceChildren(...messages.map(messageItem));
}

function setBusy(busy) {
  $("chat-send").disabled = busy;
  $("chat-stop").disabled = !busy;
}

function requestBody() {
  const system = $("chat-system").value.trim();
  const history = messages.map(({role, content}) => ({role, content}));
  return {
    model: $("chat-model").value,
    messages: system ? [{role: "system", content: system}, ...history] : history,
    stream: true,
    stream_options: {include_usage: true},
    temperature: numberOrUndefined($("chat-temperature")),
    top_p: numberOrUndefined($("chat-top-p")),
    top_k: numberOrUndefined($("chat-top-k")),
    max_tokens: numberOrUndefined($("chat-max-tokens")),
    seed: numberOrUndefined($("chat-seed")),
    ignore_eos: $("chat-ignore-eos").checked || undefined,
  };
}

async function send(text) {
  showError($("chat-error"), null);
  messages.push({role: "user", content: text});
  const body = requestBody();
  const answer = {role: "assistant", content: ""};
  messages.push(answer);
  render();
  const item = $("chat-log").lastElementChild, textEl = item.querySelector(".text"), metaEl = item.querySelector(".meta");
  item.scrollIntoView({block: "end"});
  controller = new AbortController();
  setBusy(true);
  const t0 = performance.now();
  let first = 0, usage = null, timings = null, finish = null;
  try {
    await stream("POST", "v1/chat/completions", body, (chunk) => {
      if (chunk.usage) usage = chunk.usage, timings = chunk.timings;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) return;
      if (choice.finish_reason) finish = choice.finish_reason;
      const piece = choice.delta && choice.delta.content;
      if (piece) {
        if (!first) first = performance.now();
        answer.content += piece;
        textEl.textContent = answer.content;
      }
    }, controller.signal);
  } catch (err) {
    if (err.name === "AbortError") finish = "stopped";
    else showError($("chat-error"), err);
  }
  const seconds = (performance.now() - (first || t0)) / 1000;
  const parts = [];
  if (usage) parts.push(`${usage.prompt_tokens} prompt + ${usage.completion_tokens} answer tokens`);
  const tps = timings && timings.predicted_per_second ? timings.predicted_per_second
            : usage && seconds > 0 ? usage.completion_tokens / seconds : null;
  if (tps) parts.push(`${formatNumber(tps, 1)} tokens/s`);
  if (finish) parts.push(finish === "stopped" ? "stopped" : `finish: ${finish}`);
  answer.meta = parts.join(" · ");
  metaEl.textContent = answer.meta;
  controller = null;
  setBusy(false);
  save();
}

export function initChat() {
  restore();
  render();
  $("chat-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("chat-input").value.trim();
    if (!text || controller) return;
    $("chat-input").value = "";
    send(text);
  });
  $("chat-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("chat-form").requestSubmit();
    }
  });
  $("chat-stop").addEventListener("click", () => controller && controller.abort());
  $("chat-clear").addEventListener("click", () => {
    if (controller) controller.abort();
    messages = [];
    save();
    render();
    $("chat-input").focus();
  });
  $("chat-model").addEventListener("change", save);
  try {
    const s = JSON.parse(localStorage.getItem(STORE) || "{}");
    if (s.model) $("chat-model").dataset.wanted = s.model;
  } catch { /* nothing kept */ }
}
