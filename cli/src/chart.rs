//! An SVG chart of admitted and denied requests over time: stacked bars in round bins,
//! round ticks with gridlines, the policy's limit as a reference line, a legend.
//! Admitted is solid blue, denied hatched orange: told apart by shade and pattern, not by
//! red and green.

use std::fmt::Write;

use sluicegate_core::Ticks;

use sluicegate_policy::{human, in_unit_of, Policy};

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 500.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 70.0;
const BOTTOM: f64 = 60.0;
const ADMITTED: &str = "#0072b2";
const DENIED: &str = "#e69f00";
/// The most bins a chart draws.
const MAX_BINS: u64 = 120;

/// Durations a bin or a tick step may take: round in the unit they are read in.
const ROUND: [Ticks; 43] = {
    const MS: Ticks = 1_000;
    const S: Ticks = 1_000_000;
    const MIN: Ticks = 60 * S;
    const H: Ticks = 60 * MIN;
    const D: Ticks = 24 * H;
    [
        1,
        2,
        5,
        10,
        20,
        50,
        100,
        200,
        500,
        MS,
        2 * MS,
        5 * MS,
        10 * MS,
        20 * MS,
        50 * MS,
        100 * MS,
        200 * MS,
        500 * MS,
        S,
        2 * S,
        5 * S,
        10 * S,
        15 * S,
        30 * S,
        MIN,
        2 * MIN,
        5 * MIN,
        10 * MIN,
        15 * MIN,
        30 * MIN,
        H,
        2 * H,
        3 * H,
        6 * H,
        12 * H,
        D,
        2 * D,
        7 * D,
        14 * D,
        30 * D,
        60 * D,
        180 * D,
        365 * D,
    ]
};

/// The width of a bin: a round duration that fits the period, so steady traffic lands
/// evenly in every bin. Runs of ten periods or more get bins of whole periods (each bin
/// sees the same admissions); shorter ones get round fractions of the period.
pub fn bin_width(duration: Ticks, period: Ticks) -> Ticks {
    let period = period.max(1);
    let fits = |bin: Ticks| bin > 0 && duration.div_ceil(bin) <= MAX_BINS;
    let multiples = (0..19).map(|k| {
        period.saturating_mul([1, 2, 5][k % 3] * 10u64.pow(u32::try_from(k / 3).unwrap_or(0)))
    });
    if duration / period >= 10 {
        ROUND
            .into_iter()
            .filter(|&bin| bin.is_multiple_of(period))
            .chain(multiples)
            .filter(|&bin| fits(bin))
            .min()
            .unwrap_or(duration)
    } else {
        ROUND
            .into_iter()
            .filter(|&bin| period.is_multiple_of(bin) && fits(bin))
            .min()
            .unwrap_or(period)
    }
}

/// The policy's sustained limit in units per bin, and its label. With several keys, each
/// key has the limit: the line is per key.
pub fn limit_per_bin(policy: &Policy, bin: Ticks, keys: u64) -> Option<(f64, String)> {
    let each = if keys > 1 { " per key" } else { "" };
    let period = policy.period_words();
    let (per_period, what) = match (policy.limit, policy.rate) {
        (Some(limit), _) => (limit, format!("limit: {limit} per {period}{each}")),
        (None, Some(rate)) => (rate, format!("sustained rate: {rate} per {period}{each}")),
        _ => return None,
    };
    #[allow(clippy::cast_precision_loss)]
    let per_bin = per_period as f64 * bin as f64 / policy.usual_period().max(1) as f64;
    Some((per_bin, what))
}

/// What to draw.
pub struct Chart<'a> {
    pub title: &'a str,
    pub duration: Ticks,
    pub bin: Ticks,
    /// Per bin: requests (admitted, denied).
    pub bins: &'a [(u64, u64)],
    pub limit_per_bin: Option<(f64, String)>,
}

/// A round step for about `count` ticks up to `top`: 1, 2 or 5 times a power of ten.
fn count_step(top: f64, count: f64) -> f64 {
    let raw = (top / count).max(1.0);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step >= raw)
        .unwrap_or(10.0 * power)
}

#[allow(clippy::cast_precision_loss)]
pub fn svg(chart: &Chart<'_>) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let base = TOP + plot_h;
    let duration = chart.duration.max(1) as f64;
    let peak = chart
        .bins
        .iter()
        .map(|(a, d)| a + d)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    // The limit joins the scale unless it would flatten the bars; then the legend says
    // it is above the plot.
    let limit = chart
        .limit_per_bin
        .as_ref()
        .filter(|(limit, _)| *limit <= 2.0 * peak);
    let peak = peak.max(limit.map_or(0.0, |l| l.0));
    let y_step = count_step(peak, 5.0);
    let y_top = (peak / y_step).ceil() * y_step;
    let y = |v: f64| base - v / y_top * plot_h;
    let x = |t: f64| LEFT + t / duration * plot_w;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<title>{}</title>"#, escape(chart.title));
    let _ = writeln!(
        out,
        r##"<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="{DENIED}"/><line x1="0" y1="0" x2="0" y2="6" stroke="#7a4f00" stroke-width="2"/></pattern></defs>"##
    );
    let _ = writeln!(
        out,
        r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="24" font-size="15" font-weight="bold">{}</text>"#,
        escape(chart.title)
    );

    // Horizontal gridlines and y ticks.
    let mut v = 0.0;
    while v <= y_top + y_step / 2.0 {
        let _ = writeln!(
            out,
            r##"<line class="grid" x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#dddddd"/>"##,
            y(v),
            LEFT + plot_w
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{v}</text>"#,
            LEFT - 8.0,
            y(v) + 4.0
        );
        v += y_step;
    }
    // Vertical gridlines and x ticks at a round step of time.
    let x_step = ROUND
        .into_iter()
        .find(|&s| chart.duration / s <= 8)
        .unwrap_or(chart.duration.max(1));
    let mut t: Ticks = 0;
    while t <= chart.duration {
        let _ = writeln!(
            out,
            r##"<line class="grid" x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{base}" stroke="#dddddd"/>"##,
            x(t as f64)
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x(t as f64),
            base + 18.0,
            in_unit_of(t, x_step)
        );
        t = match t.checked_add(x_step) {
            Some(next) => next,
            None => break,
        };
    }

    // Bars: admitted at the bottom, denied stacked on top.
    let bin_w = chart.bin as f64 / duration * plot_w;
    let gap = if bin_w > 6.0 { 1.0 } else { 0.0 };
    for (i, &(admitted, denied)) in (0u64..).zip(chart.bins) {
        let left = x((i * chart.bin) as f64);
        let w = (bin_w.min(LEFT + plot_w - left) - gap).max(0.5);
        let top_admitted = y(admitted as f64);
        let top_denied = y((admitted + denied) as f64);
        let _ = writeln!(
            out,
            r#"<rect class="admitted" x="{left:.2}" y="{top_admitted:.2}" width="{w:.2}" height="{:.2}" fill="{ADMITTED}"/>"#,
            base - top_admitted
        );
        let _ = writeln!(
            out,
            r#"<rect class="denied" x="{left:.2}" y="{top_denied:.2}" width="{w:.2}" height="{:.2}" fill="url(#hatch)"/>"#,
            top_admitted - top_denied
        );
    }

    // The limit as a dashed reference line.
    if let Some((limit, _)) = limit {
        let _ = writeln!(
            out,
            r#"<line class="limit" x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="black" stroke-width="2" stroke-dasharray="8 4"/>"#,
            y(*limit),
            LEFT + plot_w
        );
    }

    // Axes and their labels.
    let _ = writeln!(
        out,
        r#"<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}" stroke="black"/>"#
    );
    let _ = writeln!(
        out,
        r#"<line class="axis" x1="{LEFT}" y1="{base}" x2="{}" y2="{base}" stroke="black"/>"#,
        LEFT + plot_w
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">time</text>"#,
        LEFT + plot_w / 2.0,
        base + 42.0
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(22 {}) rotate(-90)" text-anchor="middle">requests per {}</text>"#,
        TOP + plot_h / 2.0,
        human(chart.bin)
    );

    // Legend, above the plot.
    let ly = 44.0;
    let _ = writeln!(
        out,
        r#"<rect x="{LEFT}" y="{}" width="14" height="14" fill="{ADMITTED}"/><text x="{}" y="{ly}">admitted</text>"#,
        ly - 11.0,
        LEFT + 20.0
    );
    let _ = writeln!(
        out,
        r#"<rect x="{}" y="{}" width="14" height="14" fill="url(#hatch)"/><text x="{}" y="{ly}">denied</text>"#,
        LEFT + 100.0,
        ly - 11.0,
        LEFT + 120.0
    );
    if let Some((_, label)) = &chart.limit_per_bin {
        let label = if limit.is_some() {
            label.clone()
        } else {
            format!("{label} (above the plot)")
        };
        let _ = writeln!(
            out,
            r#"<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="black" stroke-width="2" stroke-dasharray="8 4"/><text x="{3}" y="{ly}">{4}</text>"#,
            LEFT + 190.0,
            ly - 4.0,
            LEFT + 220.0,
            LEFT + 226.0,
            escape(&label)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_round_and_fit_the_period() {
        const S: Ticks = 1_000_000;
        assert_eq!(bin_width(10 * S, S), S);
        assert_eq!(bin_width(2 * 86_400 * S, S), 30 * 60 * S);
        assert_eq!(bin_width(5 * S, S), 50_000);
        assert_eq!(bin_width(100 * S, 7 * S), 7 * S);
        assert_eq!(bin_width(10_000 * S, 7 * S), 140 * S);
        assert_eq!(bin_width(1, 1), 1);
    }
}
