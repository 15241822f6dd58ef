//! Figure 3 from `dense.csv`: per (layer, rows) case, grouped bars of one MLP call with the
//! three-matmul and the fused-slices form, ours beside the paper's (its `dense.csv`, measured on
//! the Arc B390 GPU), each pair labelled with the fused form's change in time (−: faster).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{fonts, Table};
use crate::experiments::dense::table::{cases, DenseCase};

/// Ours, and the paper's case with the same (layer, rows) where there is one.
type Pair = (DenseCase, Option<DenseCase>);

/// Write `figure3.png` and `figure3.svg` into `dir` from `dir/dense.csv` and, when given, the
/// paper's dense.csv.
pub fn draw(dir: &Path, paper: Option<&Path>) -> anyhow::Result<()> {
    fonts();
    let ours = cases(&Table::read(&dir.join("dense.csv"))?)?;
    if ours.is_empty() {
        anyhow::bail!("{}/dense.csv has no rows", dir.display());
    }
    let theirs = match paper {
        Some(p) => cases(&Table::read(p)?)?,
        None => Vec::new(),
    };
    let pairs: Vec<Pair> = ours
        .iter()
        .map(|o| {
            let p = theirs
                .iter()
                .find(|p| p.layer == o.layer && p.rows == o.rows)
                .copied();
            (*o, p)
        })
        .collect();
    let what = std::fs::read_to_string(dir.join("dense.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .map(|v| {
            format!(
                "{}, {} thread(s) on {}",
                v["model"].as_str().unwrap_or("?"),
                v["threads"],
                v["host"]["cpu"].as_str().unwrap_or("this CPU")
            )
        })
        .unwrap_or_else(|| "this machine".to_string());
    let title = format!("Dense MLP, one call: three matrix calls vs fused slices ({what})");
    let png = dir.join("figure3.png");
    let svg = dir.join("figure3.svg");
    {
        let root = BitMapBackend::new(&png, (1200, 620)).into_drawing_area();
        panel(&root, &pairs, &title)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", png.display()))?;
    }
    {
        let root = SVGBackend::new(&svg, (1200, 620)).into_drawing_area();
        panel(&root, &pairs, &title)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", svg.display()))?;
    }
    Ok(())
}

const THREE: RGBColor = RGBColor(31, 119, 180);
const FUSED: RGBColor = RGBColor(255, 127, 14);
/// Width of a case's slot on the x axis (integer coordinates: plotters formats key points of an
/// integer axis only).
const U: i32 = 1000;
/// Bar offsets inside a case's slot: ours (three, fused), then the paper's (three, fused).
const SLOTS: [i32; 4] = [70, 270, 530, 730];
const BAR: i32 = 190;

/// Text centred on its point and standing on it.
fn above(size: u32) -> TextStyle<'static> {
    TextStyle::from(("sans-serif", size).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom))
}

fn panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    pairs: &[Pair],
    title: &str,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let n = pairs.len() as i32;
    let ymax = pairs
        .iter()
        .flat_map(|(o, p)| {
            [o.matrix_ms, o.fused_ms]
                .into_iter()
                .chain(p.iter().flat_map(|p| [p.matrix_ms, p.fused_ms]))
        })
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        * 1.5
        + 1e-9;
    let labels: Vec<String> = pairs
        .iter()
        .map(|(o, _)| {
            format!(
                "layer {}, {} row{}",
                o.layer,
                o.rows,
                if o.rows == 1 { "" } else { "s" }
            )
        })
        .collect();
    let keys: Vec<i32> = (0..n).map(|i| i * U + U / 2).collect();
    let mut ch = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n * U).with_key_points(keys), 0.0..ymax)
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .disable_x_mesh()
        .x_label_formatter(&|v| {
            labels
                .get((v / U).max(0) as usize)
                .cloned()
                .unwrap_or_default()
        })
        .y_desc("ms per call (median)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(err)?;
    let any_paper = pairs.iter().any(|(_, p)| p.is_some());
    let series: [(usize, RGBColor, f64, &str, bool); 4] = [
        (0, THREE, 1.0, "ours: three matrix calls", true),
        (1, FUSED, 1.0, "ours: fused slices", true),
        (
            2,
            THREE,
            0.35,
            "paper (Arc B390 GPU): three matrix calls",
            false,
        ),
        (3, FUSED, 0.35, "paper (Arc B390 GPU): fused slices", false),
    ];
    for (slot, color, alpha, name, ours) in series {
        if !ours && !any_paper {
            continue;
        }
        let bars: Vec<(i32, f64)> = pairs
            .iter()
            .enumerate()
            .filter_map(|(i, (o, p))| {
                let c = if ours { Some(*o) } else { *p }?;
                let v = if slot % 2 == 0 {
                    c.matrix_ms
                } else {
                    c.fused_ms
                };
                Some((i as i32 * U + SLOTS[slot], v))
            })
            .collect();
        let style = color.mix(alpha).filled();
        ch.draw_series(
            bars.iter()
                .map(|&(x, v)| Rectangle::new([(x, 0.0), (x + BAR, v)], style)),
        )
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], style));
        ch.draw_series(bars.iter().map(|&(x, v)| {
            Text::new(format!("{v:.2}"), (x + BAR / 2, v + ymax * 0.01), above(13))
        }))
        .map_err(err)?;
    }
    // reduction of each pair above it
    let reduction = |c: &DenseCase| 100.0 * (1.0 - c.fused_ms / c.matrix_ms);
    let mut notes = Vec::new();
    for (i, (o, p)) in pairs.iter().enumerate() {
        let top = |c: &DenseCase| c.matrix_ms.max(c.fused_ms) + ymax * 0.06;
        let mid = |a: usize| i as i32 * U + (SLOTS[a] + SLOTS[a + 1] + BAR) / 2;
        notes.push((
            mid(0),
            top(o),
            format!("ours: fused {:+.1} % time", -reduction(o)),
        ));
        if let Some(p) = p {
            notes.push((
                mid(2),
                top(p),
                format!("paper: fused {:+.1} % time", -reduction(p)),
            ));
        }
    }
    ch.draw_series(
        notes
            .into_iter()
            .map(|(x, y, t)| Text::new(t, (x, y), above(14))),
    )
    .map_err(err)?;
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_with_and_without_the_paper() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("dense.csv"),
            "layer,rows,matrix_ms,fused_ms,reduction_pct,cosine,relative_difference\n\
             0,1,30.0,31.0,-3.3,0.9999998,5.7e-4\n1,2,29.0,28.0,3.4,nan,nan\n",
        )
        .unwrap();
        draw(dir.path(), None).unwrap();
        assert!(dir.path().join("figure3.png").exists());
        let paper = dir.path().join("paper.csv");
        std::fs::write(
            &paper,
            "layer,rows,matrix_ms,fused_ms,reduction_pct,cosine,relative_difference\n\
             0,1,8.15,4.51,44.66257668711657,0.999999,0.00057\n",
        )
        .unwrap();
        draw(dir.path(), Some(&paper)).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("figure3.svg")).unwrap();
        assert!(svg.contains("paper (Arc B390 GPU)"));
        assert!(draw(dir.path(), Some(&dir.path().join("nope.csv"))).is_err());
    }
}
