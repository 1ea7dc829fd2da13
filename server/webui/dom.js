// dom.js — small helpers every view uses: find by id, build elements, format numbers, show API errors.

export const $ = (id) => document.getElementById(id);

// el("td", {className: "num", text: "3"}, child...): properties are assigned, "text" sets textContent (never HTML).
export function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") e.textContent = v;
    else if (k.startsWith("aria-") || k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c);
  return e;
}

export function formatBytes(n) {
  if (n == null || n < 0) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) n /= 1024, i++;
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

export const formatNumber = (n, digits = 0) =>
  n == null || Number.isNaN(n) ? "-" : Number(n).toLocaleString("en-US", {maximumFractionDigits: digits});

// Shows an error as the API gave it: "HTTP 409 session_busy: the session ...".
export function showError(region, err) {
  if (!err) { region.textContent = ""; return; }
  if (err.name === "AbortError") return;
  region.textContent = err.status ? `HTTP ${err.status}${err.code ? " " + err.code : ""}: ${err.message}` : String(err.message || err);
}

// A number input's value, or undefined when it is empty (the server's default then applies).
export function numberOrUndefined(input) {
  return input.value.trim() === "" ? undefined : Number(input.value);
}
