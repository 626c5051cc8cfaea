//! Heatmaps as plain SVG: a grid of coloured cells with row and column labels, for attention
//! weights (which character looks at which) and for the sinusoidal position table.

use std::fmt::Write;

/// How values map to colours.
#[derive(Debug, Clone, Copy)]
pub enum Scale {
    /// 0 white → `max` dark blue (attention weights).
    Sequential {
        /// The value drawn darkest.
        max: f32,
    },
    /// −1 blue → 0 white → +1 red (sin and cos).
    Diverging,
}

impl Scale {
    fn colour(self, v: f32) -> String {
        let mix = |a: [f32; 3], b: [f32; 3], t: f32| {
            let t = t.clamp(0.0, 1.0);
            let c: Vec<u8> = (0..3).map(|i| (a[i] + (b[i] - a[i]) * t) as u8).collect();
            format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
        };
        const WHITE: [f32; 3] = [255.0, 255.0, 255.0];
        match self {
            Scale::Sequential { max } => mix(WHITE, [8.0, 48.0, 107.0], v / max.max(1e-9)),
            Scale::Diverging if v < 0.0 => mix(WHITE, [33.0, 102.0, 172.0], -v),
            Scale::Diverging => mix(WHITE, [178.0, 24.0, 43.0], v),
        }
    }
}

/// One heatmap: `values` row-major, rows × cols.
pub struct Heatmap<'a> {
    /// Title above the grid.
    pub title: String,
    /// rows × cols values.
    pub values: &'a [f32],
    /// Labels of the rows (left), empty for none.
    pub row_labels: Vec<String>,
    /// Labels of the columns (top), empty for none.
    pub col_labels: Vec<String>,
    /// Colour scale.
    pub scale: Scale,
}

/// Side of one cell in pixels, chosen so that the whole map is at most `max_px` wide.
fn cell_size(cols: usize, max_px: usize) -> f32 {
    (max_px as f32 / cols.max(1) as f32).clamp(2.0, 28.0)
}

/// The comment every heatmap file carries, by which a later drawing knows it may replace it.
pub const MARK: &str = "<!-- heatmaps drawn by shige -->";

/// Draws `maps` side by side in one SVG document with an overall `title`.
pub fn heatmaps_svg(title: &str, maps: &[Heatmap], rows: usize, cols: usize) -> String {
    let cell = cell_size(cols, 420);
    let (label_w, label_h, gap) = (28.0, 34.0, 24.0);
    let map_w = label_w + cell * cols as f32;
    let map_h = label_h + cell * rows as f32 + 22.0;
    let width = gap + maps.len() as f32 * (map_w + gap);
    let height = 40.0 + map_h + gap;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif">"#
    );
    let _ = writeln!(svg, "{MARK}");
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{gap}" y="26" font-size="18">{}</text>"#,
        escape(title)
    );
    for (m, map) in maps.iter().enumerate() {
        let x0 = gap + m as f32 * (map_w + gap);
        let y0 = 40.0;
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="13">{}</text>"#,
            x0 + label_w,
            y0 + 12.0,
            escape(&map.title)
        );
        let (gx, gy) = (x0 + label_w, y0 + label_h);
        for (c, label) in map.col_labels.iter().enumerate() {
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" font-size="{:.0}" text-anchor="middle">{}</text>"#,
                gx + (c as f32 + 0.5) * cell,
                gy - 4.0,
                (cell * 0.7).min(14.0),
                escape(label)
            );
        }
        for (r, label) in map.row_labels.iter().enumerate() {
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" font-size="{:.0}" text-anchor="end">{}</text>"#,
                gx - 4.0,
                gy + (r as f32 + 0.75) * cell,
                (cell * 0.7).min(14.0),
                escape(label)
            );
        }
        for r in 0..rows {
            for c in 0..cols {
                let v = map.values[r * cols + c];
                let _ = writeln!(
                    svg,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
                    gx + c as f32 * cell,
                    gy + r as f32 * cell,
                    cell,
                    cell,
                    map.scale.colour(v)
                );
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
