//! Figure 8 from `mtp.csv`: first-draft agreement per prompt family, two bars each: the fitted
//! head as fitted (original f32) and as deployed (restricted vocabulary on the deployment grids).
//! With the paper's `mtp_families.csv`, its two values per family are drawn as markers over ours
//! (families matched by position: the paper's twelve are the same templates in the same order).

use std::path::Path;

use super::family_bars::{self, FamilyBars, Spec};
use super::Table;

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
    run_line: &str,
) -> anyhow::Result<()> {
    let spec = Spec {
        stem: "figure8",
        title,
        run: run_line,
        y_desc: "first-draft agreement (%)",
        scale: 100.0,
        ours: [
            "fitted head, original f32",
            "restricted vocabulary + deployment grids",
        ],
        paper: [
            "paper (Inkling, trained head): original",
            "paper: deployment",
        ],
    };
    family_bars::draw(dir, &spec, ours, paper)
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
        draw(dir.path(), &ours, None, "t", "").unwrap();
        let paper = vec![
            ("explain".to_string(), 0.63, 0.62),
            ("code".to_string(), 0.77, 0.75),
        ];
        draw(
            dir.path(),
            &ours,
            Some(&paper),
            "t",
            "inkling-mini; 2026-11-30",
        )
        .unwrap();
        let svg = std::fs::read_to_string(dir.path().join("figure8.svg")).unwrap();
        assert!(svg.contains("paper (Inkling, trained head)"));
        assert!(svg.contains("inkling-mini; 2026-11-30"));
        assert!(dir.path().join("figure8.png").exists());
    }
}
