//! `compare`'s files (docs/MEASUREMENTS.md §9): OUT/compare.md, compare.csv, compare.svg (B / A
//! of every metric with its interval) and compare.html (the table and figure in one
//! self-contained page, styled as the run pages of `report`).

use std::path::Path;

use anyhow::Context;

use super::compare::{self, Options, Row};
use super::report::{esc, md_table_of, STYLE};

/// OUT/compare.md, compare.csv, compare.svg (B / A with its interval, one line per metric) and
/// compare.html (the table and figure in one self-contained page).
pub fn write(out: &Path, a: &Path, b: &Path, opt: Options) -> anyhow::Result<Vec<Row>> {
    let rows = compare::runs(a, b, opt)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let (an, bn) = (a.display().to_string(), b.display().to_string());
    let md = compare::markdown(&rows, &an, &bn, opt);
    std::fs::write(out.join("compare.md"), &md)?;
    std::fs::write(out.join("compare.csv"), compare::csv(&rows))?;
    let svg = ratio_figure(&rows, &out.join("compare.svg"))?;
    comparison_page(&out.join("compare.html"), &md, &svg, &an, &bn)?;
    Ok(rows)
}

/// OUT/compare.svg: B / A of every compared metric with its interval, one line each, and the
/// line of no difference; returns the SVG's text.
pub fn ratio_figure(rows: &[Row], path: &Path) -> anyhow::Result<String> {
    use plotters::prelude::*;
    crate::figures::fonts();
    let pts: Vec<(String, f64, f64, f64)> = rows
        .iter()
        .filter_map(|r| {
            Some((
                format!("{} · {}", r.step, r.metric),
                r.ratio?,
                r.ratio_lo.unwrap_or(r.ratio?),
                r.ratio_hi.unwrap_or(r.ratio?),
            ))
        })
        .filter(|p| p.1.is_finite() && p.2.is_finite() && p.3.is_finite())
        .collect();
    let n = pts.len().max(1);
    let lo = pts.iter().map(|p| p.2).fold(1.0, f64::min);
    let hi = pts.iter().map(|p| p.3).fold(1.0, f64::max);
    let pad = 0.08 * (hi - lo).max(0.1);
    let err = |e: DrawingAreaErrorKind<std::io::Error>| anyhow::anyhow!("drawing: {e:?}");
    {
        let height = 120 + 22 * n as u32;
        let root = SVGBackend::new(path, (820, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut ch = ChartBuilder::on(&root)
            .caption("B / A with its bootstrap interval", ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(230)
            .build_cartesian_2d((lo - pad)..(hi + pad), -0.5..(n as f64 - 0.5))
            .map_err(err)?;
        let label = |y: &f64| {
            let k = y.round();
            if (y - k).abs() < 1e-9 && k >= 0.0 && (k as usize) < pts.len() {
                pts[pts.len() - 1 - k as usize].0.clone()
            } else {
                String::new()
            }
        };
        ch.configure_mesh()
            .light_line_style(TRANSPARENT)
            .y_labels(n + 1)
            .y_label_formatter(&label)
            .x_desc("B / A (1: no difference)")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        let blue = RGBColor(31, 119, 180);
        let y = |k: usize| (pts.len() - 1 - k) as f64;
        ch.draw_series(std::iter::once(PathElement::new(
            vec![(1.0, -0.5), (1.0, n as f64 - 0.5)],
            BLACK.mix(0.5),
        )))
        .map_err(err)?;
        ch.draw_series(
            pts.iter().enumerate().map(|(k, p)| {
                PathElement::new(vec![(p.2, y(k)), (p.3, y(k))], blue.stroke_width(2))
            }),
        )
        .map_err(err)?;
        ch.draw_series(
            (pts.iter().enumerate()).map(|(k, p)| Circle::new((p.1, y(k)), 4, blue.filled())),
        )
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// OUT/compare.html: the comparison's table and figure in one self-contained page.
pub fn comparison_page(path: &Path, md: &str, svg: &str, a: &str, b: &str) -> anyhow::Result<()> {
    let table = md_table_of(md);
    let intro = md.lines().next().unwrap_or_default();
    let body = svg.find("<svg").map_or(svg, |i| &svg[i..]);
    let h = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>moefleet-harness \
         compare: {} against {}</title><style>{STYLE}</style></head><body>\n<h1>B against A</h1>\n\
         <p>{}</p>\n<figure>{body}</figure>\n{}<p>Every column: <a href=\"compare.csv\">compare.csv\
         </a>.</p>\n</body></html>\n",
        esc(b),
        esc(a),
        esc(intro),
        table?
    );
    std::fs::write(path, h).with_context(|| format!("writing {}", path.display()))
}
