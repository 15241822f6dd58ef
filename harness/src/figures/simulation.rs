//! The fleet simulator against a reference curve (a measured run, or the paper's Table 4): left,
//! Q_decode against concurrency on a log axis; right, the TTFT median. The reference is a solid
//! line, the simulation a dashed one; simulated points at levels held out of the calibration are
//! filled, the others hollow.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::fonts;
use crate::simulate::level::Level;

/// Write `STEM.png` and `STEM.svg`.
pub fn draw(stem: &Path, title: &str, levels: &[Level], reference: &str) -> anyhow::Result<()> {
    draw_with_run(stem, title, "", levels, reference)
}

/// As `draw`, with `run_line` naming what was simulated under the title (`run_label`).
pub fn draw_with_run(
    stem: &Path,
    title: &str,
    run_line: &str,
    levels: &[Level],
    reference: &str,
) -> anyhow::Result<()> {
    fonts();
    anyhow::ensure!(!levels.is_empty(), "no levels to draw");
    let png = stem.with_extension("png");
    let svg = stem.with_extension("svg");
    {
        let root = BitMapBackend::new(&png, (1300, 520)).into_drawing_area();
        panels(&root, title, run_line, levels, reference)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", png.display()))?;
    }
    let root = SVGBackend::new(&svg, (1300, 520)).into_drawing_area();
    panels(&root, title, run_line, levels, reference)?;
    root.present()
        .map_err(|e| anyhow::anyhow!("{}: {e}", svg.display()))?;
    Ok(())
}

type Pick = fn(&Level) -> (Option<f64>, Option<f64>);

fn panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    run_line: &str,
    levels: &[Level],
    reference: &str,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let root = super::run_label::titled(root, title, 20, run_line).map_err(err)?;
    let (left, right) = root.split_horizontally(650);
    let q: Pick = |l| (l.q_decode_measured, l.q_decode_simulated);
    let t: Pick = |l| (l.ttft_median_measured, l.ttft_median_simulated);
    panel(&left, levels, q, "Q_decode (tokens/s)", reference, false)?;
    panel(&right, levels, t, "TTFT median (s)", reference, true)?;
    Ok(())
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    levels: &[Level],
    pick: Pick,
    y_desc: &str,
    reference: &str,
    legend: bool,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    let c: Vec<f64> = levels.iter().map(|l| l.concurrency as f64).collect();
    let xmin = c.iter().copied().fold(f64::INFINITY, f64::min).max(1.0) * 0.8;
    let xmax = c.iter().copied().fold(0.0, f64::max) * 1.25;
    let ymax = levels
        .iter()
        .flat_map(|l| {
            let (a, b) = pick(l);
            [a, b]
        })
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        * 1.15
        + 1e-9;
    let mut ch = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax)
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .x_desc("concurrent streams C (log)")
        .y_desc(y_desc)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    let series = |which: usize| -> Vec<(f64, f64, bool)> {
        levels
            .iter()
            .filter_map(|l| {
                let (a, b) = pick(l);
                let v = if which == 0 { a } else { b }?;
                v.is_finite()
                    .then_some((l.concurrency as f64, v, l.held_out))
            })
            .collect()
    };
    let (meas, sim) = (series(0), series(1));
    let blue = RGBColor(31, 119, 180);
    let orange = RGBColor(230, 120, 20);
    ch.draw_series(LineSeries::new(
        meas.iter().map(|p| (p.0, p.1)),
        blue.stroke_width(2),
    ))
    .map_err(err)?
    .label(reference)
    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], blue.stroke_width(2)));
    ch.draw_series(
        meas.iter()
            .map(|p| Circle::new((p.0, p.1), 3, blue.filled())),
    )
    .map_err(err)?;
    ch.draw_series(DashedLineSeries::new(
        sim.iter().map(|p| (p.0, p.1)),
        6,
        4,
        orange.stroke_width(2),
    ))
    .map_err(err)?
    .label("simulated (filled: held-out level)")
    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], orange.stroke_width(2)));
    ch.draw_series(sim.iter().map(|p| {
        let style = if p.2 {
            orange.filled()
        } else {
            orange.stroke_width(2)
        };
        Circle::new((p.0, p.1), 5, style)
    }))
    .map_err(err)?;
    if legend {
        ch.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}
