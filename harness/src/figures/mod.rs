//! Figures, one file each (Figures 3, 5, 6, 7 and 8, the family bars of the speculation and
//! draft experiments, and Figure 7's log axes); they read tables (CSV written by `analysis` and the
//! experiments) only. Text is drawn with a
//! font compiled into the binary (Ubuntu Light from the `epaint_default_fonts` crate), so no system
//! fonts are needed. Every figure is written as PNG and SVG.

pub mod axes;
pub mod family_bars;
pub mod figure3;
pub mod figure5;
pub mod figure6;
pub mod figure7;
pub mod figure8;
pub mod recheck;
pub mod run_label;
pub mod simulation;

use std::sync::Once;

/// Register the embedded font under the family name the figures use.
pub fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(
            "sans-serif",
            plotters::style::FontStyle::Normal,
            epaint_default_fonts::UBUNTU_LIGHT,
        );
    });
}

pub use crate::csv::Table;
