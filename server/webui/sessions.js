// sessions.js — the sessions view: live sessions with their tokens and memory, created, saved to a snapshot,
// restored from one, deleted; snapshots listed and deleted. Every failure is shown as the API words it.
import {del, get, post} from "./api.js";
import {$, el, formatBytes, formatNumber, showError} from "./dom.js";

const enc = encodeURIComponent;

function memoryBytes(m) {
  return m.local_kv_bytes + m.memory_key_bytes + m.memory_value_bytes + m.index_bytes;
}

async function act(what, fn) {
  showError($("sessions-error"), null);
  try {
    const done = await fn();
    $("sessions-status").textContent = done;
  } catch (err) {
    showError($("sessions-error"), err);
    $("sessions-status").textContent = "";
  }
  await refreshSessions(false);
}

function snapshotName() { return $("snapshot-name").value.trim() || undefined; }

function button(label, ariaLabel, onClick) {
  const b = el("button", {type: "button", text: label, "aria-label": ariaLabel});
  b.addEventListener("click", onClick);
  return b;
}

function sessionRow(s) {
  const id = s.id;
  const actions = el("div", {className: "row"},
    button("Save", `Save session ${id}`, () => act("save", async () => {
      const r = await post(`v1/sessions/${enc(id)}/save`, {name: snapshotName()});
      return `Saved session ${id} as snapshot ${r.snapshot} (${formatBytes(r.bytes)}).`;
    })),
    button("Restore", `Restore session ${id} from a snapshot`, () => act("restore", async () => {
      const r = await post(`v1/sessions/${enc(id)}/restore`, {name: snapshotName()});
      return `Restored session ${id}: ${formatNumber(r.tokens)} tokens.`;
    })),
    button("Delete", `Delete session ${id}`, () => act("delete", async () => {
      await del(`v1/sessions/${enc(id)}`);
      return `Deleted session ${id}.`;
    })));
  return el("tr", {"data-session": id},
    el("td", {text: id}), el("td", {className: "num", text: formatNumber(s.tokens)}),
    el("td", {className: "num", text: formatNumber(s.requests)}),
    el("td", {className: "num", text: formatBytes(memoryBytes(s.memory))}),
    el("td", {text: s.busy ? "busy" : s.last_error ? "last error: " + s.last_error : "idle"}),
    el("td", {}, actions));
}

function snapshotRow(s) {
  const actions = el("div", {className: "row"},
    button("New session from it", `Create a session from snapshot ${s.name}`, () => act("create", async () => {
      const id = $("session-new-id").value.trim() || undefined;
      const r = await post("v1/sessions", {id, restore: s.name});
      return `Created session ${r.id} from snapshot ${s.name}: ${formatNumber(r.tokens)} tokens.`;
    })),
    button("Delete", `Delete snapshot ${s.name}`, () => act("delete", async () => {
      await del(`v1/snapshots/${enc(s.name)}`);
      return `Deleted snapshot ${s.name}.`;
    })));
  return el("tr", {"data-snapshot": s.name}, el("td", {text: s.name}),
    el("td", {className: "num", text: formatBytes(s.bytes)}),
    el("td", {text: new Date(s.modified * 1000).toLocaleString()}), el("td", {}, actions));
}

export async function refreshSessions(clear = true) {
  if (clear) showError($("sessions-error"), null);
  try {
    const list = await get("v1/sessions");
    $("sessions-table").tBodies[0].replaceChildren(...list.data.map(sessionRow));
  } catch (err) {
    showError($("sessions-error"), err);
  }
  const body = $("snapshots-table").tBodies[0];
  try {
    const snaps = await get("v1/snapshots");
    body.replaceChildren(...snaps.data.map(snapshotRow));
  } catch (err) { // 501 without --session-dir: say so in the table
    body.replaceChildren(el("tr", {}, el("td", {colSpan: 4, text: err.message})));
  }
}

export function initSessions() {
  $("session-create-form").addEventListener("submit", (e) => {
    e.preventDefault();
    act("create", async () => {
      const r = await post("v1/sessions", {id: $("session-new-id").value.trim() || undefined});
      return `Created session ${r.id}.`;
    });
  });
  $("sessions-refresh").addEventListener("click", () => refreshSessions());
}
