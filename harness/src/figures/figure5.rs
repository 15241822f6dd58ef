//! The paper's Figure 5 from `curve.csv`: left, shared-interval decode throughput (Q_decode) and
//! whole-phase throughput (Q_phase) against concurrency on a log axis, each with the two phases of
//! a level as a shaded range; right, pooled TTFT median and p95.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{fonts, Table};

struct Curve {
    c: Vec<f64>,
    qd: Vec<(f64, f64, f64)>,
    qp: Vec<(f64, f64, f64)>,
    ttft50: Vec<f64>,
    ttft95: Vec<f64>,
}

fn load(run: &Path) -> anyhow::Result<Curve> {
    let t = Table::read(&run.join("curve.csv"))?;
    let c: Vec<f64> = t
        .col("concurrency")?
        .into_iter()
        .map(|v| v.unwrap_or(f64::NAN))
        .collect();
    let tri = |m: &str, lo: &str, hi: &str| -> anyhow::Result<Vec<(f64, f64, f64)>> {
        let (m, lo, hi) = (t.col(m)?, t.col(lo)?, t.col(hi)?);
        Ok(m.iter()
            .zip(&lo)
            .zip(&hi)
            .map(|((m, l), h)| {
                (
                    m.unwrap_or(f64::NAN),
                    l.unwrap_or(f64::NAN),
                    h.unwrap_or(f64::NAN),
                )
            })
            .collect())
    };
    let f = |name: &str| -> anyhow::Result<Vec<f64>> {
        Ok(t.col(name)?
            .into_iter()
            .map(|v| v.unwrap_or(f64::NAN))
            .collect())
    };
    Ok(Curve {
        qd: tri("q_decode_mean", "q_decode_min", "q_decode_max")?,
        qp: tri("q_phase_mean", "q_phase_min", "q_phase_max")?,
        ttft50: f("ttft_median_s")?,
        ttft95: f("ttft_p95_s")?,
        c,
    })
}

/// Write `figure5.png` and `figure5.svg` into the run directory; `run_line` names the run under
/// the title (`run_label`).
pub fn draw(run: &Path, title: &str, run_line: &str) -> anyhow::Result<()> {
    fonts();
    let curve = load(run)?;
    if curve.c.is_empty() {
        anyhow::bail!("{}/curve.csv has no levels", run.display());
    }
    let png = run.join("figure5.png");
    let svg = run.join("figure5.svg");
    {
        let root = BitMapBackend::new(&png, (1400, 560)).into_drawing_area();
        panels(&root, &curve, title, run_line)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", png.display()))?;
    }
    {
        let root = SVGBackend::new(&svg, (1400, 560)).into_drawing_area();
        panels(&root, &curve, title, run_line)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", svg.display()))?;
    }
    Ok(())
}

/// Tick positions: the measured levels, skipping one that would sit too close to the previous
/// tick on the log axis (88 and 96, say).
fn key_points(c: &[f64]) -> Vec<f64> {
    let mut out: Vec<f64> = Vec::new();
    for v in c.iter().copied().filter(|v| v.is_finite() && *v > 0.0) {
        if out.last().is_none_or(|p| (v / p).log10() >= 0.08) {
            out.push(v);
        }
    }
    out
}

fn finite_max(v: impl Iterator<Item = f64>) -> f64 {
    v.filter(|x| x.is_finite()).fold(0.0, f64::max)
}

fn panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    k: &Curve,
    title: &str,
    run_line: &str,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let root = super::run_label::titled(root, title, 22, run_line).map_err(err)?;
    let (left, right) = root.split_horizontally(700);
    let xmin = k.c.iter().copied().fold(f64::INFINITY, f64::min).max(1.0) * 0.8;
    let xmax = k.c.iter().copied().fold(0.0, f64::max) * 1.25;

    // left: throughput
    let ymax = finite_max(k.qd.iter().chain(&k.qp).map(|t| t.2.max(t.0))) * 1.1 + 1e-9;
    let mut ch = ChartBuilder::on(&left)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .caption("Throughput vs concurrency", ("sans-serif", 18))
        .build_cartesian_2d(
            (xmin..xmax).log_scale().with_key_points(key_points(&k.c)),
            0.0..ymax,
        )
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .x_desc("concurrent streams C (log)")
        .y_desc("tokens/s")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (series, color, name) in [
        (&k.qd, BLUE, "Q_decode (shared interval)"),
        (&k.qp, RED, "Q_phase (whole phase)"),
    ] {
        let pts: Vec<(f64, (f64, f64, f64))> =
            k.c.iter()
                .copied()
                .zip(series.iter().copied())
                .filter(|(_, t)| t.0.is_finite())
                .collect();
        if pts.is_empty() {
            continue;
        }
        let mut band: Vec<(f64, f64)> = pts.iter().map(|(c, t)| (*c, t.2)).collect();
        band.extend(pts.iter().rev().map(|(c, t)| (*c, t.1)));
        ch.draw_series(std::iter::once(Polygon::new(
            band,
            color.mix(0.18).filled(),
        )))
        .map_err(err)?;
        ch.draw_series(LineSeries::new(
            pts.iter().map(|(c, t)| (*c, t.0)),
            color.stroke_width(2),
        ))
        .map_err(err)?
        .label(format!("{name}, mean of two phases"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        ch.draw_series(
            pts.iter()
                .map(|(c, t)| Circle::new((*c, t.0), 3, color.filled())),
        )
        .map_err(err)?;
    }
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;

    // right: TTFT
    let tmax = finite_max(k.ttft95.iter().chain(&k.ttft50).copied()) * 1.1 + 1e-9;
    let mut ch = ChartBuilder::on(&right)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .caption(
            "Time to first token (pooled over both phases)",
            ("sans-serif", 18),
        )
        .build_cartesian_2d(
            (xmin..xmax).log_scale().with_key_points(key_points(&k.c)),
            0.0..tmax,
        )
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .x_desc("concurrent streams C (log)")
        .y_desc("seconds")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (series, color, name) in [
        (&k.ttft50, GREEN.mix(0.9), "TTFT median"),
        (&k.ttft95, MAGENTA.mix(0.9), "TTFT p95"),
    ] {
        let pts: Vec<(f64, f64)> =
            k.c.iter()
                .copied()
                .zip(series.iter().copied())
                .filter(|(_, v)| v.is_finite())
                .collect();
        ch.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        ch.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(err)?;
    }
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}
