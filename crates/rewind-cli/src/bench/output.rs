//! A benchmark's results: one [`Row`] per measured number, written as
//! `DIR/NAME.json` (`{"bench": NAME, "rows": [...]}`), as `DIR/NAME.csv`
//! with the same rows, printed as a table and drawn as `DIR/NAME.svg`
//! (plotters' SVG backend: no font or bitmap stack).

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use super::harness::Label;
use crate::error::CliError;

/// One measured number.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// `rewind`, `persist-nolog`, `volatile` or a peer's name.
    pub system: String,
    /// e.g. `batch-force`, `nolog`, `dram`.
    pub config: String,
    /// The varied parameter, e.g. `K=8`.
    pub param: String,
    /// e.g. `us_per_tx`.
    pub metric: String,
    pub value: f64,
    /// e.g. `us`, `count`, `lines`, `x`.
    pub unit: String,
}

/// The JSON document.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    pub bench: String,
    /// The machine, the directory's filesystem and the backend it ran on.
    #[serde(default)]
    pub machine: String,
    /// `full`, `quick` or `tiny`.
    #[serde(default)]
    pub scale: String,
    /// The configurations `--configs` kept (empty: every one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<String>,
    pub rows: Vec<Row>,
}

/// A column of the printed table: a metric, its heading and its decimals.
#[derive(Debug, Deserialize)]
pub struct Col(pub String, pub String, pub usize);

/// What the chart draws: one line per system/config (and per metric,
/// when there are several) over the parameters that have the metric.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chart {
    pub title: String,
    pub y_label: String,
    pub metrics: Vec<String>,
    pub scale: Scale,
}

/// A chart's y axis, and which way is better.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Times or costs: lower is better, on a log scale.
    Costs,
    /// Overheads or slowdowns: lower is better, on a linear scale.
    Linear,
    /// Rates or speed-ups: higher is better, on a log scale.
    Rates,
}

impl Chart {
    pub fn log_y(&self) -> bool {
        self.scale != Scale::Linear
    }

    /// Whether a higher value is the better one (a throughput, a speed-up).
    pub fn higher_is_better(&self) -> bool {
        self.scale == Scale::Rates
    }
}

impl Report {
    pub fn new(bench: &str) -> Report {
        Report {
            bench: bench.into(),
            ..Report::default()
        }
    }

    /// Adds one number; NaN (not measured) is left out.
    pub fn push(&mut self, l: &Label, metric: &str, value: f64, unit: &str) {
        if value.is_nan() {
            return;
        }
        self.rows.push(Row {
            system: l.system.clone(),
            config: l.config.clone(),
            param: l.param.clone(),
            metric: metric.into(),
            value,
            unit: unit.into(),
        });
    }

    /// The value of one metric, if measured.
    pub fn value(&self, system: &str, config: &str, param: &str, metric: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| {
                r.system == system && r.config == config && r.param == param && r.metric == metric
            })
            .map(|r| r.value)
    }

    /// `(system, config)` pairs in the order measured.
    pub fn systems(&self) -> Vec<(String, String)> {
        unique(
            self.rows
                .iter()
                .map(|r| (r.system.clone(), r.config.clone())),
        )
    }

    /// Parameters in the order measured, of the rows with `metric` (any: `None`).
    pub fn params(&self, metric: Option<&str>) -> Vec<String> {
        let rows = self
            .rows
            .iter()
            .filter(|r| metric.is_none_or(|m| r.metric == m));
        unique(rows.map(|r| r.param.clone()))
    }

    /// Writes `DIR/NAME.json` and `DIR/NAME.csv`; returns their paths.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, CliError> {
        std::fs::create_dir_all(dir)
            .map_err(CliError::io(format!("creating {}", dir.display())))?;
        let json = dir.join(format!("{}.json", self.bench));
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        write_file(&json, &text)?;
        let csv = dir.join(format!("{}.csv", self.bench));
        write_file(&csv, &self.csv()?)?;
        Ok(vec![json, csv])
    }

    /// The rows as CSV, with a header line.
    pub fn csv(&self) -> Result<String, CliError> {
        let err = |e: String| CliError::Bench(format!("{}: CSV: {e}", self.bench));
        let mut w = csv::Writer::from_writer(Vec::new());
        for r in &self.rows {
            w.serialize(r).map_err(|e| err(e.to_string()))?;
        }
        let bytes = w.into_inner().map_err(|e| err(e.to_string()))?;
        String::from_utf8(bytes).map_err(|e| err(e.to_string()))
    }

    /// Prints one line per system/config and parameter, one column per
    /// metric of `cols`, then one per standard row of the harness that the
    /// report holds and `cols` does not name, in the order first met:
    /// fences and lines per operation, `ratio_vs_NAME` (`x NAME`) and
    /// `speed_vs_NAME` (`vs NAME`), with 2 decimals (`-`: not measured
    /// there); then `note`, when given.
    pub fn print_table(&self, cols: &[Col], note: Option<&str>) {
        let mut cols: Vec<(&str, String, usize)> = cols
            .iter()
            .map(|c| (c.0.as_str(), c.1.clone(), c.2))
            .collect();
        for m in unique(self.rows.iter().map(|r| r.metric.as_str())) {
            let head = match m.split_once("_vs_") {
                Some(("ratio", name)) => format!("x {name}"),
                Some(("speed", name)) => format!("vs {name}"),
                _ if m.starts_with("fences_per_") => "fences".into(),
                _ if m.starts_with("flushes_per_") => "lines".into(),
                _ => continue,
            };
            if !cols.iter().any(|c| c.0 == m) {
                cols.push((m, head, 2));
            }
        }
        let width = |s: &str| s.len().max(9);
        let mut head = format!("  {:<40}", "system/config  param");
        for (_, h, _) in &cols {
            head.push_str(&format!(" {:>w$}", h, w = width(h)));
        }
        println!("\n{head}");
        for (s, c) in self.systems() {
            for p in self.params(None) {
                let vals: Vec<Option<f64>> = cols
                    .iter()
                    .map(|col| self.value(&s, &c, &p, col.0))
                    .collect();
                if vals.iter().all(Option::is_none) {
                    continue;
                }
                let mut line = format!("  {:<40}", format!("{s}/{c}  {p}"));
                for ((_, h, prec), v) in cols.iter().zip(vals) {
                    let v = v.map_or("-".into(), |v| format!("{v:.prec$}"));
                    line.push_str(&format!(" {v:>w$}", w = width(h)));
                }
                println!("{line}");
            }
        }
        if let Some(note) = note {
            println!("  {note}");
        }
        println!();
    }

    /// The chart as an SVG document.
    pub fn chart(&self, chart: &Chart) -> Result<String, CliError> {
        let mut xs: Vec<String> = Vec::new();
        let mut series = Vec::new();
        for m in &chart.metrics {
            xs = unique(xs.into_iter().chain(self.params(Some(m))));
        }
        for (s, c) in self.systems() {
            for m in &chart.metrics {
                let ys: Vec<f64> = xs
                    .iter()
                    .map(|p| self.value(&s, &c, p, m).unwrap_or(f64::NAN))
                    .collect();
                if ys.iter().all(|y| y.is_nan()) {
                    continue;
                }
                let mut name = if s == "rewind" { c.clone() } else { s.clone() };
                if chart.metrics.len() > 1 {
                    name = format!("{name} {m}");
                }
                series.push((name, ys));
            }
        }
        draw(chart, &xs, &series)
            .map_err(|e| CliError::Bench(format!("drawing the chart `{}`: {e}", chart.title)))
    }
}

/// The distinct items, in their first order.
fn unique<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// Writes `text` to `path`, saying which file failed.
pub fn write_file(path: &Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text).map_err(CliError::io(format!("writing {}", path.display())))
}

/// An axis label: no more digits than the value needs.
fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        // One significant digit more than the magnitude: 0.001, 0.05.
        let digits = (-a.log10().floor()).clamp(1.0, 9.0) as usize + 1;
        format!("{v:.digits$}")
    }
}

/// Series `i`'s colour: plotters' 99-colour palette, told apart on white.
fn color(i: usize) -> RGBColor {
    let (r, g, b) = Palette99::pick(i).rgb();
    RGBColor(r, g, b)
}

type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Lines over the categories `xs` (evenly spaced, each labelled), y on a
/// log scale when the chart says so; the legend outside, on the right.
fn draw(chart: &Chart, xs: &[String], series: &[(String, Vec<f64>)]) -> DrawResult<String> {
    // Values past ±1e100 (a hand-edited or broken result) stay out of the
    // chart, in the table and the CSV alone: a log axis to 1e308 never
    // finishes laying out its ticks.
    let ok = |y: &f64| y.is_finite() && y.abs() <= 1e100 && (!chart.log_y() || *y >= 1e-100);
    let all = || {
        series
            .iter()
            .flat_map(|(_, ys)| ys.iter().copied())
            .filter(ok)
    };
    let (mut lo, mut hi) = all().fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    if lo > hi {
        (lo, hi) = (1.0, 10.0);
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, 600)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot, legend) = root.split_horizontally(860);
        let mut builder = ChartBuilder::on(&plot);
        builder
            .caption(&chart.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70);
        let x_range = -0.5..(xs.len() as f64 - 0.5);
        let x_label = |x: &f64| {
            let i = x.round();
            match (i - x).abs() < 1e-6 && i >= 0.0 {
                true => xs.get(i as usize).cloned().unwrap_or_default(),
                false => String::new(),
            }
        };
        macro_rules! lines {
            ($chart:expr) => {{
                let mut c = $chart;
                c.configure_mesh()
                    .x_labels(xs.len() * 2 + 1)
                    .x_label_formatter(&x_label)
                    .y_label_formatter(&|y| tick(*y))
                    .y_desc(&chart.y_label)
                    .draw()?;
                for (i, (_, ys)) in series.iter().enumerate() {
                    let color = color(i).stroke_width(2);
                    let pts: Vec<(f64, f64)> = (ys.iter().enumerate())
                        .map(|(x, &y)| (x as f64, y))
                        .filter(|(_, y)| ok(y))
                        .collect();
                    c.draw_series(LineSeries::new(pts.clone(), color))?;
                    c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
                }
            }};
        }
        if chart.log_y() {
            lines!(builder.build_cartesian_2d(x_range, ((lo / 1.5)..(hi * 1.5)).log_scale())?);
        } else {
            lines!(builder.build_cartesian_2d(x_range, 0.0..(hi * 1.1))?);
        }
        for (i, (name, _)) in series.iter().enumerate() {
            let y = 40 + 18 * i as i32;
            legend.draw(&Rectangle::new([(8, y), (22, y + 10)], color(i).filled()))?;
            legend.draw(&Text::new(name.clone(), (28, y), ("sans-serif", 12)))?;
        }
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(config: &str, param: &str) -> Label {
        Label::new("rewind", config, param)
    }

    #[test]
    fn csv_and_json_hold_the_same_rows_and_the_chart_names_every_series() {
        let mut r = Report::new("t");
        r.push(&label("a,b", "K=1"), "us", 1.5, "us");
        r.push(&label("c", "K=1"), "us", 2.0, "us");
        r.push(&label("c", "K=8"), "us", f64::NAN, "us");
        assert_eq!(r.rows.len(), 2, "NaN is not a row");
        let dir = tempfile::tempdir().unwrap();
        r.write(dir.path()).unwrap();
        let mut csv = csv::Reader::from_path(dir.path().join("t.csv")).unwrap();
        let back: Vec<Row> = csv.deserialize().collect::<Result<_, _>>().unwrap();
        assert_eq!(back, r.rows, "a comma in a field survives");
        let chart = Chart {
            title: "t".into(),
            y_label: "y".into(),
            metrics: vec!["us".into()],
            scale: Scale::Costs,
        };
        let svg = r.chart(&chart).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("a,b") && svg.contains("K=1"));
    }
}
