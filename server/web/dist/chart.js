// Admitted and denied requests over time as an SVG of stacked bars, drawn like
// `sluicegate simulate --chart`: admitted solid blue, denied hatched orange (told apart by
// shade and pattern, not by red and green), round ticks, the limit as a dashed line.
// The legend is HTML next to the chart, so it wraps on narrow screens.

import { ROUND } from "./preview.js";

export const ADMITTED = "#0072b2";
export const DENIED = "#e69f00";
const LEFT = 52;
const RIGHT = 12;
const TOP = 10;
const BOTTOM = 40;

/** A round step for about `count` ticks up to `top`: 1, 2 or 5 times a power of ten. */
function countStep(top, count) {
  const raw = Math.max(top / count, 1);
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= raw) ?? 10 * power;
}

const escape = (text) =>
  String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

/**
 * The chart's SVG source. `bins` are `[admitted, denied]` per `bin` ticks over
 * `duration`, or bin i from `edges[i]` to `edges[i + 1]` ticks; `label(t, step)` writes
 * an axis tick at `t` ticks from the start, a round `step` apart, or with `edgeLabel(t)`
 * at bins' edges (every so many, to fit); `limit` is `[units per bin, words]` or null;
 * `title` is read by screen readers. Returns `{ svg, limitDrawn }` (false when the limit
 * is far above the bars).
 */
export function barChart({ bins, bin, edges, duration, width, height, label, edgeLabel, yLabel, limit, title }) {
  const plotW = width - LEFT - RIGHT;
  const plotH = height - TOP - BOTTOM;
  const base = TOP + plotH;
  duration = Math.max(duration, 1);
  let peak = Math.max(1, ...bins.map(([a, d]) => a + d));
  // The limit joins the scale unless it would flatten the bars.
  const line = limit && limit[0] <= 2 * peak ? limit[0] : null;
  peak = Math.max(peak, line ?? 0);
  const yStep = countStep(peak, 4);
  const yTop = Math.ceil(peak / yStep) * yStep;
  const y = (v) => base - (v / yTop) * plotH;
  const x = (t) => LEFT + (t / duration) * plotW;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" font-size="12" font-family="inherit">`,
    `<title>${escape(title)}</title>`,
    `<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="${DENIED}"/><line x1="0" y1="0" x2="0" y2="6" stroke="#7a4f00" stroke-width="2"/></pattern></defs>`,
  ];
  for (let v = 0; v <= yTop + yStep / 2; v += yStep) {
    out.push(
      `<line x1="${LEFT}" y1="${y(v).toFixed(1)}" x2="${LEFT + plotW}" y2="${y(v).toFixed(1)}" stroke="#ddd"/>`,
      `<text x="${LEFT - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${v}</text>`,
    );
  }
  edges ??= Array.from({ length: bins.length + 1 }, (_, i) => i * bin);
  // About one x tick per 90 pixels, at a round step of time or every so many edges.
  const ticks = Math.max(2, Math.floor(plotW / 90));
  const step = ROUND.find((s) => duration / s <= ticks) ?? duration;
  const starts = edges.filter((t) => t < duration);
  const every = Math.ceil(starts.length / ticks);
  const at = edgeLabel
    ? starts.filter((_, i) => i % every === 0).map((t) => [t, edgeLabel(t)])
    : Array.from({ length: Math.floor(duration / step) + 1 }, (_, i) => [i * step, label(i * step, step)]);
  for (const [t, text] of at) {
    // A label that would run past the right edge ends at its tick instead.
    const anchor = x(t) + 3.5 * text.length > width ? "end" : "middle";
    out.push(
      `<line x1="${x(t).toFixed(1)}" y1="${TOP}" x2="${x(t).toFixed(1)}" y2="${base}" stroke="#ddd"/>`,
      `<text x="${x(t).toFixed(1)}" y="${base + 16}" text-anchor="${anchor}">${escape(text)}</text>`,
    );
  }
  bins.forEach(([admitted, denied], i) => {
    const left = x(edges[i]);
    const binW = x(edges[i + 1]) - left;
    const gap = binW > 6 ? 1 : 0;
    const w = Math.max(Math.min(binW, LEFT + plotW - left) - gap, 0.5).toFixed(2);
    const top = y(admitted);
    const over = y(admitted + denied);
    out.push(
      `<rect class="admitted" data-count="${admitted}" x="${left.toFixed(2)}" y="${top.toFixed(2)}" width="${w}" height="${(base - top).toFixed(2)}" fill="${ADMITTED}"/>`,
      `<rect class="denied" data-count="${denied}" x="${left.toFixed(2)}" y="${over.toFixed(2)}" width="${w}" height="${(top - over).toFixed(2)}" fill="url(#hatch)"/>`,
    );
  });
  if (line !== null) {
    out.push(
      `<line class="limit" x1="${LEFT}" y1="${y(line).toFixed(1)}" x2="${LEFT + plotW}" y2="${y(line).toFixed(1)}" stroke="black" stroke-width="2" stroke-dasharray="8 4"/>`,
    );
  }
  out.push(
    `<line x1="${LEFT}" y1="${TOP}" x2="${LEFT}" y2="${base}" stroke="black"/>`,
    `<line x1="${LEFT}" y1="${base}" x2="${LEFT + plotW}" y2="${base}" stroke="black"/>`,
    `<text x="${LEFT + plotW / 2}" y="${base + 34}" text-anchor="middle">time</text>`,
    `<text transform="translate(12 ${TOP + plotH / 2}) rotate(-90)" text-anchor="middle">${escape(yLabel)}</text>`,
    "</svg>",
  );
  return { svg: out.join("\n"), limitDrawn: line !== null };
}

/** The legend for a chart: admitted, denied, and the limit line's words when drawn. */
export function legend(limitWords, drawn) {
  const items = [
    `<span><svg width="14" height="14" aria-hidden="true"><rect width="14" height="14" fill="${ADMITTED}"/></svg> admitted</span>`,
    `<span><svg width="14" height="14" aria-hidden="true"><defs><pattern id="hatch-key" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="${DENIED}"/><line x1="0" y1="0" x2="0" y2="6" stroke="#7a4f00" stroke-width="2"/></pattern></defs><rect width="14" height="14" fill="url(#hatch-key)"/></svg> denied</span>`,
  ];
  if (limitWords) {
    items.push(
      `<span><svg width="30" height="14" aria-hidden="true"><line x1="0" y1="7" x2="30" y2="7" stroke="black" stroke-width="2" stroke-dasharray="8 4"/></svg> ${escape(limitWords)}${drawn ? "" : " (above the plot)"}</span>`,
    );
  }
  return `<p class="legend">${items.join(" ")}</p>`;
}
