//! The paper's Figure 7 from the context tables: left, TTFT against prompt tokens on log-log axes,
//! the measured points of each scan (serial and parallel attention kernels apart), each scan's
//! `aN + bN²` fit and its linear part `aN`, with the fit's predictions at 128k, 256k and 1M marked;
//! right, per-role decode milliseconds per token and its attention part from each probe against
//! context, beside the scans' measured decode time per token divided by their number of roles.
//! Reads the loaded tables and fits only; drawing is all it does.

use std::path::Path;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::axes::{
    colour, duration_label, log_range, log_space, marker, positions_label, seconds_label,
    ticks_time, ticks_x4,
};
use crate::experiments::context::inputs::{Probe, Scan};
use crate::experiments::context::report::ScanFit;
use crate::figures::fonts;

/// Per-role ms per token of each scan point with a decode rate.
fn per_role_decode_ms(scan: &Scan, roles: Option<usize>) -> Vec<(f64, f64)> {
    let div = roles.unwrap_or(1).max(1) as f64;
    scan.points
        .iter()
        .filter(|p| p.streams == 1)
        .filter_map(|p| {
            let r = p.decode_tok_s.filter(|r| *r > 0.0)?;
            Some((p.prompt_tokens, 1000.0 / r / div))
        })
        .collect()
}

/// One probe context with a decode time: median ms, min-max over roles, attention median.
struct ProbePoint {
    context: f64,
    median: f64,
    range: Option<(f64, f64)>,
    attn: Option<f64>,
}

fn probe_points(p: &Probe) -> Vec<ProbePoint> {
    p.rows
        .iter()
        .filter_map(|r| {
            Some(ProbePoint {
                context: r.context,
                median: r.decode_ms_median.filter(|m| *m > 0.0)?,
                range: r.decode_ms_min.zip(r.decode_ms_max),
                attn: r.attn_ms_median.filter(|m| *m > 0.0),
            })
        })
        .collect()
}

/// Write `figure7.png` and `figure7.svg` into `root`; `run_line` names the runs under the title
/// (`run_label`).
pub fn draw(
    root: &Path,
    scans: &[Scan],
    fits: &[ScanFit],
    probes: &[Probe],
    title: &str,
    run_line: &str,
) -> anyhow::Result<()> {
    fonts();
    let png = root.join("figure7.png");
    let svg = root.join("figure7.svg");
    {
        let area = BitMapBackend::new(&png, (1500, 620)).into_drawing_area();
        panels(&area, scans, fits, probes, title, run_line)?;
        area.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", png.display()))?;
    }
    {
        let area = SVGBackend::new(&svg, (1500, 620)).into_drawing_area();
        panels(&area, scans, fits, probes, title, run_line)?;
        area.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", svg.display()))?;
    }
    Ok(())
}

fn panels<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    scans: &[Scan],
    fits: &[ScanFit],
    probes: &[Probe],
    title: &str,
    run_line: &str,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    area.fill(&WHITE).map_err(err)?;
    let area = super::run_label::titled(area, title, 22, run_line).map_err(err)?;
    let (left, right) = area.split_horizontally(760);
    ttft_panel(&left, scans, fits)?;
    decode_panel(&right, scans, fits, probes)?;
    Ok(())
}

fn empty<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    caption: &str,
    msg: &str,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    let (w, h) = a.dim_in_pixel();
    a.draw(&Text::new(
        caption.to_string(),
        (20, 10),
        ("sans-serif", 18),
    ))
    .map_err(err)?;
    a.draw(&Text::new(
        msg.to_string(),
        (40, h as i32 / 2),
        ("sans-serif", 16),
    ))
    .map_err(err)?;
    let _ = w;
    Ok(())
}

fn ttft_panel<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    scans: &[Scan],
    fits: &[ScanFit],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    let caption = "Time to first token against context (one stream)";
    let pts: Vec<(f64, f64)> = scans.iter().flat_map(|s| s.single_stream()).collect();
    let any_fit = fits.iter().any(|f| f.fit.is_some());
    let xs = pts
        .iter()
        .map(|p| p.0)
        .chain(any_fit.then_some(1_048_576.0));
    let Some((x0, x1)) = log_range(xs, 1.4) else {
        return empty(
            a,
            caption,
            "no scan: run `moefleet-harness context` into ROOT/scan-serial and ROOT/scan-parallel",
        );
    };
    let grid = log_space(x0, x1, 80);
    let curve_ys = fits.iter().filter_map(|f| f.fit).flat_map(|q| {
        grid.iter()
            .flat_map(move |&n| [q.ttft_s(n), q.linear_s(n)])
            .collect::<Vec<_>>()
    });
    let Some((y0, y1)) = log_range(pts.iter().map(|p| p.1).chain(curve_ys), 1.6) else {
        return empty(a, caption, "the scans hold no positive TTFT");
    };
    let mut ch = ChartBuilder::on(a)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .caption(caption, ("sans-serif", 18))
        .build_cartesian_2d(
            (x0..x1)
                .log_scale()
                .with_key_points(ticks_x4(x0, x1, 1024.0)),
            (y0..y1).log_scale().with_key_points(ticks_time(y0, y1)),
        )
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("prompt tokens N (server's usage.prompt_tokens, log)")
        .y_desc("TTFT (log)")
        .x_label_formatter(&|v| positions_label(*v))
        .y_label_formatter(&|v| seconds_label(*v))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (i, s) in scans.iter().enumerate() {
        let c = colour(&s.label, i);
        let label = s.label.clone();
        let p = s.single_stream();
        ch.draw_series(p.iter().map(|&at| marker::<DB, (f64, f64)>(&label, at, c)))
            .map_err(err)?
            .label(format!("{}: measured", s.description()))
            .legend(move |(x, y)| marker::<DB, (i32, i32)>(&label, (x + 10, y), c));
        let Some(q) = fits.iter().find(|f| f.scan == s.label).and_then(|f| f.fit) else {
            continue;
        };
        // b ≤ 0: the quadratic term is not resolved by the points; draw the fit only where it
        // was measured and predict nothing from it
        let resolved = q.b > 0.0;
        let n_max = p.iter().map(|pt| pt.0).fold(0.0, f64::max);
        ch.draw_series(LineSeries::new(
            grid.iter()
                .filter(|&&n| resolved || n <= n_max)
                .map(|&n| (n, q.ttft_s(n))),
            c.stroke_width(2),
        ))
        .map_err(err)?
        .label(if resolved {
            format!(
                "fit aN+bN²: 1/a = {:.0} tok/s, b = {:.2e} s",
                q.linear_tok_s(),
                q.b
            )
        } else {
            format!(
                "fit aN+bN²: 1/a = {:.0} tok/s, b = {:.2e} s ≤ 0: not resolved, no extrapolation",
                q.linear_tok_s(),
                q.b
            )
        })
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        let lin: Vec<(f64, f64)> = grid
            .iter()
            .map(|&n| (n, q.linear_s(n)))
            .filter(|p| p.1 >= y0 && p.1 > 0.0)
            .collect();
        ch.draw_series(DashedLineSeries::new(lin, 8, 5, c.stroke_width(1)))
            .map_err(err)?
            .label("linear part aN")
            .legend(move |(x, y)| {
                DashedPathElement::new(vec![(x, y), (x + 20, y)], 5, 3, c.stroke_width(1))
            });
        for n in [131_072.0, 262_144.0, 1_048_576.0] {
            let t = q.ttft_s(n);
            if resolved && n <= x1 && t > 0.0 && t <= y1 {
                ch.draw_series(std::iter::once(
                    EmptyElement::at((n, t))
                        + Circle::new((0, 0), 4, c.stroke_width(2))
                        + Text::new(
                            duration_label(t),
                            (-44, if i == 0 { -18 } else { 6 }),
                            ("sans-serif", 13).into_font().color(&c),
                        ),
                ))
                .map_err(err)?;
            }
        }
    }
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}

fn decode_panel<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    scans: &[Scan],
    fits: &[ScanFit],
    probes: &[Probe],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    let caption = "Decode cost per token, per role";
    let roles_of = |s: &Scan| {
        fits.iter()
            .find(|f| f.scan == s.label)
            .and_then(|f| f.roles)
            .or(s.roles)
    };
    let measured: Vec<(usize, Vec<(f64, f64)>)> = scans
        .iter()
        .enumerate()
        .map(|(i, s)| (i, per_role_decode_ms(s, roles_of(s))))
        .collect();
    let xs = measured.iter().flat_map(|m| m.1.iter().map(|p| p.0)).chain(
        probes
            .iter()
            .flat_map(|p| probe_points(p).into_iter().map(|r| r.context)),
    );
    let ys = measured
        .iter()
        .flat_map(|m| m.1.iter().map(|p| p.1))
        .chain(probes.iter().flat_map(|p| {
            probe_points(p)
                .into_iter()
                .flat_map(|r| {
                    [
                        Some(r.median),
                        r.range.map(|x| x.0),
                        r.range.map(|x| x.1),
                        r.attn,
                    ]
                })
                .flatten()
        }));
    let (Some((x0, x1)), Some((y0, y1))) = (log_range(xs, 1.4), log_range(ys, 1.6)) else {
        return empty(
            a,
            caption,
            "no probe (ROOT/probe-*/context_probe.csv) and no measured decode rate",
        );
    };
    let mut ch = ChartBuilder::on(a)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .caption(caption, ("sans-serif", 18))
        .build_cartesian_2d(
            (x0..x1)
                .log_scale()
                .with_key_points(ticks_x4(x0, x1, 1024.0)),
            (y0..y1).log_scale(),
        )
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("context positions (log)")
        .y_desc("ms per token per role (log)")
        .x_label_formatter(&|v| positions_label(*v))
        .y_label_formatter(&|v| {
            if *v >= 10.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (i, p) in probes.iter().enumerate() {
        let c = colour(&p.label, i + scans.len());
        let rows = probe_points(p);
        let name = match (&p.preset, &p.attention) {
            (Some(m), Some(a)) => format!("{} ({m}, {a} attention)", p.label),
            (Some(m), None) => format!("{} ({m})", p.label),
            (None, Some(a)) => format!("{} ({a} attention)", p.label),
            (None, None) => p.label.clone(),
        };
        if rows.is_empty() {
            continue;
        }
        ch.draw_series(LineSeries::new(
            rows.iter().map(|r| (r.context, r.median)),
            c.stroke_width(2),
        ))
        .map_err(err)?
        .label(format!(
            "probe {name}: decode, median over roles (bars: min-max)"
        ))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        // min-max over roles as a vertical bar (a path in data coordinates)
        ch.draw_series(rows.iter().filter_map(|r| {
            let (lo, hi) = r.range?;
            Some(PathElement::new(
                vec![(r.context, lo), (r.context, hi)],
                c.stroke_width(1),
            ))
        }))
        .map_err(err)?;
        let attn: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((r.context, r.attn?)))
            .collect();
        if !attn.is_empty() {
            ch.draw_series(DashedLineSeries::new(attn.clone(), 8, 5, c.stroke_width(2)))
                .map_err(err)?
                .label(format!("probe {name}: attention part, median"))
                .legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 20, y)], 5, 3, c.stroke_width(2))
                });
            ch.draw_series(attn.iter().map(|&at| Circle::new(at, 3, c.stroke_width(1))))
                .map_err(err)?;
        }
    }
    for (i, pts) in &measured {
        let s = &scans[*i];
        if pts.is_empty() {
            continue;
        }
        let c = colour(&s.label, *i);
        let label = s.label.clone();
        let how = match roles_of(s) {
            Some(r) => format!("measured decode ms/token ÷ {r} roles"),
            None => "measured decode ms/token (roles unknown: not divided)".to_string(),
        };
        ch.draw_series(
            pts.iter()
                .map(|&at| marker::<DB, (f64, f64)>(&label, at, c)),
        )
        .map_err(err)?
        .label(format!("scan {}: {how}", s.label))
        .legend(move |(x, y)| marker::<DB, (i32, i32)>(&label, (x + 10, y), c));
    }
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::context::inputs::Inputs;
    use crate::experiments::context::inputs::{read_probe, read_scan};
    use crate::experiments::context::report::{build, FitOptions};

    #[test]
    fn per_role_decode_divides_by_roles() {
        let s = Scan {
            label: "serial".into(),
            dir: ".".into(),
            points: vec![crate::experiments::context::inputs::ScanPoint {
                streams: 1,
                size: 1024,
                prompt_tokens: 1000.0,
                ttft_s: 1.0,
                decode_tok_s: Some(4.0),
            }],
            model: None,
            roles: Some(2),
        };
        assert_eq!(per_role_decode_ms(&s, Some(2)), vec![(1000.0, 125.0)]);
        assert_eq!(per_role_decode_ms(&s, None), vec![(1000.0, 250.0)]);
    }

    /// Draws the paper's own data (as the "serial" scan and probe) and an empty root without error.
    #[test]
    fn draws_the_paper_and_nothing() {
        let paper = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../reproduction/paper");
        let scan = read_scan(&paper, "serial").unwrap();
        let probe = read_probe(&paper.join("context_probe.csv"), "serial").unwrap();
        let inputs = Inputs {
            scans: vec![scan],
            probes: vec![probe],
            problems: vec![],
        };
        let opts = FitOptions {
            preset: Some("inkling".into()),
            roles: Some(11),
        };
        let r = build(&inputs, &opts).unwrap();
        let d = tempfile::tempdir().unwrap();
        draw(
            d.path(),
            &inputs.scans,
            &r.scans,
            &inputs.probes,
            "paper",
            "inkling; 2026-11-29",
        )
        .unwrap();
        assert!(
            std::fs::metadata(d.path().join("figure7.png"))
                .unwrap()
                .len()
                > 10_000
        );
        assert!(std::fs::read_to_string(d.path().join("figure7.svg"))
            .unwrap()
            .contains("linear part"));
        assert!(std::fs::read_to_string(d.path().join("figure7.svg"))
            .unwrap()
            .contains("inkling; 2026-11-29"));
        draw(d.path(), &[], &[], &[], "nothing", "").unwrap();
    }
}
