//! `parity.png` / `parity.svg` from `margins.csv` and `parity.csv`: llama-server's top-2 margin at
//! every position where both sides chose the same token, and at each first divergence both sides'
//! margins, by decade (counts on a log axis), with the identical share in the title and the noise
//! of the agreed positions in the corner. Reads the tables only.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::table::bin_names;
use crate::csv::Table;
use crate::figures::{fonts, run_label};

const AGREED: RGBColor = RGBColor(44, 160, 44);
const LLAMA: RGBColor = RGBColor(31, 119, 180);
const OURS: RGBColor = RGBColor(255, 127, 14);

/// Per margin bin: agreed positions, divergences by llama-server's and by moefleet's margin;
/// identical prompts, prompts, and the largest noise (|Δ logprob| of the chosen token at the
/// agreed positions) of any prompt.
pub struct Counts {
    pub bins: Vec<[usize; 3]>,
    pub identical: usize,
    pub prompts: usize,
    pub noise_max: f64,
}

/// The counts of a run directory's `margins.csv` and `parity.csv`.
pub fn read(dir: &Path) -> anyhow::Result<Counts> {
    let m = Table::read(&dir.join("margins.csv"))?;
    let cols = [
        m.index("agreed_positions")?,
        m.index("llama_divergences")?,
        m.index("moefleet_divergences")?,
    ];
    let bins = m
        .rows
        .iter()
        .map(|r| -> anyhow::Result<[usize; 3]> {
            let mut b = [0; 3];
            for (k, &c) in cols.iter().enumerate() {
                b[k] = m.num(r, c)? as usize;
            }
            Ok(b)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if bins.len() != bin_names().len() {
        anyhow::bail!(
            "margins.csv has {} bins, not {}",
            bins.len(),
            bin_names().len()
        );
    }
    let t = Table::read(&dir.join("parity.csv"))?;
    let same = t.index("identical")?;
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
const BAR: i32 = 26;

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
        "Greedy parity with llama-server: {} of {} prompts identical; top-2 margins by decade",
        c.identical, c.prompts
    );
    let area = run_label::titled(root, &title, 19, run_line).map_err(err)?;
    let names = bin_names();
    let n = names.len() as i32;
    let most = c.bins.iter().flatten().copied().max().unwrap_or(1).max(1) as f64;
    let (bottom, top) = (0.5, most * 60.0);
    let keys: Vec<i32> = (0..n).map(|i| i * U + U / 2).collect();
    let mut ch = ChartBuilder::on(&area)
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((0..n * U).with_key_points(keys), (bottom..top).log_scale())
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
        .x_desc("top-2 log-probability margin (logit units): llama-server's at agreed positions, each side's at divergences")
        .y_desc("positions or prompts (log scale)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    let label =
        TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (slot, color, name) in [
        (0usize, AGREED, "positions where both chose the same token"),
        (1, LLAMA, "first divergences, by llama-server's margin"),
        (2, OURS, "first divergences, by moefleet's margin"),
    ] {
        let bars: Vec<(i32, usize)> = c
            .bins
            .iter()
            .enumerate()
            .map(|(i, b)| (i as i32 * U + 11 + slot as i32 * BAR, b[slot]))
            .collect();
        let style = color.filled();
        ch.draw_series(
            bars.iter()
                .filter(|b| b.1 > 0)
                .map(|&(x, v)| Rectangle::new([(x, bottom), (x + BAR - 2, v as f64)], style)),
        )
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], style));
        ch.draw_series(bars.iter().filter(|b| b.1 > 0).map(|&(x, v)| {
            Text::new(
                v.to_string(),
                (x + BAR / 2 - 1, v as f64 * 1.08),
                label.clone(),
            )
        }))
        .map_err(err)?;
    }
    ch.draw_series(std::iter::once(Text::new(
        format!(
            "noise at the agreed positions: the chosen token's |Δ logprob| up to {:.6}",
            c.noise_max
        ),
        (n * U * 11 / 20, top / 1.8),
        ("sans-serif", 14).into_font(),
    )))
    .map_err(err)?;
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_tables_and_draws() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("parity.csv"),
            "id,identical,noise_max_abs_dlogprob\na,true,0.01\nb,false,0.03\nc,false,\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("margins.csv"),
            "bin,lower,upper,agreed_positions,llama_divergences,moefleet_divergences\n\
             0,0,0.0001,0,0,0\n1,0.0001,0.001,2,1,0\n2,0.001,0.01,10,0,1\n3,0.01,0.1,40,1,0\n\
             4,0.1,1,400,0,1\n5,1,10,3000,0,0\n6,10,,100,0,0\n",
        )
        .unwrap();
        let c = read(dir.path()).unwrap();
        assert_eq!((c.identical, c.prompts, c.noise_max), (1, 3, 0.03));
        assert_eq!(c.bins[1], [2, 1, 0]);
        assert_eq!(c.bins[6], [100, 0, 0]);
        draw(dir.path(), &c, "SmolLM2; host; 2026-12-03; engine abc").unwrap();
        let svg = std::fs::read_to_string(dir.path().join("parity.svg")).unwrap();
        assert!(svg.contains("1 of 3 prompts identical"));
        assert!(dir.path().join("parity.png").exists());
    }
}
