// api.js — every request the page makes. Paths are relative ("v1/models"), so the page works behind a reverse
// proxy under a sub-path; nothing goes to another origin. The API key travels as an Authorization: Bearer header
// (never in a URL), kept in this module's memory, and in localStorage only when the user ticks "Remember".

const KEY_STORE = "mnemo.apiKey";
let apiKey = null;
let onUnauthorized = () => {};

export class ApiError extends Error {
  constructor(status, message, code = null, param = null) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.param = param;
  }
}

export function loadRememberedKey() {
  try { apiKey = localStorage.getItem(KEY_STORE); } catch { apiKey = null; }
  return apiKey;
}

export function setKey(key, remember) {
  apiKey = key || null;
  try {
    if (remember && key) localStorage.setItem(KEY_STORE, key);
    else localStorage.removeItem(KEY_STORE);
  } catch { /* storage disabled: memory only */ }
}

// Called on every 401, so the page can ask for the key again.
export function whenUnauthorized(fn) { onUnauthorized = fn; }

function headers(extra = {}) {
  return apiKey ? {...extra, Authorization: "Bearer " + apiKey} : extra;
}

async function fail(resp) {
  const text = await resp.text();
  let err = new ApiError(resp.status, text || resp.statusText);
  try {
    const e = JSON.parse(text).error;
    if (e) err = new ApiError(resp.status, e.message, e.code, e.param);
  } catch { /* not JSON: the text stands */ }
  if (resp.status === 401) onUnauthorized(err);
  throw err;
}

async function send(method, path, body, signal) {
  const init = {method, headers: headers(), signal, cache: "no-store"};
  if (body instanceof FormData) init.body = body; // the browser writes the multipart boundary
  else if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (!resp.ok) await fail(resp);
  return resp;
}

// JSON (or text, for /metrics) of a successful reply; ApiError with the API's message otherwise.
export async function request(method, path, body, signal) {
  const resp = await send(method, path, body, signal);
  const type = resp.headers.get("Content-Type") || "";
  return type.includes("json") ? resp.json() : resp.text();
}

export const get = (path) => request("GET", path);
export const post = (path, body = {}) => request("POST", path, body);
export const del = (path) => request("DELETE", path);

// Server-sent events read through fetch (EventSource cannot send the Authorization header): onData gets each
// "data:" payload parsed; resolves at "[DONE]" or when the stream closes; an error event throws its ApiError.
export async function stream(method, path, body, onData, signal) {
  const resp = await send(method, path, body, signal);
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buf += decoder.decode(value, {stream: true});
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") { reader.cancel().catch(() => {}); return; }
        const obj = JSON.parse(data);
        if (obj.error) throw new ApiError(resp.status, obj.error.message, obj.error.code, obj.error.param);
        onData(obj);
      }
    }
  }
}
