// A small live line chart on <canvas>: a rolling window of (time, value) per series.
// Written for the console so that no charting library is shipped or fetched.

export class LiveChart {
  // `integer`: the series count things (messages, lag), so the y-axis is labelled with
  // whole numbers only (0 1 2 3 4, never 0.3 or 0.8).
  constructor(canvas, series, { windowS = 120, unit = "", integer = false } = {}) {
    this.canvas = canvas;
    this.series = series; // [{name, color}]
    this.points = series.map(() => []);
    this.windowS = windowS;
    this.unit = unit;
    this.integer = integer;
  }

  push(t, values) {
    values.forEach((v, i) => {
      if (v === null || v === undefined || Number.isNaN(v)) return;
      this.points[i].push([t, v]);
      const cut = t - this.windowS;
      while (this.points[i].length && this.points[i][0][0] < cut) this.points[i].shift();
    });
    this.draw();
  }

  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight;
    if (!w || !h) return;
    c.width = w * dpr; c.height = h * dpr;
    const g = c.getContext("2d");
    g.scale(dpr, dpr);
    g.clearRect(0, 0, w, h);
    const left = 56, right = 8, top = 8, bottom = 20;
    const all = this.points.flat();
    const now = all.length ? Math.max(...all.map((p) => p[0])) : Date.now() / 1000;
    const t0 = now - this.windowS;
    const TICKS = 4;
    const peak = Math.max(...all.map((p) => p[1]), 0);
    // Four equal steps from 0; a whole-number step when the series count things.
    const step = this.integer ? Math.max(1, niceMax(peak / TICKS)) : niceMax(Math.max(1, peak)) / TICKS;
    const max = step * TICKS;
    const labels = [];
    g.font = "11px system-ui, sans-serif";
    // The page's colours (light or dark, as the system asks): labels muted, grid lines faint.
    const css = getComputedStyle(this.canvas);
    g.fillStyle = css.getPropertyValue("--muted").trim() || "#6b7585";
    g.strokeStyle = css.getPropertyValue("--line").trim() || "#e2e6ec";
    g.lineWidth = 1;
    for (let k = 0; k <= TICKS; k++) {
      const y = top + (h - top - bottom) * (1 - k / TICKS);
      g.beginPath(); g.moveTo(left, y); g.lineTo(w - right, y); g.stroke();
      const label = fmtShort(step * k) + this.unit;
      labels.push(label);
      g.fillText(label, 4, y + 4);
    }
    c.dataset.ticks = labels.join(","); // what the y-axis says, for people using a reader and tests
    c.setAttribute("aria-label", `y-axis ${labels[0]} to ${labels[TICKS]}`);
    g.fillText(`-${this.windowS}s`, left, h - 4);
    g.fillText("now", w - right - 22, h - 4);
    this.points.forEach((pts, i) => {
      if (!pts.length) return;
      g.strokeStyle = this.series[i].color;
      g.lineWidth = 2;
      g.beginPath();
      pts.forEach(([t, v], j) => {
        const x = left + (w - left - right) * ((t - t0) / this.windowS);
        const y = top + (h - top - bottom) * (1 - v / max);
        if (j === 0) g.moveTo(x, y); else g.lineTo(x, y);
      });
      g.stroke();
      // The latest value as a dot, so a series with one point is visible too.
      const [lt, lv] = pts[pts.length - 1];
      g.fillStyle = this.series[i].color;
      g.beginPath();
      g.arc(left + (w - left - right) * ((lt - t0) / this.windowS),
        top + (h - top - bottom) * (1 - lv / max), 3, 0, 2 * Math.PI);
      g.fill();
    });
  }
}

// The smallest of 1, 2, 5 x 10^n at least v (v > 0).
function niceMax(v) {
  if (!(v > 0)) return 0;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

export function fmtShort(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}
