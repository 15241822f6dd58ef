//! Two bars per prompt family (ours), optionally the paper's two values per family as markers over
//! them (families matched by position: the paper's twelve are the same templates in the same
//! order). Figure 8 (draft agreement), the speculation figure (first and repeated pass) and Figure
//! 6 (two panels, per burst phase) use it.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::fonts;

/// (family, first bar, second bar).
pub type FamilyBars = Vec<(String, f64, f64)>;

/// What a family-bars figure shows.
pub struct Spec<'a> {
    /// File stem: `STEM.png` and `STEM.svg`.
    pub stem: &'a str,
    pub title: &'a str,
    /// The run under the title (`run_label`; empty: none).
    pub run: &'a str,
    pub y_desc: &'a str,
    /// Values are multiplied by this for the axis and the labels (100 for percentages).
    pub scale: f64,
    /// Names of our two bars and of the paper's two markers.
    pub ours: [&'a str; 2],
    pub paper: [&'a str; 2],
}

/// Write `dir/STEM.png` and `dir/STEM.svg`.
pub fn draw(
    dir: &Path,
    spec: &Spec<'_>,
    ours: &FamilyBars,
    paper: Option<&FamilyBars>,
) -> anyhow::Result<()> {
    draw_panels(dir, spec.stem, 620, &[(spec, ours, paper)])
}

/// Several family-bars panels stacked in one figure, `dir/STEM.png` and `dir/STEM.svg` (each
/// panel's own title, axis and legend; the specs' stems are not used).
pub fn draw_stacked(
    dir: &Path,
    stem: &str,
    panels: &[(Spec<'_>, &FamilyBars, Option<&FamilyBars>)],
) -> anyhow::Result<()> {
    let panels: Vec<_> = panels.iter().map(|(s, o, p)| (s, *o, *p)).collect();
    draw_panels(dir, stem, 520, &panels)
}

/// Panels of `height` pixels each, one above the other, as PNG and SVG.
fn draw_panels(
    dir: &Path,
    stem: &str,
    height: u32,
    panels: &[(&Spec<'_>, &FamilyBars, Option<&FamilyBars>)],
) -> anyhow::Result<()> {
    fonts();
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    let size = (1300, height * panels.len().max(1) as u32);
    {
        let root = BitMapBackend::new(&png, size).into_drawing_area();
        for (area, (spec, ours, paper)) in root.split_evenly((panels.len(), 1)).iter().zip(panels) {
            panel(area, spec, ours, *paper)?;
        }
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", png.display()))?;
    }
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        for (area, (spec, ours, paper)) in root.split_evenly((panels.len(), 1)).iter().zip(panels) {
            panel(area, spec, ours, *paper)?;
        }
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", svg.display()))?;
    }
    Ok(())
}

const ORIGINAL: RGBColor = RGBColor(31, 119, 180);
const DEPLOYED: RGBColor = RGBColor(255, 127, 14);
/// The paper's markers, dark so that they show over our bars too.
const PAPER_FIRST: RGBColor = RGBColor(8, 48, 107);
const PAPER_SECOND: RGBColor = RGBColor(127, 39, 4);
const U: i32 = 1000;
const SLOTS: [i32; 2] = [150, 520];
const BAR: i32 = 330;

fn panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    spec: &Spec<'_>,
    ours: &FamilyBars,
    paper: Option<&FamilyBars>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let root = super::run_label::titled(root, spec.title, 20, spec.run).map_err(err)?;
    let n = ours.len() as i32;
    let top = ours
        .iter()
        .flat_map(|x| [x.1, x.2])
        .chain(paper.into_iter().flatten().flat_map(|x| [x.1, x.2]))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let ymax = (spec.scale * top * 1.2).max(1e-9);
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
        .y_desc(spec.y_desc)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (slot, color, name) in [
        (0usize, ORIGINAL, spec.ours[0]),
        (1, DEPLOYED, spec.ours[1]),
    ] {
        let bars: Vec<(i32, f64)> = ours
            .iter()
            .enumerate()
            .map(|(i, x)| {
                (
                    i as i32 * U + SLOTS[slot],
                    spec.scale * if slot == 0 { x.1 } else { x.2 },
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
            (0usize, PAPER_FIRST, spec.paper[0]),
            (1, PAPER_SECOND, spec.paper[1]),
        ] {
            let pts: Vec<(i32, f64)> = p
                .iter()
                .take(ours.len())
                .enumerate()
                .map(|(i, x)| {
                    (
                        i as i32 * U + SLOTS[slot] + BAR / 2,
                        spec.scale * if slot == 0 { x.1 } else { x.2 },
                    )
                })
                .filter(|(_, v)| v.is_finite()) // no published value: no marker
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
