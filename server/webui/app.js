// app.js — the page's entry: switches views (keyboard-reachable buttons; focus moves to the view's heading), asks
// for the API key when the server answers 401, and starts each view.
import {get, loadRememberedKey, setKey, whenUnauthorized} from "./api.js";
import {$, showError} from "./dom.js";
import {initChat, refreshModels} from "./chat.js";
import {initDocument} from "./document.js";
import {initSessions, refreshSessions} from "./sessions.js";
import {initFinetune, refreshFinetune} from "./finetune.js";
import {startMetrics, stopMetrics} from "./metrics.js";

const VIEWS = ["chat", "document", "sessions", "finetune", "metrics"];
let current = "chat";

export function showView(name, focus = true) {
  current = name;
  document.body.classList.remove("locked");
  $("view-key").hidden = true;
  for (const v of VIEWS) $("view-" + v).hidden = v !== name;
  for (const b of document.querySelectorAll("nav button")) {
    if (b.dataset.view === name) b.setAttribute("aria-current", "page");
    else b.removeAttribute("aria-current");
  }
  if (name === "metrics") startMetrics(); else stopMetrics();
  if (name === "sessions") refreshSessions();
  if (name === "finetune") refreshFinetune();
  if (focus) $("view-" + name).querySelector("h2").focus();
  history.replaceState(null, "", "#" + name);
}

function askForKey(err) {
  stopMetrics();
  document.body.classList.add("locked");
  for (const v of VIEWS) $("view-" + v).hidden = true;
  $("view-key").hidden = false;
  if (err && $("key-input").value) showError($("key-error"), err); // a key was tried and refused
  $("key-input").focus();
}

async function connect() {
  await refreshModels(); // 401 here means a key is needed (whenUnauthorized shows the form)
  const props = await get("props");
  $("server-info").textContent = `${props.model_alias} · ${props.model_desc} · context ${props.n_ctx} · ` +
    `chat template ${props.chat_template} · ${props.total_slots} slots`;
  showView(VIEWS.includes(location.hash.slice(1)) ? location.hash.slice(1) : current, false);
}

function start() {
  for (const b of document.querySelectorAll("nav button")) b.addEventListener("click", () => showView(b.dataset.view));
  document.addEventListener("mnemo:show", (e) => showView(e.detail));
  window.addEventListener("hashchange", () => { // a link or the address bar naming a view (#sessions)
    const v = location.hash.slice(1);
    if (VIEWS.includes(v) && v !== current && !document.body.classList.contains("locked")) showView(v, false);
  });
  whenUnauthorized(askForKey);
  $("key-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    setKey($("key-input").value, $("key-remember").checked);
    showError($("key-error"), null);
    try { await connect(); } catch (err) { if (err.status !== 401) showError($("key-error"), err); }
  });
  initChat();
  initDocument();
  initSessions();
  initFinetune();
  loadRememberedKey();
  connect().catch((err) => {
    if (err.status === 401) return; // the key form is showing
    $("server-info").textContent = "cannot reach the server: " + err.message;
    showView(current, false);
  });
}

start();
