//! Figure 3 from `dense.csv`: per (layer, rows) case, grouped bars of one MLP call with the
//! three-matmul and the fused-slices form, ours (per backend: native kernels, OpenVINO) beside the
//! paper's (its `dense.csv`, measured on the Arc B390 GPU), each pair labelled with the fused
//! form's change in time (−: faster).

use std::path::Path;

use anyhow::Context;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{fonts, Table};
use crate::experiments::dense::table::{cases, DenseCase};

/// One source of bars: our backends, then the paper's.
struct Source {
    name: String,
    three: RGBColor,
    fused: RGBColor,
    alpha: f64,
    cases: Vec<DenseCase>,
}

/// Write `figure3.png` and `figure3.svg` into `dir` from `dir/dense.csv` (one source per backend
/// it holds) and, when given, the paper's dense.csv.
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
    // the cases on the x axis: ours, in first-seen order
    let mut keys: Vec<(usize, usize)> = Vec::new();
    for c in &ours {
        if !keys.contains(&(c.layer, c.rows)) {
            keys.push((c.layer, c.rows));
        }
    }
    let mut sources = Vec::new();
    let mut backends: Vec<Option<&str>> = Vec::new();
    for c in &ours {
        if !backends.contains(&c.backend) {
            backends.push(c.backend);
        }
    }
    for b in backends {
        let (name, three, fused) = match b {
            Some("openvino") => ("ours, OpenVINO CPU f32", OV_THREE, OV_FUSED),
            Some(_) => ("ours, native kernels", THREE, FUSED),
            None => ("ours", THREE, FUSED),
        };
        sources.push(Source {
            name: name.into(),
            three,
            fused,
            alpha: 1.0,
            cases: ours.iter().filter(|c| c.backend == b).copied().collect(),
        });
    }
    if !theirs.is_empty() {
        sources.push(Source {
            name: "paper (Arc B390 GPU)".into(),
            three: THREE,
            fused: FUSED,
            alpha: 0.35,
            cases: theirs,
        });
    }
    // the run, from its record (dense.json), never from the directory; without one, its
    // fields are said missing
    let record: serde_json::Value = match std::fs::read_to_string(dir.join("dense.json")) {
        Ok(t) => {
            serde_json::from_str(&t).with_context(|| format!("{}/dense.json", dir.display()))?
        }
        Err(_) => serde_json::Value::Null,
    };
    let threads = record["threads"]
        .as_u64()
        .map_or("threads not recorded".into(), |n| format!("{n} thread(s)"));
    let run_line = format!(
        "{}; {threads}",
        super::run_label::RunLabel::from_record(&record).line()
    );
    let title = "Dense MLP, one call: three matrix calls vs fused slices";
    let png = dir.join("figure3.png");
    let svg = dir.join("figure3.svg");
    {
        let root = BitMapBackend::new(&png, (1400, 660)).into_drawing_area();
        panel(&root, &keys, &sources, title, &run_line)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", png.display()))?;
    }
    {
        let root = SVGBackend::new(&svg, (1400, 660)).into_drawing_area();
        panel(&root, &keys, &sources, title, &run_line)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", svg.display()))?;
    }
    Ok(())
}

const THREE: RGBColor = RGBColor(31, 119, 180);
const FUSED: RGBColor = RGBColor(255, 127, 14);
const OV_THREE: RGBColor = RGBColor(44, 160, 44);
const OV_FUSED: RGBColor = RGBColor(214, 39, 40);
/// Width of a case's slot on the x axis (integer coordinates: plotters formats key points of an
/// integer axis only).
const U: i32 = 1200;
/// Margin of a case's slot on each side.
const EDGE: i32 = 60;

/// Text centred on its point and standing on it.
fn above(size: u32) -> TextStyle<'static> {
    TextStyle::from(("sans-serif", size).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom))
}

fn panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    keys: &[(usize, usize)],
    sources: &[Source],
    title: &str,
    run_line: &str,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let root = super::run_label::titled(root, title, 20, run_line).map_err(err)?;
    let n = keys.len() as i32;
    let find =
        |s: &Source, k: (usize, usize)| s.cases.iter().find(|c| (c.layer, c.rows) == k).copied();
    let ymax = sources
        .iter()
        .flat_map(|s| keys.iter().filter_map(move |&k| find(s, k)))
        .flat_map(|c| [c.matrix_ms, c.fused_ms])
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        * 1.5
        + 1e-9;
    let labels: Vec<String> = keys
        .iter()
        .map(|&(l, r)| format!("layer {l}, {r} row{}", if r == 1 { "" } else { "s" }))
        .collect();
    let key_points: Vec<i32> = (0..n).map(|i| i * U + U / 2).collect();
    let mut ch = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n * U).with_key_points(key_points), 0.0..ymax)
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
    // two bars per source in each case's slot
    let per = (U - 2 * EDGE) / (2 * sources.len() as i32).max(1);
    let bar = per * 9 / 10;
    let x_of = |case: usize, source: usize, fused: bool| {
        case as i32 * U + EDGE + (2 * source as i32 + i32::from(fused)) * per
    };
    let mut notes = Vec::new();
    for (si, s) in sources.iter().enumerate() {
        for fused in [false, true] {
            let color = if fused { s.fused } else { s.three };
            let bars: Vec<(i32, f64)> = keys
                .iter()
                .enumerate()
                .filter_map(|(i, &k)| {
                    let c = find(s, k)?;
                    Some((
                        x_of(i, si, fused),
                        if fused { c.fused_ms } else { c.matrix_ms },
                    ))
                })
                .collect();
            let style = color.mix(s.alpha).filled();
            let name = format!(
                "{}: {}",
                s.name,
                if fused {
                    "fused slices"
                } else {
                    "three matrix calls"
                }
            );
            ch.draw_series(
                bars.iter()
                    .map(|&(x, v)| Rectangle::new([(x, 0.0), (x + bar, v)], style)),
            )
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], style));
            ch.draw_series(bars.iter().map(|&(x, v)| {
                Text::new(format!("{v:.2}"), (x + bar / 2, v + ymax * 0.01), above(12))
            }))
            .map_err(err)?;
        }
        // the fused form's change in time above each pair
        for (i, &k) in keys.iter().enumerate() {
            if let Some(c) = find(s, k) {
                let change = -100.0 * (1.0 - c.fused_ms / c.matrix_ms);
                notes.push((
                    (x_of(i, si, false) + x_of(i, si, true) + bar) / 2,
                    c.matrix_ms.max(c.fused_ms) + ymax * 0.06,
                    format!("{change:+.0} %"),
                ));
            }
        }
    }
    ch.draw_series(
        notes
            .into_iter()
            .map(|(x, y, t)| Text::new(t, (x, y), above(13))),
    )
    .map_err(err)?;
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
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
        // both backends: a source each, beside the paper
        std::fs::write(
            dir.path().join("dense.csv"),
            "backend,layer,rows,matrix_ms,fused_ms,reduction_pct,cosine,relative_difference\n\
             native,0,1,30.0,31.0,-3.3,0.9999998,5.7e-4\n\
             openvino,0,1,20.0,25.0,-25.0,0.9999999,1e-6\n",
        )
        .unwrap();
        draw(dir.path(), Some(&paper)).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("figure3.svg")).unwrap();
        for s in [
            "ours, native kernels",
            "ours, OpenVINO CPU f32",
            "paper (Arc B390 GPU)",
        ] {
            assert!(svg.contains(s), "{s}");
        }
    }
}
