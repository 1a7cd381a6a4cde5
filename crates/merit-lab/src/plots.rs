//! The report's figures as small SVG files.
//!
//! Written by hand rather than with a plotting crate because the figures must be
//! byte-identical for identical records (reports are compared across resumed runs) and need
//! no font files: a few rectangles, polylines and text elements are all they use.
//!
//! Every figure has the same fixed plot rectangle (so figures line up side by side), axis
//! ticks at "nice" round values, and, for line charts, a legend to the right of the plot
//! rectangle: the SVG is widened to fit it rather than drawing it over the data. Each series
//! differs from the others in colour, dash pattern and marker shape, so that two identical
//! curves drawn on top of each other both stay visible.

use crate::report::{MethodSummary, Report};
use merit_core::episode::EpisodeRecord;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Default SVG height; the SVG grows taller only when a legend or rotated labels need it.
const HEIGHT: f64 = 400.0;
/// Room left of the plot rectangle for the y tick labels and the rotated y axis title.
const LEFT: f64 = 70.0;
/// Width of the plot rectangle, the same in every figure.
const PLOT_WIDTH: f64 = 560.0;
/// Margin right of the plot rectangle (or of the legend, when there is one).
const RIGHT: f64 = 20.0;
/// Room above the plot rectangle for the title, and for a bar's value label when the bar
/// reaches the top of the axis.
const TOP: f64 = 46.0;
/// Room below the plot rectangle for the x tick labels and the x axis title.
const BOTTOM: f64 = 60.0;
const PLOT_RIGHT: f64 = LEFT + PLOT_WIDTH;
const PLOT_BOTTOM: f64 = HEIGHT - BOTTOM;
/// A generous estimate of the advance of one character at font-size 12 in a sans-serif font.
/// Without font metrics the layout can only estimate text widths; overestimating keeps
/// labels from running into each other or off the canvas.
const CHAR_WIDTH: f64 = 7.0;
/// Gap between the plot rectangle and the legend.
const LEGEND_GAP: f64 = 20.0;
/// Length of the line sample drawn in front of each legend entry.
const LEGEND_SAMPLE: f64 = 36.0;
/// Vertical distance between legend entries.
const LEGEND_ROW: f64 = 18.0;
/// About how many intervals an axis is divided into; the nice-number search picks the
/// smallest round step that gives at most roughly this many.
const TARGET_INTERVALS: f64 = 5.0;
/// At most about this many markers per series: a marker on every point of a long stream
/// would merge into a thick smudge.
const MAX_MARKERS: usize = 12;

/// Colours, dash patterns and marker shapes, indexed together by series position. The first
/// series is solid and every later one dashed or dotted, so a later curve drawn exactly over
/// an earlier one lets the earlier one show through its gaps.
const PALETTE: &[&str] = &[
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
];
const DASHES: &[&str] = &[
    "",
    "8 4",
    "2 3",
    "10 3 2 3",
    "14 5",
    "4 4",
    "10 3 2 3 2 3",
    "1 5",
];
const MARKERS: &[Marker] = &[
    Marker::Circle,
    Marker::Square,
    Marker::TriangleUp,
    Marker::Diamond,
    Marker::TriangleDown,
    Marker::Cross,
    Marker::Plus,
    Marker::Asterisk,
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Estimated rendered width of `text`, in pixels (see [`CHAR_WIDTH`]).
fn text_width(text: &str) -> f64 {
    text.chars().count() as f64 * CHAR_WIDTH
}

/// Opens an SVG of the given size with its title and the two axis titles.
///
/// A positive `shift` moves the whole drawing right by that much inside a group, for labels
/// that reach left of the usual margin; [`footer`] closes the group.
fn header(
    width: f64,
    height: f64,
    shift: f64,
    title: &str,
    y_label: &str,
    x_label: &str,
) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    if shift > 0.0 {
        let _ = writeln!(svg, r#"<g transform="translate({shift:.0} 0)">"#);
    }
    // Titles are centred on the plot rectangle rather than the canvas, so a wide legend does
    // not pull them sideways.
    let middle = LEFT + PLOT_WIDTH / 2.0;
    let _ = writeln!(
        svg,
        r#"<text x="{middle:.0}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        escape(title)
    );
    let y_middle = TOP + (PLOT_BOTTOM - TOP) / 2.0;
    let _ = writeln!(
        svg,
        r#"<text x="16" y="{y_middle:.0}" transform="rotate(-90 16 {y_middle:.0})" text-anchor="middle">{}</text>"#,
        escape(y_label)
    );
    let _ = writeln!(
        svg,
        r#"<text x="{middle:.0}" y="{:.0}" text-anchor="middle">{}</text>"#,
        height - 12.0,
        escape(x_label)
    );
    svg
}

/// Closes an SVG opened by [`header`] with the same `shift`.
fn footer(svg: &mut String, shift: f64) {
    if shift > 0.0 {
        svg.push_str("</g>\n");
    }
    svg.push_str("</svg>\n");
}

/// Round tick values along one axis: `ticks[0]` and the last tick are the axis ends.
#[derive(Debug, Clone, PartialEq)]
struct Axis {
    ticks: Vec<f64>,
    /// Decimals that print every tick exactly (e.g. 2 for a step of 0.25).
    decimals: usize,
}

impl Axis {
    fn min(&self) -> f64 {
        self.ticks[0]
    }

    fn max(&self) -> f64 {
        self.ticks[self.ticks.len() - 1]
    }

    fn label(&self, value: f64) -> String {
        let text = format!("{value:.*}", self.decimals);
        // A tick that is zero up to rounding must not print as "-0".
        if text.starts_with('-') && text[1..].chars().all(|c| c == '0' || c == '.') {
            text[1..].to_string()
        } else {
            text
        }
    }
}

/// Ticks at "nice" round values covering `low..=high`: the step is 1, 2, 2.5 or 5 times a
/// power of ten, the smallest such step that divides the range into at most about
/// [`TARGET_INTERVALS`] intervals, and the axis runs from the largest multiple of the step at
/// or below `low` to the smallest at or above `high`. With `integer` the step is a whole
/// number of at least 1 (stream positions and repair steps have no fractional ticks).
///
/// Ticks are computed as (index × mantissa) scaled by an exact power of ten, not by adding
/// the step repeatedly, so 0.1-steps give 0.3 rather than 0.30000000000000004 and the output
/// does not drift with the number of ticks.
fn nice_ticks(low: f64, high: f64, integer: bool) -> Axis {
    let (low, high) = if low.is_finite() && high.is_finite() {
        (low.min(high), low.max(high))
    } else {
        (0.0, 1.0)
    };
    let (low, mut high) = if (high - low).is_finite() {
        (low, high)
    } else {
        // A range too wide for an f64 span (only from corrupt data) gets a placeholder.
        (0.0, 1.0)
    };
    if high - low <= f64::EPSILON * high.abs().max(1.0) {
        // A flat range still needs an axis with some extent, one that is not lost to
        // rounding when added to a large value.
        high = low + low.abs().max(1.0);
    }
    let raw = (high - low) / TARGET_INTERVALS;
    let mut exponent = raw.log10().floor() as i32;
    if integer {
        exponent = exponent.max(0);
    }
    // Mantissas times ten so that 2.5 is an integer: step = MANTISSA10 × 10^(exponent - 1).
    const MANTISSA10: [f64; 4] = [10.0, 20.0, 25.0, 50.0];
    let scale = |value: f64, power: i32| {
        // Multiplying or dividing by an exactly representable power of ten rounds once.
        if power >= 0 {
            value * 10f64.powi(power)
        } else {
            value / 10f64.powi(-power)
        }
    };
    let (mantissa, power) = (exponent..=exponent + 2)
        .flat_map(|e| MANTISSA10.iter().map(move |&m| (m, e - 1)))
        .find(|&(m, p)| {
            let step = scale(m, p);
            // The slack keeps a raw step that is 2 up to rounding noise from becoming 2.5.
            step >= raw * (1.0 - 1e-9) && (!integer || (step >= 1.0 && step.fract() == 0.0))
        })
        .unwrap_or((10.0, exponent + 1));
    let step = scale(mantissa, power);
    // Slack for data that sits on a tick up to rounding noise (e.g. 100.00000000000001%).
    let first = (low / step + 1e-9).floor();
    let last = (high / step - 1e-9).ceil().max(first + 1.0);
    let ticks = (0..=(last - first) as usize)
        .map(|offset| scale((first + offset as f64) * mantissa, power))
        .collect();
    let decimals = if power < 0 {
        // 25 × 10^-2 = 0.25 needs two decimals, 20 × 10^-2 = 0.2 one.
        let trailing_zero = mantissa % 10.0 == 0.0;
        (-power) as usize - usize::from(trailing_zero)
    } else {
        0
    };
    Axis { ticks, decimals }
}

/// Ticks for a y axis over `values` that always includes 0 (bars and counts are read from
/// zero). A percent axis never runs past 100, which it would otherwise do only through
/// rounding noise, since every nice step below 100 divides 100.
fn y_axis(values: impl Iterator<Item = f64>, percent: bool) -> Axis {
    let (mut low, mut high) = (0.0_f64, 0.0_f64);
    let mut any = false;
    for value in values.filter(|v| v.is_finite()) {
        low = low.min(value);
        high = high.max(value);
        any = true;
    }
    if percent {
        high = if any { high.min(100.0) } else { 100.0 };
    }
    nice_ticks(low, high, false)
}

/// Maps data coordinates into the fixed plot rectangle.
struct Frame {
    x: Axis,
    y: Axis,
}

impl Frame {
    fn x(&self, value: f64) -> f64 {
        let span = (self.x.max() - self.x.min()).max(f64::EPSILON);
        LEFT + (value - self.x.min()) / span * PLOT_WIDTH
    }

    fn y(&self, value: f64) -> f64 {
        let span = (self.y.max() - self.y.min()).max(f64::EPSILON);
        PLOT_BOTTOM - (value - self.y.min()) / span * (PLOT_BOTTOM - TOP)
    }

    /// Horizontal grid lines with labelled ticks on the y axis, then both axis lines (drawn
    /// last so the grid does not cover them).
    fn y_axis(&self, svg: &mut String) {
        for &value in &self.y.ticks {
            let y = self.y(value);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{PLOT_RIGHT}" y2="{y:.1}" stroke="#dddddd"/><line x1="{}" y1="{y:.1}" x2="{LEFT}" y2="{y:.1}" stroke="black"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT - 4.0,
                LEFT - 7.0,
                y + 4.0,
                self.y.label(value)
            );
        }
        // The x axis line sits at 0 when the range spans negative values (e.g. rewards).
        let base = self.y(0.0_f64.clamp(self.y.min(), self.y.max()));
        let _ = writeln!(
            svg,
            r#"<line x1="{LEFT}" y1="{base:.1}" x2="{PLOT_RIGHT}" y2="{base:.1}" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{PLOT_BOTTOM}" stroke="black"/>"#
        );
    }

    /// Labelled tick marks below the plot rectangle at the x axis's round values.
    fn x_axis(&self, svg: &mut String) {
        for &value in &self.x.ticks {
            let x = self.x(value);
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{PLOT_BOTTOM}" x2="{x:.1}" y2="{}" stroke="black"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                PLOT_BOTTOM + 4.0,
                PLOT_BOTTOM + 17.0,
                self.x.label(value)
            );
        }
    }
}

/// A marker shape distinguishing one series from another where colours are hard to tell
/// apart (print, colour blindness, or two curves on top of each other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Circle,
    Square,
    TriangleUp,
    Diamond,
    TriangleDown,
    Cross,
    Plus,
    Asterisk,
}

impl Marker {
    /// The marker centred on (x, y), hollow so that differently shaped markers on the same
    /// point all stay visible.
    fn svg(self, x: f64, y: f64, color: &str) -> String {
        let style = format!(r#"fill="none" stroke="{color}" stroke-width="1.5""#);
        let polygon = |points: &[(f64, f64)]| {
            let points: Vec<String> = points
                .iter()
                .map(|(dx, dy)| format!("{:.1},{:.1}", x + dx, y + dy))
                .collect();
            format!(r#"<polygon points="{}" {style}/>"#, points.join(" "))
        };
        let path = |segments: &[(f64, f64, f64, f64)]| {
            let d: Vec<String> = segments
                .iter()
                .map(|(x1, y1, x2, y2)| {
                    format!("M{:.1} {:.1}L{:.1} {:.1}", x + x1, y + y1, x + x2, y + y2)
                })
                .collect();
            format!(r#"<path d="{}" {style}/>"#, d.concat())
        };
        match self {
            Marker::Circle => format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" {style}/>"#),
            Marker::Square => format!(
                r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" {style}/>"#,
                x - 3.5,
                y - 3.5
            ),
            Marker::TriangleUp => polygon(&[(0.0, -4.5), (4.0, 3.0), (-4.0, 3.0)]),
            Marker::Diamond => polygon(&[(0.0, -4.5), (4.5, 0.0), (0.0, 4.5), (-4.5, 0.0)]),
            Marker::TriangleDown => polygon(&[(0.0, 4.5), (4.0, -3.0), (-4.0, -3.0)]),
            Marker::Cross => path(&[(-4.0, -4.0, 4.0, 4.0), (-4.0, 4.0, 4.0, -4.0)]),
            Marker::Plus => path(&[(-4.5, 0.0, 4.5, 0.0), (0.0, -4.5, 0.0, 4.5)]),
            Marker::Asterisk => path(&[
                (-4.5, 0.0, 4.5, 0.0),
                (-2.5, -4.0, 2.5, 4.0),
                (-2.5, 4.0, 2.5, -4.0),
            ]),
        }
    }
}

/// Colour, dash pattern and marker of the series at `index` in drawing order.
struct Style {
    color: &'static str,
    dash: &'static str,
    marker: Marker,
}

impl Style {
    fn of(index: usize) -> Style {
        Style {
            color: PALETTE[index % PALETTE.len()],
            dash: DASHES[index % DASHES.len()],
            marker: MARKERS[index % MARKERS.len()],
        }
    }

    fn dash_attribute(&self) -> String {
        if self.dash.is_empty() {
            String::new()
        } else {
            format!(r#" stroke-dasharray="{}""#, self.dash)
        }
    }
}

/// Accuracy per method: bars at the mean over seeds, whiskers at the 95% bootstrap interval.
///
/// Methods are categories along the x axis, each named under its bar (so the bars need no
/// legend); the names are set at an angle, with the SVG made taller, when they would not fit
/// side by side.
pub fn accuracy_bars(report: &Report) -> String {
    let methods: &[MethodSummary] = &report.methods;
    let count = methods.len().max(1);
    let frame = Frame {
        x: Axis {
            ticks: vec![0.0, count as f64],
            decimals: 0,
        },
        y: y_axis(
            methods
                .iter()
                .flat_map(|m| [m.accuracy_mean, m.accuracy_ci.0, m.accuracy_ci.1]),
            true,
        ),
    };
    let slot = PLOT_WIDTH / count as f64;
    let widest = methods
        .iter()
        .map(|m| text_width(&m.method))
        .fold(0.0_f64, f64::max);
    let slanted = widest > slot - 6.0;
    // A label slanted at 45 degrees drops by its width times sin 45°.
    let drop = if slanted {
        widest * std::f64::consts::FRAC_1_SQRT_2
    } else {
        0.0
    };
    let height = HEIGHT.max((PLOT_BOTTOM + 17.0 + drop + 32.0).ceil());
    // A slanted label also reaches left by its width times cos 45°; the first one may need
    // more room than the margin left of the plot gives.
    let shift = if slanted {
        (drop + 8.0 - (LEFT + slot / 2.0)).max(0.0).ceil()
    } else {
        0.0
    };
    let mut svg = header(
        PLOT_RIGHT + RIGHT + shift,
        height,
        shift,
        "Execution accuracy per method (95% CI)",
        "accuracy (%)",
        "method",
    );
    frame.y_axis(&mut svg);
    for (index, method) in methods.iter().enumerate() {
        let left = frame.x(index as f64 + 0.2);
        let right = frame.x(index as f64 + 0.8);
        let middle = (left + right) / 2.0;
        let color = PALETTE[index % PALETTE.len()];
        let mean = method.accuracy_mean;
        if mean.is_finite() {
            let y = frame.y(mean);
            let _ = writeln!(
                svg,
                r#"<rect x="{left:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                right - left,
                frame.y(0.0) - y
            );
        }
        let (low, high) = method.accuracy_ci;
        let mut label_y = frame.y(if mean.is_finite() { mean } else { 0.0 });
        if low.is_finite() && high.is_finite() {
            let (low, high) = (frame.y(low), frame.y(high));
            label_y = label_y.min(high);
            // Short caps mark the interval's ends, which a bare line leaves ambiguous where it
            // meets the bar's top edge.
            let _ = writeln!(
                svg,
                r#"<line x1="{middle:.1}" y1="{low:.1}" x2="{middle:.1}" y2="{high:.1}" stroke="black"/><line x1="{:.1}" y1="{low:.1}" x2="{:.1}" y2="{low:.1}" stroke="black"/><line x1="{:.1}" y1="{high:.1}" x2="{:.1}" y2="{high:.1}" stroke="black"/>"#,
                middle - 5.0,
                middle + 5.0,
                middle - 5.0,
                middle + 5.0
            );
        }
        let _ = writeln!(
            svg,
            r#"<line x1="{middle:.1}" y1="{PLOT_BOTTOM}" x2="{middle:.1}" y2="{}" stroke="black"/>"#,
            PLOT_BOTTOM + 4.0
        );
        if slanted {
            let y = PLOT_BOTTOM + 14.0;
            let _ = writeln!(
                svg,
                r#"<text x="{middle:.1}" y="{y:.1}" transform="rotate(-45 {middle:.1} {y:.1})" text-anchor="end">{}</text>"#,
                escape(&method.method)
            );
        } else {
            let _ = writeln!(
                svg,
                r#"<text x="{middle:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                PLOT_BOTTOM + 17.0,
                escape(&method.method)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{middle:.1}" y="{:.1}" text-anchor="middle">{mean:.1}</text>"#,
            label_y - 4.0
        );
    }
    footer(&mut svg, shift);
    svg
}

/// A line chart of named series of (x, y) points, drawn in `order` (SVG text).
///
/// Names in `order` without a series are skipped, and series not named in `order` are not
/// drawn. The series at position i of `order` gets colour, dash pattern and marker shape i
/// (the first solid, later ones dashed or dotted), and a legend entry right of the plot that
/// shows all three; a series identical to one drawn before it says so in its entry. The x
/// axis has whole-number ticks when every x is a whole number.
pub fn line_chart(
    title: &str,
    y_label: &str,
    x_label: &str,
    series: &BTreeMap<String, Vec<(f64, f64)>>,
    order: &[String],
) -> String {
    draw_lines(title, y_label, x_label, series, order, false)
}

/// One series' (x, y) points.
type Points = Vec<(f64, f64)>;

/// [`line_chart`], with a y axis capped at 100 when `percent`.
fn draw_lines(
    title: &str,
    y_label: &str,
    x_label: &str,
    series: &BTreeMap<String, Vec<(f64, f64)>>,
    order: &[String],
    percent: bool,
) -> String {
    let drawn: Vec<(usize, &String, &Points)> = order
        .iter()
        .enumerate()
        .filter_map(|(index, name)| series.get(name).map(|values| (index, name, values)))
        .collect();
    let points = || {
        drawn
            .iter()
            .flat_map(|(_, _, values)| values.iter())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    };
    let integer_x = points().all(|(x, _)| x.fract() == 0.0);
    let (x_low, x_high) = points().fold((0.0_f64, 0.0_f64), |(low, high), (x, _)| {
        (low.min(*x), high.max(*x))
    });
    let frame = Frame {
        x: nice_ticks(x_low, x_high, integer_x),
        y: y_axis(points().map(|(_, y)| *y), percent),
    };

    let labels: Vec<String> = drawn
        .iter()
        .enumerate()
        .map(|(position, (_, name, values))| {
            // Identical curves coincide exactly; the reader is told rather than left to
            // guess why one of them seems to be missing.
            match drawn[..position]
                .iter()
                .find(|(_, _, other)| other == values)
            {
                Some((_, earlier, _)) => format!("{name} (identical to {earlier})"),
                None => (*name).clone(),
            }
        })
        .collect();
    let legend_left = PLOT_RIGHT + LEGEND_GAP;
    let legend_text = legend_left + LEGEND_SAMPLE + 6.0;
    let width = if drawn.is_empty() {
        PLOT_RIGHT + RIGHT
    } else {
        let widest = labels.iter().map(|l| text_width(l)).fold(0.0, f64::max);
        (legend_text + widest + RIGHT).ceil()
    };
    let height = HEIGHT.max(TOP + LEGEND_ROW * drawn.len() as f64 + 10.0);
    let mut svg = header(width, height, 0.0, title, y_label, x_label);
    frame.y_axis(&mut svg);
    frame.x_axis(&mut svg);

    // All lines first, then all markers, so no line hides another series' markers.
    for (index, _, values) in &drawn {
        let style = Style::of(*index);
        // A non-finite value breaks the line instead of being plotted somewhere arbitrary.
        for segment in values.split(|(x, y)| !(x.is_finite() && y.is_finite())) {
            if segment.is_empty() {
                continue;
            }
            let path: Vec<String> = segment
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", frame.x(*x), frame.y(*y)))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline class="series" fill="none" stroke="{}" stroke-width="2"{} points="{}"/>"#,
                style.color,
                style.dash_attribute(),
                path.join(" ")
            );
        }
    }
    for (index, _, values) in &drawn {
        let style = Style::of(*index);
        // Every k-th point carries a marker; each series starts at a different offset so
        // that the markers of identical curves fall on different points.
        let every = values.len().div_ceil(MAX_MARKERS).max(1);
        let offset = index * every / order.len().max(1) % every;
        for (x, y) in values
            .iter()
            .skip(offset)
            .step_by(every)
            .filter(|(x, y)| x.is_finite() && y.is_finite())
        {
            svg.push_str(&style.marker.svg(frame.x(*x), frame.y(*y), style.color));
            svg.push('\n');
        }
    }
    for (row, ((index, _, _), label)) in drawn.iter().zip(&labels).enumerate() {
        let style = Style::of(*index);
        let y = TOP + 6.0 + LEGEND_ROW * row as f64;
        let _ = writeln!(
            svg,
            r#"<g class="legend-entry"><line x1="{legend_left:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{}" stroke-width="2"{}/>{}<text x="{legend_text:.1}" y="{:.1}">{}</text></g>"#,
            legend_left + LEGEND_SAMPLE,
            style.color,
            style.dash_attribute(),
            style
                .marker
                .svg(legend_left + LEGEND_SAMPLE / 2.0, y, style.color),
            y + 4.0,
            escape(label)
        );
    }
    footer(&mut svg, 0.0);
    svg
}

fn by_method_and_seed(
    episodes: &[EpisodeRecord],
) -> BTreeMap<String, BTreeMap<u64, Vec<&EpisodeRecord>>> {
    let mut grouped: BTreeMap<String, BTreeMap<u64, Vec<&EpisodeRecord>>> = BTreeMap::new();
    for episode in episodes {
        grouped
            .entry(episode.method.clone())
            .or_default()
            .entry(episode.seed)
            .or_default()
            .push(episode);
    }
    grouped
}

/// Cumulative initial failures repaired by repair step k (mean over seeds), per method.
pub fn repaired_by_step(report: &Report, episodes: &[EpisodeRecord]) -> String {
    let grouped = by_method_and_seed(episodes);
    let max_step = episodes.iter().map(|e| e.repair_steps()).max().unwrap_or(0);
    let mut series = BTreeMap::new();
    for (method, runs) in &grouped {
        let seeds = runs.len() as f64;
        let points = (0..=max_step)
            .map(|step| {
                let total: usize = runs
                    .values()
                    .map(|run| {
                        run.iter()
                            .filter(|e| e.repaired() && e.repair_steps() <= step)
                            .count()
                    })
                    .sum();
                (step as f64, total as f64 / seeds)
            })
            .collect();
        series.insert(method.clone(), points);
    }
    let order: Vec<String> = report.methods.iter().map(|m| m.method.clone()).collect();
    line_chart(
        "Initial failures repaired by repair step",
        "repaired (mean over seeds)",
        "repair step",
        &series,
        &order,
    )
}

/// Running accuracy along the stream (mean over seeds): how memory warms up.
pub fn accuracy_over_stream(report: &Report, episodes: &[EpisodeRecord]) -> String {
    let grouped = by_method_and_seed(episodes);
    let mut series = BTreeMap::new();
    for (method, runs) in &grouped {
        let length = runs.values().map(Vec::len).min().unwrap_or(0);
        let seeds = runs.len() as f64;
        let mut running = vec![0.0; length];
        for run in runs.values() {
            let mut ordered: Vec<&&EpisodeRecord> = run.iter().collect();
            ordered.sort_by_key(|e| e.position);
            let mut correct = 0usize;
            for (index, episode) in ordered.iter().take(length).enumerate() {
                correct += usize::from(episode.finally_correct());
                running[index] += correct as f64 / (index + 1) as f64 * 100.0 / seeds;
            }
        }
        let points = running
            .iter()
            .enumerate()
            .map(|(index, value)| ((index + 1) as f64, *value))
            .collect();
        series.insert(method.clone(), points);
    }
    let order: Vec<String> = report.methods.iter().map(|m| m.method.clone()).collect();
    draw_lines(
        "Running accuracy over stream position",
        "accuracy so far (%)",
        "stream position",
        &series,
        &order,
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::build_report;
    use merit_core::episode::AttemptRecord;
    use merit_core::Status;

    fn episode(
        method: &str,
        seed: u64,
        position: usize,
        repaired_at: Option<u32>,
    ) -> EpisodeRecord {
        let mut attempts = vec![AttemptRecord {
            step: 0,
            sql: "SELECT 0".into(),
            status: Status::DenotationMismatch,
            error: None,
            failure_type: None,
            retrieved: vec![],
            prompt_tokens: 0,
            completion_tokens: 0,
            calls: 0,
            aids: Default::default(),
        }];
        for step in 1..=repaired_at.unwrap_or(3) {
            let mut attempt = attempts[0].clone();
            attempt.step = step;
            attempt.status = if Some(step) == repaired_at {
                Status::Correct
            } else {
                Status::ExecutionError
            };
            attempts.push(attempt);
        }
        EpisodeRecord {
            method: method.into(),
            seed,
            position,
            question_id: format!("q{position}"),
            db_id: "db".into(),
            attempts,
            memory_written: None,
            stopped_early: None,
        }
    }

    #[test]
    fn figures_are_well_formed_and_deterministic() {
        let mut episodes = Vec::new();
        for seed in 0..2 {
            for position in 0..10 {
                let fix = (position % 3 != 0).then_some((position % 3) as u32);
                episodes.push(episode("merit", seed, position, fix));
                episodes.push(episode("iterative <&>", seed, position, None));
            }
        }
        let report = build_report(&episodes);
        for svg in [
            accuracy_bars(&report),
            repaired_by_step(&report, &episodes),
            accuracy_over_stream(&report, &episodes),
        ] {
            assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
            assert!(svg.contains("iterative &lt;&amp;&gt;"));
            assert!(!svg.contains("NaN") && !svg.contains("inf"));
        }
        assert_eq!(
            repaired_by_step(&report, &episodes),
            repaired_by_step(&build_report(&episodes), &episodes)
        );
    }

    /// The value of attribute `name` in the first element of `element` that has it.
    fn attribute(element: &str, name: &str) -> f64 {
        let key = format!(" {name}=\"");
        let start = element
            .find(&key)
            .unwrap_or_else(|| panic!("no {name} in {element}"));
        let rest = &element[start + key.len()..];
        rest[..rest.find('"').unwrap()].parse().unwrap()
    }

    fn two_series(second: Points) -> (BTreeMap<String, Points>, Vec<String>) {
        let first: Vec<(f64, f64)> = (1..=100).map(|x| (x as f64, x as f64 * 0.403)).collect();
        let series = BTreeMap::from([("alpha".to_string(), first), ("beta".to_string(), second)]);
        // Drawing order differs from the map's (alphabetical) order on purpose.
        (series, vec!["beta".to_string(), "alpha".to_string()])
    }

    #[test]
    fn ticks_are_round_and_cover_the_data() {
        let ticks = |low, high, integer| nice_ticks(low, high, integer).ticks;
        assert_eq!(ticks(0.0, 40.3, false), [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]);
        assert_eq!(ticks(0.0, 1.1, false), [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]);
        assert_eq!(
            ticks(0.0, 100.0, true),
            [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        // Few positions: every whole number, never a fractional step.
        assert_eq!(ticks(0.0, 3.0, true), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(ticks(0.0, 7.0, true), [0.0, 2.0, 4.0, 6.0, 8.0]);
        assert_eq!(ticks(0.0, 12.0, true), [0.0, 5.0, 10.0, 15.0]);
        // A flat range (a single repair step, all-zero data) still gets an axis.
        assert_eq!(ticks(0.0, 0.0, true), [0.0, 1.0]);
        assert_eq!(ticks(0.0, 0.0, false), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        // Negative data (rewards) gets ticks below zero, and zero among them.
        assert_eq!(ticks(-0.3, 1.1, false), [-0.5, 0.0, 0.5, 1.0, 1.5]);
        // Decimal steps are exact, not accumulated: 0.3, not 0.30000000000000004.
        assert_eq!(ticks(0.0, 0.5, false), [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]);
        // Rounding noise on a tick does not add a tick.
        assert_eq!(ticks(0.0, 100.0 + 1e-12, false).last(), Some(&100.0));
        assert_eq!(ticks(0.0, f64::NAN, false), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        for (low, high, integer) in [(0.0, 40.3, false), (0.0, 97.0, true), (-3.7, 12.2, false)] {
            let axis = nice_ticks(low, high, integer);
            assert!(axis.min() <= low && axis.max() >= high, "{axis:?}");
            let step = axis.ticks[1] - axis.ticks[0];
            let mantissa = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 2.5, 5.0]
                    .iter()
                    .any(|m| (m - mantissa).abs() < 1e-9),
                "{step}"
            );
            assert!(!integer || step.fract() == 0.0);
        }
    }

    #[test]
    fn tick_labels_print_every_tick_exactly_and_once() {
        let axis = nice_ticks(0.0, 1.1, false);
        let labels: Vec<String> = axis.ticks.iter().map(|t| axis.label(*t)).collect();
        assert_eq!(labels, ["0.00", "0.25", "0.50", "0.75", "1.00", "1.25"]);
        let axis = nice_ticks(0.0, 40.3, false);
        assert_eq!(axis.label(40.0), "40");
        let axis = nice_ticks(-0.3, 1.1, false);
        assert_eq!(axis.label(-0.0), "0.0");
        assert_eq!(axis.label(-0.5), "-0.5");
    }

    #[test]
    fn percent_axes_end_at_a_round_value_no_higher_than_100() {
        assert_eq!(y_axis([97.3].into_iter(), true).max(), 100.0);
        assert_eq!(y_axis([100.0, 60.0].into_iter(), true).max(), 100.0);
        // Bootstrap arithmetic can land a hair above 100; the axis still ends there.
        assert_eq!(y_axis([100.000_000_1].into_iter(), true).max(), 100.0);
        assert_eq!(y_axis([40.3].into_iter(), true).max(), 50.0);
        assert_eq!(y_axis(std::iter::empty(), true).max(), 100.0);
        assert_eq!(y_axis([40.3].into_iter(), false).ticks.len(), 6);
    }

    #[test]
    fn line_chart_axes_have_round_labelled_ticks() {
        let (series, order) = two_series((1..=100).map(|x| (x as f64, 1.1)).collect());
        let svg = line_chart("t", "y", "x", &series, &order);
        // y: the data reaches 40.3, so the axis ends at 50 with ticks every 10.
        for label in ["0", "10", "20", "30", "40", "50"] {
            assert!(
                svg.contains(&format!(r#"text-anchor="end">{label}</text>"#)),
                "{label}"
            );
        }
        assert!(!svg.contains(">40.3<") && !svg.contains(">42.3<"));
        // x: 100 positions, whole-number ticks every 20 from 0.
        for label in ["0", "20", "40", "60", "80", "100"] {
            assert!(
                svg.contains(&format!(r#"text-anchor="middle">{label}</text>"#)),
                "{label}"
            );
        }
    }

    #[test]
    fn every_series_has_a_legend_entry_outside_the_plot() {
        let (series, order) = two_series((1..=100).map(|x| (x as f64, 50.0)).collect());
        let svg = line_chart("t", "y", "x", &series, &order);
        let width = attribute(svg.lines().next().unwrap(), "width");
        let entries: Vec<&str> = svg
            .lines()
            .filter(|l| l.contains(r#"class="legend-entry""#))
            .collect();
        assert_eq!(entries.len(), order.len());
        for (entry, name) in entries.iter().zip(&order) {
            assert!(entry.contains(&format!(">{name}</text>")), "{entry}");
            // The sample line and the text start right of the plot rectangle...
            assert!(attribute(entry, "x1") > PLOT_RIGHT, "{entry}");
            let text = &entry[entry.find("<text").unwrap()..];
            let x = attribute(text, "x");
            assert!(x > PLOT_RIGHT, "{entry}");
            // ...and the SVG is wide enough for the text.
            assert!(x + text_width(name) <= width, "{entry}");
        }
        // Every data point lies inside the plot rectangle, so nothing there meets the legend.
        for line in svg.lines().filter(|l| l.starts_with("<polyline")) {
            let start = line.find("points=\"").unwrap() + "points=\"".len();
            let points = &line[start..start + line[start..].find('"').unwrap()];
            for point in points.split(' ') {
                let (x, y) = point.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!((LEFT..=PLOT_RIGHT).contains(&x), "{point}");
                assert!((TOP..=PLOT_BOTTOM).contains(&y), "{point}");
            }
        }
    }

    #[test]
    fn identical_series_differ_in_dash_and_marker_and_say_so() {
        let (series, order) = two_series((1..=100).map(|x| (x as f64, x as f64 * 0.403)).collect());
        let svg = line_chart("t", "y", "x", &series, &order);
        let dashes: Vec<Option<&str>> = svg
            .lines()
            .filter(|l| l.starts_with("<polyline"))
            .map(|l| {
                l.find("stroke-dasharray=\"").map(|start| {
                    let rest = &l[start + "stroke-dasharray=\"".len()..];
                    &rest[..rest.find('"').unwrap()]
                })
            })
            .collect();
        assert_eq!(dashes.len(), 2);
        assert_ne!(dashes[0], dashes[1]);
        // The first series drawn is solid, the one drawn over it dashed.
        assert_eq!(dashes[0], None);
        assert!(svg.contains("alpha (identical to beta)"));
        assert!(!svg.contains("beta (identical"));
        // Different marker shapes, on different points of the shared curve.
        assert_ne!(MARKERS[0], MARKERS[1]);
        assert!(svg.contains("<circle") && svg.contains("<rect x=\""));
        let marker_xs = |tag: &str| -> Vec<f64> {
            svg.lines()
                .filter(|l| l.starts_with(tag))
                .map(|l| attribute(l, if tag == "<circle" { "cx" } else { "x" }))
                .collect()
        };
        let circles = marker_xs("<circle");
        let squares: Vec<f64> = marker_xs("<rect x=\"").iter().map(|x| x + 3.5).collect();
        assert!(circles
            .iter()
            .all(|c| squares.iter().all(|s| (c - s).abs() > 1.0)));
        // Every style is distinct from every other within one cycle.
        for a in 0..PALETTE.len() {
            for b in a + 1..PALETTE.len() {
                let (a, b) = (Style::of(a), Style::of(b));
                assert!(a.dash != b.dash && a.marker != b.marker && a.color != b.color);
            }
        }
    }

    #[test]
    fn line_charts_are_deterministic() {
        let (series, order) = two_series((1..=50).map(|x| (x as f64, -(x as f64))).collect());
        let svg = line_chart("t", "y", "x", &series, &order);
        // The same data in a map built in another order draws the same bytes.
        let rebuilt: BTreeMap<String, Vec<(f64, f64)>> = series.clone().into_iter().rev().collect();
        assert_eq!(svg, line_chart("t", "y", "x", &rebuilt, &order));
        assert_eq!(svg, line_chart("t", "y", "x", &series, &order));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        // Negative data gets an axis below zero rather than lines drawn off the plot.
        assert!(svg.contains(r#"text-anchor="end">-60</text>"#));
    }

    #[test]
    fn non_finite_points_break_the_line_and_empty_charts_are_well_formed() {
        let series = BTreeMap::from([(
            "s".to_string(),
            vec![(0.0, 1.0), (1.0, f64::NAN), (2.0, 2.0), (3.0, 3.0)],
        )]);
        let svg = line_chart("t", "y", "x", &series, &["s".to_string()]);
        assert!(!svg.contains("NaN"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        let empty = line_chart("t", "y", "x", &BTreeMap::new(), &["s".to_string()]);
        assert!(empty.starts_with("<svg") && empty.ends_with("</svg>\n"));
        assert!(!empty.contains("legend-entry"));
    }

    #[test]
    fn long_method_names_are_slanted_under_the_bars() {
        let mut episodes = Vec::new();
        for index in 0..8 {
            let method = format!("a-rather-long-method-name-{index}");
            for position in 0..4 {
                episodes.push(episode(&method, 0, position, Some(1)));
            }
        }
        let report = build_report(&episodes);
        let svg = accuracy_bars(&report);
        assert_eq!(svg.matches("rotate(-45").count(), 8);
        // The first slanted name reaches left of the usual margin, so the drawing moves right.
        assert!(svg.contains(r#"<g transform="translate("#) && svg.ends_with("</g>\n</svg>\n"));
        assert!(attribute(svg.lines().next().unwrap(), "height") > HEIGHT);
        assert!(svg.contains(r#"text-anchor="end">100</text>"#));
        assert!(!svg.contains(">120<"));
    }
}
