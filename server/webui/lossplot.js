// lossplot.js — the training loss curve on a <canvas>: loss against step, redrawn whole at each new point (a job
// has at most a few thousand), axes scaled to the points so far and to the job's total steps when known.

function css(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888"; }

// train, valid: [{step, loss}] in step order; totalSteps: the x axis' end (0: the last point's step).
export function drawLoss(canvas, train, valid = [], totalSteps = 0) {
  const ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  const pad = {left: 48, right: 12, top: 12, bottom: 28};
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = css("--muted");
  ctx.strokeStyle = css("--line");
  ctx.strokeRect(pad.left, pad.top, w - pad.left - pad.right, h - pad.top - pad.bottom);
  const all = train.concat(valid);
  canvas.dataset.points = String(train.length);
  if (!all.length) {
    ctx.fillText("the loss appears here as the job trains", pad.left + 8, h / 2);
    canvas.setAttribute("aria-label", "Training loss by step: no points yet");
    return;
  }
  const maxStep = Math.max(totalSteps, ...all.map((p) => p.step), 1);
  let lo = Math.min(...all.map((p) => p.loss)), hi = Math.max(...all.map((p) => p.loss));
  if (hi - lo < 1e-6) lo -= 0.5, hi += 0.5;
  const x = (s) => pad.left + (s / maxStep) * (w - pad.left - pad.right);
  const y = (l) => pad.top + (1 - (l - lo) / (hi - lo)) * (h - pad.top - pad.bottom);
  ctx.fillText(hi.toFixed(3), 4, pad.top + 8);
  ctx.fillText(lo.toFixed(3), 4, h - pad.bottom);
  ctx.fillText("step 0", pad.left, h - 8);
  ctx.fillText(`step ${maxStep}`, w - pad.right - 50, h - 8);
  const line = (points, color) => {
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    points.forEach((p, i) => (i ? ctx.lineTo(x(p.step), y(p.loss)) : ctx.moveTo(x(p.step), y(p.loss))));
    ctx.stroke();
    for (const p of points) ctx.fillRect(x(p.step) - 2, y(p.loss) - 2, 4, 4);
  };
  line(train, css("--accent"));
  if (valid.length) line(valid, css("--error"));
  const last = train[train.length - 1];
  canvas.setAttribute("aria-label", `Training loss by step: ${train.length} points` +
    (last ? `, last ${last.loss.toFixed(4)} at step ${last.step}` : ""));
}
