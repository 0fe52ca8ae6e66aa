//! A line chart of per-interval rates as a self-contained SVG, for
//! `sluice bench --chart` (the benchmark scripts use bench/chart.py for
//! charts that compare runs). Hand-written: a plotting crate would bring
//! a font stack for one polyline and two axes.

use std::fmt::Write;

/// Writes an SVG of `values` (one per `interval_secs`) as messages per
/// second, titled `title`.
pub fn svg(title: &str, values: &[u64], interval_secs: f64) -> String {
    let (w, h, left, bottom) = (800.0, 320.0, 60.0, 40.0);
    let rates: Vec<f64> = values
        .iter()
        .map(|&v| v as f64 / interval_secs.max(1e-9))
        .collect();
    let max = rates.iter().copied().fold(1.0, f64::max);
    let n = rates.len().max(2) - 1;
    let x = |i: usize| left + (w - left - 20.0) * i as f64 / n as f64;
    let y = |r: f64| h - bottom - (h - bottom - 30.0) * r / max;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\
         <text x=\"{left}\" y=\"18\" font-size=\"14\">{}</text>\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>\
         <line x1=\"{left}\" y1=\"30\" x2=\"{left}\" y2=\"{}\" stroke=\"#999\"/>\
         <text x=\"4\" y=\"34\">{:.0}/s</text><text x=\"4\" y=\"{}\">0</text>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0} s</text>",
        escape(title),
        h - bottom,
        w - 20.0,
        h - bottom,
        h - bottom,
        max,
        h - bottom,
        w - 20.0,
        h - 12.0,
        values.len() as f64 * interval_secs,
    );
    let points: Vec<String> = rates
        .iter()
        .enumerate()
        .map(|(i, &r)| format!("{:.1},{:.1}", x(i), y(r)))
        .collect();
    let _ = writeln!(
        out,
        "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/></svg>",
        points.join(" ")
    );
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_chart_has_one_point_per_interval() {
        let svg = super::svg("relay <400 B>", &[10, 20, 30], 1.0);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("relay &lt;400 B&gt;"));
        let points = svg
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(points.split(' ').count(), 3);
        assert!(svg.contains(">30/s<"), "the scale's top is the peak rate");
    }
}
