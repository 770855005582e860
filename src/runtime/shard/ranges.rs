//! The hash space: 64-bit FNV-1a of a shard key, half-open [`HashRange`]s over it, sets of
//! them ([`Ranges`]), the `shardSelector` they become on the wire, and the deterministic
//! split of the space among live members ([`assign`]).

use std::fmt;
use std::str::FromStr;

/// 2^64: the exclusive end of the whole hash space.
const SPACE: u128 = 1 << 64;

/// 64-bit FNV-1a of `value`'s UTF-8 bytes: the hash the API server's `shardRange` applies to
/// the field's string (`k8s.io/apimachinery/pkg/sharding.HashField`).
pub fn fnv1a64(value: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    value.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// The field of an object whose hash places it on a shard. The API server's `shardRange`
/// accepts these two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ShardKey {
    /// `metadata.uid`: objects spread evenly whatever their names or namespaces.
    #[default]
    Uid,
    /// `metadata.namespace`: a namespace's objects stay together on one shard (for
    /// controllers that read across a namespace), at the price of an uneven split when
    /// namespaces differ in size.
    Namespace,
}

impl ShardKey {
    /// The field path as `shardRange` names it.
    pub fn field_path(self) -> &'static str {
        match self {
            ShardKey::Uid => "object.metadata.uid",
            ShardKey::Namespace => "object.metadata.namespace",
        }
    }
}

/// Why a range or a set of ranges did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A range is not `0x<start>-0x<end>`.
    #[error("range {0:?} is not 0x<start>-0x<end>")]
    Syntax(String),
    /// A bound is not a hexadecimal number within 0 ..= 2^64.
    #[error("range bound {0:?} is not a hexadecimal number from 0x0 to 0x10000000000000000")]
    Bound(String),
    /// The start is not below the end.
    #[error("range {0:?} is empty: its start is not below its end")]
    Empty(String),
}

/// A half-open range `[start, end)` of 64-bit hashes; `end` may be 2^64. Never empty.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HashRange {
    /// Invariant: `start < end <= 2^64`.
    start: u128,
    end: u128,
}

impl HashRange {
    /// The whole hash space, `[0, 2^64)`.
    pub const ALL: HashRange = HashRange {
        start: 0,
        end: SPACE,
    };

    /// `[start, end)`; `None` if it would be empty or reach past 2^64.
    pub fn new(start: u128, end: u128) -> Option<HashRange> {
        (start < end && end <= SPACE).then_some(HashRange { start, end })
    }

    /// The first hash in the range.
    pub fn start(&self) -> u128 {
        self.start
    }

    /// The first hash past the range (2^64 at most).
    pub fn end(&self) -> u128 {
        self.end
    }

    /// Whether `hash` falls in the range.
    pub fn contains(&self, hash: u64) -> bool {
        let hash = u128::from(hash);
        self.start <= hash && hash < self.end
    }

    /// Whether the two ranges share a hash.
    pub fn overlaps(&self, other: &HashRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// The fraction of the hash space the range covers.
    pub fn share(&self) -> f64 {
        (self.end - self.start) as f64 / SPACE as f64
    }

    /// `shardRange(<field>, '0x…', '0x…')` as the API server parses it: lowercase, 16
    /// hexadecimal digits, or 17 for the end 2^64 (the server refuses any other width).
    pub fn selector(&self, key: ShardKey) -> String {
        format!(
            "shardRange({}, '{}', '{}')",
            key.field_path(),
            hex(self.start),
            hex(self.end)
        )
    }
}

/// A bound in the server's spelling: `0x` and 16 digits, or `0x10000000000000000`.
fn hex(bound: u128) -> String {
    if bound == SPACE {
        "0x10000000000000000".to_owned()
    } else {
        format!("0x{bound:016x}")
    }
}

fn parse_bound(text: &str) -> Result<u128, ParseError> {
    let bad = || ParseError::Bound(text.to_owned());
    let digits = text.strip_prefix("0x").ok_or_else(bad)?;
    if digits.is_empty() || digits.len() > 17 {
        return Err(bad());
    }
    let value = u128::from_str_radix(digits, 16).map_err(|_| bad())?;
    if value > SPACE {
        return Err(bad());
    }
    Ok(value)
}

impl fmt::Display for HashRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", hex(self.start), hex(self.end))
    }
}

impl fmt::Debug for HashRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for HashRange {
    type Err = ParseError;

    /// Parses what [`Display`](fmt::Display) writes: `0x<start>-0x<end>`.
    fn from_str(text: &str) -> Result<Self, ParseError> {
        let (start, end) = text
            .trim()
            .split_once('-')
            .ok_or_else(|| ParseError::Syntax(text.to_owned()))?;
        let (start, end) = (parse_bound(start.trim())?, parse_bound(end.trim())?);
        HashRange::new(start, end).ok_or_else(|| ParseError::Empty(text.to_owned()))
    }
}

/// A set of hashes, kept as sorted, disjoint, non-adjacent [`HashRange`]s (adjacent ranges
/// are merged), so that two equal sets are equal values and print the same.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Ranges {
    /// Invariant: sorted by start; each range ends strictly before the next one starts.
    ranges: Vec<HashRange>,
}

impl Ranges {
    /// The empty set.
    pub fn none() -> Ranges {
        Ranges::default()
    }

    /// The whole hash space.
    pub fn all() -> Ranges {
        Ranges {
            ranges: vec![HashRange::ALL],
        }
    }

    /// The union of `ranges`.
    pub fn from_ranges(ranges: impl IntoIterator<Item = HashRange>) -> Ranges {
        let mut sorted: Vec<HashRange> = ranges.into_iter().collect();
        sorted.sort();
        let mut merged: Vec<HashRange> = Vec::with_capacity(sorted.len());
        for range in sorted {
            match merged.last_mut() {
                Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
                _ => merged.push(range),
            }
        }
        Ranges { ranges: merged }
    }

    /// The ranges, sorted and disjoint.
    pub fn ranges(&self) -> &[HashRange] {
        &self.ranges
    }

    /// Whether the set holds no hash.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `hash` is in the set.
    pub fn contains(&self, hash: u64) -> bool {
        let wide = u128::from(hash);
        // The last range starting at or before the hash is the only candidate.
        let at = self.ranges.partition_point(|r| r.start <= wide);
        at > 0 && self.ranges[at - 1].contains(hash)
    }

    /// Whether the two sets share a hash.
    pub fn overlaps(&self, other: &Ranges) -> bool {
        !self.intersect(other).is_empty()
    }

    /// The hashes in both sets.
    pub fn intersect(&self, other: &Ranges) -> Ranges {
        let mut out = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < self.ranges.len() && j < other.ranges.len() {
            let (a, b) = (self.ranges[i], other.ranges[j]);
            if let Some(both) = HashRange::new(a.start.max(b.start), a.end.min(b.end)) {
                out.push(both);
            }
            if a.end < b.end { i += 1 } else { j += 1 }
        }
        Ranges::from_ranges(out)
    }

    /// The hashes in either set.
    pub fn union(&self, other: &Ranges) -> Ranges {
        Ranges::from_ranges(self.ranges.iter().chain(&other.ranges).copied())
    }

    /// The hashes in `self` and not in `other`.
    pub fn subtract(&self, other: &Ranges) -> Ranges {
        let mut out = Vec::new();
        for range in &self.ranges {
            let mut start = range.start;
            for cut in other.ranges.iter().filter(|c| c.overlaps(range)) {
                if let Some(kept) = HashRange::new(start, cut.start) {
                    out.push(kept);
                }
                start = start.max(cut.end);
            }
            if let Some(kept) = HashRange::new(start, range.end) {
                out.push(kept);
            }
        }
        Ranges::from_ranges(out)
    }

    /// The fraction of the hash space the set covers.
    pub fn share(&self) -> f64 {
        // `+ 0.0`: an empty sum of floats is -0.0.
        self.ranges.iter().map(HashRange::share).sum::<f64>() + 0.0
    }

    /// The `shardSelector` for the set on field `key`: its ranges joined by ` || `, the
    /// syntax the API server parses; `None` for the whole space (send no selector) and for
    /// the empty set (no selector selects nothing: do not list at all).
    pub fn selector(&self, key: ShardKey) -> Option<String> {
        if self.is_empty() || *self == Ranges::all() {
            return None;
        }
        let parts: Vec<String> = self.ranges.iter().map(|r| r.selector(key)).collect();
        Some(parts.join(" || "))
    }
}

impl fmt::Display for Ranges {
    /// Comma-separated ranges, `0x…-0x…,0x…-0x…`; nothing for the empty set. What a
    /// member's Lease publishes, and what [`FromStr`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, range) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Ranges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{self}]")
    }
}

impl FromStr for Ranges {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, ParseError> {
        let parts = text.split(',').map(str::trim).filter(|p| !p.is_empty());
        let ranges = parts.map(str::parse).collect::<Result<Vec<_>, _>>()?;
        Ok(Ranges::from_ranges(ranges))
    }
}

/// The ranges each member should hold: the hash space cut into `members.len()` contiguous,
/// equal parts (to within one hash), given out in the order of the members' sorted
/// identities, so that every replica that sees the same members computes the same
/// assignment without talking to the others. Duplicates count once. Returns
/// `(identity, ranges)` pairs in that order; nothing for no members.
pub fn assign<S: AsRef<str>>(members: &[S]) -> Vec<(String, Ranges)> {
    let mut sorted: Vec<&str> = members.iter().map(AsRef::as_ref).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let n = sorted.len() as u128;
    sorted
        .into_iter()
        .enumerate()
        .map(|(i, member)| {
            let i = i as u128;
            let part = HashRange::new(SPACE * i / n, SPACE * (i + 1) / n);
            (member.to_owned(), Ranges::from_ranges(part))
        })
        .collect()
}

/// The ranges [`assign`] gives `member` among `members`; empty if it is not one of them.
pub fn assigned_to<S: AsRef<str>>(members: &[S], member: &str) -> Ranges {
    assign(members)
        .into_iter()
        .find_map(|(m, ranges)| (m == member).then_some(ranges))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u128, end: u128) -> HashRange {
        HashRange::new(start, end).unwrap()
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        // The FNV reference values, as Go's hash/fnv computes them.
        assert_eq!(fnv1a64(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn a_range_is_half_open() {
        let range = r(0x10, 0x20);
        assert!(!range.contains(0x0f));
        assert!(range.contains(0x10));
        assert!(range.contains(0x1f));
        assert!(!range.contains(0x20));
        assert!(HashRange::ALL.contains(u64::MAX));
        assert!(HashRange::new(5, 5).is_none());
        assert!(HashRange::new(0, SPACE + 1).is_none());
    }

    #[test]
    fn selectors_use_the_widths_the_server_accepts() {
        let ranges = Ranges::from_ranges([r(0, 1 << 63), r(3 << 62, SPACE)]);
        assert_eq!(
            ranges.selector(ShardKey::Uid).unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || \
             shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            Ranges::from_ranges([r(1, 2)])
                .selector(ShardKey::Namespace)
                .unwrap(),
            "shardRange(object.metadata.namespace, '0x0000000000000001', '0x0000000000000002')"
        );
        assert_eq!(Ranges::all().selector(ShardKey::Uid), None);
        assert_eq!(Ranges::none().selector(ShardKey::Uid), None);
    }

    #[test]
    fn ranges_merge_and_print_and_parse_back() {
        let ranges = Ranges::from_ranges([r(20, 30), r(0, 10), r(10, 15), r(25, 40)]);
        assert_eq!(ranges.ranges(), &[r(0, 15), r(20, 40)]);
        let text = ranges.to_string();
        assert_eq!(
            text,
            "0x0000000000000000-0x000000000000000f,0x0000000000000014-0x0000000000000028"
        );
        assert_eq!(text.parse::<Ranges>().unwrap(), ranges);
        assert_eq!("".parse::<Ranges>().unwrap(), Ranges::none());
        let all: Ranges = "0x0-0x10000000000000000".parse().unwrap();
        assert_eq!(all, Ranges::all());
        assert!(matches!(
            "0x5-0x5".parse::<Ranges>(),
            Err(ParseError::Empty(_))
        ));
        assert!(matches!(
            "0x0-0x20000000000000000".parse::<Ranges>(),
            Err(ParseError::Bound(_))
        ));
        assert!(matches!("12".parse::<Ranges>(), Err(ParseError::Syntax(_))));
    }

    #[test]
    fn set_operations() {
        let a = Ranges::from_ranges([r(0, 10), r(20, 30)]);
        let b = Ranges::from_ranges([r(5, 25)]);
        assert_eq!(a.intersect(&b), Ranges::from_ranges([r(5, 10), r(20, 25)]));
        assert_eq!(a.union(&b), Ranges::from_ranges([r(0, 30)]));
        assert_eq!(a.subtract(&b), Ranges::from_ranges([r(0, 5), r(25, 30)]));
        assert_eq!(b.subtract(&a), Ranges::from_ranges([r(10, 20)]));
        assert!(a.overlaps(&b));
        assert!(!a.overlaps(&Ranges::from_ranges([r(10, 20)])));
        assert!(a.contains(0) && a.contains(29) && !a.contains(10) && !a.contains(30));
        assert_eq!(Ranges::all().subtract(&Ranges::all()), Ranges::none());
    }

    #[test]
    fn assignment_is_contiguous_equal_and_independent_of_order() {
        let one = assign(&["b", "c", "a"]);
        let two = assign(&["c", "a", "b", "a"]);
        assert_eq!(one, two);
        let names: Vec<&str> = one.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        // The parts tile the space, in order, each a third to within one hash.
        let mut next = 0;
        for (_, ranges) in &one {
            let [range] = ranges.ranges() else {
                panic!("{ranges:?}")
            };
            assert_eq!(range.start(), next);
            assert!((range.share() - 1.0 / 3.0).abs() < 1e-12);
            next = range.end();
        }
        assert_eq!(next, SPACE);
        assert_eq!(assigned_to(&["x"], "x"), Ranges::all());
        assert_eq!(assigned_to(&["x"], "y"), Ranges::none());
        assert!(assign::<&str>(&[]).is_empty());
    }

    #[test]
    fn uids_spread_evenly_over_an_equal_split() {
        // Random-looking uids (as the API server makes them) land within a few percent of
        // an equal share on each of three members.
        let members = ["r0", "r1", "r2"];
        let split = assign(&members);
        let mut counts = [0usize; 3];
        let n = 30_000;
        for i in 0..n {
            let uid = format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                fnv1a64(&format!("a{i}")) as u32,
                i % 0xffff,
                i % 0xfff,
                (i * 7) % 0xfff,
                fnv1a64(&format!("b{i}")) & 0xffff_ffff_ffff
            );
            let hash = fnv1a64(&uid);
            let at = split.iter().position(|(_, r)| r.contains(hash)).unwrap();
            counts[at] += 1;
        }
        for count in counts {
            let share = count as f64 / n as f64;
            assert!((share - 1.0 / 3.0).abs() < 0.02, "{counts:?}");
        }
    }
}
