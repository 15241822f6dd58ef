//! Figure 8 from `mtp.csv`: first-draft agreement per prompt family, two bars each: the fitted
//! head as fitted (original f32) and as deployed (restricted vocabulary on the deployment grids).
//! With the paper's `mtp_families.csv`, its two values per family are drawn as markers over ours
//! (families matched by position: the paper's twelve are the same templates in the same order).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{fonts, Table};

/// (family, original, deployed) agreement, as fractions.
pub type FamilyBars = Vec<(String, f64, f64)>;

/// Ours, from an `mtp.csv`: per family, `fitted_teacher` and `grids_teacher_r64k`.
pub fn read_ours(mtp_csv: &Path) -> anyhow::Result<FamilyBars> {
    let t = Table::read(mtp_csv)?;
    let (f, c, a) = (
        t.index("family")?,
        t.index("calculation")?,
        t.index("agreement")?,
    );
    let mut out: FamilyBars = Vec::new();
    for r in &t.rows {
        let fam = r.get(f).cloned().unwrap_or_default();
        if fam == "all" {
            continue;
        }
        let v = t.num(r, a)?;
        let slot = match r.get(c).map(String::as_str) {
            Some("fitted_teacher") => 0,
            Some("grids_teacher_r64k") => 1,
            _ => continue,
        };
        let at = match out.iter().position(|x| x.0 == fam) {
            Some(i) => i,
            None => {
                out.push((fam, f64::NAN, f64::NAN));
                out.len() - 1
            }
        };
        if slot == 0 {
            out[at].1 = v;
        } else {
            out[at].2 = v;
        }
    }
    if out.is_empty() {
        anyhow::bail!("{} has no per-family rows", mtp_csv.display());
    }
    Ok(out)
}

/// Write `figure8.png` and `figure8.svg` into `dir`; `paper` overlays the published values.
pub fn draw(
    dir: &Path,
    ours: &FamilyBars,
    paper: Option<&FamilyBars>,
    title: &str,
) -> anyhow::Result<()> {
    fonts();
    let png = dir.join("figure8.png");
    let svg = dir.join("figure8.svg");
    {
        let root = BitMapBackend::new(&png, (1300, 620)).into_drawing_area();
        panel(&root, ours, paper, title)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", png.display()))?;
    }
    {
        let root = SVGBackend::new(&svg, (1300, 620)).into_drawing_area();
        panel(&root, ours, paper, title)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", svg.display()))?;
    }
    Ok(())
}

const ORIGINAL: RGBColor = RGBColor(31, 119, 180);
const DEPLOYED: RGBColor = RGBColor(255, 127, 14);
const U: i32 = 1000;
const SLOTS: [i32; 2] = [150, 520];
const BAR: i32 = 330;

fn panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    ours: &FamilyBars,
    paper: Option<&FamilyBars>,
    title: &str,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let n = ours.len() as i32;
    let top = ours
        .iter()
        .flat_map(|x| [x.1, x.2])
        .chain(paper.into_iter().flatten().flat_map(|x| [x.1, x.2]))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let ymax = (100.0 * top * 1.2).max(1.0);
    let keys: Vec<i32> = (0..n).map(|i| i * U + U / 2).collect();
    let mut ch = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((0..n * U).with_key_points(keys), 0.0..ymax)
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .disable_x_mesh()
        .x_label_formatter(&|v| {
            ours.get((v / U).max(0) as usize)
                .map(|x| x.0.clone())
                .unwrap_or_default()
        })
        .y_desc("first-draft agreement (%)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (slot, color, name) in [
        (0usize, ORIGINAL, "fitted head, original f32"),
        (1, DEPLOYED, "restricted vocabulary + deployment grids"),
    ] {
        let bars: Vec<(i32, f64)> = ours
            .iter()
            .enumerate()
            .map(|(i, x)| {
                (
                    i as i32 * U + SLOTS[slot],
                    100.0 * if slot == 0 { x.1 } else { x.2 },
                )
            })
            .filter(|(_, v)| v.is_finite())
            .collect();
        let style = color.filled();
        ch.draw_series(
            bars.iter()
                .map(|&(x, v)| Rectangle::new([(x, 0.0), (x + BAR, v)], style)),
        )
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], style));
        let label = TextStyle::from(("sans-serif", 12).into_font())
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        ch.draw_series(bars.iter().map(|&(x, v)| {
            Text::new(
                format!("{v:.1}"),
                (x + BAR / 2, v + ymax * 0.01),
                label.clone(),
            )
        }))
        .map_err(err)?;
    }
    if let Some(p) = paper {
        for (slot, color, name) in [
            (0usize, ORIGINAL, "paper (Inkling, trained head): original"),
            (1, DEPLOYED, "paper: deployment"),
        ] {
            let pts: Vec<(i32, f64)> = p
                .iter()
                .take(ours.len())
                .enumerate()
                .map(|(i, x)| {
                    (
                        i as i32 * U + SLOTS[slot] + BAR / 2,
                        100.0 * if slot == 0 { x.1 } else { x.2 },
                    )
                })
                .collect();
            let style = color.stroke_width(2);
            ch.draw_series(
                pts.iter()
                    .map(|&(x, v)| TriangleMarker::new((x, v), 7, style)),
            )
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| TriangleMarker::new((x + 7, y), 6, style));
        }
    }
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
    fn draws_ours_and_the_overlay() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("mtp.csv");
        std::fs::write(
            &csv,
            "family,calculation,anchors,hits,agreement\ncode,fitted_teacher,10,3,0.3\n\
             code,grids_teacher_r64k,10,2,0.2\npoem,fitted_teacher,10,1,0.1\n\
             poem,grids_teacher_r64k,10,1,0.1\nall,fitted_teacher,20,4,0.2\ncode,bigram,10,9,0.9\n",
        )
        .unwrap();
        let ours = read_ours(&csv).unwrap();
        assert_eq!(
            ours,
            vec![("code".into(), 0.3, 0.2), ("poem".into(), 0.1, 0.1)]
        );
        draw(dir.path(), &ours, None, "t").unwrap();
        let paper = vec![
            ("explain".to_string(), 0.63, 0.62),
            ("code".to_string(), 0.77, 0.75),
        ];
        draw(dir.path(), &ours, Some(&paper), "t").unwrap();
        let svg = std::fs::read_to_string(dir.path().join("figure8.svg")).unwrap();
        assert!(svg.contains("paper (Inkling, trained head)"));
        assert!(dir.path().join("figure8.png").exists());
    }
}
