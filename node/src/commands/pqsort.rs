//! Redis's partial quicksort (`pqsort.c`, a Bentley-McIlroy quicksort that only sorts the
//! partitions overlapping a wanted range), step for step: where Redis sorts only part of a vector
//! (GEO searches with COUNT, SORT BY with LIMIT), elements that compare equal come out in
//! Redis's order only if the same swaps happen.

/// Redis's `pqsort` (a Bentley-McIlroy quicksort that only sorts the partitions overlapping
/// `0..=upto`), step for step, so that points at equal distances come out in Redis's order when
/// COUNT keeps fewer than were found.
pub fn partial_sort<T>(v: &mut [T], cmp: &impl Fn(&T, &T) -> i32, upto: usize) {
    pqsort_range(v, cmp, 0, upto);
}

/// Redis's `pqsort` over the wanted positions `lo..=hi` (SORT BY with LIMIT): partitions that
/// do not overlap them are left unsorted.
pub fn pqsort_range<T>(v: &mut [T], cmp: &impl Fn(&T, &T) -> i32, lo: usize, hi: usize) {
    let n = v.len();
    pqsort(v, cmp, lo, hi, 0, n);
}

/// [`pqsort_range`] of `v[a..a + n]`. A partition is sorted further only if it overlaps
/// `lo..=hi` (Redis's test of the wanted range against the partition's addresses).
fn pqsort<T>(v: &mut [T], cmp: &impl Fn(&T, &T) -> i32, lo: usize, hi: usize, mut a: usize, mut n: usize) {
    let med3 = |v: &[T], a: usize, b: usize, c: usize| {
        if cmp(&v[a], &v[b]) < 0 {
            if cmp(&v[b], &v[c]) < 0 {
                b
            } else if cmp(&v[a], &v[c]) < 0 {
                c
            } else {
                a
            }
        } else if cmp(&v[b], &v[c]) > 0 {
            b
        } else if cmp(&v[a], &v[c]) < 0 {
            a
        } else {
            c
        }
    };
    let vecswap = |v: &mut [T], i: usize, j: usize, n: usize| (0..n).for_each(|k| v.swap(i + k, j + k));
    loop {
        if n < 7 {
            for pm in a + 1..a + n {
                let mut pl = pm;
                while pl > a && cmp(&v[pl - 1], &v[pl]) > 0 {
                    v.swap(pl, pl - 1);
                    pl -= 1;
                }
            }
            return;
        }
        let mut pm = a + n / 2;
        if n > 7 {
            let (mut pl, mut pn) = (a, a + n - 1);
            if n > 40 {
                let d = n / 8;
                pl = med3(v, pl, pl + d, pl + 2 * d);
                pm = med3(v, pm - d, pm, pm + d);
                pn = med3(v, pn - 2 * d, pn - d, pn);
            }
            pm = med3(v, pl, pm, pn);
        }
        v.swap(a, pm);
        // Elements equal to the pivot gather at both ends (before `pa`, after `pd`) and move to
        // the middle once the rest is partitioned.
        let (mut pa, mut pb) = (a + 1, a + 1);
        let (mut pc, mut pd) = (a + n - 1, a + n - 1);
        loop {
            while pb <= pc {
                let c = cmp(&v[pb], &v[a]);
                if c > 0 {
                    break;
                }
                if c == 0 {
                    v.swap(pa, pb);
                    pa += 1;
                }
                pb += 1;
            }
            while pb <= pc {
                let c = cmp(&v[pc], &v[a]);
                if c < 0 {
                    break;
                }
                if c == 0 {
                    v.swap(pc, pd);
                    pd -= 1;
                }
                pc -= 1;
            }
            if pb > pc {
                break;
            }
            v.swap(pb, pc);
            pb += 1;
            pc -= 1;
        }
        let pn = a + n;
        let r = (pa - a).min(pb - pa);
        vecswap(v, a, pb - r, r);
        let r = (pd - pc).min(pn - pd - 1);
        vecswap(v, pb, pn - r, r);
        let r = pb - pa;
        if r > 1 && a <= hi && a + r > lo {
            pqsort(v, cmp, lo, hi, a, r);
        }
        let r = pd - pc;
        if r <= 1 {
            return;
        }
        a = pn - r;
        n = r;
        if a > hi || a + n - 1 < lo {
            return;
        }
    }
}
