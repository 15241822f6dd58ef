//! `parity.png` / `parity.svg` from `parity.csv`: how many prompts diverge at each top-2 margin,
//! llama-server's margin and moefleet's side by side per bin, with the identical share and the
//! noise of the agreed positions in the corner. Reads the table only.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::table::{bin_names, bin_of};
use crate::csv::Table;
use crate::figures::{fonts, run_label};

const LLAMA: RGBColor = RGBColor(31, 119, 180);
const OURS: RGBColor = RGBColor(255, 127, 14);

/// Divergences per margin bin (llama-server, moefleet), identical prompts, prompts, and the
/// largest noise (|Δ logprob| of the chosen token before the divergence) of any prompt.
pub struct Counts {
    pub bins: Vec<(usize, usize)>,
    pub identical: usize,
    pub prompts: usize,
    pub noise_max: f64,
}

/// The counts of a `parity.csv`.
pub fn read(csv: &Path) -> anyhow::Result<Counts> {
    let t = Table::read(csv)?;
    let (l, m) = (t.col("llama_margin")?, t.col("moefleet_margin")?);
    let same = t.index("identical")?;
    let mut bins = vec![(0, 0); bin_names().len()];
    for x in l.iter().flatten() {
        bins[bin_of(*x)].0 += 1;
    }
    for x in m.iter().flatten() {
        bins[bin_of(*x)].1 += 1;
    }
    Ok(Counts {
        bins,
        identical: t
            .rows
            .iter()
            .filter(|r| r.get(same).is_some_and(|v| v == "true"))
            .count(),
        prompts: t.rows.len(),
        noise_max: t
            .col("noise_max_abs_dlogprob")?
            .into_iter()
            .flatten()
            .fold(0.0, f64::max),
    })
}

/// Write `dir/parity.png` and `dir/parity.svg`.
pub fn draw(dir: &Path, c: &Counts, run_line: &str) -> anyhow::Result<()> {
    fonts();
    let size = (1100, 560);
    let png = dir.join("parity.png");
    let svg = dir.join("parity.svg");
    panel(
        &BitMapBackend::new(&png, size).into_drawing_area(),
        c,
        run_line,
    )
    .map_err(|e| anyhow!("{}: {e}", png.display()))?;
    panel(
        &SVGBackend::new(&svg, size).into_drawing_area(),
        c,
        run_line,
    )
    .map_err(|e| anyhow!("{}: {e}", svg.display()))?;
    Ok(())
}

const U: i32 = 100;

fn panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    c: &Counts,
    run_line: &str,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let title = format!(
        "Greedy parity with llama-server: {} of {} prompts identical; the first divergences by top-2 margin",
        c.identical, c.prompts
    );
    let area = run_label::titled(root, &title, 19, run_line).map_err(err)?;
    let names = bin_names();
    let n = names.len() as i32;
    let top = c
        .bins
        .iter()
        .map(|b| b.0.max(b.1))
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.2;
    let keys: Vec<i32> = (0..n).map(|i| i * U + U / 2).collect();
    let mut ch = ChartBuilder::on(&area)
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(56)
        .build_cartesian_2d((0..n * U).with_key_points(keys), 0.0..top)
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .disable_x_mesh()
        .x_label_formatter(&|v| {
            names
                .get((v / U).max(0) as usize)
                .cloned()
                .unwrap_or_default()
        })
        .x_desc("top-2 log-probability margin at the first divergence (logit units)")
        .y_desc("prompts")
        .y_labels((top as usize).clamp(2, 12))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    let label =
        TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (slot, color, name) in [
        (0, LLAMA, "llama-server's margin"),
        (1, OURS, "moefleet's margin"),
    ] {
        let bars: Vec<(i32, usize)> = c
            .bins
            .iter()
            .enumerate()
            .map(|(i, b)| {
                (
                    i as i32 * U + 12 + slot * 38,
                    if slot == 0 { b.0 } else { b.1 },
                )
            })
            .collect();
        let style = color.filled();
        ch.draw_series(
            bars.iter()
                .map(|&(x, v)| Rectangle::new([(x, 0.0), (x + 36, v as f64)], style)),
        )
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], style));
        ch.draw_series(bars.iter().filter(|b| b.1 > 0).map(|&(x, v)| {
            Text::new(
                v.to_string(),
                (x + 18, v as f64 + top * 0.01),
                label.clone(),
            )
        }))
        .map_err(err)?;
    }
    ch.draw_series(std::iter::once(Text::new(
        format!(
            "noise at the agreed positions: the chosen token's |Δ logprob| up to {:.4}",
            c.noise_max
        ),
        (U / 10, top * 0.95),
        ("sans-serif", 14).into_font(),
    )))
    .map_err(err)?;
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_table_and_draws() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("parity.csv");
        std::fs::write(
            &p,
            "id,identical,llama_margin,moefleet_margin,noise_max_abs_dlogprob\n\
             a,true,,,0.01\nb,false,0.005,0.02,0.03\nc,false,3.5,0.4,\n",
        )
        .unwrap();
        let c = read(&p).unwrap();
        assert_eq!((c.identical, c.prompts, c.noise_max), (1, 3, 0.03));
        assert_eq!(c.bins[0], (1, 0));
        assert_eq!(c.bins[1], (0, 1));
        assert_eq!(c.bins[2], (0, 1));
        assert_eq!(c.bins[5], (1, 0));
        draw(dir.path(), &c, "SmolLM2; host; 2026-12-03; engine abc").unwrap();
        let svg = std::fs::read_to_string(dir.path().join("parity.svg")).unwrap();
        assert!(svg.contains("1 of 3 prompts identical"));
        assert!(dir.path().join("parity.png").exists());
    }
}
