//! The geohash arithmetic behind the GEO commands, as Redis 7.0 computes it (`geohash.c`,
//! `geohash_helper.c`), so that scores, positions, distances and the order in which a search
//! finds its points are Redis's to the last bit: a point is a 52-bit interleaved geohash (26 bits
//! of latitude on the even bits, 26 of longitude on the odd ones) kept as a sorted-set score;
//! latitudes are limited to Web Mercator's +-85.05112878. A search covers its shape with the
//! geohash box of its centre and that box's eight neighbours, at a precision estimated from the
//! radius, and each box is one score range of the sorted set.
//!
//! Pure arithmetic: no store, no protocol (`super::geo` holds the commands).

pub const LON_MIN: f64 = -180.0;
pub const LON_MAX: f64 = 180.0;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
/// Bits per coordinate of a stored point (52 bits in all: a double holds them exactly).
pub const STEP_MAX: u8 = 26;

/// Earth's quadratic mean radius (WGS-84), the one Redis's distances use.
const EARTH_RADIUS_M: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;
const D_R: f64 = std::f64::consts::PI / 180.0;

/// A geohash of `step` bits per coordinate. `bits == 0 && step == 0` is "no box" (a neighbour a
/// search skips).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hash {
    pub bits: u64,
    pub step: u8,
}

impl Hash {
    fn is_zero(self) -> bool {
        self.bits == 0 && self.step == 0
    }

    /// The scores `[min, max)` of the points inside this box, at full precision.
    pub fn score_range(self) -> (f64, f64) {
        let align = |bits: u64| (bits << (52 - u32::from(self.step) * 2)) as f64;
        (align(self.bits), align(self.bits + 1))
    }
}

#[derive(Debug, Clone, Copy)]
struct Range {
    min: f64,
    max: f64,
}

const LON_RANGE: Range = Range { min: LON_MIN, max: LON_MAX };
const LAT_RANGE: Range = Range { min: LAT_MIN, max: LAT_MAX };

#[derive(Debug, Clone, Copy)]
struct Area {
    lon: Range,
    lat: Range,
}

/// Spreads the 32 bits of `v` over the even bits of a u64 (a Morton code's half).
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The even bits of `v`, packed (the inverse of [`spread`]).
fn squash(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0xFFFF_FFFF) as u32
}

/// Whether a longitude/latitude pair can be indexed (GEOADD's and the searches' check).
pub fn valid(lon: f64, lat: f64) -> bool {
    (LON_MIN..=LON_MAX).contains(&lon) && (LAT_MIN..=LAT_MAX).contains(&lat)
}

fn encode_in(lon_r: Range, lat_r: Range, lon: f64, lat: f64, step: u8) -> Option<Hash> {
    if step == 0 || step > 32 || !valid(lon, lat) {
        return None;
    }
    if lat < lat_r.min || lat > lat_r.max || lon < lon_r.min || lon > lon_r.max {
        return None;
    }
    let scale = (1u64 << step) as f64;
    // C converts these to uint32_t by truncation, as `as` does for values in range.
    let lat_off = (lat - lat_r.min) / (lat_r.max - lat_r.min) * scale;
    let lon_off = (lon - lon_r.min) / (lon_r.max - lon_r.min) * scale;
    Some(Hash { bits: spread(lat_off as u32) | (spread(lon_off as u32) << 1), step })
}

/// The geohash of a point at `step` bits per coordinate (Mercator's latitude range).
pub fn encode(lon: f64, lat: f64, step: u8) -> Option<Hash> {
    encode_in(LON_RANGE, LAT_RANGE, lon, lat, step)
}

/// The score GEOADD stores for a valid point.
pub fn score_of(lon: f64, lat: f64) -> Option<u64> {
    encode(lon, lat, STEP_MAX).map(|h| h.bits << (52 - 2 * u32::from(STEP_MAX)))
}

fn decode_area(hash: Hash) -> Option<Area> {
    if hash.is_zero() {
        return None;
    }
    let scale = (1u64 << hash.step) as f64;
    let ilat = squash(hash.bits);
    let ilon = squash(hash.bits >> 1);
    let at = |r: Range, i: u32| r.min + (f64::from(i) / scale) * (r.max - r.min);
    Some(Area {
        lat: Range { min: at(LAT_RANGE, ilat), max: at(LAT_RANGE, ilat.wrapping_add(1)) },
        lon: Range { min: at(LON_RANGE, ilon), max: at(LON_RANGE, ilon.wrapping_add(1)) },
    })
}

/// C's `(uint64_t)` of a double as x86-64 compilers emit it (a score that no GEOADD wrote may be
/// negative or huge; Redis decodes whatever bits that conversion gives).
fn c_to_u64(d: f64) -> u64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    // cvttsd2si answers i64::MIN for what it cannot represent (NaN included); `as` saturates.
    let cvt = |x: f64| if x.is_nan() || !(-TWO63..TWO63).contains(&x) { i64::MIN } else { x as i64 };
    if d < TWO63 { cvt(d) as u64 } else { (cvt(d - TWO63) as u64) ^ (1 << 63) }
}

/// A stored score's point: the centre of its geohash box, clamped to the indexable range.
pub fn decode_score(score: f64) -> Option<(f64, f64)> {
    let area = decode_area(Hash { bits: c_to_u64(score), step: STEP_MAX })?;
    let lon = ((area.lon.min + area.lon.max) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((area.lat.min + area.lat.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    Some((lon, lat))
}

/// GEOHASH's 11-character string of a stored score: the point re-encoded on the standard
/// latitude range (+-90), 52 bits in base 32, the eleventh character always '0'.
pub fn geohash_string(score: f64) -> Option<[u8; 11]> {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (lon, lat) = decode_score(score)?;
    let standard = Range { min: -90.0, max: 90.0 };
    let bits = encode_in(LON_RANGE, standard, lon, lat, STEP_MAX).map_or(0, |h| h.bits);
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().take(10).enumerate() {
        *c = ALPHABET[((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    Some(out)
}

fn deg_rad(a: f64) -> f64 {
    a * D_R
}

fn rad_deg(a: f64) -> f64 {
    a / D_R
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_M * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// The haversine distance in meters, as Redis computes it (its shortcut for equal longitudes
/// included, which rounds differently).
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let v = ((deg_rad(lon2) - deg_rad(lon1)) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (deg_rad(lat1), deg_rad(lat2));
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

/// What a search covers, in meters once multiplied by `conversion`.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// A search: its centre, shape and unit (meters per unit).
#[derive(Debug, Clone, Copy)]
pub struct Search {
    pub lon: f64,
    pub lat: f64,
    pub shape: Shape,
    pub conversion: f64,
}

impl Search {
    /// The distance of a point from the centre when the point lies inside the shape.
    pub fn within(&self, lon: f64, lat: f64) -> Option<f64> {
        match self.shape {
            Shape::Radius(r) => {
                let d = distance(self.lon, self.lat, lon, lat);
                (d <= r * self.conversion).then_some(d)
            }
            Shape::Box { width, height } => {
                let (w, h) = (width * self.conversion, height * self.conversion);
                if lat_distance(lat, self.lat) > h / 2.0 || distance(lon, lat, self.lon, lat) > w / 2.0 {
                    return None;
                }
                Some(distance(self.lon, self.lat, lon, lat))
            }
        }
    }

    /// Half the shape's height and width in meters.
    fn half_extent(&self) -> (f64, f64) {
        let (h, w) = match self.shape {
            Shape::Radius(r) => (r, r),
            Shape::Box { width, height } => (height / 2.0, width / 2.0),
        };
        (h * self.conversion, w * self.conversion)
    }

    /// `[min_lon, min_lat, max_lon, max_lat]` of the shape (its edges bend towards the poles).
    fn bounds(&self) -> [f64; 4] {
        let (height, width) = self.half_extent();
        let lat_delta = rad_deg(height / EARTH_RADIUS_M);
        let lon_delta_top = rad_deg(width / EARTH_RADIUS_M / deg_rad(self.lat + lat_delta).cos());
        let lon_delta_bottom = rad_deg(width / EARTH_RADIUS_M / deg_rad(self.lat - lat_delta).cos());
        let lon_delta = if self.lat < 0.0 { lon_delta_bottom } else { lon_delta_top };
        [self.lon - lon_delta, self.lat - lat_delta, self.lon + lon_delta, self.lat + lat_delta]
    }

    /// The boxes to scan, in Redis's order: the centre's box, then north, south, east, west,
    /// north-east, north-west, south-east, south-west; boxes the shape cannot reach are zero.
    pub fn boxes(&self) -> [Hash; 9] {
        let [min_lon, min_lat, max_lon, max_lat] = self.bounds();
        let radius = match self.shape {
            Shape::Radius(r) => r,
            Shape::Box { width, height } => {
                ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
            }
        } * self.conversion;
        let mut step = estimate_step(radius, self.lat);
        let at = |step: u8| {
            let hash = encode(self.lon, self.lat, step).unwrap_or_default();
            (hash, neighbours(hash), decode_area(hash))
        };
        let (mut hash, mut n, mut area) = at(step);
        // Near the edge of its box the estimated step may leave a neighbour too small to reach
        // the shape's bounds: one step coarser then.
        let reach = |h: Hash| decode_area(h);
        let short = reach(n[N]).is_some_and(|a| a.lat.max < max_lat)
            || reach(n[S]).is_some_and(|a| a.lat.min > min_lat)
            || reach(n[E]).is_some_and(|a| a.lon.max < max_lon)
            || reach(n[W]).is_some_and(|a| a.lon.min > min_lon);
        if step > 1 && short {
            step -= 1;
            (hash, n, area) = at(step);
        }
        if step >= 2
            && let Some(a) = area
        {
            let mut drop = |dirs: [usize; 3]| dirs.iter().for_each(|&d| n[d] = Hash::default());
            if a.lat.min < min_lat {
                drop([S, SW, SE]);
            }
            if a.lat.max > max_lat {
                drop([N, NE, NW]);
            }
            if a.lon.min < min_lon {
                drop([W, SW, NW]);
            }
            if a.lon.max > max_lon {
                drop([E, SE, NE]);
            }
        }
        [hash, n[N], n[S], n[E], n[W], n[NE], n[NW], n[SE], n[SW]]
    }
}

/// Indexes into [`neighbours`]' answer.
const N: usize = 0;
const S: usize = 1;
const E: usize = 2;
const W: usize = 3;
const NE: usize = 4;
const NW: usize = 5;
const SE: usize = 6;
const SW: usize = 7;

/// The bits per coordinate whose boxes are about the size of a search of `radius_m` at `lat`.
fn estimate_step(mut radius_m: f64, lat: f64) -> u8 {
    if radius_m == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while radius_m < MERCATOR_MAX {
        radius_m *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// Moves a box by `d` (+-1) along longitude (`lon`) or latitude, wrapping at the edges.
fn moved(h: Hash, lon: bool, d: i8) -> Hash {
    if d == 0 {
        return h;
    }
    let shift = 64 - u32::from(h.step) * 2;
    let (moving_mask, other_mask) = if lon {
        (0xAAAA_AAAA_AAAA_AAAAu64, 0x5555_5555_5555_5555u64)
    } else {
        (0x5555_5555_5555_5555, 0xAAAA_AAAA_AAAA_AAAA)
    };
    let moving = h.bits & moving_mask;
    let other = h.bits & other_mask;
    // The other coordinate's bits, all set: adding one to the moving bits carries across them.
    let zz = other_mask >> shift;
    let moved = if d > 0 { moving.wrapping_add(zz + 1) } else { (moving | zz).wrapping_sub(zz + 1) };
    Hash { bits: (moved & (moving_mask >> shift)) | other, step: h.step }
}

/// The eight neighbours of a box: N, S, E, W, NE, NW, SE, SW.
fn neighbours(h: Hash) -> [Hash; 8] {
    let at = |dlon: i8, dlat: i8| moved(moved(h, true, dlon), false, dlat);
    [at(0, 1), at(0, -1), at(1, 0), at(-1, 0), at(1, 1), at(-1, 1), at(1, -1), at(-1, -1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_encodes_and_decodes_as_redis_does() {
        // GEOADD Sicily 13.361389 38.115556 "Palermo" stores this score; GEOPOS answers the
        // centre of its box; GEOHASH gives "sqc8b49rny0" (redis-server 7.0.15).
        let score = score_of(13.361389, 38.115556).unwrap();
        assert_eq!(score, 3479099956230698);
        let (lon, lat) = decode_score(score as f64).unwrap();
        assert_eq!(format!("{lon:.17}"), "13.36138933897018433");
        assert_eq!(format!("{lat:.17}"), "38.11555639549629859");
        assert_eq!(&geohash_string(score as f64).unwrap(), b"sqc8b49rny0");
        assert!(score_of(181.0, 0.0).is_none() && score_of(0.0, 85.06).is_none());
    }

    #[test]
    fn interleaving_round_trips() {
        for v in [0u32, 1, 0x2AAA_AAAA, 0x03FF_FFFF, u32::MAX] {
            assert_eq!(squash(spread(v)), v);
            assert_eq!(squash(spread(v) << 1 >> 1), v);
        }
        assert_eq!(spread(0b11), 0b101);
    }

    #[test]
    fn distances_match_redis() {
        // GEODIST Sicily Palermo Catania: "166274.1516" m.
        let p = decode_score(3479099956230698.0).unwrap();
        let c = decode_score(score_of(15.087269, 37.502669).unwrap() as f64).unwrap();
        assert_eq!(format!("{:.4}", distance(p.0, p.1, c.0, c.1)), "166274.1516");
    }

    #[test]
    fn neighbours_are_adjacent_boxes() {
        let h = encode(0.0, 0.0, 4).unwrap();
        let a = decode_area(h).unwrap();
        let n = neighbours(h);
        let north = decode_area(n[N]).unwrap();
        assert_eq!(north.lat.min, a.lat.max);
        assert_eq!(north.lon.min, a.lon.min);
        let west = decode_area(n[W]).unwrap();
        assert_eq!(west.lon.max, a.lon.min);
        assert_eq!(west.lat.min, a.lat.min);
    }

    #[test]
    fn odd_scores_convert_as_x86_does() {
        assert_eq!(c_to_u64(-5.0), (-5i64) as u64);
        assert_eq!(c_to_u64(f64::INFINITY), 0);
        assert_eq!(c_to_u64(1e19), 10_000_000_000_000_000_000);
    }
}
