//! The report's figures as small SVG files.
//!
//! Written by hand rather than with a plotting crate because the figures must be
//! byte-identical for identical records (reports are compared across resumed runs) and need
//! no font files: a few rectangles, polylines and text elements are all they use.

use crate::report::{MethodSummary, Report};
use merit_core::episode::EpisodeRecord;
use std::collections::BTreeMap;
use std::fmt::Write as _;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const PALETTE: &[&str] = &[
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn header(title: &str, y_label: &str, x_label: &str) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    let _ = writeln!(
        svg,
        r#"<text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>"#,
        HEIGHT / 2.0,
        HEIGHT / 2.0,
        escape(y_label)
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        WIDTH / 2.0,
        HEIGHT - 12.0,
        escape(x_label)
    );
    svg
}

/// Maps data coordinates into the plot area.
struct Frame {
    x_min: f64,
    x_max: f64,
    y_min: f64,
    y_max: f64,
}

impl Frame {
    fn x(&self, value: f64) -> f64 {
        let span = (self.x_max - self.x_min).max(f64::EPSILON);
        LEFT + (value - self.x_min) / span * (WIDTH - LEFT - RIGHT)
    }

    fn y(&self, value: f64) -> f64 {
        let span = (self.y_max - self.y_min).max(f64::EPSILON);
        HEIGHT - BOTTOM - (value - self.y_min) / span * (HEIGHT - TOP - BOTTOM)
    }

    fn axes(&self, svg: &mut String, y_ticks: usize) {
        let _ = writeln!(
            svg,
            r#"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
            HEIGHT - BOTTOM,
            WIDTH - RIGHT,
            HEIGHT - BOTTOM
        );
        let _ = writeln!(
            svg,
            r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>"#,
            HEIGHT - BOTTOM
        );
        for tick in 0..=y_ticks {
            let value = self.y_min + (self.y_max - self.y_min) * tick as f64 / y_ticks as f64;
            let y = self.y(value);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#dddddd"/><text x="{}" y="{:.1}" text-anchor="end">{value:.1}</text>"##,
                WIDTH - RIGHT,
                LEFT - 6.0,
                y + 4.0
            );
        }
    }
}

/// Accuracy per method: bars at the mean over seeds, whiskers at the 95% bootstrap interval.
pub fn accuracy_bars(report: &Report) -> String {
    let methods: &[MethodSummary] = &report.methods;
    let mut svg = header(
        "Execution accuracy per method (95% CI)",
        "accuracy (%)",
        "method",
    );
    let top = methods
        .iter()
        .map(|m| m.accuracy_ci.1.max(m.accuracy_mean))
        .fold(0.0_f64, f64::max);
    let frame = Frame {
        x_min: 0.0,
        x_max: methods.len().max(1) as f64,
        y_min: 0.0,
        y_max: (top / 10.0).ceil().max(1.0) * 10.0,
    };
    frame.axes(&mut svg, 5);
    for (index, method) in methods.iter().enumerate() {
        let left = frame.x(index as f64 + 0.2);
        let right = frame.x(index as f64 + 0.8);
        let y = frame.y(method.accuracy_mean);
        let color = PALETTE[index % PALETTE.len()];
        let _ = writeln!(
            svg,
            r#"<rect x="{left:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
            right - left,
            frame.y(0.0) - y
        );
        let middle = (left + right) / 2.0;
        let (low, high) = (frame.y(method.accuracy_ci.0), frame.y(method.accuracy_ci.1));
        let _ = writeln!(
            svg,
            r#"<line x1="{middle:.1}" y1="{low:.1}" x2="{middle:.1}" y2="{high:.1}" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{middle:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            HEIGHT - BOTTOM + 16.0,
            escape(&method.method)
        );
        let _ = writeln!(
            svg,
            r#"<text x="{middle:.1}" y="{:.1}" text-anchor="middle">{:.1}</text>"#,
            high - 4.0,
            method.accuracy_mean
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// A line chart of named series of (x, y) points, drawn in `order` (SVG text).
pub fn line_chart(
    title: &str,
    y_label: &str,
    x_label: &str,
    series: &BTreeMap<String, Vec<(f64, f64)>>,
    order: &[String],
) -> String {
    let mut svg = header(title, y_label, x_label);
    let points = series.values().flatten();
    let x_max = points.clone().map(|p| p.0).fold(1.0_f64, f64::max);
    let y_max = points.map(|p| p.1).fold(1.0_f64, f64::max);
    let frame = Frame {
        x_min: 0.0,
        x_max,
        y_min: 0.0,
        y_max: y_max * 1.05,
    };
    frame.axes(&mut svg, 5);
    for (index, name) in order.iter().enumerate() {
        let Some(values) = series.get(name) else {
            continue;
        };
        let color = PALETTE[index % PALETTE.len()];
        let path: Vec<String> = values
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", frame.x(*x), frame.y(*y)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        let _ = writeln!(
            svg,
            r#"<rect x="{:.1}" y="{:.1}" width="10" height="10" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            WIDTH - RIGHT - 150.0,
            TOP + 4.0 + 16.0 * index as f64,
            WIDTH - RIGHT - 135.0,
            TOP + 13.0 + 16.0 * index as f64,
            escape(name)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end">{x_max:.0}</text>"#,
        WIDTH - RIGHT,
        HEIGHT - BOTTOM + 16.0
    );
    svg.push_str("</svg>\n");
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
    line_chart(
        "Running accuracy over stream position",
        "accuracy so far (%)",
        "stream position",
        &series,
        &order,
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
}
