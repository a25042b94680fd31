// A small live line chart on <canvas>: a rolling window of (time, value) per series.
// Written for the console so that no charting library is shipped or fetched.

export class LiveChart {
  constructor(canvas, series, { windowS = 120, unit = "" } = {}) {
    this.canvas = canvas;
    this.series = series; // [{name, color}]
    this.points = series.map(() => []);
    this.windowS = windowS;
    this.unit = unit;
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
    const max = niceMax(Math.max(1, ...all.map((p) => p[1])));
    g.font = "11px system-ui, sans-serif";
    g.fillStyle = "#6b7585";
    g.strokeStyle = "#e2e6ec";
    g.lineWidth = 1;
    for (let k = 0; k <= 4; k++) {
      const y = top + (h - top - bottom) * (1 - k / 4);
      g.beginPath(); g.moveTo(left, y); g.lineTo(w - right, y); g.stroke();
      g.fillText(fmtShort(max * k / 4) + this.unit, 4, y + 4);
    }
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

function niceMax(v) {
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
