//! Samples, summaries and the tables the bench prints.

use std::fmt::Write as _;

/// Median and p99 of `samples` (nearest rank). `(NaN, NaN)` when empty.
pub fn median_p99(samples: &[f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    (percentile(&sorted, 50.0), percentile(&sorted, 99.0))
}

/// The slowest of per-round rates (the "worst" a rate row reports).
pub fn slowest(rates: &[f64]) -> f64 {
    rates.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// How a row is judged.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// Informational: no target.
    None,
    /// `ratio` (row cost / baseline cost) at most this.
    RatioAtMost(f64),
    /// The median at most this (in the row's unit).
    MedianAtMost(f64),
    /// The p99 at most this (in the row's unit): a tail budget stated in absolute terms.
    P99AtMost(f64),
    /// A rate row's median at least this (in the row's unit).
    RateAtLeast(f64),
}

#[derive(Clone, Debug)]
pub struct Row {
    pub metric: String,
    pub unit: &'static str,
    pub median: f64,
    /// p99 of the samples; for rates, the worst (lowest) round.
    pub p99: f64,
    pub baseline: Option<f64>,
    /// Cost relative to the baseline: >1 means slower than the baseline.
    pub ratio: Option<f64>,
    pub target: Target,
}

impl Row {
    pub fn new(metric: impl Into<String>, unit: &'static str, median: f64, p99: f64) -> Row {
        Row { metric: metric.into(), unit, median, p99, baseline: None, ratio: None, target: Target::None }
    }

    /// A latency-like row (lower is better) with its baseline; ratio = median / baseline.
    pub fn cost(mut self, baseline: f64) -> Row {
        self.baseline = Some(baseline);
        self.ratio = Some(self.median / baseline);
        self
    }

    /// A rate row (higher is better) with its baseline rate; ratio = baseline / median (cost ratio).
    pub fn rate(mut self, baseline: f64) -> Row {
        self.baseline = Some(baseline);
        self.ratio = Some(baseline / self.median);
        self
    }

    pub fn target(mut self, target: Target) -> Row {
        self.target = target;
        self
    }

    /// `Some(true)` PASS, `Some(false)` FAIL, `None` no target.
    pub fn verdict(&self) -> Option<bool> {
        match self.target {
            Target::None => None,
            Target::RatioAtMost(limit) => Some(self.ratio.is_some_and(|ratio| ratio <= limit)),
            Target::MedianAtMost(limit) => Some(self.median <= limit),
            Target::P99AtMost(limit) => Some(self.p99 <= limit),
            Target::RateAtLeast(limit) => Some(self.median >= limit),
        }
    }
}

#[derive(Debug)]
pub struct Table {
    pub figure: String,
    pub note: String,
    pub rows: Vec<Row>,
}

fn num(value: f64) -> String {
    if value.is_nan() {
        "—".to_owned()
    } else if value.abs() >= 1000.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else if value.abs() >= 0.1 {
        format!("{value:.3}")
    } else {
        format!("{value:.4}")
    }
}

impl Table {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "\n### {}\n", self.figure);
        if !self.note.is_empty() {
            let _ = writeln!(out, "{}\n", self.note);
        }
        let _ = writeln!(out, "| metric | unit | median | p99 / worst | baseline | ratio | target | result |");
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---|---|");
        for row in &self.rows {
            let target = match row.target {
                Target::None => "—".to_owned(),
                Target::RatioAtMost(limit) => format!("ratio ≤ {limit}"),
                Target::MedianAtMost(limit) => format!("≤ {} {}", num(limit), row.unit),
                Target::P99AtMost(limit) => format!("p99 ≤ {} {}", num(limit), row.unit),
                Target::RateAtLeast(limit) => format!("≥ {} {}", num(limit), row.unit),
            };
            let result = match row.verdict() {
                None => "info",
                Some(true) => "PASS",
                Some(false) => "FAIL",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                row.metric,
                row.unit,
                num(row.median),
                num(row.p99),
                row.baseline.map_or("—".to_owned(), num),
                row.ratio.map_or("—".to_owned(), |ratio| format!("{ratio:.2}×")),
                target,
                result
            );
        }
        out
    }
}
