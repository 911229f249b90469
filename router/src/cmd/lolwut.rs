//! LOLWUT: Redis 7.0.15's answer (its version line) and, with `VERSION 5`, Georg Nees's
//! "Schotter" drawn in Braille characters as Redis 5 draws it: the same canvas, squares, lines and
//! rendering, so the rows without random displacement (the first two) are Redis's byte for byte;
//! the rows below are displaced at random, as Redis displaces them (with another generator).
//! `VERSION 6` (Redis 6's skyline) is answered with the version line.

use super::spec::*;
use super::{Args, Ctx, Pending, int_arg};
use crate::resp::Reply;

pub const LOLWUT: CommandSpec = CommandSpec { decl: &redis::LOLWUT, run: lolwut, ..CommandSpec::DEFAULT };

const VERSION_LINE: &str = "Redis ver. 7.0.15\n";

/// `LOLWUT [VERSION version] [args]`.
fn lolwut(args: &Args, _ctx: &mut Ctx) -> Pending {
    let mut rest = &args[1..];
    let mut version = 7;
    if rest.len() >= 2 && rest[0].eq_ignore_ascii_case(b"version") {
        version = match int_arg(&rest[1]) {
            Ok(v) => v as u32,
            Err(e) => return e.into(),
        };
        rest = &rest[2..];
    }
    if version != 5 {
        return Reply::Verbatim(VERSION_LINE.into()).into();
    }
    // cols, squares per row, squares per column (Redis's defaults and clamps).
    let mut params = [66i64, 8, 12];
    for (p, arg) in params.iter_mut().zip(rest) {
        *p = match int_arg(arg) {
            Ok(v) => v,
            Err(e) => return e.into(),
        };
    }
    let cols = params[0].clamp(1, 1000) as i32;
    let (per_row, per_col) = (params[1].clamp(1, 200) as i32, params[2].clamp(1, 200) as i32);
    let mut text = schotter(cols, per_row, per_col).render();
    text.push_str("\nGeorg Nees - schotter, plotter on paper, 1968. ");
    text.push_str(VERSION_LINE);
    Reply::Verbatim(text.into()).into()
}

/// A 1-bit canvas.
struct Canvas {
    width: i32,
    height: i32,
    pixels: Vec<bool>,
}

impl Canvas {
    fn new(width: i32, height: i32) -> Canvas {
        Canvas { width, height, pixels: vec![false; (width.max(0) * height.max(0)) as usize] }
    }

    fn at(&self, x: i32, y: i32) -> Option<usize> {
        (x >= 0 && x < self.width && y >= 0 && y < self.height).then(|| (y * self.width + x) as usize)
    }

    fn set(&mut self, x: i32, y: i32) {
        if let Some(i) = self.at(x, y) {
            self.pixels[i] = true;
        }
    }

    fn get(&self, x: i32, y: i32) -> bool {
        self.at(x, y).is_some_and(|i| self.pixels[i])
    }

    /// Bresenham's line, as Redis's `lwDrawLine`.
    fn line(&mut self, (mut x1, mut y1): (i32, i32), (x2, y2): (i32, i32)) {
        let (dx, dy) = ((x2 - x1).abs(), (y2 - y1).abs());
        let (sx, sy) = (if x1 < x2 { 1 } else { -1 }, if y1 < y2 { 1 } else { -1 });
        let mut err = dx - dy;
        loop {
            self.set(x1, y1);
            if x1 == x2 && y1 == y2 {
                break;
            }
            let e2 = err * 2;
            if e2 > -dy {
                err -= dy;
                x1 += sx;
            }
            if e2 < dx {
                err += dx;
                y1 += sy;
            }
        }
    }

    /// A square centred at (x, y), rotated by `angle`, as Redis's `lwDrawSquare` (its float and
    /// double steps kept, so that the corners round as Redis's do).
    fn square(&mut self, x: i32, y: i32, size: f32, angle: f32) {
        // Redis's own literal, not SQRT_2: the rounding of the corners depends on it.
        #[allow(clippy::approx_constant)]
        let size = ((size as f64 / 1.4142135623) as f32 as f64).round() as f32;
        let mut k = (std::f64::consts::FRAC_PI_4 + angle as f64) as f32;
        let mut corners = [(0, 0); 4];
        for c in &mut corners {
            *c = (
                ((k as f64).sin() * size as f64 + x as f64).round() as i32,
                ((k as f64).cos() * size as f64 + y as f64).round() as i32,
            );
            k = (k as f64 + std::f64::consts::FRAC_PI_2) as f32;
        }
        for j in 0..4 {
            self.line(corners[j], corners[(j + 1) % 4]);
        }
    }

    /// Two by four pixels per Braille character, as Redis's `lwRenderCanvas`.
    fn render(&self) -> String {
        let mut text = String::new();
        let mut y = 0;
        while y < self.height {
            let mut x = 0;
            while x < self.width {
                let dots = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (0, 3), (1, 3)];
                let byte = dots.iter().enumerate().fold(0u32, |b, (bit, &(dx, dy))| {
                    if self.get(x + dx, y + dy) { b | 1 << bit } else { b }
                });
                text.push(char::from_u32(0x2800 + byte).expect("a Braille pattern"));
                x += 2;
            }
            if y != self.height - 1 {
                text.push('\n');
            }
            y += 4;
        }
        text
    }
}

/// Redis's `lwDrawSchotter`: rows of squares, rotated and moved at random from the third row on.
fn schotter(cols: i32, per_row: i32, per_col: i32) -> Canvas {
    let width = cols * 2;
    let padding = if width > 4 { 2 } else { 0 };
    let side = (width - padding * 2) as f32 / per_row as f32;
    let height = (side * per_col as f32 + (padding * 2) as f32) as i32;
    let mut canvas = Canvas::new(width, height);
    let mut random = rand_source();
    for y in 0..per_col {
        for x in 0..per_row {
            let mut sx = (x as f32 * side + side / 2.0 + padding as f32) as i32;
            let mut sy = (y as f32 * side + side / 2.0 + padding as f32) as i32;
            let mut angle = 0.0f32;
            if y > 1 {
                let mut r = || random() / per_col as f32 * y as f32;
                let (mut r1, mut r2, mut r3) = (r(), r(), r());
                for v in [&mut r1, &mut r2, &mut r3] {
                    if random() < 0.5 {
                        *v = -*v;
                    }
                }
                angle = r1;
                sx = (sx as f32 + r2 * side / 3.0) as i32;
                sy = (sy as f32 + r3 * side / 3.0) as i32;
            }
            canvas.square(sx, sy, side, angle);
        }
    }
    canvas
}

/// Uniform numbers in [0, 1) from a small generator seeded by the clock (art, not secrets).
fn rand_source() -> impl FnMut() -> f32 {
    let mut state = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x9E37_79B9_7F4A_7C15, |d| d.as_nanos() as u64)
        | 1;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis's default Schotter: 66 columns of Braille, the canvas's height in rows of four
    /// pixels, and squares in every row (the random rows included: none falls off the canvas
    /// entirely).
    #[test]
    fn the_default_schotter_fills_its_canvas() {
        let canvas = schotter(66, 8, 12);
        let text = canvas.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len() as i32, (canvas.height + 3) / 4);
        assert!(lines.iter().all(|l| l.chars().count() == 66), "{text}");
        let inked = |l: &&str| l.chars().any(|c| c != '\u{2800}');
        assert!(lines[1..lines.len() - 1].iter().all(inked), "{text}");
    }
}
