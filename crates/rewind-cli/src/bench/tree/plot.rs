//! Line plots of the B+-tree benchmarks, drawn with `plotters` into an
//! SVG string (its SVG backend only: no fonts or bitmaps are needed).

use plotters::prelude::*;

use crate::error::CliError;

/// One line: a name and a y per x (NaN: no point).
pub struct Series {
    pub name: String,
    pub ys: Vec<f64>,
}

/// Where the legend goes, and room for it: on a log scale the y range
/// reaches down `room` times below the lowest point.
pub struct Legend {
    pub pos: SeriesLabelPosition,
    pub room: f64,
}

/// An axis label: no more digits than the value needs.
fn tick(v: &f64) -> String {
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

/// Strong colours, told apart on white (plotters' palettes include pale ones).
const COLORS: [(u8, u8, u8); 20] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (100, 100, 100),
    (160, 160, 20),
    (23, 170, 190),
    (0, 0, 128),
    (128, 0, 0),
    (0, 128, 128),
    (110, 110, 0),
    (20, 20, 20),
    (220, 0, 220),
    (0, 100, 0),
    (139, 69, 19),
    (72, 61, 139),
    (205, 92, 92),
];

fn color(i: usize) -> RGBAColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b).to_rgba()
}

/// A line chart of `series` over `xs` (one tick per x), y on a log scale
/// when `log_y`.
pub fn lines(
    title: &str,
    (x_label, y_label): (&str, &str),
    xs: &[f64],
    series: &[Series],
    log_y: bool,
    legend: Legend,
) -> Result<String, CliError> {
    let err = |e: String| CliError::Bench(format!("drawing the chart `{title}`: {e}"));
    let finite = || {
        series
            .iter()
            .flat_map(|s| s.ys.iter().copied())
            .filter(|y| y.is_finite() && (!log_y || *y > 0.0))
    };
    let (mut lo, mut hi) = finite().fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    if lo > hi {
        (lo, hi) = (1.0, 10.0);
    }
    let (x0, x1) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let (x0, x1) = if x0 < x1 {
        (x0, x1)
    } else {
        (x0 - 1.0, x0 + 1.0)
    };
    let pad = (x1 - x0) * 0.03;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70);
        let x_range = (x0 - pad)..(x1 + pad);
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_labels(xs.len().max(2) * 2)
                    .x_label_formatter(&|x| tick(x))
                    .y_label_formatter(&|y| tick(y))
                    .x_desc(x_label)
                    .y_desc(y_label)
                    .draw()
                    .map_err(|e| err(e.to_string()))?;
                for (i, s) in series.iter().enumerate() {
                    let color = color(i);
                    let points: Vec<(f64, f64)> = xs
                        .iter()
                        .copied()
                        .zip(s.ys.iter().copied())
                        .filter(|(_, y)| y.is_finite() && (!log_y || *y > 0.0))
                        .collect();
                    chart
                        .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                        .map_err(|e| err(e.to_string()))?
                        .label(s.name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                        });
                    chart
                        .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                        .map_err(|e| err(e.to_string()))?;
                }
                chart
                    .configure_series_labels()
                    .position(legend.pos)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 11))
                    .draw()
                    .map_err(|e| err(e.to_string()))?;
            }};
        }
        if log_y {
            let y_range = (lo / 1.5 / legend.room.max(1.0))..(hi * 1.5);
            draw!(builder
                .build_cartesian_2d(x_range, y_range.log_scale())
                .map_err(|e| err(e.to_string()))?);
        } else {
            let y_range = 0.0..(hi * 1.1);
            draw!(builder
                .build_cartesian_2d(x_range, y_range)
                .map_err(|e| err(e.to_string()))?);
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg_with_every_series_named() {
        let series = vec![
            Series {
                name: "volatile".into(),
                ys: vec![0.5, 0.6, f64::NAN],
            },
            Series {
                name: "rewind".into(),
                ys: vec![1.0, 2.0, 3.0],
            },
        ];
        let legend = Legend {
            pos: SeriesLabelPosition::UpperLeft,
            room: 1.0,
        };
        let svg = lines("t", ("x", "y"), &[0.0, 0.5, 1.0], &series, true, legend).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("volatile") && svg.contains("rewind"));
    }
}
