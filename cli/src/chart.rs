//! An SVG chart of admitted and denied requests over time: stacked bars, axes, legend.

use std::fmt::Write;

use tollgate_core::Ticks;

const WIDTH: u64 = 800;
const HEIGHT: u64 = 400;
const LEFT: u64 = 60;
const BOTTOM: u64 = 40;
const TOP: u64 = 40;
const RIGHT: u64 = 20;

/// Per column of time: (admitted, denied) counts.
pub fn svg(title: &str, duration: Ticks, columns: &[(u64, u64)]) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let peak = columns.iter().map(|(a, d)| a + d).max().unwrap_or(0).max(1);
    let n = u64::try_from(columns.len()).unwrap_or(1).max(1);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<title>{}</title>"#, escape(title));
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="24" font-size="14">{}</text>"#,
        escape(title)
    );
    let base = TOP + plot_h;
    for (i, &(admitted, denied)) in (0u64..).zip(columns) {
        let x = LEFT + i * plot_w / n;
        let w = ((i + 1) * plot_w / n - i * plot_w / n).max(1);
        let h_admitted = admitted * plot_h / peak;
        let h_denied = denied * plot_h / peak;
        let _ = writeln!(
            out,
            r##"<rect x="{x}" y="{}" width="{w}" height="{h_admitted}" fill="#2e7d32"/>"##,
            base - h_admitted
        );
        let _ = writeln!(
            out,
            r##"<rect x="{x}" y="{}" width="{w}" height="{h_denied}" fill="#c62828"/>"##,
            base - h_admitted - h_denied
        );
    }
    // Axes with end labels: requests per column, and time.
    let _ = writeln!(
        out,
        r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}" stroke="black"/>"#
    );
    let _ = writeln!(
        out,
        r#"<line x1="{LEFT}" y1="{base}" x2="{}" y2="{base}" stroke="black"/>"#,
        LEFT + plot_w
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="end">{peak}</text>"#,
        LEFT - 6,
        TOP + 4
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{base}" text-anchor="end">0</text>"#,
        LEFT - 6
    );
    let _ = writeln!(out, r#"<text x="{LEFT}" y="{}">0 s</text>"#, base + 16);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="end">{} s</text>"#,
        LEFT + plot_w,
        base + 16,
        seconds(duration)
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">time</text>"#,
        LEFT + plot_w / 2,
        base + 32
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(16 {}) rotate(-90)" text-anchor="middle">requests per {} ms</text>"#,
        TOP + plot_h / 2,
        duration / n / 1000
    );
    // Legend.
    let lx = WIDTH - RIGHT - 170;
    let _ = writeln!(
        out,
        r##"<rect x="{lx}" y="12" width="12" height="12" fill="#2e7d32"/><text x="{}" y="22">admitted</text>"##,
        lx + 16
    );
    let _ = writeln!(
        out,
        r##"<rect x="{}" y="12" width="12" height="12" fill="#c62828"/><text x="{}" y="22">denied</text>"##,
        lx + 90,
        lx + 106
    );
    out.push_str("</svg>\n");
    out
}

fn seconds(ticks: Ticks) -> String {
    format!("{}.{:03}", ticks / 1_000_000, ticks % 1_000_000 / 1000)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
