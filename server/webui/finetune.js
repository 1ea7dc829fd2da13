// finetune.js — the fine-tuning view: upload a training file (a refused line shown with its text), create a job
// with the common hyper-parameters, follow its events live (server-sent events) with the loss drawn as it trains,
// cancel it, and open the chat on the fine-tuned model in one click.
import {get, post, stream} from "./api.js";
import {$, el, formatBytes, numberOrUndefined, showError} from "./dom.js";
import {drawLoss} from "./lossplot.js";
import {chatWith} from "./chat.js";

const FINAL = new Set(["succeeded", "failed", "cancelled"]);
let follower = null; // AbortController of the followed job's event stream
let followed = null; // the followed job's object

function setJob(job) {
  followed = job;
  $("ft-job-id").textContent = job.id;
  $("ft-status").textContent = job.status + (job.error && job.error.message ? `: ${job.error.message}` : "");
  $("ft-cancel").disabled = FINAL.has(job.status);
  $("ft-chat").disabled = !(job.status === "succeeded" && job.fine_tuned_model);
}

async function follow(id) {
  if (follower) follower.abort();
  const mine = follower = new AbortController();
  const train = [], valid = [];
  let total = 0;
  const canvas = $("ft-loss"), list = $("ft-events");
  list.replaceChildren();
  drawLoss(canvas, train, valid);
  try {
    setJob(await get("v1/fine_tuning/jobs/" + id));
    await stream("GET", `v1/fine_tuning/jobs/${id}/events?stream=true`, undefined, (ev) => {
      list.append(el("li", {text: ev.message}));
      list.scrollTop = list.scrollHeight;
      const d = ev.data || {};
      if (ev.type === "metrics" && d.total_steps != null) {
        total = d.total_steps;
        train.push({step: d.step, loss: d.train_loss});
        drawLoss(canvas, train, valid, total);
      } else if (ev.type === "metrics" && d.valid_loss != null) {
        valid.push({step: d.step, loss: d.valid_loss});
        drawLoss(canvas, train, valid, total);
      } else {
        get("v1/fine_tuning/jobs/" + id).then((j) => mine === follower && setJob(j)).catch(() => {});
      }
    }, mine.signal);
    if (mine === follower) setJob(await get("v1/fine_tuning/jobs/" + id));
    refreshJobs();
  } catch (err) {
    if (mine === follower) showError($("ft-error"), err);
  }
}

// The line the API's message names ("training file line 3: ..."), shown from the local file.
async function showBadLine(file, message) {
  const pre = $("ft-upload-line"), m = /line (\d+)/.exec(message);
  pre.hidden = true;
  if (!m || !file) return;
  const n = Number(m[1]), lines = (await file.text()).split("\n");
  if (n < 1 || n > lines.length) return;
  pre.textContent = `line ${n}: ${lines[n - 1].slice(0, 500)}`;
  pre.hidden = false;
}

async function upload() {
  const file = $("ft-file").files[0];
  showError($("ft-upload-error"), null);
  $("ft-upload-line").hidden = true;
  if (!file) return;
  const form = new FormData();
  form.append("purpose", "fine-tune");
  form.append("file", file, file.name);
  try {
    const f = await post("v1/files", form);
    $("ft-upload-error").textContent = "";
    await refreshFiles(f.id);
    $("ft-training-file").focus();
  } catch (err) {
    showError($("ft-upload-error"), err);
    showBadLine(file, err.message);
  }
}

async function createJob() {
  showError($("ft-error"), null);
  const hyper = {batch_size: numberOrUndefined($("ft-batch")), learning_rate_multiplier: numberOrUndefined($("ft-lr"))};
  const epochs = numberOrUndefined($("ft-epochs"));
  if (epochs !== undefined) hyper.n_epochs = epochs;
  const extra = {};
  for (const [key, id] of [["steps", "ft-steps"], ["seq_len", "ft-seq-len"], ["lora_rank", "ft-rank"]]) {
    const v = numberOrUndefined($(id));
    if (v !== undefined) extra[key] = v;
  }
  try {
    const job = await post("v1/fine_tuning/jobs", {
      model: $("ft-model").value, training_file: $("ft-training-file").value,
      suffix: $("ft-suffix").value.trim() || undefined, seed: numberOrUndefined($("ft-seed")),
      hyperparameters: hyper, extra,
    });
    await refreshJobs();
    follow(job.id);
  } catch (err) {
    showError($("ft-error"), err);
  }
}

async function refreshFiles(select) {
  const files = await get("v1/files?purpose=fine-tune");
  const sel = $("ft-training-file"), keep = select || sel.value;
  sel.replaceChildren(...files.data.map((f) =>
    el("option", {value: f.id, text: `${f.filename} (${formatBytes(f.bytes)}, ${f.id})`})));
  if (keep) sel.value = keep;
}

async function refreshJobs() {
  const jobs = await get("v1/fine_tuning/jobs?limit=20");
  $("ft-jobs-table").tBodies[0].replaceChildren(...jobs.data.map((j) => {
    const b = el("button", {type: "button", text: "Follow", "aria-label": `Follow job ${j.id}`});
    b.addEventListener("click", () => follow(j.id));
    return el("tr", {"data-job": j.id}, el("td", {text: j.id}), el("td", {text: j.status}),
      el("td", {text: j.fine_tuned_model || j.model}), el("td", {}, b));
  }));
}

export async function refreshFinetune() {
  showError($("ft-error"), null);
  try {
    const [props, models] = await Promise.all([get("props"), get("v1/models")]);
    const on = props.fine_tuning;
    $("ft-off").hidden = on;
    for (const f of [$("ft-upload-form"), $("ft-job-form")])
      for (const c of f.elements) c.disabled = !on;
    if (!on) return;
    const sel = $("ft-model"), keep = sel.value;
    sel.replaceChildren(...models.data.filter((m) => !m.id.startsWith("ft:")).map((m) => el("option", {value: m.id, text: m.id})));
    if (keep) sel.value = keep;
    await Promise.all([refreshFiles(), refreshJobs()]);
  } catch (err) {
    showError($("ft-error"), err);
  }
}

export function initFinetune() {
  drawLoss($("ft-loss"), []);
  $("ft-upload-form").addEventListener("submit", (e) => { e.preventDefault(); upload(); });
  $("ft-job-form").addEventListener("submit", (e) => { e.preventDefault(); createJob(); });
  $("ft-cancel").addEventListener("click", async () => {
    if (!followed) return;
    try { setJob(await post(`v1/fine_tuning/jobs/${followed.id}/cancel`)); } catch (err) { showError($("ft-error"), err); }
  });
  $("ft-chat").addEventListener("click", () => followed && followed.fine_tuned_model && chatWith(followed.fine_tuned_model));
}
