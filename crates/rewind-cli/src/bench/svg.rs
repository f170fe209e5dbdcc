//! A hand-written SVG grouped bar chart with a log-scale y axis: enough to
//! see the benchmark's shape in a browser without a plotting dependency.

use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 480.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
/// Tableau 10, then two darker tones, so up to 12 series differ.
const COLORS: [&str; 12] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#1b3a5c", "#6b3e0a",
];

/// Bars `value(group, series)` for each group (x axis) and series (legend).
/// Values that are not positive and finite are left out (a log axis has no zero).
pub fn grouped_bars(
    title: &str,
    y_label: &str,
    groups: &[String],
    series: &[String],
    value: impl Fn(usize, usize) -> f64,
) -> String {
    let values: Vec<f64> = (0..groups.len())
        .flat_map(|g| (0..series.len()).map(move |s| (g, s)))
        .map(|(g, s)| value(g, s))
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    // Whole decades around the data, so the grid lines fall on 10^n.
    let lo = values
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .log10()
        .floor();
    let hi = values
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max)
        .log10()
        .ceil();
    let (lo, hi) = if values.is_empty() {
        (0.0, 1.0)
    } else {
        (lo, hi.max(lo + 1.0))
    };
    let plot_h = HEIGHT - TOP - BOTTOM;
    let plot_w = WIDTH - LEFT - RIGHT;
    let y = |v: f64| TOP + plot_h * (1.0 - (v.log10() - lo) / (hi - lo));

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="25" text-anchor="middle" font-size="15">{}</text>"#,
        LEFT + plot_w / 2.0,
        escape(title)
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(20 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    for d in lo as i32..=hi as i32 {
        let v = 10f64.powi(d);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y(v) + 4.0,
            tick(v),
            y = y(v)
        );
    }
    let group_w = plot_w / groups.len().max(1) as f64;
    let bar_w = group_w * 0.8 / series.len().max(1) as f64;
    for (g, name) in groups.iter().enumerate() {
        let x0 = LEFT + g as f64 * group_w + group_w * 0.1;
        for si in 0..series.len() {
            let v = value(g, si);
            if !(v.is_finite() && v > 0.0) {
                continue;
            }
            let top = y(v).max(TOP);
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}: {v:.3}</title></rect>"#,
                x0 + si as f64 * bar_w,
                bar_w * 0.9,
                TOP + plot_h - top,
                COLORS[si % COLORS.len()],
                escape(&series[si]),
                escape(name)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x0 + group_w * 0.4,
            TOP + plot_h + 20.0,
            escape(name)
        );
    }
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{}" stroke="black"/><line x1="{LEFT}" x2="{}" y1="{y0}" y2="{y0}" stroke="black"/>"#,
        TOP + plot_h,
        LEFT + plot_w,
        y0 = TOP + plot_h
    );
    for (si, name) in series.iter().enumerate() {
        let ly = TOP + 10.0 + si as f64 * 20.0;
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{ly}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            WIDTH - RIGHT + 20.0,
            COLORS[si % COLORS.len()],
            WIDTH - RIGHT + 38.0,
            ly + 10.0,
            escape(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn tick(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
